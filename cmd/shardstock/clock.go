package main

import (
	"context"
	"slices"
	"time"
)

// One clock for the sale: the scripts judge the window by the shards'
// clock (TIME in lua/purchase.lua). The coordinator measures how far its
// own clock is from the shards' (the median over the shards that answer,
// every 2 s, each reading corrected by half its round trip), judges its own
// checks — the window before a script runs, a spooled purchase's time — by
// its clock moved by that much, and reports the skew: a metric, /readyz,
// and an alert past a second.

// wallClock is the coordinator's own clock (Config.Test.Clock; tests skew it).
func (m *Main) wallClock() time.Time {
	if m.cfg.Test.Clock != nil {
		return m.cfg.Test.Clock()
	}
	return time.Now()
}

// saleClock is the coordinator's clock moved onto the shards'.
func (m *Main) saleClock() time.Time {
	return m.wallClock().Add(-time.Duration(m.skew.Load()))
}

// clockSkew is how far the coordinator's clock is ahead of the shards'.
func (m *Main) clockSkew() time.Duration { return time.Duration(m.skew.Load()) }

// measureSkew reads every shard's clock once and keeps the median skew.
func (m *Main) measureSkew(ctx context.Context) {
	var skews []time.Duration
	for i := range m.set.Len() {
		t0 := m.wallClock()
		st, err := m.set.Time(ctx, i)
		t1 := m.wallClock()
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
	m.skew.Store(int64(skew))
	m.metrics.ClockSkew.Set(skew.Seconds())
}

func (m *Main) runSkew(ctx context.Context) {
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for {
		m.measureSkew(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
