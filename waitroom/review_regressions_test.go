package waitroom

// Regression tests from the third review of the waiting room (2026-12-03):
// each failed when it was written; the comment above it says what broke.

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/shardstock/shardstock"
	"github.com/shardstock/shardstock/api"
	"github.com/shardstock/shardstock/sqlstore"
	"github.com/shardstock/shardstock/sqlstore/sqlstoretest"
)

// crowdSQL is a SQL store under a crowd that keeps joining: after every
// read of the lines (and, when set, after every draw) one more buyer
// joins, as a join lands between a Refresh's read and its write whenever
// joins come faster than one per refresh's few milliseconds.
type crowdSQL struct {
	*sqlstore.Queues
	mu       sync.Mutex
	on       bool
	n        int
	now      func() time.Time
	drawTime time.Duration // a draw takes this long (the fake clock moves on)
	advance  func(time.Duration)
	joinDraw bool // a join lands right after the draw commits
}

func (c *crowdSQL) joinOne(ctx context.Context) {
	c.mu.Lock()
	c.n++
	b := fmt.Sprint("crowd", c.n)
	c.mu.Unlock()
	if _, err := c.Queues.JoinQueue(ctx, "lamp", b, c.now()); err != nil {
		panic(err)
	}
}

func (c *crowdSQL) QueueLines(ctx context.Context) (map[string]shardstock.QueueLine, error) {
	l, err := c.Queues.QueueLines(ctx)
	c.mu.Lock()
	on := c.on
	c.mu.Unlock()
	if on {
		c.joinOne(ctx)
	}
	return l, err
}

func (c *crowdSQL) DrawQueue(ctx context.Context, product string, now func() time.Time, shuffle func([]string)) (int64, error) {
	if c.advance != nil {
		c.advance(c.drawTime)
	}
	n, err := c.Queues.DrawQueue(ctx, product, now, shuffle)
	if err == nil && n >= 0 && c.joinDraw {
		c.joinOne(ctx)
	}
	return n, err
}

// Promise 4 (a waiting buyer's turn never passes while no unit is
// salable). The hold is written with SaveQueueLineBeforeJoins: it lands
// only if nobody joined between the Refresh's read of the lines and its
// write (a read of the revoked, a count of every shard, a catalog read
// later). During a flash sale's sell-out buyers keep arriving (hundreds a
// second): some join lands in nearly every such window, so the hold is
// never written, the number runs on at the rate, and every waiting place
// it reaches is admitted with nothing to buy and passes. The guard is only
// needed when the number ran ahead of the places handed out (serving >
// Joined: a join could take a reached place); with buyers waiting
// (serving <= Joined) a new join's place is past the number whatever it
// is, and a plain SaveQueueLine is safe.
func TestAHoldLandsWhileBuyersKeepJoining(t *testing.T) {
	// "quiet" (nobody joins during the sell-out) is the control: it holds.
	for _, joining := range []bool{false, true} {
		for name, s := range sqlstoretest.Stores(t) {
			t.Run(map[bool]string{false: "quiet/", true: "crowd/"}[joining]+name, func(t *testing.T) {
				f := newSQLFix(t, s, api.QueueDefinition{Mode: "fifo", Rate: 10, LeadSeconds: 600, WindowSeconds: 5})
				crowd := &crowdSQL{Queues: s.Queues, now: f.clock}
				a := f.another(crowd, f.items) // the coordinator that tends, under the crowd
				f.at(-time.Minute, a)
				toks := map[int64]string{}
				for i := range 100 {
					p := f.join(f.room, fmt.Sprint("early", i)) // places 1..100
					toks[p.Position] = p.Token
				}
				f.at(0, a)
				f.at(time.Second, a) // serving 10, 90 waiting
				f.left["lamp"] = 0   // sold out (every shard answers 0)
				crowd.mu.Lock()
				crowd.on = joining // buyers keep arriving
				crowd.mu.Unlock()
				for d := 1500 * time.Millisecond; d <= 12*time.Second; d += 500 * time.Millisecond {
					f.set(d)
					if err := a.Refresh(context.Background()); err != nil {
						t.Fatal(err)
					}
				}
				s1, _ := a.Summary(context.Background(), "lamp")
				p, err := a.Look(context.Background(), "lamp", "early29", toks[30])
				if err != nil {
					t.Fatal(err)
				}
				if !s1.Held || p.Status == "passed" {
					t.Errorf("sold out from 1 s, buyers joining meanwhile: at 12 s the line is held=%v, serving %d (was 10); place 30 (waiting at the sell-out) is %q — "+
						"the hold never landed and the waiting places passed with nothing to buy", s1.Held, s1.Serving, p.Status)
				}
			})
		}
	}
}

