package inventory

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/shardstock/shardstock"
)

// fences are two shards' restart fences and the SQL record of resynced
// runs, in memory, with a resync that fails while failing is set. The
// record's and the catalog's other methods are not called (nil).
type fences struct {
	ShardLog
	CatalogStore
	mu       sync.Mutex
	fenced   [2]bool
	seen     [2]string
	synced   map[int]string // the run ids on record
	resyncs  int
	failing  int      // resyncs left to fail
	catching int      // catch-ups left to fail
	records  []string // the runs put on record, in order
	stamp    error
	problems map[int]string
}

func (f *fences) Fenced(i int) bool               { f.mu.Lock(); defer f.mu.Unlock(); return f.fenced[i] }
func (f *fences) SeenRun(i int) string            { f.mu.Lock(); defer f.mu.Unlock(); return f.seen[i] }
func (f *fences) Ping(context.Context, int) error { return nil }
func (f *fences) Synced(i int, run string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fenced[i] = f.seen[i] != run
}
func (f *fences) ClaimCatalog(context.Context, int, string, func(string) bool) error { return f.stamp }
func (f *fences) CatalogID(context.Context) (string, error)                          { return "c", nil }
func (f *fences) ProductIDs(context.Context) ([]string, error)                       { return nil, nil }
func (f *fences) SyncedRunID(_ context.Context, i int) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.synced[i], nil
}
func (f *fences) RecheckLate(context.Context) {}
func (f *fences) CatchUp(context.Context, int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.catching > 0 {
		f.catching--
		return errors.New("the order table did not answer")
	}
	return nil
}

func (f *fences) RecordSynced(_ context.Context, i int, run string, _ time.Time) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.synced[i] = run
	f.records = append(f.records, run)
	return nil
}
func (f *fences) Shard(context.Context, int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.resyncs++
	if f.failing > 0 {
		f.failing--
		return errors.New("shard did not answer")
	}
	return nil
}
func (f *fences) Accept(context.Context, int, string) ([]string, error) { return nil, nil }
func (f *fences) Problem(i int) string                                  { return f.problems[i] }
func (f *fences) ClearProblem(i int)                                    { delete(f.problems, i) }
func (f *fences) Opened(int)                                            {}

// restart fences shard i at run, and asks for its resync as the shard
// set's new connection would.
func (f *fences) restart(q *ResyncRequests, i int, run string) {
	f.mu.Lock()
	f.fenced[i], f.seen[i] = true, run
	f.mu.Unlock()
	q.Request(i, run)
}

func startRestarts(t *testing.T, f *fences) (*Restarts, *ResyncRequests) {
	q := NewResyncRequests()
	r := NewRestarts(RestartsConfig{Addrs: []string{"a", "b"}, Requests: q, Fence: f, ShardLog: f, Catalog: f, Resync: f})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { r.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() }) // Run returns once ctx is done
	return r, q
}

// ready waits for Ready, which wakes when a fence opens (no polling).
func ready(t *testing.T, r *Restarts, within time.Duration) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	err := r.Ready(ctx)
	if ctx.Err() != nil {
		t.Fatalf("Ready waited past %v", within)
	}
	return err
}

// A run already on record opens its fence without a resync; a new run is
// resynced, put on record, then opened.
func TestRestartsOpenAFenceOnceTheRunIsResynced(t *testing.T) {
	f := &fences{synced: map[int]string{0: "old"}}
	r, q := startRestarts(t, f)
	f.restart(q, 0, "old")
	f.restart(q, 1, "new")
	if err := ready(t, r, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if f.Fenced(0) || f.Fenced(1) || f.resyncs != 1 || f.synced[1] != "new" {
		t.Fatalf("fenced %v %v, resyncs %d, record %v; want both open after one resync", f.Fenced(0), f.Fenced(1), f.resyncs, f.synced)
	}
}

// A resync that fails is tried again by Run itself, every second, until it
// succeeds.
func TestRestartsRetryAFailedResync(t *testing.T) {
	f := &fences{synced: map[int]string{}, failing: 1}
	r, q := startRestarts(t, f)
	f.restart(q, 0, "r1")
	if err := ready(t, r, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if f.resyncs != 2 {
		t.Fatalf("%d resyncs, want 2 (one failed, one retried)", f.resyncs)
	}
}

// A resync is put on record in two steps: its time under a pending run
// (late orders are judged by it), then, once the orders written while it
// ran are checked, the run. A check that fails keeps the run off the
// record and the fence shut, and the resync is done again: recorded
// before the check, a coordinator that died in it left every other one
// selling the unit of an order nobody checked.
func TestRestartsRecordTheRunOnlyAfterTheCatchUp(t *testing.T) {
	f := &fences{synced: map[int]string{0: "r1"}, catching: 1}
	r, q := startRestarts(t, f)
	f.restart(q, 0, "r2")
	if err := ready(t, r, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	want := []string{pendingRun("r2"), pendingRun("r2"), "r2"}
	if f.fenced[0] || f.resyncs != 2 || fmt.Sprint(f.records) != fmt.Sprint(want) {
		t.Fatalf("fenced %v, %d resyncs, records %q; want open after 2 resyncs, records %q", f.fenced[0], f.resyncs, f.records, want)
	}
}

// A shard holding another catalog's stock stays fenced, and Ready says so
// at once.
func TestRestartsReportAForeignShard(t *testing.T) {
	f := &fences{synced: map[int]string{}, stamp: shardstock.ErrForeignCatalog}
	r, q := startRestarts(t, f)
	f.restart(q, 1, "r1")
	if err := ready(t, r, 5*time.Second); !errors.Is(err, shardstock.ErrForeignCatalog) {
		t.Fatalf("Ready: %v, want ErrForeignCatalog", err)
	}
	if !f.Fenced(1) || r.FenceStates()[1] != 1 {
		t.Fatalf("the foreign shard opened: %v", r.FenceStates())
	}
}
