package wire

import (
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
)

// ClusterOf finds the Cluster client under the wrappers KindOf sees
// through, so that their pipelines are sent per master too.
func TestClusterOf(t *testing.T) {
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	defer cc.Close()
	plain := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer plain.Close()
	type embedsCluster struct{ *redis.ClusterClient }
	type embedsUniversal struct{ redis.UniversalClient }
	type embedsClient struct{ Client }
	for _, c := range []struct {
		name string
		c    Client
		want *redis.ClusterClient
	}{
		{"*redis.Client", plain, nil},
		{"*redis.ClusterClient", cc, cc},
		{"a struct embedding *redis.ClusterClient", embedsCluster{cc}, cc},
		{"a struct embedding a UniversalClient that is a Cluster client", &embedsUniversal{cc}, cc},
		{"a struct embedding a Client that is a plain client", embedsClient{plain}, nil},
	} {
		assert.Same(t, c.want, ClusterOf(c.c), c.name)
	}
}