// Promise: a draw line admits its first places DrawGrace after the draw
// is written, so the lobby learns its places before its turns come. Only
// tend's own draw moves the clock, and only with
// SaveQueueLineBeforeJoins right after the draw. Two ways around it:
//   - join: the first join after the start on a room that has not read
//     the start yet (Join: "draw first") draws; its result is thrown away,
//     and tend then finds the line drawn (-1) and never moves the clock;
//   - tend: the joins that waited on the line's row during the draw run
//     the moment it commits, before tend's BeforeJoins write, which then
//     loses and is never tried again (the line is drawn now).
//
// Either way the first turns count from the sale's start + DrawGrace, not
// from the draw: with a draw that takes longer than the grace (a large
// lobby; simulated here: the draw moves the fake clock by 4 s) the first
// places' turns come before anybody could know them, and with a short
// window pass as the draw ends.
func TestTheDrawGraceRunsFromTheDraw(t *testing.T) {
	// "tend-alone" (tend draws, nobody joins before its write) is the control: it holds.
	for _, by := range []string{"tend-alone", "join", "tend"} {
		for name, s := range sqlstoretest.Stores(t) {
			t.Run(by+"/"+name, func(t *testing.T) {
				f := newSQLFix(t, s, api.QueueDefinition{Mode: "draw", Rate: 10, LeadSeconds: 600, WindowSeconds: 3})
				crowd := &crowdSQL{Queues: s.Queues, now: f.clock, drawTime: 4 * time.Second, joinDraw: by == "tend"}
				crowd.advance = func(d time.Duration) {
					f.mu.Lock()
					f.now = f.now.Add(d)
					f.mu.Unlock()
				}
				a := f.another(crowd, f.items)
				f.set(-time.Minute)
				for _, r := range []*Room{f.room, a} {
					r.Refresh(context.Background())
				}
				toks := map[string]string{}
				for i := range 20 {
					b := fmt.Sprint("lobby", i)
					toks[b] = f.join(a, b).Token
				}
				f.at(-300*time.Millisecond, a)
				f.set(100 * time.Millisecond)
				var drawnAt time.Time
				if by == "join" {
					f.join(a, "first-after-start") // draws (4 s)
					drawnAt = f.clock()
				} else {
					if err := a.Refresh(context.Background()); err != nil { // draws (4 s)
						t.Fatal(err)
					}
					drawnAt = f.clock()
				}
				if err := a.Refresh(context.Background()); err != nil {
					t.Fatal(err)
				}
				l, _ := a.line("lamp")
				t.Logf("the draw committed at start+%v; the line's first turns at start+%v", drawnAt.Sub(saleStart), l.Starts().Sub(saleStart))
				var first Place
				for b, tok := range toks {
					p, err := a.Look(context.Background(), "lamp", b, tok)
					if err != nil {
						t.Fatal(err)
					}
					if p.Position == 1 {
						first = p
					}
				}
				// The fix: no turn of a draw line comes before DrawGrace after
				// the draw was written (QueueLine.DrawnAt), whoever drew.
				if l.DrawnAt.Before(drawnAt.Truncate(time.Millisecond)) || first.Status != "waiting" || first.WaitSeconds < shardstock.DrawGrace.Seconds() {
					t.Errorf("draw done by %s, committed at start+%v, marked drawn at start+%v; place 1, looking as the draw ends: %q, wait %v s",
						by, drawnAt.Sub(saleStart), l.DrawnAt.Sub(saleStart), first.Status, first.WaitSeconds)
				}
			})
		}
	}
}

