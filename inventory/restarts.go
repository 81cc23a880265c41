package inventory

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardstock/shardstock"
)

// A shard that restarted is fenced by the shard set until it is back in
// line with SQL (shard/resync.go): each new connection that finds a new run
// id asks for a resync (Request). Restarts answers: a run id already on
// record as resynced (another coordinator, or this one before a restart,
// did the work) opens the fence at once; any other is resynced first
// (Resync.Shard), then put on record. A resync that fails is tried again
// every second, for as long as Run runs.

// Resyncer replays what a restarted shard lost, and keeps why one stays
// fenced (Resync).
type Resyncer interface {
	Shard(ctx context.Context, i int) error
	// RecheckLate checks the orders written while their shard was fenced.
	RecheckLate(ctx context.Context)
	// CatchUp checks the orders written while shard i's resync ran, once
	// its time is on record (Restarts.record).
	CatchUp(ctx context.Context, i int) error
	Accept(ctx context.Context, i int, run string) ([]string, error)
	Problem(i int) string
	ClearProblem(i int)
	// Opened: shard i's fence opens; its resync time may have changed.
	Opened(i int)
}

// RestartsConfig is a Restarts' ports.
type RestartsConfig struct {
	Addrs    []string // the shards' addresses, in index order
	Requests *ResyncRequests
	Fence    Fence
	ShardLog ShardLog
	Catalog  CatalogStore
	Resync   Resyncer
	Opened   func(i int) // optional: shard i's fence opened (the spool retries at once)
	Now      func() time.Time
	Logger   *slog.Logger
}

// Restarts opens the fences of restarted shards. Safe for concurrent use.
type Restarts struct {
	cfg RestartsConfig
	// running holds one resync or accept at a time (Run's, an operator's):
	// a channel of one, not a mutex, so a caller whose context ends stops
	// waiting (and the model test's fake clock goes on while one waits:
	// with a mutex, a history hung).
	running chan struct{}
	foreign atomic.Pointer[error] // a shard found holding another catalog's stock
	mu      sync.Mutex            // guards changed
	changed chan struct{}         // closed when a fence opens or a foreign shard is found
}

// NewRestarts returns Restarts over cfg's ports.
func NewRestarts(cfg RestartsConfig) *Restarts {
	orDefaults(&cfg.Now, &cfg.Logger)
	return &Restarts{cfg: cfg, changed: make(chan struct{}), running: make(chan struct{}, 1)}
}

// ResyncRequests queues the shards that ask for a resync. It exists before
// the shard set (whose connections ask) and the Restarts that answer.
type ResyncRequests struct{ c chan resyncRequest }

type resyncRequest struct {
	shard int
	run   string
}

// NewResyncRequests returns an empty queue.
func NewResyncRequests() *ResyncRequests {
	return &ResyncRequests{c: make(chan resyncRequest, 256)}
}

// Request asks for shard i's resync at run (shard.Config.Resync). It never
// blocks: a full queue drops it, and the next connection asks again.
func (q *ResyncRequests) Request(i int, run string) {
	select {
	case q.c <- resyncRequest{i, run}:
	default:
	}
}

// Run answers the requests until ctx is done; a request that failed is
// tried again every second (the latest run of each shard).
func (s *Restarts) Run(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	retry := map[int]string{}
	for {
		select {
		case <-ctx.Done():
			return
		case r := <-s.cfg.Requests.c:
			s.answer(ctx, r, retry)
		case <-t.C:
			for i, run := range retry {
				s.answer(ctx, resyncRequest{i, run}, retry)
			}
		}
		s.cfg.Resync.RecheckLate(ctx)
	}
}

// answer resyncs r, and keeps it in retry when that fails.
func (s *Restarts) answer(ctx context.Context, r resyncRequest, retry map[int]string) {
	err := s.resync(ctx, r)
	if err == nil || ctx.Err() != nil {
		delete(retry, r.shard)
		return
	}
	s.cfg.Logger.Warn("shard resync failed; will retry", "shard", r.shard, "err", err)
	retry[r.shard] = r.run
}

