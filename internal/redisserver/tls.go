package redisserver

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// TLSOptions configures StartTLS.
type TLSOptions struct {
	// AuthClients makes the server require a client certificate signed by
	// the test CA (--tls-auth-clients yes); otherwise it asks for none.
	AuthClients bool
	// Args are extra redis-server arguments, as for Options.
	Args []string
}

// TLSServer is a redis-server started by StartTLS: the plain port of Server
// (which the readiness probe and Do use) and a TLS port, with the PEM files
// of a certificate authority made for the test, and of a client certificate
// and key it signed.
type TLSServer struct {
	*Server
	tlsPort    int
	CACert     string // PEM file of the CA certificate
	ClientCert string // PEM file of a client certificate signed by the CA
	ClientKey  string // PEM file of ClientCert's private key
}

// TLSAddr returns the TLS address, "127.0.0.1:PORT".
func (s *TLSServer) TLSAddr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.tlsPort))
}

// StartTLS starts a redis-server like Start that also listens with TLS on
// another free port, with a server certificate for 127.0.0.1 and localhost
// signed by a CA made with crypto/x509 for this test (ECDSA P-256, valid for
// an hour). It is skipped, or fails under CI=true, if redis-server is not in
// PATH.
func StartTLS(t testing.TB, o TLSOptions) *TLSServer {
	t.Helper()
	requireBinaries(t, Binary())
	dir := t.TempDir()
	files, err := writeTestPKI(dir)
	if err != nil {
		t.Fatalf("redisserver: StartTLS: making certificates: %v", err)
	}
	s := &TLSServer{CACert: files.ca, ClientCert: files.clientCert, ClientKey: files.clientKey}
	auth := "no"
	if o.AuthClients {
		auth = "yes"
	}
	s.Server = start(t, func(port int, dir string) ([]string, error) {
		tlsPort, err := freePort()
		if err != nil {
			return nil, err
		}
		s.tlsPort = tlsPort
		args := append([]string{
			"--tls-port", strconv.Itoa(tlsPort),
			"--tls-cert-file", files.serverCert, "--tls-key-file", files.serverKey,
			"--tls-ca-cert-file", files.ca, "--tls-auth-clients", auth,
		}, o.Args...)
		return buildArgs(port, dir, Options{Args: args}), nil
	})
	return s
}

// testPKI are the PEM files writeTestPKI wrote.
type testPKI struct {
	ca, serverCert, serverKey, clientCert, clientKey string
}

// writeTestPKI makes a CA, a server certificate for 127.0.0.1 and localhost
// and a client certificate, and writes them and their keys to dir.
func writeTestPKI(dir string) (testPKI, error) {
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return testPKI{}, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "redisserver test CA"},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return testPKI{}, err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return testPKI{}, err
	}
	leaf := func(serial int64, name string, usage x509.ExtKeyUsage) ([]byte, *ecdsa.PrivateKey, error) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, nil, err
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: name},
			NotBefore:    now.Add(-time.Minute),
			NotAfter:     now.Add(time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		}
		if usage == x509.ExtKeyUsageServerAuth {
			tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
			tmpl.DNSNames = []string{"localhost"}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		return der, key, err
	}
	serverDER, serverKey, err := leaf(2, "127.0.0.1", x509.ExtKeyUsageServerAuth)
	if err != nil {
		return testPKI{}, err
	}
	clientDER, clientKey, err := leaf(3, "redisserver test client", x509.ExtKeyUsageClientAuth)
	if err != nil {
		return testPKI{}, err
	}
	files := testPKI{
		ca:         filepath.Join(dir, "ca.crt"),
		serverCert: filepath.Join(dir, "server.crt"),
		serverKey:  filepath.Join(dir, "server.key"),
		clientCert: filepath.Join(dir, "client.crt"),
		clientKey:  filepath.Join(dir, "client.key"),
	}
	for _, w := range []struct {
		path string
		der  []byte
		key  *ecdsa.PrivateKey
	}{
		{files.ca, caDER, nil},
		{files.serverCert, serverDER, nil},
		{files.serverKey, nil, serverKey},
		{files.clientCert, clientDER, nil},
		{files.clientKey, nil, clientKey},
	} {
		block := &pem.Block{Type: "CERTIFICATE", Bytes: w.der}
		if w.key != nil {
			der, err := x509.MarshalECPrivateKey(w.key)
			if err != nil {
				return testPKI{}, err
			}
			block = &pem.Block{Type: "EC PRIVATE KEY", Bytes: der}
		}
		if err := os.WriteFile(w.path, pem.EncodeToMemory(block), 0o600); err != nil {
			return testPKI{}, err
		}
	}
	return files, nil
}
