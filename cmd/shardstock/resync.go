package main

import (
	"context"
	"time"

	"github.com/shardstock/shardstock/shard"
)

// Shards that restarted are fenced by the shard set until they are back in
// line with SQL (shard/resync.go, inventory.Resync). This loop does that:
// a run id already on record as resynced (another coordinator, or this one
// before a restart, did the work) opens the fence at once; any other is
// resynced first, then put on record.

type resyncRequest struct {
	shard int
	run   string
}

// requestResync is shard.Config.Resync: it queues the request and never
// blocks (a full queue drops it; the next connection asks again).
func (m *Main) requestResync(i int, run string) {
	select {
	case m.resyncs <- resyncRequest{i, run}:
	default:
	}
}

// startResyncs starts the resync loop and waits, up to 10 s, until every
// shard that answers is resynced: a coordinator sells nothing before.
func (m *Main) startResyncs() {
	ctx, cancel := context.WithCancel(context.Background())
	m.resyncCtx, m.stopSync = ctx, cancel
	m.loops.Go(func() { m.resyncLoop(ctx) })
	probe := shard.ResyncContext(ctx)
	deadline := time.Now().Add(10 * time.Second)
	for i := range m.set.Len() {
		if m.set.Ping(probe, i) != nil {
			continue // down: resynced when it answers
		}
		for m.set.Fenced(i) && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
	}
}

func (m *Main) resyncLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case r := <-m.resyncs:
			if err := m.resync(ctx, r); err != nil && ctx.Err() == nil {
				m.log.Warn("shard resync failed; will retry", "shard", r.shard, "err", err)
				time.AfterFunc(time.Second, func() { m.requestResync(r.shard, r.run) })
			}
		}
	}
}

func (m *Main) resync(ctx context.Context, r resyncRequest) error {
	if !m.set.Fenced(r.shard) {
		return nil // a request queued twice
	}
	done, err := m.store.SyncedRunID(ctx, r.shard)
	if err != nil {
		return err
	}
	if done != r.run {
		start := time.Now()
		if err := m.inv.Resync(ctx, r.shard); err != nil {
			return err
		}
		if err := m.store.RecordSynced(ctx, r.shard, r.run); err != nil {
			return err
		}
		m.log.Info("shard back in line with the order table", "shard", r.shard, "run_id", r.run, "took", time.Since(start).Round(time.Millisecond))
	}
	m.set.Synced(r.shard, r.run)
	return nil
}
