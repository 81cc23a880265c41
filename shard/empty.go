package shard

import (
	"sync"
	"time"
)

// emptyMarks remembers which shards answered "sold out" for which product,
// so that a sold-out product costs no Redis call: the sold-out fast path.
// A mark lasts ttl; when it runs out, the first request to see it re-arms
// it and probes that shard, while concurrent requests keep skipping it. So
// after a sell-out each shard gets at most one probe per ttl per process.
type emptyMarks struct {
	ttl   time.Duration
	mu    sync.Mutex             // guards until
	until map[string][]time.Time // product -> per-shard end of the mark
}

func newEmptyMarks(ttl time.Duration) *emptyMarks {
	return &emptyMarks{ttl: ttl, until: make(map[string][]time.Time)}
}

// plan returns the shards to skip for product (bit i set: skip shard i) and
// whether every one of the n shards is marked, i.e. the product is sold out
// here without asking Redis. Expired marks are re-armed for this caller,
// which then probes those shards (their bits are clear).
func (e *emptyMarks) plan(product string, n int, now time.Time) (skip uint64, soldOut bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	u := e.until[product]
	if u == nil {
		return 0, false
	}
	soldOut = true
	for i, t := range u {
		switch {
		case t.IsZero():
			soldOut = false
		case now.Before(t):
			skip |= 1 << i
		default:
			u[i] = now.Add(e.ttl)
			soldOut = false
		}
	}
	return skip, soldOut && len(u) == n
}

// known reports whether every one of the n shards is marked empty for
// product and no mark has run out (read-only: nothing is re-armed).
func (e *emptyMarks) known(product string, n int, now time.Time) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	u := e.until[product]
	if len(u) != n {
		return false
	}
	for _, t := range u {
		if !now.Before(t) {
			return false
		}
	}
	return true
}

// mark records that shard i of n answered "sold out" for product.
func (e *emptyMarks) mark(product string, i, n int, now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	u := e.until[product]
	if u == nil {
		u = make([]time.Time, n)
		e.until[product] = u
	}
	u[i] = now.Add(e.ttl)
}

// unmark clears the mark of shard i for product: it just sold a unit.
func (e *emptyMarks) unmark(product string, i int) {
	e.mu.Lock()
	if u := e.until[product]; u != nil {
		u[i] = time.Time{}
	}
	e.mu.Unlock()
}

// forget drops the marks of product: units came back (a release, a new
// initialisation), so every shard is worth asking again.
func (e *emptyMarks) forget(product string) {
	e.mu.Lock()
	delete(e.until, product)
	e.mu.Unlock()
}
