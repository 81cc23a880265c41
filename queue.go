package shardstock

import (
	"math"
	"time"
)

// QueueMode is how a waiting room orders its buyers.
type QueueMode string

// The waiting room's modes: fifo places buyers in the order they join;
// draw gives everyone who joined before the sale's start a uniformly random
// place, drawn at the start, and places later buyers in the order they join.
const (
	QueueFIFO QueueMode = "fifo"
	QueueDraw QueueMode = "draw"
)

// QueueLine is a product's waiting room: as the operator defined it, and
// the clock of its "now serving" number. Every coordinator computes the
// number from the line alone, so admitting a purchase reads no store.
type QueueLine struct {
	Product    string
	Mode       QueueMode
	Rate       float64       // places admitted per second while running
	Lead       time.Duration // buyers may join this long before the sale starts
	Window     time.Duration // an admitted buyer's time to buy, from their turn
	Difficulty int           // proof of work at join: leading zero bits (0: none)
	Paused     bool
	// Held: no unit was left at the last count, and the number waits for
	// units to come back (a release, a stock add) instead of letting places
	// pass their turn with nothing to buy.
	Held bool
	// Clock is how the number moved: each segment runs from At until the
	// next one's At; the last runs on. Expired: every place up to it had
	// its turn longer ago than Window (older segments are dropped).
	Clock   []QueueSegment
	Expired int64
	// WindowVersion is the sale window's version the clock's start follows
	// (shardstock.Product.WindowVersion).
	WindowVersion int64
	Joined        int64 // places handed out
	Lobby         int64 // buyers in a draw line's lobby, waiting for the draw
	Drawn         bool  // a draw line's lobby has its places
	// DrawnAt is when the lobby got its places: no turn of a draw line
	// comes before DrawGrace after it, so its buyers learn their places
	// before the first turns, however long the draw took.
	DrawnAt time.Time
	Version int64 // grows with every change of the definition or the clock
}

// QueuePlace is a buyer's place in a line: Position (0: in a draw's lobby,
// placed at the start) and when they joined; LineVersion is the line's
// version when the place was handed out or read.
type QueuePlace struct {
	Position    int64
	JoinedAt    time.Time
	LineVersion int64
}

// QueueSegment is a stretch of a line's clock: from At, the number now
// serving is Base + Rate × the seconds since At.
type QueueSegment struct {
	At   time.Time
	Base int64
	Rate float64
}

// Serving is the number now serving at t: every place up to it has had its
// turn.
func (l *QueueLine) Serving(t time.Time) int64 {
	var n int64
	for _, s := range l.Clock {
		if t.Before(s.At) {
			break
		}
		n = s.Base + int64(math.Floor(s.Rate*t.Sub(s.At).Seconds()))
	}
	return n
}

// TurnAt is when place pos's turn came (the start of the last stretch in
// which the number has been at least pos), or comes as the clock runs now;
// ok is false when the clock as it runs never reaches it (paused). A
// rebase back (Append with a lower base) reaches only places nobody holds
// yet, so a held place, once reached, stays reached.
func (l *QueueLine) TurnAt(pos int64) (from time.Time, ok bool) {
	for i, s := range l.Clock {
		if s.Base >= pos {
			if !ok {
				from, ok = s.At, true
			}
			continue
		}
		ok = false
		wait := float64(pos-s.Base) / s.Rate * float64(time.Second)
		if s.Rate <= 0 || wait > maxWait {
			continue // never, as this stretch runs (or not in any lifetime: no overflow)
		}
		at := s.At.Add(time.Duration(wait))
		if i+1 == len(l.Clock) || at.Before(l.Clock[i+1].At) {
			from, ok = at, true
		}
	}
	return from, ok
}

// maxWait is the longest wait TurnAt computes (a century): a place further
// off is not reached as the clock runs.
const maxWait = float64(100 * 365 * 24 * time.Hour)

