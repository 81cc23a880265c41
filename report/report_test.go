package report_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardstock/shardstock"
	"github.com/shardstock/shardstock/report"
	"github.com/shardstock/shardstock/sqlstore/sqlstoretest"
)

// Two coordinators record the same seconds into one real database (SQLite,
// and MariaDB under make test); the report adds their counts up, carries
// each shard's stock forward, finds when each shard sold out, and reads
// the latency percentiles off the histogram.
func TestTwoRecordersMakeOneReport(t *testing.T) {
	for name, store := range sqlstoretest.Stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			at := time.Unix(1_800_000_000, 0)
			now := func() time.Time { return at }
			stock := map[string][]int64{"lamp": {2, 1}}
			salable := func(context.Context) (map[string][]int64, error) { return stock, nil }
			a := report.NewRecorder(report.RecorderConfig{Store: store.Reports, Stock: salable, Now: now})
			b := report.NewRecorder(report.RecorderConfig{Store: store.Reports, Stock: salable, Now: now})

			a.Purchase("lamp", "reserved", 3*time.Millisecond)
			b.Purchase("lamp", "reserved", 4*time.Millisecond)
			b.Purchase("lamp", "sold_out", 400*time.Millisecond)
			a.Purchase("", "not_found", time.Millisecond) // not a catalog product: not recorded
			mustFlush(t, a, b)
			at = at.Add(time.Second)
			stock = map[string][]int64{"lamp": {0, 1}}
			a.Purchase("lamp", "sold_out", time.Millisecond)
			mustFlush(t, a, b)
			at = at.Add(time.Second)
			mustFlush(t, a, b) // nothing new: nothing written

			rows, err := store.Reports.SaleSeconds(ctx, "lamp")
			if err != nil {
				t.Fatal(err)
			}
			if other, _ := store.Reports.SaleSeconds(ctx, ""); len(other) != 0 {
				t.Fatalf("a purchase of no catalog product was recorded: %v", other)
			}
			rep := report.Build("lamp", rows, map[shardstock.OrderStatus]int64{"paid": 2})
			if got := len(rep.Seconds); got != 2 {
				t.Fatalf("seconds %v, want the two with activity", rep.Seconds)
			}
			if r, s := rep.Purchases["reserved"], rep.Purchases["sold_out"]; r[0] != 2 || r[1] != 0 || s[0] != 1 || s[1] != 1 {
				t.Fatalf("purchases %v, want reserved [2 0] and sold_out [1 1] (both coordinators added up)", rep.Purchases)
			}
			if rep.P50MS[0] != 5 || rep.P99MS[0] != 500 || rep.P50MS[1] != 1 {
				t.Fatalf("p50 %v p99 %v, want [5 1] and [500 ...] (bucket bounds)", rep.P50MS, rep.P99MS)
			}
			if s0, s1 := rep.Salable["0"], rep.Salable["1"]; s0[0] != 2 || s0[1] != 0 || s1[0] != 1 || s1[1] != 1 {
				t.Fatalf("salable %v, want shard 0 [2 0] and shard 1 [1 1] (carried forward)", rep.Salable)
			}
			if at0, ok := rep.SoldOutAt["0"]; !ok || at0 != rep.Seconds[1] || len(rep.SoldOutAt) != 1 {
				t.Fatalf("sold out at %v, want shard 0 at the second second only", rep.SoldOutAt)
			}
		})
	}
}

