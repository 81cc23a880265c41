package ha

import (
	"math/bits"
	"sync"
	"time"
)

// BreakerState is a circuit breaker's state.
type BreakerState int

// The states: closed lets every call through; open lets none through until
// the cooldown has passed; half-open lets one probe through, whose outcome
// closes or re-opens the breaker.
const (
	Closed BreakerState = iota
	Open
	HalfOpen
)

func (s BreakerState) String() string {
	return [...]string{"closed", "open", "half_open"}[s]
}

// BreakerConfig tunes a Breaker; zero values mean the defaults.
type BreakerConfig struct {
	Failures int              // consecutive failures that open it; default 3
	Cooldown time.Duration    // time open before a probe; default 2s
	Now      func() time.Time // the clock; default time.Now
}

func (c *BreakerConfig) fill() {
	if c.Failures <= 0 {
		c.Failures = 3
	}
	if c.Cooldown <= 0 {
		c.Cooldown = 2 * time.Second
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Breaker is a circuit breaker for one shard. It has no goroutines: time
// is read from the injected clock when it is asked. Safe for concurrent use.
type Breaker struct {
	cfg      BreakerConfig
	mu       sync.Mutex // guards the fields below
	state    BreakerState
	failures int       // consecutive, while closed
	since    time.Time // when it opened, or when the probe was let through
	// recent holds the last 20 outcomes while closed (bit set: failed): a
	// shard that fails half its calls opens the breaker even when its
	// failures never come three in a row.
	recent, calls uint32
}

// errorWindow is how many recent calls the error rate is judged over, and
// errorRate the share of them that opens the breaker.
const (
	errorWindow = 20
	errorRate   = 0.5
)

// NewBreaker returns a closed breaker.
func NewBreaker(cfg BreakerConfig) *Breaker {
	cfg.fill()
	return &Breaker{cfg: cfg}
}

// Allow reports whether a call may go to the shard now. In half-open only
// one call (the probe) is let through per cooldown; if its outcome is never
// recorded (its caller went away), another is let through after the next
// cooldown.
func (b *Breaker) Allow() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.cfg.Now()
	switch b.state {
	case Closed:
		return true
	case Open, HalfOpen:
		if now.Sub(b.since) < b.cfg.Cooldown {
			return false
		}
		b.state, b.since = HalfOpen, now
		return true
	}
	return false
}

// Record records a call's outcome: ok means the shard answered.
func (b *Breaker) Record(ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case ok && b.state == Open && b.cfg.Now().Sub(b.since) < b.cfg.Cooldown:
		// A late answer to a call sent before it opened: not a probe.
	case ok:
		if b.state != Closed {
			b.recent, b.calls = 0, 0
		}
		b.state, b.failures = Closed, 0
		b.remember(false)
	case b.state == Closed:
		b.failures++
		b.remember(true)
		if b.failures >= b.cfg.Failures || b.calls >= errorWindow && bits.OnesCount32(b.recent) >= int(errorRate*errorWindow) {
			b.state, b.since = Open, b.cfg.Now()
		}
	default: // a failed probe, or a failure while open
		b.state, b.since = Open, b.cfg.Now()
	}
}

// remember shifts one outcome into the recent window.
func (b *Breaker) remember(failed bool) {
	b.recent = (b.recent << 1) & (1<<errorWindow - 1)
	if failed {
		b.recent |= 1
	}
	if b.calls < errorWindow {
		b.calls++
	}
}

// State returns the current state.
func (b *Breaker) State() BreakerState {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state
}