// Promise 4, through the alert that pages for it. A line held by a
// sell-out with buyers waiting looks exactly like a stalled line to
// ShardstockQueueStalled (waiting > 0, paused 0, serving unchanged for
// 3 min: the metrics have no "held"), which pages and says "shardstock
// admin queue PRODUCT advance N lets buyers in". Advance while held moves
// the number on (Append with the held rate 0) and tend never holds it
// again (Held is already true): the advanced places are admitted with
// nothing to buy, their windows run out during the hold, and when units
// come back they are "passed" while the places behind them get the units.
func TestAdvanceDuringAHoldDoesNotPassTurns(t *testing.T) {
	f := newFixture(t, api.QueueDefinition{Mode: "fifo", Rate: 1, LeadSeconds: 600, WindowSeconds: 30})
	f.at(-time.Minute)
	toks := map[int64]string{}
	for i := range 10 {
		p := f.join(fmt.Sprint("b", i))
		toks[p.Position] = p.Token
	}
	f.at(0)
	f.at(2 * time.Second) // places 1, 2 admitted
	f.left["lamp"] = 0
	f.at(2500 * time.Millisecond)
	var held Summary
	for d := 3 * time.Second; d <= 4*time.Minute; d += 15 * time.Second { // what the metrics see every 15 s
		f.at(d)
		held = f.room.Lines()[0]
	}
	if !held.Held {
		t.Fatalf("not held: %+v", held)
	}
	// The fix: Advance is refused while held (and held lines are out of
	// ShardstockQueueStalled: shardstock_queue_held, rules_test.yml).
	if _, err := f.room.Advance(context.Background(), "lamp", 3); code(err) != "conflict" {
		t.Fatalf("advance while held: %v, want conflict", err)
	}
	f.at(5 * time.Minute) // still held: no unit
	f.left["lamp"] = 1    // a release
	f.at(5*time.Minute + 500*time.Millisecond)
	f.at(5*time.Minute + 2*time.Second) // run on at 1 a second from 2
	if after, _ := f.room.Look(context.Background(), "lamp", "b2", toks[3]); after.Status != "admitted" {
		t.Errorf("place 3, waiting when the sell-out held the line: %q when a unit comes back, want admitted", after.Status)
	}
}

// Promise 1 at the edge. EdgeLines publishes Serving(now+2s) so that an
// edge up to a couple of seconds behind still lets every admitted place
// through. A stopped clock (the idle stop, a hold, a pause) does not grow
// in those 2 s, and the edge cannot know it is about to run again: when
// the line runs on (the idle-stopped line's buyers reach the number and
// tend resumes it; a unit comes back; resume; advance) the places it
// reaches in the next second or two are told "admitted" by an up-to-date
// coordinator while the edge, fed by a coordinator that read the line
// before it ran again (one refresh, 500 ms), answers 403 not_admitted
// "not your turn yet (edge)" — for up to its own fetch interval (1 s) on
// top. Before the idle stop an idle line kept running at the rate, so
// this happened only after a pause, hold or advance; now it happens each
// time an idle line gets a buyer more than the stop's ceil(rate) places.
func TestTheEdgeAdmitsAPlaceReachedRightAfterAnIdleStop(t *testing.T) {
	f := newFixture(t, api.QueueDefinition{Mode: "fifo", Rate: 2, LeadSeconds: 600, WindowSeconds: 30})
	b := f.another(f.store) // the coordinator that feeds the edge
	f.at(-time.Minute)
	f.join("ann")
	for d := time.Duration(0); d <= 5*time.Second; d += 500 * time.Millisecond {
		f.at(d) // the line runs ahead of ann and stops at Joined+2 = 3
	}
	l, _ := f.room.line("lamp")
	if last := l.Clock[len(l.Clock)-1]; last.Rate != 0 {
		t.Fatalf("not idle-stopped: %+v", l.Clock)
	}
	if err := b.Refresh(context.Background()); err != nil { // B's last read, at 5 s
		t.Fatal(err)
	}
	f.join("bob")
	f.join("cat")                              // places 2, 3: reached, admitted at once
	dan := f.join("dan")                       // place 4: waits for the number to run again
	f.at(5*time.Second + 400*time.Millisecond) // A resumes the line (B reads it on its next refresh)
	f.now = saleStart.Add(5*time.Second + 900*time.Millisecond)
	p, err := f.room.Look(context.Background(), "lamp", "dan", dan.Token)
	if err != nil {
		t.Fatal(err)
	}
	edge := b.EdgeLines(f.now, 2*time.Second)
	var n int64
	fmt.Sscanf(edge, "queue lamp %d", &n)
	if p.Status == "admitted" && n < p.Position {
		t.Errorf("dan (place %d) is told %q until %v; the edge, fed 400 ms ago by coordinator B, publishes %q: a purchase through it answers 403 not_admitted",
			p.Position, p.Status, p.AdmittedUntil.Sub(saleStart), edge)
	}
}

