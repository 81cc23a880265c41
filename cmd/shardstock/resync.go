package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
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

// claimCatalog checks that shard i holds this catalog's stock, stamping it
// when it has no stamp (shard.ClaimCatalog). A foreign shard stays fenced:
// it is remembered, so that a coordinator starting on it refuses to start.
func (m *Main) claimCatalog(ctx context.Context, i int) error {
	id, err := m.store.CatalogID(ctx)
	if err != nil {
		return err
	}
	ids, err := m.store.ProductIDs(ctx)
	if err != nil {
		return err
	}
	err = m.set.ClaimCatalog(ctx, i, id, func(p string) bool { return slices.Contains(ids, p) })
	if errors.Is(err, shard.ErrForeignCatalog) {
		m.foreign.Store(&err)
	}
	return err
}

// foreignShard is the error of a shard found holding another catalog's
// stock, said as one line that tells the operator what to do; nil if none.
func (m *Main) foreignShard() error {
	p := m.foreign.Load()
	if p == nil {
		return nil
	}
	return fmt.Errorf("SHARDSTOCK_SHARDS: %w. Point SHARDSTOCK_DB at the database these shards were used with, "+
		"or use other (empty) shards; for the quick start, make reset deletes both", *p)
}

// startResyncs starts the resync loop and waits, up to 10 s, until every
// shard that answers is resynced: a coordinator sells nothing before. A
// shard that holds another catalog's stock fails the start.
func (m *Main) startResyncs() error {
	ctx, cancel := context.WithCancel(context.Background())
	m.resyncCtx, m.stopSync = ctx, cancel
	m.loops.Go(func() { m.resyncLoop(ctx) })
	probe := shard.ResyncContext(ctx)
	deadline := time.Now().Add(10 * time.Second)
	for i := range m.set.Len() {
		if m.set.Ping(probe, i) != nil {
			continue // down: resynced when it answers
		}
		for m.set.Fenced(i) && m.foreign.Load() == nil && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
	}
	return m.foreignShard()
}

// fenceStates is each shard's fence for the metrics: 0 open, 1 fenced, 2
// kept fenced by a disagreement its resync found.
func (m *Main) fenceStates() []int {
	out := make([]int, m.set.Len())
	for i := range out {
		switch {
		case !m.set.Fenced(i):
		case m.inv.ResyncProblem(i) != "":
			out[i] = 2
		default:
			out[i] = 1
		}
	}
	return out
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
	if err := m.claimCatalog(ctx, r.shard); err != nil {
		return err
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
	if sp := m.spooled.Load(); sp != nil {
		sp.RetryNow() // the purchases spooled while it was away
	}
	return nil
}
