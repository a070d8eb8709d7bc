//go:build unix

package main

import (
	"github.com/redis/go-redis/v9"
	leasefloor "github.com/redisleader/redisleader/internal/lease"
)

// requestScript is the library's script that takes, withdraws and
// readdresses a transfer request (internal/lease/lua/request_take.lua):
// TestTransferReaddressReplyLost holds the transfer's readdress by its SHA.
var requestScript = redis.NewScript(leasefloor.RequestTake.Src)
