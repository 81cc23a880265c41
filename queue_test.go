package shardstock

import (
	"testing"
	"time"
)

func TestQueueClockServesAtItsRateFromTheStart(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	l := QueueLine{Rate: 10, Window: time.Minute, Clock: []QueueSegment{{At: t0, Rate: 10}}}
	for _, c := range []struct {
		at   time.Duration
		want int64
	}{{-time.Second, 0}, {0, 0}, {99 * time.Millisecond, 0}, {100 * time.Millisecond, 1}, {2500 * time.Millisecond, 25}} {
		if got := l.Serving(t0.Add(c.at)); got != c.want {
			t.Errorf("Serving(start%+v) = %d, want %d", c.at, got, c.want)
		}
	}
	turn, ok := l.TurnAt(25)
	if !ok || !turn.Equal(t0.Add(2500*time.Millisecond)) {
		t.Fatalf("TurnAt(25) = %v %v, want start+2.5s", turn, ok)
	}
	if _, _, admitted, _ := l.Turn(25, t0, t0.Add(2400*time.Millisecond)); admitted {
		t.Error("place 25 admitted before its turn")
	}
	if _, until, admitted, passed := l.Turn(25, t0, t0.Add(3*time.Second)); !admitted || passed || !until.Equal(turn.Add(time.Minute)) {
		t.Errorf("place 25 at start+3s: admitted %v passed %v until %v", admitted, passed, until)
	}
	if _, _, admitted, passed := l.Turn(25, t0, turn.Add(time.Minute)); admitted || !passed {
		t.Errorf("place 25 a window after its turn: admitted %v passed %v, want passed", admitted, passed)
	}
}

func TestQueueClockPausesAdvancesAndRebases(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	l := QueueLine{Rate: 10, Window: time.Minute, Clock: []QueueSegment{{At: t0, Rate: 10}}}
	l.Append(t0.Add(time.Second), 0, 0) // pause at 10
	if got := l.Serving(t0.Add(time.Hour)); got != 10 {
		t.Fatalf("paused: serving %d, want 10", got)
	}
	if _, ok := l.TurnAt(11); ok {
		t.Fatal("a paused clock reaches place 11")
	}
	l.Append(t0.Add(2*time.Second), 5, 0) // advance by 5 while paused
	if got := l.Serving(t0.Add(2 * time.Second)); got != 15 {
		t.Fatalf("after advance: serving %d, want 15", got)
	}
	if turn, _ := l.TurnAt(13); !turn.Equal(t0.Add(2 * time.Second)) {
		t.Fatalf("TurnAt(13) = %v, want the advance", turn)
	}
	if turn, _ := l.TurnAt(5); !turn.Equal(t0.Add(500 * time.Millisecond)) {
		t.Fatalf("TurnAt(5) = %v, want start+0.5s (reached before the pause)", turn)
	}
	// Resume, then a rebase back to 20 (nobody holds a place past 20): a
	// place up to 20 stays reached since it was; 21 comes at the rate.
	l.Append(t0.Add(3*time.Second), 0, 10)
	l.AppendAt(t0.Add(10*time.Second), 20, 10)
	if got := l.Serving(t0.Add(10 * time.Second)); got != 20 {
		t.Fatalf("after the rebase: serving %d, want 20", got)
	}
	if turn, _ := l.TurnAt(18); !turn.Equal(t0.Add(3300 * time.Millisecond)) {
		t.Fatalf("TurnAt(18) = %v, want start+3.3s", turn)
	}
	if turn, _ := l.TurnAt(21); !turn.Equal(t0.Add(10100 * time.Millisecond)) {
		t.Fatalf("TurnAt(21) = %v, want start+10.1s (reached again after the rebase)", turn)
	}
}

func TestQueueClockDropsSegmentsPastTheWindowAndExpiresTheirPlaces(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	l := QueueLine{Rate: 1, Window: 10 * time.Second, Clock: []QueueSegment{{At: t0, Rate: 1}}}
	for i := 1; i <= 30; i++ {
		l.Append(t0.Add(time.Duration(i)*time.Second), 0, 1)
	}
	if len(l.Clock) > 12 {
		t.Fatalf("%d segments kept, want at most the window's", len(l.Clock))
	}
	if l.Expired < 15 || l.Expired > 20 {
		t.Fatalf("expired up to %d, want about 30-10-1", l.Expired)
	}
	if _, _, _, passed := l.Turn(3, t0, t0.Add(30*time.Second)); !passed {
		t.Fatal("place 3 (turn at 3 s) has not passed at 30 s")
	}
	if _, _, admitted, _ := l.Turn(29, t0, t0.Add(30*time.Second)); !admitted {
		t.Fatal("place 29 (turn at 29 s) not admitted at 30 s")
	}
}

// A line that ran ahead of its crowd and was moved back: a place taken
// after an idle spell has its turn when it is taken, not when the number
// first passed it (an earlier version told such buyers "passed" at once).
func TestQueueTurnNeverComesBeforeTheBuyerJoined(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	l := QueueLine{Rate: 10, Window: 10 * time.Second, Clock: []QueueSegment{{At: t0, Rate: 10}}}
	idle := t0.Add(time.Minute) // 600 places reached, 3 taken
	l.AppendAt(idle, 3+10, 10)  // moved back to the crowd plus a second of the rate
	for i := 1; i <= 40; i++ {  // the old stretch is dropped: its places expire
		l.Append(idle.Add(time.Duration(i)*time.Second), 0, 10)
	}
	if l.Expired == 0 {
		t.Fatal("nothing expired: the test does not reach the pruned case")
	}
	late := idle.Add(40 * time.Second)
	for _, pos := range []int64{4, 13} { // one the number passed before, one at the rebase
		from, until, admitted, passed := l.Turn(pos, late, late)
		if !admitted || passed || !from.Equal(late) || !until.Equal(late.Add(l.Window)) {
			t.Errorf("place %d taken at %v: from %v until %v admitted %v passed %v, want its turn from the join",
				pos, late, from, until, admitted, passed)
		}
	}
	if _, _, admitted, passed := l.Turn(2, t0, late); admitted || !passed {
		t.Errorf("place 2, joined at the start: admitted %v passed %v, want passed", admitted, passed)
	}
}

// A rate so small that a place's turn lies beyond any time.Duration is not
// reached (an earlier version overflowed and admitted it at once).
func TestQueueTurnOfATinyRateDoesNotOverflow(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	l := QueueLine{Rate: 1e-12, Window: time.Minute, Clock: []QueueSegment{{At: t0, Rate: 1e-12}}}
	if at, ok := l.TurnAt(5); ok {
		t.Fatalf("TurnAt(5) at rate 1e-12 = %v, want never", at)
	}
	if _, _, admitted, passed := l.Turn(5, t0, t0.Add(time.Second)); admitted || passed {
		t.Fatalf("place 5: admitted %v passed %v, want waiting", admitted, passed)
	}
}
