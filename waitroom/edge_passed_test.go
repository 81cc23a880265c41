package waitroom

import (
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/shardstock/shardstock"
	"github.com/shardstock/shardstock/api"
)

// TestTheEdgeNeverEndsATurnEarly (issue 41, finding 1): the edge turns
// away a place whose turn is over by its own judgement (PassedBefore). Over
// lines whose clocks run, stop and rebase back, judged by an edge whose
// copy is up to 2 s old (limiter.lua keeps a passed line 2 s) and whose
// clock is up to 3 s off, every place it would turn away has had its turn
// by the line's own rule (QueueLine.Turn).
// A buyer holds a place only where the system lets one: a rebase back
// reaches only places nobody holds, so a holder of a place the number
// dropped below joined after the drop.
func TestTheEdgeNeverEndsATurnEarly(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 8, 0, 0, 0, time.UTC)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	judged := 0
	rapid.Check(t, func(t *rapid.T) {
		l := shardstock.QueueLine{Mode: shardstock.QueueFIFO, Window: time.Duration(rapid.IntRange(1, 20).Draw(t, "window")) * time.Second}
		at := 0
		for i := range rapid.IntRange(1, 6).Draw(t, "segments") {
			at += rapid.IntRange(0, 20_000).Draw(t, "gap")
			base := int64(rapid.IntRange(0, 40).Draw(t, "base"))
			if i == 0 {
				base = 0
			}
			rate := float64(rapid.IntRange(0, 8).Draw(t, "rate")) / 2
			l.Clock = append(l.Clock, shardstock.QueueSegment{At: ms(at), Base: base, Rate: rate})
		}
		pub := ms(rapid.IntRange(0, at+40_000).Draw(t, "published"))
		copied := l
		copied.Clock = nil
		for _, s := range l.Clock {
			if !s.At.After(pub) {
				copied.Clock = append(copied.Clock, s)
			}
		}
		if len(copied.Clock) == 0 {
			return
		}
		p, w := PassedBefore(&copied, pub)
		truth := pub.Add(time.Duration(rapid.IntRange(0, 2000).Draw(t, "age")) * time.Millisecond)
		edge := truth.Add(time.Duration(rapid.IntRange(-3000, 3000).Draw(t, "skew")) * time.Millisecond)
		pos := int64(rapid.IntRange(1, int(max(p, 1))).Draw(t, "pos"))
		joined := ms(rapid.IntRange(-20_000, int(edge.Sub(t0)/time.Millisecond)).Draw(t, "joined"))
		// A holder of pos joined after every drop of the number below pos.
		for i := 1; i < len(l.Clock); i++ {
			s := l.Clock[i]
			if !s.At.After(truth) && s.Base < pos && l.Serving(s.At.Add(-time.Nanosecond)) >= pos && !joined.After(s.At) {
				return
			}
		}
		if pos > p || joined.Add(w).After(edge) {
			return // let through: the coordinator judges
		}
		judged++
		now := l // the line as it stands at the true time
		now.Clock = nil
		for _, s := range l.Clock {
			if !s.At.After(truth) {
				now.Clock = append(now.Clock, s)
			}
		}
		from, until, admitted, passed := now.Turn(pos, joined, truth)
		if !passed {
			t.Fatalf("place %d (joined %v) turned away at the edge (p %d, w %v, edge clock %v) but its turn is %v to %v at %v (admitted %v)",
				pos, joined.Sub(t0), p, w, edge.Sub(t0), from.Sub(t0), until.Sub(t0), truth.Sub(t0), admitted)
		}
	})
	t.Logf("%d places turned away at the edge, each passed by the line's own rule", judged)
	if judged == 0 {
		t.Fatalf("only %d draws judged at the edge: the test sees too little", judged)
	}
}

// TestEdgeLinesPublishPassedPlacesAndRevocations: the edge's copy of a
// line names the places whose turns are over and the revoked buyers.
func TestEdgeLinesPublishPassedPlacesAndRevocations(t *testing.T) {
	f := newFixture(t, api.QueueDefinition{Mode: "fifo", Rate: 2, LeadSeconds: 600, WindowSeconds: 30})
	f.at(-time.Minute)
	f.join("ann")
	f.join("bob")
	if _, err := f.room.Revoke(t.Context(), "lamp", "bob"); err != nil {
		t.Fatal(err)
	}
	f.at(time.Minute)
	edge := f.room.EdgeLines(f.now, 2*time.Second)
	for _, want := range []string{"queue lamp ", "passed lamp ", " 35000\n", "revoked lamp bob\n"} {
		if !strings.Contains(edge, want) {
			t.Errorf("edge lines %q: no %q", edge, want)
		}
	}
}

// TestTheEdgeSeesARebaseBackSinceItsCut: the number stood at 15 at the
// cut, then went back to 0 and on to 1 only lately; place 1, taken after
// the rebase, has its turn now, and the edge must not count it passed by
// the number at the cut.
func TestTheEdgeSeesARebaseBackSinceItsCut(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 8, 0, 0, 0, time.UTC)
	sec := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Second) }
	l := shardstock.QueueLine{Mode: shardstock.QueueFIFO, Window: 10 * time.Second, Clock: []shardstock.QueueSegment{
		{At: sec(0), Base: 0, Rate: 1}, {At: sec(16), Base: 0, Rate: 0}, {At: sec(25), Base: 1, Rate: 0}}}
	now, joined := sec(30), sec(17)
	if _, _, admitted, _ := l.Turn(1, joined, now); !admitted {
		t.Fatal("place 1 should be admitted at 30 s")
	}
	p, w := PassedBefore(&l, now)
	if p >= 1 && !joined.Add(w).After(now.Add(2*time.Second)) {
		t.Fatalf("the edge (2 s ahead) turns away place 1 in its turn: p %d, w %v", p, w)
	}
}
