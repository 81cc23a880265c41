package ha

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// errReply stands for an error that came with an answer (shard.Answered
// says which do).
var errReply = errors.New("ERR wrong number of arguments")

func TestObserve(t *testing.T) {
	cases := []struct {
		name string
		err  error
		up   bool
	}{
		{"success", nil, true},
		{"an error that came with an answer", errReply, true},
		{"wrapped", fmt.Errorf("shard 0: %w", errReply), true},
		{"any other error", errors.New("connection refused"), false},
		{"deadline", context.DeadlineExceeded, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := NewHealth(HealthConfig{Shards: 1, Answered: func(err error) bool { return errors.Is(err, errReply) }})
			h.Observe(0, errors.New("i/o timeout")) // start from down
			h.Observe(0, tc.err)
			if h.Status()[0].Up != tc.up {
				t.Fatalf("Up = %v, want %v", h.Status()[0].Up, tc.up)
			}
		})
	}
	t.Run("a caller's cancellation says nothing about the shard", func(t *testing.T) {
		h := NewHealth(HealthConfig{Shards: 1})
		h.Observe(0, context.Canceled)
		if !h.Status()[0].Up {
			t.Fatal("cancelled call marked the shard down")
		}
	})
	t.Run("last error is kept and since moves on change only", func(t *testing.T) {
		now := time.Unix(100, 0)
		h := NewHealth(HealthConfig{Shards: 2, Breaker: BreakerConfig{Failures: 1, Now: func() time.Time { return now }}})
		now = now.Add(time.Second)
		h.Observe(1, errors.New("boom"))
		now = now.Add(time.Second)
		h.Observe(1, errors.New("boom again"))
		s := h.Status()[1]
		if s.Up || s.LastError != "boom again" || !s.Since.Equal(time.Unix(101, 0)) {
			t.Fatalf("%+v", s)
		}
		if !h.AnyUp() {
			t.Fatal("shard 0 is up")
		}
		h.Observe(0, errors.New("down too"))
		if h.AnyUp() {
			t.Fatal("AnyUp with every shard down")
		}
	})
}

type flakyPinger struct{ fail atomic.Bool }

func (p *flakyPinger) Ping(context.Context, int) error {
	if p.fail.Load() {
		return errors.New("connection refused")
	}
	return nil
}

func TestRunBringsAShardBack(t *testing.T) {
	h := NewHealth(HealthConfig{Shards: 1, Breaker: BreakerConfig{Failures: 1, Cooldown: 5 * time.Millisecond}})
	p := &flakyPinger{}
	p.fail.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { h.Run(ctx, p, time.Millisecond); close(done) }()
	waitFor(t, func() bool { return h.Status()[0].Breaker == Open })
	p.fail.Store(false)
	waitFor(t, func() bool { return h.Status()[0].Breaker == Closed && h.Up(0) })
	cancel()
	<-done
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for i := 0; i < 2000; i++ {
		if cond() {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("condition never held")
}

// slowPinger answers every ping after a delay.
type slowPinger time.Duration

func (d slowPinger) Ping(ctx context.Context, i int) error {
	time.Sleep(time.Duration(d))
	return nil
}

// TestSlowShardLeavesRotation: a shard that answers, but slower than
// SlowAfter, is taken out of rotation like a down one, and its status
// says why.
func TestSlowShardLeavesRotation(t *testing.T) {
	h := NewHealth(HealthConfig{Shards: 1, SlowAfter: 20 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go h.Run(ctx, slowPinger(40*time.Millisecond), 10*time.Millisecond)
	deadline := time.Now().Add(5 * time.Second)
	for h.Up(0) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	st := h.Status()[0]
	if h.Up(0) || st.Breaker != Open || !strings.Contains(st.LastError, "slow") {
		t.Fatalf("a slow shard: %+v", st)
	}
}