func (s *Restarts) resync(ctx context.Context, r resyncRequest) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.unlock()
	if !s.cfg.Fence.Fenced(r.shard) {
		return nil // a request queued twice
	}
	if err := s.claimCatalog(ctx, r.shard); err != nil {
		return err
	}
	done, err := s.cfg.ShardLog.SyncedRunID(ctx, r.shard)
	if err != nil {
		return err
	}
	if done != r.run {
		start := time.Now()
		err := s.cfg.Resync.Shard(ctx, r.shard)
		if errors.Is(err, ErrResyncPartial) {
			// Open for this coordinator's own products, and leave the
			// record to a coordinator that sees the rest (ErrResyncPartial).
			s.cfg.Logger.Warn("shard back in line for this coordinator's products only; not put on record as resynced",
				"shard", r.shard, "run_id", r.run, "why", err)
			s.open(r.shard, r.run)
			return nil
		}
		if err != nil {
			return err
		}
		// The time the shard came back: orders of reservations made
		// before it may have lost their holds (HoldLate). A shard seen
		// for the first time lost nothing: no time.
		at := s.cfg.Now()
		if done == "" {
			at = time.Time{}
		}
		if err := s.record(ctx, r.shard, r.run, at); err != nil {
			return err
		}
		s.cfg.Logger.Info("shard back in line with the order table", "shard", r.shard, "run_id", r.run, "took", time.Since(start).Round(time.Millisecond))
	}
	s.open(r.shard, r.run)
	return nil
}

