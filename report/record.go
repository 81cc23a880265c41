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
	"sync/atomic"
	"time"

	"github.com/shardstock/shardstock"
)

// ReportStore keeps the seconds (sqlstore.Reports).
type ReportStore interface {
	AddSeconds(ctx context.Context, rows []shardstock.SaleSecond) error
	SaleSeconds(ctx context.Context, product string) ([]shardstock.SaleSecond, error)
}

// MaxSeconds bounds the seconds one process records for one product (a
// day of a sale that never stops); later seconds are not recorded.
const MaxSeconds = 86_400

// LatencyBuckets are the upper bounds (ms) of the latency histogram; the
// last bucket is everything slower.
var LatencyBuckets = [...]int64{1, 2, 5, 10, 20, 50, 100, 250, 500, 1000, 5000}

// Recorder counts purchases per product and second in memory and writes
// them to the Store every few seconds (Run). Safe for concurrent use; a
// purchase is counted with atomic adds on its product's current second, no
// lock (a lock shared by every answer of a flash sale would be contended).
type Recorder struct {
	store  ReportStore
	stock  func(ctx context.Context) (map[string][]int64, error)
	now    func() time.Time
	logger *slog.Logger
	cur    sync.Map // product -> *atomic.Pointer[second]: the second being counted

	mu      sync.Mutex // guards the fields below
	retired []retired  // seconds no longer counted into, not yet drained
	counts  map[key]int64
	seconds map[string]map[int64]bool // product -> seconds recorded (bounded by MaxSeconds)
	last    map[string][]int64        // product -> salable per shard last written
	full    map[string]bool           // products past MaxSeconds (logged once)
}

// second is one product's counts of one second. A purchase counts into it
// only while it is open (add, under a read lock); drain closes it first
// (the write lock waits for every add in progress), so no count lands in a
// second after it was read, however long its purchase was held up between
// reading the clock and counting.
type second struct {
	at       int64        // unix second
	mu       sync.RWMutex // read: an add in progress; write: close
	closed   bool         // drained: add refuses
	outcomes sync.Map     // outcome -> *atomic.Int64
	latency  [latencySlots]atomic.Int64
}

// add counts one answer; false when s was closed meanwhile.
func (s *second) add(outcome string, bucket int) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return false
	}
	c, ok := s.outcomes.Load(outcome)
	if !ok {
		c, _ = s.outcomes.LoadOrStore(outcome, new(atomic.Int64))
	}
	c.(*atomic.Int64).Add(1)
	s.latency[bucket].Add(1)
	return true
}

// close stops every later add; it returns once no add is in progress.
func (s *second) close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
}

type retired struct {
	product string
	s       *second
}

// latencySlots: one per bucket of LatencyBuckets, and everything slower.
const latencySlots = len(LatencyBuckets) + 1

type key struct {
	product string
	second  int64
	kind    string
	label   string
}

// RecorderConfig sets up a Recorder; zero values mean the defaults.
type RecorderConfig struct {
	Store ReportStore // where the counts go (every flush)
	// Stock gives every product's salable units per shard (read every
	// flush); nil: no stock is recorded.
	Stock  func(context.Context) (map[string][]int64, error)
	Now    func() time.Time // default time.Now
	Logger *slog.Logger     // default slog.Default()
}

// NewRecorder records into cfg.Store.
func NewRecorder(cfg RecorderConfig) *Recorder {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Recorder{store: cfg.Store, stock: cfg.Stock, now: cfg.Now, logger: cfg.Logger,
		counts: map[key]int64{}, seconds: map[string]map[int64]bool{}, last: map[string][]int64{}, full: map[string]bool{}}
}

// Purchase counts one answered purchase of product: its outcome
// ("reserved", "queued" or the error code) and how long the answer took.
// Product "" (not a catalog product: flashsale.Config.Observe) is not
// recorded, so a made-up id costs nothing and the table stays bounded by
// the catalog.
func (r *Recorder) Purchase(product, outcome string, took time.Duration) {
	if product == "" {
		return
	}
	now := r.now().Unix()
	slot, ok := r.cur.Load(product)
	if !ok {
		slot, _ = r.cur.LoadOrStore(product, new(atomic.Pointer[second]))
	}
	p := slot.(*atomic.Pointer[second])
	ms := took.Milliseconds()
	bucket := len(LatencyBuckets)
	for i, le := range LatencyBuckets {
		if ms <= le {
			bucket = i
			break
		}
	}
	for { // again when the second was drained between the load and the add
		s := p.Load()
		if s == nil || s.at != now {
			if s = r.roll(product, p, now); s == nil {
				return // past MaxSeconds
			}
		}
		if s.add(outcome, bucket) {
			return
		}
	}
}

// roll starts second now of product (once, whoever comes first), retiring
// the one before; nil when the product's seconds reached MaxSeconds.
func (r *Recorder) roll(product string, p *atomic.Pointer[second], now int64) *second {
	r.mu.Lock()
	defer r.mu.Unlock()
	old := p.Load()
	if old != nil && old.at >= now { // another purchase rolled it (or the clock stepped back)
		return old
	}
	if !r.take(product, now) {
		return nil
	}
	if old != nil {
		r.retired = append(r.retired, retired{product, old})
	}
	s := &second{at: now}
	p.Store(s)
	return s
}

// drain moves the seconds that ended at least two seconds ago (all of them
// with all set) into counts, closing each before it reads it: a purchase
// that read the clock earlier and counts later goes into a newer second.
// Caller holds mu.
func (r *Recorder) drain(now int64, all bool) {
	done := func(s *second) bool { return all || s.at <= now-2 }
	keep := r.retired[:0]
	var out []retired
	for _, x := range r.retired {
		if done(x.s) {
			out = append(out, x)
		} else {
			keep = append(keep, x)
		}
	}
	r.retired = keep
	r.cur.Range(func(k, v any) bool {
		p := v.(*atomic.Pointer[second])
		if s := p.Load(); s != nil && done(s) && p.CompareAndSwap(s, nil) {
			out = append(out, retired{k.(string), s})
		}
		return true
	})
	for _, x := range out {
		x.s.close()
		x.s.outcomes.Range(func(o, n any) bool {
			r.counts[key{x.product, x.s.at, shardstock.KindOutcome, o.(string)}] += n.(*atomic.Int64).Load()
			return true
		})
		for b := range x.s.latency {
			if n := x.s.latency[b].Load(); n > 0 {
				r.counts[key{x.product, x.s.at, shardstock.KindLatency, strconv.Itoa(b)}] += n
			}
		}
	}
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
// ctx is done, then everything once more (the server has stopped
// answering by then).
func (r *Recorder) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			r.FlushAll(context.WithoutCancel(ctx))
			return
		case <-t.C:
			r.Flush(ctx)
		}
	}
}

// Flush samples the stock and writes the seconds that are done (ended two
// seconds ago or more). Counts that could not be written are kept for the
// next flush.
func (r *Recorder) Flush(ctx context.Context) error { return r.flush(ctx, false) }

// FlushAll is Flush for every second, the current ones too: for when no
// purchase is being answered any more (at the end).
func (r *Recorder) FlushAll(ctx context.Context) error { return r.flush(ctx, true) }

func (r *Recorder) flush(ctx context.Context, all bool) error {
	r.sampleStock(ctx)
	r.mu.Lock()
	r.drain(r.now().Unix(), all)
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
			if n < 0 { // (-1: the shard did not answer)
				n = Down
			}
			r.counts[key{product, sec, shardstock.KindSalable, strconv.Itoa(i)}] = n
		}
	}
}
