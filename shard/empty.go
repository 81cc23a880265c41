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

// plan returns the shards to skip for product (bit i set: skip shard i),
// the shards whose marks ran out and were re-armed for this caller, which
// then probes them (probe; see settle), and whether every one of the n
// shards is marked, i.e. the product is sold out here without asking Redis.
func (e *emptyMarks) plan(product string, n int, now time.Time) (skip, probe uint64, soldOut bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	u := e.until[product]
	if u == nil {
		return 0, 0, false
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
			probe |= 1 << i
			soldOut = false
		}
	}
	return skip, probe, soldOut && len(u) == n
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

// settle records what an attempt learnt (its decision, walk.go): the
// shards that answered "sold out" (emptied) are marked; the probed shards
// that did not (unmark: they sold a unit, refused for another reason, or
// did not answer) lose the mark plan re-armed for the probe, so no
// purchase is told "sold out" on a shard that could not say so now.
func (e *emptyMarks) settle(product string, n int, emptied, unmark uint64, now time.Time) {
	if emptied == 0 && unmark == 0 {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	u := e.until[product]
	if u == nil {
		if emptied == 0 {
			return
		}
		u = make([]time.Time, n)
		e.until[product] = u
	}
	for i := range u {
		switch {
		case emptied&(1<<i) != 0:
			u[i] = now.Add(e.ttl)
		case unmark&(1<<i) != 0:
			u[i] = time.Time{}
		}
	}
}

// forget drops the marks of product: units came back (a release, a new
// initialisation), so every shard is worth asking again.
func (e *emptyMarks) forget(product string) {
	e.mu.Lock()
	delete(e.until, product)
	e.mu.Unlock()
}