// Promise 2 (the draw orders everyone who joined before the sale's start).
// Join draws "first" when its room's copy of the line says the start came
// — a copy up to a refresh (500 ms) old — and DrawQueue draws whatever the
// stored line says. The previous review made tend follow only a newer
// window (TestALineFollowsAStartMovedAtTheLastMoment), but Join's draw
// goes by the stale copy: a sale postponed just before its start (here
// 300 ms before, by ten minutes) and read by coordinator A, while B read
// the line 100 ms earlier; a buyer joining through B 100 ms after the old
// start draws the lobby. Everybody joining in the ten minutes before the
// real start is then placed in join order after the lobby, never drawn.
func TestAJoinDoesNotDrawBeforeAPostponedStart(t *testing.T) {
	f := newFixture(t, api.QueueDefinition{Mode: "draw", Rate: 10, LeadSeconds: 3600, WindowSeconds: 60})
	b := f.another(f.store)
	f.now = saleStart.Add(-time.Minute)
	for _, r := range []*Room{f.room, b} {
		r.Refresh(context.Background())
	}
	for i := range 5 {
		f.join(fmt.Sprint("early", i))
	}
	f.now = saleStart.Add(-400 * time.Millisecond)
	b.Refresh(context.Background())
	moved := saleStart.Add(10 * time.Minute)
	f.items["lamp"].StartsAt, f.items["lamp"].WindowVersion = moved, 1 // postponed, 300 ms before the start
	f.at(-300 * time.Millisecond)                                      // A follows
	f.now = saleStart.Add(100 * time.Millisecond)                      // B's next refresh is 100 ms away
	p1, err := b.Join(context.Background(), "lamp", "just-after", "")
	if err != nil {
		t.Fatal(err)
	}
	f.at(time.Minute)
	if err := b.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	p2 := f.join("a-minute-after") // nine minutes before the sale's start
	s, _ := f.room.Summary(context.Background(), "lamp")
	if p1.Status != "lobby" || p2.Status != "lobby" || s.Drawn {
		t.Errorf("the sale starts at %v (line: %v); buyers joining 100 ms and 1 min after the old start, before the new one: %s place %d, %s place %d (drawn: %v) — want both in the lobby",
			moved.Sub(saleStart), s.Starts.Sub(saleStart), p1.Status, p1.Position, p2.Status, p2.Position, s.Drawn)
	}
}

// Promise 1 (a buyer told "admitted until T" can buy until T). Define
// again "keeps its places and clock", but the window is the line's one
// Window, applied to every turn whenever it is computed: shortening it
// (600 s to 60 s here) takes back the rest of every turn already told —
// a buyer told at their turn "admitted until turn+600 s" is "passed" and
// refused the moment the change is read, 9 minutes before T.
func TestRedefiningTheWindowKeepsTurnsTold(t *testing.T) {
	f := newFixture(t, api.QueueDefinition{Mode: "fifo", Rate: 1, LeadSeconds: 600, WindowSeconds: 600})
	f.at(-time.Minute)
	ann := f.join("ann")
	f.at(2 * time.Second)
	p, err := f.room.Look(context.Background(), "lamp", "ann", ann.Token)
	if err != nil || p.Status != "admitted" {
		t.Fatalf("ann at 2 s: %+v %v", p, err)
	}
	f.at(2 * time.Minute)
	// The fix: once turns have come the window may grow, not shrink.
	if _, err := f.room.Define(context.Background(), "lamp", api.QueueDefinition{Mode: "fifo", Rate: 1, LeadSeconds: 600, WindowSeconds: 60}); code(err) != "conflict" {
		t.Fatalf("a shorter window after turns came: %v, want conflict", err)
	}
	if _, err := f.room.Define(context.Background(), "lamp", api.QueueDefinition{Mode: "fifo", Rate: 1, LeadSeconds: 600, WindowSeconds: 900}); err != nil {
		t.Fatalf("a longer window: %v", err)
	}
	if err := f.room.Admit("lamp", "ann", p.Token, f.now); err != nil {
		t.Errorf("ann, told admitted until %v, at 2 min after the window is redefined to 60 s: %v", p.AdmittedUntil.Sub(saleStart), err)
	}
}