// lock waits for running, for as long as ctx allows.
func (s *Restarts) lock(ctx context.Context) error {
	select {
	case s.running <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *Restarts) unlock() { <-s.running }

// record puts run on record as resynced at at, in two steps when at is
// set. First the time alone, under a run id no shard has (pendingRun):
// from then on every coordinator judges the reservations made before it
// late (Resync.HoldLate). Then, once the orders written while the resync
// ran are checked (Resync.CatchUp), the run itself, which opens every
// coordinator's fence. A coordinator that dies or fails between the two
// leaves the run off the record, and the next resync does it all again:
// recorded at once, a death before the check let the other coordinators
// sell the unit of an order nobody checked.
func (s *Restarts) record(ctx context.Context, i int, run string, at time.Time) error {
	if !at.IsZero() {
		if err := s.cfg.ShardLog.RecordSynced(ctx, i, pendingRun(run), at); err != nil {
			return err
		}
		if err := s.cfg.Resync.CatchUp(ctx, i); err != nil {
			return err
		}
	}
	return s.cfg.ShardLog.RecordSynced(ctx, i, run, at)
}

// pendingRun is the run id on record while run's resync checks the orders
// written as it ran: no shard's run id.
func pendingRun(run string) string { return "catching-up:" + run }

// claimCatalog checks that shard i holds this catalog's stock, stamping it
// when it has no stamp. A foreign shard stays fenced: it is remembered, so
// that a coordinator starting on it refuses to start (Ready).
func (s *Restarts) claimCatalog(ctx context.Context, i int) error {
	id, err := s.cfg.ShardLog.CatalogID(ctx)
	if err != nil {
		return err
	}
	ids, err := s.cfg.Catalog.ProductIDs(ctx)
	if err != nil {
		return err
	}
	err = s.cfg.Fence.ClaimCatalog(ctx, i, id, func(p string) bool { return slices.Contains(ids, p) })
	if errors.Is(err, shardstock.ErrForeignCatalog) {
		s.foreign.Store(&err)
		s.signal()
	}
	return err
}

// open opens shard i's fence for run.
func (s *Restarts) open(i int, run string) {
	s.cfg.Resync.Opened(i) // before the fence opens: no order is judged against the shard's old resync time after it
	s.cfg.Fence.Synced(i, run)
	s.signal()
	if s.cfg.Opened != nil {
		s.cfg.Opened(i)
	}
}

// signal wakes whoever waits for a fence (Ready).
func (s *Restarts) signal() {
	s.mu.Lock()
	defer s.mu.Unlock()
	close(s.changed)
	s.changed = make(chan struct{})
}

// signalled is closed at the next signal.
func (s *Restarts) signalled() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

// Ready waits, for as long as ctx allows, until every shard that answers
// is resynced (a coordinator sells nothing before). It answers the
// error of a shard found holding another catalog's stock, if any.
func (s *Restarts) Ready(ctx context.Context) error {
	probe := shardstock.ResyncContext(ctx)
	for i := range len(s.cfg.Addrs) {
		if s.cfg.Fence.Ping(probe, i) != nil {
			continue // down: resynced when it answers
		}
		for {
			woken := s.signalled()
			if !s.cfg.Fence.Fenced(i) || s.Foreign() != nil {
				break
			}
			select {
			case <-ctx.Done():
				return s.Foreign()
			case <-woken:
			}
		}
	}
	return s.Foreign()
}

// Foreign is the error of a shard found holding another catalog's stock
// (nil: none).
func (s *Restarts) Foreign() error {
	if p := s.foreign.Load(); p != nil {
		return *p
	}
	return nil
}

// FenceStates is each shard's fence for the metrics: 0 open, 1 fenced, 2
// kept fenced by a disagreement its resync found.
func (s *Restarts) FenceStates() []int {
	out := make([]int, len(s.cfg.Addrs))
	for i := range out {
		switch {
		case !s.cfg.Fence.Fenced(i):
		case s.cfg.Resync.Problem(i) != "":
			out[i] = 2
		default:
			out[i] = 1
		}
	}
	return out
}

// ResyncNow is an operator's call on shard i: it runs the shard's resync
// now, and answers the run id; ErrConflict with the disagreement when the
// shard stays fenced.
func (s *Restarts) ResyncNow(ctx context.Context, i int) (string, error) {
	run, err := s.fencedRun(i)
	switch {
	case err != nil:
		return "", err // (i may be no shard's index: nothing to ask of the fence)
	case run == "":
		return s.cfg.Fence.SeenRun(i), nil
	}
	err = s.resync(ctx, resyncRequest{i, run})
	switch {
	case errors.Is(err, ErrResyncBlocked):
		return run, shardstock.Conflict(fmt.Sprintf("shard %d stays fenced: %s. Put the cause right and call again, or accept the shard as it stands with {\"accept\": true}", i, s.cfg.Resync.Problem(i)))
	case err != nil:
		return run, fmt.Errorf("%w: %w", shardstock.ErrUnavailable, err)
	}
	return run, nil
}

// Accept is an operator's answer to shard i kept fenced by a disagreement:
// the shard is taken as it stands (Resync.Accept says how), its run put on
// record as resynced, so every coordinator opens its fence within a second.
// It answers the run, the disagreement accepted and what was done.
func (s *Restarts) Accept(ctx context.Context, i int) (run, problem string, actions []string, err error) {
	if err := s.lock(ctx); err != nil {
		return "", "", nil, fmt.Errorf("%w: %w", shardstock.ErrUnavailable, err)
	}
	defer s.unlock()
	run, err = s.fencedRun(i)
	switch {
	case err != nil:
		return "", "", nil, err
	case run == "":
		return s.cfg.Fence.SeenRun(i), "", nil, nil
	}
	problem = s.cfg.Resync.Problem(i)
	if problem == "" {
		return run, "", nil, shardstock.Conflict(fmt.Sprintf("shard %d is fenced but no disagreement keeps it so (its resync has not finished): nothing to accept; call without accept to resync it now", i))
	}
	if actions, err = s.cfg.Resync.Accept(ctx, i, run); err != nil {
		return run, problem, nil, err
	}
	if err := s.record(ctx, i, run, s.cfg.Now()); err != nil {
		return run, problem, nil, fmt.Errorf("%w: %w", shardstock.ErrUnavailable, err)
	}
	s.open(i, run)
	s.cfg.Resync.ClearProblem(i)
	s.cfg.Logger.Error("an operator accepted a shard that disagreed with the order table and the transfer log; it sells again",
		"shard", i, "run_id", run, "disagreement", problem, "actions", actions)
	return run, problem, actions, nil
}

// fencedRun is the run of fenced shard i to resync ("": the shard is not
// fenced); ErrNotFound for no such shard, ErrUnavailable when it has not
// answered since it was fenced.
func (s *Restarts) fencedRun(i int) (string, error) {
	if i < 0 || i >= len(s.cfg.Addrs) {
		return "", shardstock.ErrNoShard
	}
	run := s.cfg.Fence.SeenRun(i)
	switch {
	case !s.cfg.Fence.Fenced(i):
		return "", nil
	case run == "":
		return "", fmt.Errorf("%w: shard %d has not answered since it was fenced; nothing to resync yet", shardstock.ErrUnavailable, i)
	}
	return run, nil
}
