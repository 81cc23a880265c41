package shard_test

import (
	"github.com/shardstock/shardstock/inventory"
	"github.com/shardstock/shardstock/shard"
)

// The shard set fills the inventory's ports to the shards (the wiring,
// cmd/shardstock/inventory.go, hands it to each service). The checks sit in
// a test so that shard never imports the services it serves.
var (
	_ inventory.ShardInit   = (*shard.Set)(nil)
	_ inventory.ViewShards  = (*shard.Set)(nil)
	_ inventory.Probe       = (*shard.Set)(nil)
	_ inventory.Movers      = (*shard.Set)(nil)
	_ inventory.SaleShards  = (*shard.Set)(nil)
	_ inventory.Holds       = (*shard.Set)(nil)
	_ inventory.Repairs     = (*shard.Set)(nil)
	_ inventory.SettleHolds = (*shard.Set)(nil)
)
