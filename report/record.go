// Package report is the sale report: what happened in each second of a
// product's sale — purchases by outcome, answer latency, each shard's
// salable units — recorded by every coordinator into SQL (bounded: only
// seconds with activity, stock only when it changed, at most MaxSeconds
// seconds per product and process) and drawn as charts for the operators'
// page with go-chart. Its ports (Store, the stock and catalog lookups) are
// interfaces and functions; it imports only the domain.
package report

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/shardstock/shardstock"
)

// Store keeps the seconds (sqlstore.Store).
type Store interface {
	AddSeconds(ctx context.Context, rows []shardstock.SaleSecond) error
	SaleSeconds(ctx context.Context, product string) ([]shardstock.SaleSecond, error)
}

// MaxSeconds bounds the seconds one process records for one product (a
// day of a sale that never stops); later seconds are not recorded.
const MaxSeconds = 86_400

// LatencyBuckets are the upper bounds (ms) of the latency histogram; the
// last bucket is everything slower.
var LatencyBuckets = []int64{1, 2, 5, 10, 20, 50, 100, 250, 500, 1000, 5000}

// Recorder counts purchases per product and second in memory and writes
// them to the Store every few seconds (Run). Safe for concurrent use.
type Recorder struct {
	store  Store
	known  func(product string) bool
	stock  func(ctx context.Context) (map[string][]int64, error)
	now    func() time.Time
	logger *slog.Logger

	mu      sync.Mutex // guards the fields below
	counts  map[key]int64
	seconds map[string]map[int64]bool // product -> seconds recorded (bounded by MaxSeconds)
	last    map[string][]int64        // product -> salable per shard last written
	full    map[string]bool           // products past MaxSeconds (logged once)
}

type key struct {
	product string
	second  int64
	kind    string
	label   string
}

// NewRecorder records into store. known says whether a product id is in
// the catalog (only those are recorded: a made-up id costs nothing); stock
// gives every product's salable units per shard (read every flush); now
// is the clock (nil: time.Now).
func NewRecorder(store Store, known func(string) bool, stock func(context.Context) (map[string][]int64, error), now func() time.Time, logger *slog.Logger) *Recorder {
	if now == nil {
		now = time.Now
	}
	if logger == nil {
		logger = slog.Default()
	}
	return &Recorder{store: store, known: known, stock: stock, now: now, logger: logger,
		counts: map[key]int64{}, seconds: map[string]map[int64]bool{}, last: map[string][]int64{}, full: map[string]bool{}}
}

// Purchase counts one answered purchase of product: its outcome
// ("reserved", "queued" or the error code) and how long the answer took.
func (r *Recorder) Purchase(product, outcome string, took time.Duration) {
	if r.known != nil && !r.known(product) {
		return
	}
	sec := r.now().Unix()
	ms := took.Milliseconds()
	bucket := len(LatencyBuckets)
	for i, le := range LatencyBuckets {
		if ms <= le {
			bucket = i
			break
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.take(product, sec) {
		return
	}
	r.counts[key{product, sec, shardstock.KindOutcome, outcome}]++
	r.counts[key{product, sec, shardstock.KindLatency, strconv.Itoa(bucket)}]++
}

// take reports whether second sec of product may be recorded. Caller
// holds mu.
func (r *Recorder) take(product string, sec int64) bool {
	secs := r.seconds[product]
	if secs == nil {
		secs = map[int64]bool{}
		r.seconds[product] = secs
	}
	if secs[sec] {
		return true
	}
	if len(secs) >= MaxSeconds {
		if !r.full[product] {
			r.full[product] = true
			r.logger.Warn("sale report: this product's recorded seconds reached their bound; later seconds are not recorded",
				"product", product, "seconds", MaxSeconds)
		}
		return false
	}
	secs[sec] = true
	return true
}

// Run samples the stock and writes what was counted every interval until
// ctx is done, then once more.
func (r *Recorder) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			r.Flush(context.WithoutCancel(ctx))
			return
		case <-t.C:
			r.Flush(ctx)
		}
	}
}

// Flush samples the stock and writes the counts so far. Counts that could
// not be written are kept for the next flush.
func (r *Recorder) Flush(ctx context.Context) error {
	r.sampleStock(ctx)
	r.mu.Lock()
	rows := make([]shardstock.SaleSecond, 0, len(r.counts))
	for k, n := range r.counts {
		rows = append(rows, shardstock.SaleSecond{Product: k.product, Second: k.second, Kind: k.kind, Label: k.label, N: n})
	}
	r.counts = map[key]int64{}
	r.mu.Unlock()
	if err := r.store.AddSeconds(ctx, rows); err != nil {
		r.logger.Warn("sale report: could not write; will retry", "err", err, "rows", len(rows))
		r.mu.Lock()
		for _, row := range rows { // back for the next flush (added to, or replaced by, newer counts)
			k := key{row.Product, row.Second, row.Kind, row.Label}
			if row.Kind == shardstock.KindSalable {
				if _, newer := r.counts[k]; !newer {
					r.counts[k] = row.N
				}
				continue
			}
			r.counts[k] += row.N
		}
		r.mu.Unlock()
		return err
	}
	return nil
}

// sampleStock records each shard's salable units of every product whose
// stock changed since the last sample.
func (r *Recorder) sampleStock(ctx context.Context) {
	if r.stock == nil {
		return
	}
	stock, err := r.stock(ctx)
	if err != nil {
		return
	}
	sec := r.now().Unix()
	r.mu.Lock()
	defer r.mu.Unlock()
	for product, salable := range stock {
		last := r.last[product]
		changed := len(last) != len(salable)
		for i := 0; !changed && i < len(salable); i++ {
			changed = last[i] != salable[i]
		}
		if !changed || !r.take(product, sec) {
			continue
		}
		r.last[product] = append([]int64(nil), salable...)
		for i, n := range salable {
			if n >= 0 { // -1: the shard did not answer
				r.counts[key{product, sec, shardstock.KindSalable, strconv.Itoa(i)}] = n
			}
		}
	}
}
