package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/shardstock/shardstock"
	"github.com/shardstock/shardstock/api"
	"github.com/shardstock/shardstock/inventory"
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
	probe := shardstock.ResyncContext(ctx)
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
		case m.inv.resync.Problem(i) != "":
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
		if err := m.inv.resync.Shard(ctx, r.shard); err != nil {
			return err
		}
		if err := m.store.RecordSynced(ctx, r.shard, r.run); err != nil {
			return err
		}
		m.log.Info("shard back in line with the order table", "shard", r.shard, "run_id", r.run, "took", time.Since(start).Round(time.Millisecond))
	}
	m.opened(r.shard, r.run)
	return nil
}

// opened opens shard i's fence for run, and has the purchases spooled
// while it was away tried at once.
func (m *Main) opened(i int, run string) {
	m.set.Synced(i, run)
	if sp := m.spooled.Load(); sp != nil {
		sp.RetryNow()
	}
}

type resyncBody struct {
	Accept bool `json:"accept"`
}

// postResync is POST /admin/v1/shards/{index}/resync, the operator's call
// on a fenced shard. Without "accept" it runs the shard's resync now and
// answers whether the fence opened (409 with the disagreement when it
// stays). With "accept": true the operator takes a shard kept fenced by a
// disagreement as it stands (inventory.Resync.Accept writes off the units
// it holds past what the transfer log gives it, and refuses when those are
// held rather than salable); the run is put on record as resynced, so
// every coordinator opens its fence within a second.
func (m *Main) postResync(c echo.Context) error {
	i, err := strconv.Atoi(c.Param("index"))
	if err != nil || i < 0 || i >= m.set.Len() {
		return shardstock.ErrNotFound
	}
	var b resyncBody
	if err := api.Decode(c, &b, true); err != nil {
		return err
	}
	ctx := c.Request().Context()
	run := m.set.SeenRun(i)
	if !m.set.Fenced(i) {
		return c.JSON(http.StatusOK, map[string]any{"shard": i, "fenced": false, "run_id": run})
	}
	if run == "" {
		return fmt.Errorf("%w: shard %d has not answered since it was fenced; nothing to resync yet", shardstock.ErrUnavailable, i)
	}
	if !b.Accept {
		if err := m.resync(ctx, resyncRequest{i, run}); err != nil {
			if errors.Is(err, inventory.ErrResyncBlocked) {
				return shardstock.Conflict(fmt.Sprintf("shard %d stays fenced: %s. Put the cause right and call again, or accept the shard as it stands with {\"accept\": true}", i, m.inv.resync.Problem(i)))
			}
			return fmt.Errorf("%w: %w", shardstock.ErrUnavailable, err)
		}
		return c.JSON(http.StatusOK, map[string]any{"shard": i, "fenced": false, "run_id": run})
	}
	problem := m.inv.resync.Problem(i)
	if problem == "" {
		return shardstock.Conflict(fmt.Sprintf("shard %d is fenced but no disagreement keeps it so (its resync has not finished): nothing to accept; call without accept to resync it now", i))
	}
	actions, err := m.inv.resync.Accept(ctx, i, run)
	if err != nil {
		return err
	}
	if err := m.store.RecordSynced(ctx, i, run); err != nil {
		return fmt.Errorf("%w: %w", shardstock.ErrUnavailable, err)
	}
	m.opened(i, run)
	m.inv.resync.ClearProblem(i)
	m.log.Error("an operator accepted a shard that disagreed with the order table and the transfer log; it sells again",
		"shard", i, "run_id", run, "disagreement", problem, "actions", actions)
	return c.JSON(http.StatusOK, map[string]any{"shard": i, "fenced": false, "run_id": run, "accepted": problem, "actions": actions})
}
