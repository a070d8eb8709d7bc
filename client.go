package redisleader

import (
	"context"
	"reflect"

	"github.com/redis/go-redis/v9"
)

// clientKind is what NewSession and NewRedlockSession need to know about a
// client. When a wrapper embeds several clients, the largest kind counts.
type clientKind int

const (
	kindPlain   clientKind = iota // *redis.Client, or none of the methods below
	kindCluster                   // has ForEachMaster, like *redis.ClusterClient
	kindRing                      // has SetAddrs, like *redis.Ring
	kindNil                       // nil, or a wrapper around a nil client
)

var (
	clientType  = reflect.TypeFor[Client]()
	clusterType = reflect.TypeFor[interface {
		ForEachMaster(context.Context, func(context.Context, *redis.Client) error) error
	}]()
	ringType = reflect.TypeFor[interface{ SetAddrs(map[string]string) }]()
	redisPkg = reflect.TypeFor[redis.Client]().PkgPath()
)

// ringRejectf is the error for a Ring client, given who names it and the client.
const ringRejectf = "%s (%T) is or wraps a *redis.Ring: each Ring client decides on its own when a shard is down and moves its keys, so two clients can hold one name on different shards"

// kindOf classifies c by the methods of its type, which include those that
// an embedded *redis.ClusterClient or *redis.Ring promotes, and by the
// clients it embeds as fields of pointer or interface type (Client,
// redis.UniversalClient), up to 4 wrappers deep. A client held in a named
// field is not seen, and a nil embedded interface is passed over (the
// wrapper may implement the methods itself).
func kindOf(c Client) clientKind { return kindOfValue(reflect.ValueOf(c), 4) }

func kindOfValue(v reflect.Value, depth int) clientKind {
	switch v.Kind() {
	case reflect.Invalid:
		return kindNil
	case reflect.Interface:
		if v.IsNil() {
			return kindNil
		}
		return kindOfValue(v.Elem(), depth)
	case reflect.Pointer, reflect.Map, reflect.Chan, reflect.Func, reflect.Slice:
		if v.IsNil() {
			return kindNil
		}
	}
	kind := kindPlain
	switch t := v.Type(); {
	case t.Implements(ringType):
		kind = kindRing
	case t.Implements(clusterType):
		kind = kindCluster
	}
	s := reflect.Indirect(v)
	if s.Kind() != reflect.Struct || s.Type().PkgPath() == redisPkg || depth == 0 {
		return kind
	}
	for i := range s.NumField() {
		f := s.Type().Field(i)
		if !f.Anonymous || !f.Type.Implements(clientType) {
			continue
		}
		fv := s.Field(i)
		if f.Type.Kind() == reflect.Interface && fv.IsNil() {
			continue // a test double that implements the methods itself, say
		}
		kind = max(kind, kindOfValue(fv, depth-1))
	}
	return kind
}