// Running is the rate the number grows at now: 0 while paused or held.
func (l *QueueLine) Running() float64 {
	if l.Paused || l.Held {
		return 0
	}
	return l.Rate
}

// Starts is when the line's clock starts: its sale's start, or DrawGrace
// after it for a draw (LineStarts).
func (l *QueueLine) Starts() time.Time {
	if len(l.Clock) == 0 {
		return time.Time{}
	}
	return l.Clock[0].At
}

// SaleStarts is the sale's start as the line has it: its clock's start,
// less a draw's grace.
func (l *QueueLine) SaleStarts() time.Time {
	if l.Mode == QueueDraw {
		return l.Starts().Add(-DrawGrace)
	}
	return l.Starts()
}

// DrawGrace is how long after its sale's start a draw line admits its
// first places: the lobby is drawn at the start, and its buyers, told to
// look again then, learn their places before the first turns come.
const DrawGrace = 2 * time.Second

// LineStarts is when the clock of a line of mode starts for a sale that
// starts at sale (to the millisecond, as lines are stored).
func LineStarts(mode QueueMode, sale time.Time) time.Time {
	if mode == QueueDraw {
		sale = sale.Add(DrawGrace)
	}
	return sale.Truncate(time.Millisecond)
}

// Turn is the stretch of time place pos, joined at joined, may buy in, at
// t: admitted is whether t is in it; passed whether it is over. A turn
// never comes before its buyer joined: a place the number reached while
// nobody held it (a line that ran ahead of its crowd) has its turn when it
// is taken.
func (l *QueueLine) Turn(pos int64, joined, t time.Time) (from, until time.Time, admitted, passed bool) {
	if pos <= l.Expired {
		// Reached by the first stretch's start, which is more than a
		// Window ago: passed, unless taken since.
		if len(l.Clock) == 0 || !joined.After(l.Clock[0].At) {
			return time.Time{}, time.Time{}, false, true
		}
		from = joined
	} else {
		var ok bool
		if from, ok = l.TurnAt(pos); !ok {
			return time.Time{}, time.Time{}, false, false
		}
		if joined.After(from) {
			from = joined
		}
		if l.Mode == QueueDraw && !l.DrawnAt.IsZero() && l.DrawnAt.Add(DrawGrace).After(from) {
			from = l.DrawnAt.Add(DrawGrace)
		}
	}
	until = from.Add(l.Window)
	return from, until, !t.Before(from) && t.Before(until), !t.Before(until)
}

// Append changes the clock at t: from then the number is Serving(t)+by and
// grows at rate. Segments whose places all passed their turn more than
// Window before t are dropped.
func (l *QueueLine) Append(t time.Time, by int64, rate float64) {
	base := l.Serving(t) + by
	l.AppendAt(t, base, rate)
}

// AppendAt changes the clock at t: from then the number is base and grows
// at rate.
func (l *QueueLine) AppendAt(t time.Time, base int64, rate float64) {
	if n := len(l.Clock); n > 0 && l.Clock[n-1].Rate == 0 && rate == 0 && l.Clock[n-1].Base == base {
		return // stopped where it stands: nothing changes
	}
	seg := QueueSegment{At: t, Base: base, Rate: rate}
	if n := len(l.Clock); n > 0 && !t.After(l.Clock[n-1].At) {
		seg.At = l.Clock[n-1].At // the clock only moves on: this change replaces the last
		l.Clock[n-1] = seg
	} else {
		l.Clock = append(l.Clock, seg)
	}
	for len(l.Clock) > 1 && l.Clock[1].At.Add(l.Window).Before(t) {
		s, next := l.Clock[0], l.Clock[1]
		reached := s.Base + int64(math.Floor(s.Rate*next.At.Sub(s.At).Seconds()))
		l.Expired = max(l.Expired, min(reached, next.Base))
		l.Clock = l.Clock[1:]
	}
}
