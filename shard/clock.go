package shard

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"time"
)

// One clock for the sale: the scripts judge the window by the shards'
// clock (TIME in lua/purchase.lua). Clock measures how far the
// coordinator's own clock is from the shards' (the median over the shards
// that answer, every 2 s, each reading corrected by half its round trip),
// so the coordinator judges its own checks — the window before a script
// runs, a spooled purchase's time — by its clock moved by that much, and
// reports the skew (a metric, /readyz, an alert past a second).
type Clock struct {
	set    *Set
	wall   func() time.Time    // the coordinator's own clock
	onSkew func(time.Duration) // optional: each new measurement (the metric)
	skew   atomic.Int64        // ns the coordinator's clock is ahead of the shards'
	known  atomic.Bool         // a shard has answered its clock since the start
}

// ClockConfig sets up a Clock; zero values mean the defaults.
type ClockConfig struct {
	Set    *Set                // the shards whose clock the sale runs on
	Wall   func() time.Time    // the coordinator's own clock; default time.Now
	OnSkew func(time.Duration) // optional: each new measurement (the metric)
}

// NewClock returns the sale clock over cfg.Set's shards.
func NewClock(cfg ClockConfig) *Clock {
	if cfg.Wall == nil {
		cfg.Wall = time.Now
	}
	return &Clock{set: cfg.Set, wall: cfg.Wall, onSkew: cfg.OnSkew}
}

// Now is the coordinator's clock moved onto the shards'.
func (c *Clock) Now() time.Time { return c.wall().Add(-c.Skew()) }

// Known says whether the skew was measured: until a shard answers its
// clock, Now is the coordinator's own, which may be off.
func (c *Clock) Known() bool { return c.known.Load() }

// Skew is how far the coordinator's clock is ahead of the shards'.
func (c *Clock) Skew() time.Duration { return time.Duration(c.skew.Load()) }

// SkewWarning says, when the skew is past a second, by how much and what
// it means for the sale ("" otherwise): /readyz shows it (the coordinator
// stays ready; its checks are corrected by the skew).
func (c *Clock) SkewWarning() string {
	if skew := c.Skew(); skew > time.Second || skew < -time.Second {
		return fmt.Sprintf("this coordinator's clock is %s off the shards'; sale windows are judged by the shards' clock, and its own checks are corrected by the skew", skew.Round(time.Millisecond))
	}
	return ""
}

// Run measures the skew every 2 s until ctx is done.
func (c *Clock) Run(ctx context.Context) {
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for {
		c.measure(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Measure reads every shard's clock once and keeps the median skew (Run
// does it every 2 s); a coordinator measures once before it serves.
func (c *Clock) Measure(ctx context.Context) { c.measure(ctx) }

// measure reads every shard's clock once and keeps the median skew.
func (c *Clock) measure(ctx context.Context) {
	var skews []time.Duration
	for i := range c.set.Len() {
		t0 := c.wall()
		st, err := c.set.Time(ctx, i)
		t1 := c.wall()
		if err != nil {
			continue
		}
		skews = append(skews, t0.Add(t1.Sub(t0)/2).Sub(st))
	}
	if len(skews) == 0 {
		return
	}
	slices.Sort(skews)
	skew := skews[len(skews)/2]
	c.skew.Store(int64(skew))
	c.known.Store(true)
	if c.onSkew != nil {
		c.onSkew(skew)
	}
}
