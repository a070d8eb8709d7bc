package redisserver

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// StartTLS's server answers on its TLS port a client that trusts the test
// CA and shows the client certificate, and refuses one without it.
func TestStartTLS(t *testing.T) {
	t.Parallel()
	s := StartTLS(t, TLSOptions{AuthClients: true})
	pem, err := os.ReadFile(s.CACert)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(pem))
	pair, err := tls.LoadX509KeyPair(s.ClientCert, s.ClientKey)
	require.NoError(t, err)

	ping := func(conf *tls.Config) error {
		c := redis.NewClient(&redis.Options{Addr: s.TLSAddr(), TLSConfig: conf, MaxRetries: -1})
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return c.Ping(ctx).Err()
	}
	assert.NoError(t, ping(&tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}))
	assert.Error(t, ping(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}), "accepted a client without a certificate")
	assert.Error(t, ping(&tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}), "trusted without the test CA")
}
