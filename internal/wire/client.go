package wire

import (
	"context"
	"reflect"
	"slices"

	"github.com/redis/go-redis/v9"
)

// Kind is what the floors need to know about a client: whether it is one
// server, a Cluster (whose pipelines go per master, and whose Combiner
// lets a CallNow take along only a call on its own key) or a Ring (which
// the library refuses). KindOf decides it, for all of them.
type Kind int

const (
	// KindPlain is one server (a primary found through Sentinel included):
	// *redis.Client, also from redis.NewFailoverClient, an AutoPipeline
	// client over one, or a client with none of the methods below.
	KindPlain Kind = iota
	// KindCluster has ForEachMaster, like *redis.ClusterClient (also from
	// redis.NewFailoverClusterClient), or is an AutoPipeline client over one.
	KindCluster
	KindRing // has SetAddrs, like *redis.Ring
	KindNil  // nil, or a wrapper around a nil client
)

var (
	clientType  = reflect.TypeFor[Client]()
	clusterType = reflect.TypeFor[interface {
		ForEachMaster(context.Context, func(context.Context, *redis.Client) error) error
	}]()
	ringType          = reflect.TypeFor[interface{ SetAddrs(map[string]string) }]()
	redisPkg          = reflect.TypeFor[redis.Client]().PkgPath()
	clusterClientType = reflect.TypeFor[*redis.ClusterClient]()
	// redisClients are go-redis's clients proper, whose kind their methods
	// tell; their fields that implement Client are caches and back
	// references (their AutoPipeliners), not clients they stand on.
	redisClients = []reflect.Type{reflect.TypeFor[redis.Client](), reflect.TypeFor[redis.ClusterClient](), reflect.TypeFor[redis.Ring]()}
)

// RingRejectf is the error for a Ring client, given who names it and the client.
const RingRejectf = "%s (%T) is or wraps a *redis.Ring: each Ring client decides on its own when a shard is down and moves its keys, so two clients can hold one name on different shards"

// KindOf classifies c by the methods of its type, which include those that
// an embedded *redis.ClusterClient or *redis.Ring promotes, and by the
// clients it wraps, up to 4 wrappers deep (see kindOfValue for what counts
// as wrapped); when it wraps several, the largest kind counts.
func KindOf(c Client) Kind { return kindOfValue(reflect.ValueOf(c), 4, nil) }

// ClusterOf returns the *redis.ClusterClient that c is, or wraps as KindOf
// sees through wrappers, or nil; RunCalls groups a pipeline's calls by its
// masters. A plain client costs no reflection.
func ClusterOf(c Client) (cc *redis.ClusterClient) {
	switch c := c.(type) {
	case *redis.Client:
		return nil
	case *redis.ClusterClient:
		return c
	}
	kindOfValue(reflect.ValueOf(c), 4, &cc)
	return cc
}

// kindOfValue is KindOf for v, up to depth wrappers deep; with cluster not
// nil, it also stores there the first *redis.ClusterClient it meets. What
// counts as wrapped:
//
//   - in a type of go-redis other than its clients proper, the client in any
//     field, exported or not. That is how an AutoPipeliner (from
//     Client.AutoPipeline or ClusterClient.AutoPipeline, go-redis v9.22+),
//     whose methods are the same over either, is seen through: it holds
//     the client it batches for in an unexported field, which reflection
//     reads without naming the type (go.mod pins an older go-redis). A nil
//     field there is passed over.
//   - in any other type (a wrapper of the user's), the clients it embeds as
//     fields of pointer or interface type (Client, redis.UniversalClient).
//     A client held in a named field is not seen, and a nil embedded
//     interface is passed over (the wrapper may implement the methods
//     itself).
func kindOfValue(v reflect.Value, depth int, cluster **redis.ClusterClient) Kind {
	switch v.Kind() {
	case reflect.Invalid:
		return KindNil
	case reflect.Interface:
		if v.IsNil() {
			return KindNil
		}
		return kindOfValue(v.Elem(), depth, cluster)
	case reflect.Pointer, reflect.Map, reflect.Chan, reflect.Func, reflect.Slice:
		if v.IsNil() {
			return KindNil
		}
	}
	if cluster != nil && *cluster == nil && v.Type() == clusterClientType {
		// UnsafePointer, not Interface: v may be an unexported field (an
		// AutoPipeliner's), whose value Interface refuses to return.
		*cluster = (*redis.ClusterClient)(v.UnsafePointer())
	}
	kind := KindPlain
	switch t := v.Type(); {
	case t.Implements(ringType):
		kind = KindRing
	case t.Implements(clusterType):
		kind = KindCluster
	}
	s := reflect.Indirect(v)
	if s.Kind() != reflect.Struct || slices.Contains(redisClients, s.Type()) || depth == 0 {
		return kind
	}
	inRedis := s.Type().PkgPath() == redisPkg
	for i := range s.NumField() {
		f := s.Type().Field(i)
		if !f.Type.Implements(clientType) || !f.Anonymous && !inRedis {
			continue
		}
		fv := s.Field(i)
		if f.Type.Kind() == reflect.Interface && fv.IsNil() {
			continue // a test double that implements the methods itself, say
		}
		if k := kindOfValue(fv, depth-1, cluster); k != KindNil || !inRedis {
			kind = max(kind, k)
		}
	}
	return kind
}
