package shard_test

import (
	"github.com/shardstock/shardstock/flashsale"
	"github.com/shardstock/shardstock/ha"
	"github.com/shardstock/shardstock/inventory"
	"github.com/shardstock/shardstock/order"
	"github.com/shardstock/shardstock/shard"
)

// Each port to the shards is filled by one role of the set (the wiring,
// cmd/shardstock, hands each service the role its port names). The checks
// sit in a test so that shard never imports the services it serves.
var (
	// purchase.go, register.go
	_ flashsale.Reserver  = (*shard.Purchases)(nil)
	_ order.ClaimReturner = (*shard.Purchases)(nil)
	_ inventory.Claims    = (*shard.Purchases)(nil)
	// holds.go
	_ inventory.Holds  = (*shard.Holds)(nil)
	_ order.HoldFinder = (*shard.Holds)(nil)
	// stock.go, snapshot.go
	_ inventory.StockShards = (*shard.Stock)(nil)
	// resync.go, catalog.go
	_ inventory.Fence = (*shard.Fence)(nil)
	// the set itself
	_ ha.Pinger    = (*shard.Set)(nil)
	_ order.Budget = (*shard.Set)(nil)
)
