// Package ha keeps the sale going through failures. Health tracks which
// shards answer: every call's outcome feeds a per-shard circuit breaker, and
// a loop pings each shard with a deadline, so a shard that fails repeatedly
// is skipped by the purchase path (costing no time at all) until a probe
// after the cooldown finds it answering again. Backoff is the one retry
// wait of the app. It imports nothing of shardstock's: what an error means
// is its caller's to say (HealthConfig.Answered).
package ha

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ShardStatus is what Health knows of one shard.
type ShardStatus struct {
	Up        bool         // the last call or ping was answered
	Breaker   BreakerState // closed: in rotation
	LastError string       // the last transport error, kept after recovery
	Since     time.Time    // when Up last changed
}

// Health records per-shard reachability. It is safe for concurrent use and
// satisfies shard.Health.
type Health struct {
	cfg      HealthConfig
	breakers []*Breaker
	mu       sync.RWMutex // guards state
	state    []ShardStatus
}

// HealthConfig sets up a Health; zero values mean the defaults.
type HealthConfig struct {
	Shards  int           // how many shards are tracked
	Breaker BreakerConfig // each shard's breaker (whose clock Health uses too)
	// SlowAfter: a ping answered later than this counts as a failure, so a
	// shard that has turned slow (but still answers) leaves rotation like a
	// down one, and the shard view says why. Zero: latency is not judged.
	SlowAfter time.Duration
	// Answered tells whether a call's error still came with an answer from
	// the shard (an error reply does: the shard is up); the shard package
	// knows its client's errors (shard.Answered). Default: only a nil error.
	Answered func(error) bool
}

// NewHealth tracks cfg.Shards shards, all presumed up.
func NewHealth(cfg HealthConfig) *Health {
	cfg.Breaker.fill()
	if cfg.Answered == nil {
		cfg.Answered = func(err error) bool { return err == nil }
	}
	h := &Health{cfg: cfg, state: make([]ShardStatus, cfg.Shards)}
	for i := range h.state {
		h.state[i] = ShardStatus{Up: true, Since: cfg.Breaker.Now()}
		h.breakers = append(h.breakers, NewBreaker(cfg.Breaker))
	}
	return h
}

// Up reports whether a call may go to shard i now (its breaker allows it).
func (h *Health) Up(i int) bool { return h.breakers[i].Allow() }

// Observe records the outcome of a call on shard i. An answer — Answered
// says which errors still came with one — proves it is up; any other error
// (a transport error, a deadline) marks it down. A call cancelled by its caller
// says nothing about the shard and is ignored.
func (h *Health) Observe(i int, err error) {
	if errors.Is(err, context.Canceled) {
		return
	}
	up := err == nil || h.cfg.Answered(err)
	h.breakers[i].Record(up)
	h.mu.Lock()
	defer h.mu.Unlock()
	s := &h.state[i]
	if !up {
		s.LastError = err.Error()
	}
	if s.Up != up {
		s.Up, s.Since = up, h.cfg.Breaker.Now()
	}
}

// Status returns a copy of every shard's status, in index order.
func (h *Health) Status() []ShardStatus {
	h.mu.RLock()
	out := append([]ShardStatus(nil), h.state...)
	h.mu.RUnlock()
	for i := range out {
		out[i].Breaker = h.breakers[i].State()
	}
	return out
}

// AnyUp reports whether at least one shard is up with its breaker closed.
func (h *Health) AnyUp() bool {
	for _, s := range h.Status() {
		if s.Up && s.Breaker != Open {
			return true
		}
	}
	return false
}

// Pinger checks one shard; ping errors are observed by the caller's own
// Health hook or by Run.
type Pinger interface {
	Ping(ctx context.Context, i int) error
}

// Run pings every shard each interval until ctx is done, observing each
// result, so a shard marked down comes back into rotation when it answers.
func (h *Health) Run(ctx context.Context, p Pinger, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		var wg sync.WaitGroup
		for i := range h.state {
			wg.Go(func() {
				start := h.cfg.Breaker.Now()
				err := p.Ping(ctx, i)
				if took := h.cfg.Breaker.Now().Sub(start); err == nil && h.cfg.SlowAfter > 0 && took > h.cfg.SlowAfter {
					err = fmt.Errorf("slow: a ping took %s (over %s)", took.Round(time.Millisecond), h.cfg.SlowAfter)
				}
				h.Observe(i, err)
			})
		}
		wg.Wait()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