func mustFlush(t *testing.T, rs ...*report.Recorder) {
	t.Helper()
	for _, r := range rs {
		if err := r.FlushAll(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

// The operators' page fetches the four charts at once: drawing them
// concurrently is safe (go test -race).
func TestChartsRenderConcurrently(t *testing.T) {
	rep := report.Build("lamp", []shardstock.SaleSecond{
		{Second: 10, Kind: shardstock.KindOutcome, Label: "reserved", N: 5},
		{Second: 11, Kind: shardstock.KindOutcome, Label: "reserved", N: 2},
	}, map[shardstock.OrderStatus]int64{"paid": 1})
	var wg sync.WaitGroup
	for range 4 {
		for _, chart := range []string{"purchases.svg", "stock.svg", "latency.svg", "orders.svg"} {
			wg.Go(func() {
				if _, err := report.Chart(chart, rep); err != nil {
					t.Error(err)
				}
			})
		}
	}
	wg.Wait()
}

// Every chart renders as SVG: with data, with one second of it (found by
// Schemathesis), and before any.
func TestChartsRender(t *testing.T) {
	full := report.Build("lamp", []shardstock.SaleSecond{
		{Second: 10, Kind: shardstock.KindOutcome, Label: "reserved", N: 5},
		{Second: 11, Kind: shardstock.KindOutcome, Label: "reserved", N: 2},
		{Second: 11, Kind: shardstock.KindOutcome, Label: "sold_out", N: 9},
		{Second: 10, Kind: shardstock.KindLatency, Label: "2", N: 5},
		{Second: 11, Kind: shardstock.KindLatency, Label: "6", N: 11},
		{Second: 10, Kind: shardstock.KindSalable, Label: "0", N: 2},
		{Second: 11, Kind: shardstock.KindSalable, Label: "0", N: 0},
	}, map[shardstock.OrderStatus]int64{"paid": 3, "cancelled": 1})
	oneSecond := report.Build("lamp", []shardstock.SaleSecond{ // shards sampled once, apart
		{Second: 10, Kind: shardstock.KindSalable, Label: "0", N: 3},
		{Second: 10, Kind: shardstock.KindSalable, Label: "1", N: 2},
	}, nil)
	for _, rep := range []report.Report{full, oneSecond, report.Build("lamp", nil, nil)} {
		for _, chart := range []string{"purchases.svg", "stock.svg", "latency.svg", "orders.svg"} {
			svg, err := report.Chart(chart, rep)
			if err != nil || !strings.HasPrefix(string(svg), "<svg") {
				t.Fatalf("%s of %d seconds: %v %.60s", chart, len(rep.Seconds), err, svg)
			}
		}
	}
}

// memStore keeps the seconds in memory (the real store is tested above).
type memStore struct {
	mu   sync.Mutex
	rows []shardstock.SaleSecond
}

func (m *memStore) AddSeconds(_ context.Context, rows []shardstock.SaleSecond) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.rows = append(m.rows, rows...)
	return nil
}

func (m *memStore) SaleSeconds(context.Context, string) ([]shardstock.SaleSecond, error) {
	return m.rows, nil
}

// Purchases counted without a lock, from many goroutines, while the clock
// moves on and flushes run: every one is written once, in its second.
func TestRecorderCountsEveryPurchaseOnce(t *testing.T) {
	var clock atomic.Int64
	clock.Store(1_800_000_000)
	store := &memStore{}
	r := report.NewRecorder(report.RecorderConfig{Store: store, Now: func() time.Time { return time.Unix(clock.Load(), 0) }})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 2000 {
				r.Purchase("lamp", []string{"reserved", "sold_out"}[(g+i)%2], time.Millisecond)
			}
		})
	}
	wg.Go(func() {
		for range 20 {
			clock.Add(1)
			r.Flush(context.Background()) // while purchases are counted: the seconds that are done
			time.Sleep(time.Millisecond)
		}
	})
	wg.Wait()
	if err := r.FlushAll(context.Background()); err != nil {
		t.Fatal(err)
	}
	var outcomes, latency int64
	for _, row := range store.rows {
		switch row.Kind {
		case shardstock.KindOutcome:
			outcomes += row.N
		case shardstock.KindLatency:
			latency += row.N
		}
	}
	if outcomes != 16000 || latency != 16000 {
		t.Fatalf("written %d outcomes and %d latencies, want 16000 each", outcomes, latency)
	}
}

// TestADownShardIsMarkedNotFlat (issue 42, finding 8): a shard that did
// not answer was left out of the samples, and its line stayed flat at its
// last count as if it still sold. Its seconds down are recorded as Down,
// carried forward until it answers again, and its line breaks there with
// the time it went down in its legend.
func TestADownShardIsMarkedNotFlat(t *testing.T) {
	store := &memStore{}
	var stock atomic.Pointer[[]int64]
	sec := atomic.Int64{}
	rec := report.NewRecorder(report.RecorderConfig{Store: store, Now: func() time.Time { return time.Unix(sec.Load(), 0) },
		Stock: func(context.Context) (map[string][]int64, error) {
			return map[string][]int64{"lamp": *stock.Load()}, nil
		}})
	for s, counts := range [][]int64{{5, 5}, {4, -1}, {3, -1}, {3, 4}} {
		sec.Store(int64(100 + s))
		stock.Store(&counts)
		rec.Purchase("lamp", "reserved", time.Millisecond) // (a second with activity: its sample is taken)
		if err := rec.FlushAll(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	rep := report.Build("lamp", store.rows, nil)
	if got := fmt.Sprint(rep.Salable["1"]); got != "[5 -2 -2 4]" {
		t.Fatalf("shard 1's salable units: %s, want [5 -2 -2 4] (-2: down)", got)
	}
	svg, err := report.Chart("stock.svg", rep)
	if err != nil || !strings.Contains(string(svg), "shard 1 (down 00:01:41)") {
		t.Fatalf("stock chart: %v; want shard 1's legend to say when it went down", err)
	}
}
