package ha

import (
	"testing"
	"time"
)

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

func TestBreaker(t *testing.T) {
	type step struct {
		op    string // allow | ok | fail | wait
		wait  time.Duration
		want  bool   // for allow
		state string // state after the step ("" = not checked)
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{"stays closed below the threshold", []step{
			{op: "fail", state: "closed"}, {op: "fail", state: "closed"}, {op: "ok", state: "closed"},
			{op: "fail", state: "closed"}, {op: "fail", state: "closed"}, {op: "allow", want: true, state: "closed"}}},
		{"opens after consecutive failures and refuses calls", []step{
			{op: "fail", state: "closed"}, {op: "fail", state: "closed"}, {op: "fail", state: "open"},
			{op: "allow", want: false, state: "open"}, {op: "wait", wait: time.Second, state: "open"},
			{op: "allow", want: false, state: "open"}}},
		{"half-open lets one probe through; success closes", []step{
			{op: "fail"}, {op: "fail"}, {op: "fail", state: "open"},
			{op: "wait", wait: 2 * time.Second, state: "open"},
			{op: "allow", want: true, state: "half_open"}, {op: "allow", want: false, state: "half_open"},
			{op: "ok", state: "closed"}, {op: "allow", want: true, state: "closed"}}},
		{"a failed probe re-opens for another cooldown", []step{
			{op: "fail"}, {op: "fail"}, {op: "fail", state: "open"},
			{op: "wait", wait: 2 * time.Second}, {op: "allow", want: true, state: "half_open"},
			{op: "fail", state: "open"}, {op: "wait", wait: time.Second}, {op: "allow", want: false, state: "open"},
			{op: "wait", wait: time.Second}, {op: "allow", want: true, state: "half_open"}}},
		{"a lost probe is replaced after a cooldown", []step{
			{op: "fail"}, {op: "fail"}, {op: "fail", state: "open"},
			{op: "wait", wait: 2 * time.Second}, {op: "allow", want: true, state: "half_open"},
			{op: "wait", wait: time.Second}, {op: "allow", want: false, state: "half_open"},
			{op: "wait", wait: time.Second}, {op: "allow", want: true, state: "half_open"}}},
		{"a late success from before opening does not close it", []step{
			{op: "fail"}, {op: "fail"}, {op: "fail", state: "open"}, {op: "ok", state: "open"},
			{op: "allow", want: false, state: "open"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clk := &fakeClock{t: time.Unix(1000, 0)}
			b := NewBreaker(BreakerConfig{Failures: 3, Cooldown: 2 * time.Second, Now: clk.now})
			for i, s := range tc.steps {
				switch s.op {
				case "allow":
					if got := b.Allow(); got != s.want {
						t.Fatalf("step %d: Allow = %v, want %v", i, got, s.want)
					}
				case "ok", "fail":
					b.Record(s.op == "ok")
				case "wait":
					clk.advance(s.wait)
				}
				if got := b.State().String(); s.state != "" && got != s.state {
					t.Fatalf("step %d (%s): state %s, want %s", i, s.op, got, s.state)
				}
			}
		})
	}
}

// TestBreakerOpensOnErrorRate: failures that never come three in a row but
// are half of the recent calls open the breaker too.
func TestBreakerOpensOnErrorRate(t *testing.T) {
	b := NewBreaker(BreakerConfig{})
	for i := 0; i < 40 && b.State() == Closed; i++ {
		b.Record(i%2 == 0) // fail, answer, fail, answer, ...
	}
	if b.State() != Open {
		t.Fatal("a shard failing every other call kept its breaker closed")
	}
	ok := NewBreaker(BreakerConfig{})
	for i := 0; i < 100; i++ {
		ok.Record(i%5 != 0) // one failure in five
	}
	if ok.State() != Closed {
		t.Fatal("one failure in five opened the breaker")
	}
}
