package main

import (
	"context"
	"fmt"
	"time"
)

// Shards that restarted are fenced by the shard set until they are back in
// line with SQL (shard/resync.go); inventory.Restarts answers their
// requests (inventory/restarts.go).

// startResyncs starts answering the shards' resync requests and waits, up
// to 10 s, until every shard that answers is resynced: a coordinator sells
// nothing before. A shard that holds another catalog's stock fails the
// start.
func (m *Main) startResyncs() error {
	ctx, cancel := context.WithCancel(context.Background())
	m.stopSync = cancel
	m.loops.Go(func() { m.inv.restarts.Run(ctx) })
	wait, stop := context.WithTimeout(ctx, 10*time.Second)
	defer stop()
	if err := m.inv.restarts.Ready(wait); err != nil {
		return fmt.Errorf("SHARDSTOCK_SHARDS: %w. Point SHARDSTOCK_DB at the database these shards were used with, "+
			"or use other (empty) shards; for the quick start, make reset deletes both", err)
	}
	return nil
}

// retrySpool has the purchases spooled while shard i was away tried at
// once, when its fence opens (the spool opens after the resyncs start).
func (m *Main) retrySpool(int) {
	if sp := m.spooled.Load(); sp != nil {
		sp.RetryNow()
	}
}
