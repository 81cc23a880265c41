package waitroom

// Regression tests from the review of 2026-12-03: the waiting room
// on real SQL stores (SQLite always, MariaDB when SHARDSTOCK_TEST_MYSQL is
// set). Each test failed when it was written; the comment above it
// says what broke.

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

// sqlFix is a room over a real SQL store, on a clock the test moves, with
// products and units left the test sets.
type sqlFix struct {
	t     *testing.T
	store *sqlstore.Store
	mu    sync.Mutex
	now   time.Time
	left  map[string]int64
	items products
	room  *Room
}

func newSQLFix(t *testing.T, s *sqlstore.Store, d api.QueueDefinition) *sqlFix {
	t.Helper()
	f := &sqlFix{t: t, store: s, now: saleStart.Add(-time.Hour), left: map[string]int64{"lamp": 100},
		items: products{"lamp": {ID: "lamp", Stock: 100, StartsAt: saleStart}}}
	f.room = f.another(s.Queues, f.items)
	if _, err := f.room.Define(context.Background(), "lamp", d); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *sqlFix) clock() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *sqlFix) another(store QueueStore, items products) *Room {
	f.t.Helper()
	r := New(Config{Store: store, Products: items, Now: f.clock, DropOut: 2,
		Stock: leftOf(&f.mu, f.left)})
	if err := r.Start(context.Background()); err != nil {
		f.t.Fatal(err)
	}
	return r
}

func (f *sqlFix) set(d time.Duration) {
	f.mu.Lock()
	f.now = saleStart.Add(d)
	f.mu.Unlock()
}

// at moves the clock to the sale's start + d and has the rooms read.
func (f *sqlFix) at(d time.Duration, rooms ...*Room) {
	f.t.Helper()
	f.set(d)
	for _, r := range append([]*Room{f.room}, rooms...) {
		if err := r.Refresh(context.Background()); err != nil {
			f.t.Fatal(err)
		}
	}
}

func (f *sqlFix) join(r *Room, buyer string) Place {
	f.t.Helper()
	p, err := r.Join(context.Background(), "lamp", buyer, "")
	if err != nil {
		f.t.Fatalf("%s joins: %v", buyer, err)
	}
	return p
}

// Found by review (promise 4: a turn never passes while no unit is salable). The
// hold stops the number where it is, which may be ahead of the places
// handed out (the rebase lets it run up to 2×rate ahead of the last
// place). A buyer who joins during the hold takes one of those places:
// it is "reached", so the join answers "admitted" (no unit to buy) and the
// window runs out during the hold. When a unit comes back that buyer is
// "passed" and places behind get the unit: exactly the case the hold is
// there to prevent ("the places next in line get the units that come back,
// instead of places whose turn came and went while there was nothing to
// buy").
func TestAJoinDuringAHoldIsNotPassedByIt(t *testing.T) {
	for name, s := range sqlstoretest.Stores(t) {
		t.Run(name, func(t *testing.T) {
			f := newSQLFix(t, s, api.QueueDefinition{Mode: "fifo", Rate: 10, LeadSeconds: 600, WindowSeconds: 30})
			f.at(-time.Minute)
			for i := range 5 {
				f.join(f.room, fmt.Sprint("early", i)) // places 1..5
			}
			f.at(0)
			f.at(500 * time.Millisecond)
			f.at(time.Second) // serving 10, five ahead of the line: no rebase (2×rate = 20)
			f.left["lamp"] = 0
			f.at(1500 * time.Millisecond)
			s0, _ := f.room.Summary(context.Background(), "lamp")
			if !s0.Held {
				t.Fatalf("nothing left: %+v, want held", s0)
			}
			f.set(2 * time.Second)
			late := f.join(f.room, "late") // place 6, while nothing is left
			t.Logf("a join during the hold (serving %d, joined %d): place %d, %s until %v", s0.Serving, s0.Joined, late.Position, late.Status, late.AdmittedUntil)
			f.at(40 * time.Second) // still held, the window (30 s) is over
			p, err := f.room.Look(context.Background(), "lamp", "late", late.Token)
			if err != nil {
				t.Fatal(err)
			}
			f.left["lamp"] = 1 // a release: one unit back
			f.at(41 * time.Second)
			f.at(41500 * time.Millisecond)
			err = f.room.Admit("lamp", "late", late.Token, f.clock())
			if p.Status == "passed" || err != nil {
				t.Errorf("place %d, joined during a hold and never able to buy: told %q after 38 s of hold; after a unit came back it buys: %v "+
					"(want: still waiting while held, and its turn after the release)", late.Position, p.Status, err)
			}
		})
	}
}

// Found by review (liveness and, on MariaDB, promises 5 and 6). Below a rate of 0.5
// a second the idle-line rebase never settles: it moves the number to
// Joined+ceil(rate) = Joined+1, which is again more than 2×rate ahead, so
// every refresh of every coordinator writes a new clock segment and a new
// version, for as long as nobody joins. The clock keeps every segment of
// the last window (up to 24 h): two segments a second.
func TestASlowLineSettlesWhenIdle(t *testing.T) {
	for name, s := range sqlstoretest.Stores(t) {
		t.Run(name, func(t *testing.T) {
			f := newSQLFix(t, s, api.QueueDefinition{Mode: "fifo", Rate: 0.2, LeadSeconds: 600, WindowSeconds: 3600})
			f.at(-time.Minute)
			f.join(f.room, "ann")
			f.at(0)
			l0, _ := f.room.line("lamp")
			for i := 1; i <= 60; i++ { // 30 s of nobody joining, read every half second
				f.at(time.Duration(i) * 500 * time.Millisecond)
			}
			l, _ := f.room.line("lamp")
			if l.Version-l0.Version > 3 || len(l.Clock) > 4 {
				t.Errorf("an idle line at 0.2/s read 60 times: %d writes, %d clock segments (want it to settle after one move back)",
					l.Version-l0.Version, len(l.Clock))
			}
		})
	}
}

// Found by review (MariaDB: promises 5 and 6; a frozen room). The clock is a JSON
// array in a TEXT column (64 KiB on MariaDB). A line whose clock gets
// ~1500 segments within its window (the idle rebase above at two a
// second, i.e. 13 minutes of an idle slow line; or a sold-out sale whose
// units come back now and then: each release is a hold and an unhold)
// can no longer be saved. tend's failed write fails the whole Refresh, on
// every coordinator and for every product: the rooms keep what they read
// last, a revoke is recorded but never obeyed (the revoked buyer still
// buys), and pause/advance answer 503.
func TestALongClockDoesNotFreezeTheRooms(t *testing.T) {
	stores := sqlstoretest.Stores(t)
	s, ok := stores["mariadb"]
	if !ok {
		t.Skip("MariaDB only (SHARDSTOCK_TEST_MYSQL)")
	}
	f := newSQLFix(t, s, api.QueueDefinition{Mode: "fifo", Rate: 0.2, LeadSeconds: 600, WindowSeconds: 3600})
	f.set(-time.Minute)
	f.room.Refresh(context.Background())
	ann := f.join(f.room, "ann")
	var refreshErr error
	steps := 0
	for i := 0; i <= 4000 && refreshErr == nil; i++ { // up to 33 min, read every half second
		f.set(time.Duration(i) * 500 * time.Millisecond)
		refreshErr = f.room.Refresh(context.Background())
		steps = i
	}
	l, _ := f.room.line("lamp")
	t.Logf("after %d refreshes: %d segments, version %d, refresh: %v", steps, len(l.Clock), l.Version, refreshErr)
	if refreshErr == nil {
		return
	}
	t.Errorf("the rooms stop reading after %d refreshes (%s of an idle line): %v", steps, time.Duration(steps)*500*time.Millisecond, refreshErr)
	if _, err := f.room.Revoke(context.Background(), "lamp", "ann"); err != nil {
		t.Logf("revoke ann: %v", err)
	}
	if err := f.room.Admit("lamp", "ann", ann.Token, f.clock()); err == nil {
		t.Errorf("ann, revoked, is still admitted")
	}
	if _, err := f.room.Pause(context.Background(), "lamp"); err != nil {
		t.Errorf("pause: %v", err)
	}
}

// hookedSQL runs afterRead once, after the next read of the lines.
type hookedSQL struct {
	*sqlstore.Queues
	mu        sync.Mutex
	afterRead func()
}

func (h *hookedSQL) QueueLines(ctx context.Context) (map[string]shardstock.QueueLine, error) {
	l, err := h.Queues.QueueLines(ctx)
	h.mu.Lock()
	f := h.afterRead
	h.afterRead = nil
	h.mu.Unlock()
	if f != nil {
		f()
	}
	return l, err
}

// Found by review (B4 again, by a race; promise 5). Define checks "the line has
// buyers" on its read, but a join does not change the line's version, so a
// join between Define's read and its write does not make the write lose:
// a draw line becomes fifo with a buyer in the lobby (place 0, never
// drawn: "lobby" for ever), and a fifo line becomes draw with a buyer
// already at place 1, whom the draw then gives place 1 to somebody else as
// well.
func TestAModeChangeRacingAJoin(t *testing.T) {
	for name, s := range sqlstoretest.Stores(t) {
		t.Run("draw-to-fifo/"+name, func(t *testing.T) {
			f := newSQLFix(t, s, api.QueueDefinition{Mode: "draw", Rate: 1, LeadSeconds: 600, WindowSeconds: 30})
			hooked := &hookedSQL{Queues: s.Queues}
			a := f.another(hooked, f.items)
			f.at(-time.Minute, a)
			var ann Place
			hooked.afterRead = func() { ann = f.join(f.room, "ann") }
			_, err := a.Define(context.Background(), "lamp", api.QueueDefinition{Mode: "fifo", Rate: 1, LeadSeconds: 600, WindowSeconds: 30})
			t.Logf("define fifo while ann joins: %v; ann: %s place %d", err, ann.Status, ann.Position)
			f.at(10*time.Second, a)
			p, err := f.room.Look(context.Background(), "lamp", "ann", ann.Token)
			if err == nil && p.Status == "lobby" {
				t.Errorf("ann joined a draw line and ten seconds after the start is still %q (place %d) in a line that is now %s: she never gets a turn",
					p.Status, p.Position, p.Mode)
			}
		})
	}
	for name, s := range sqlstoretest.Stores(t) { // fresh databases
		t.Run("fifo-to-draw/"+name, func(t *testing.T) {
			f := newSQLFix(t, s, api.QueueDefinition{Mode: "fifo", Rate: 1, LeadSeconds: 600, WindowSeconds: 30})
			hooked := &hookedSQL{Queues: s.Queues}
			a := f.another(hooked, f.items)
			f.at(-time.Minute, a)
			var bob Place
			hooked.afterRead = func() { bob = f.join(f.room, "bob") }
			_, err := a.Define(context.Background(), "lamp", api.QueueDefinition{Mode: "draw", Rate: 1, LeadSeconds: 600, WindowSeconds: 30})
			t.Logf("define draw while bob joins: %v; bob: %s place %d", err, bob.Status, bob.Position)
			toks := map[string]string{"bob": bob.Token}
			for _, b := range []string{"cat", "dan"} {
				toks[b] = f.join(f.room, b).Token
			}
			f.at(time.Second, a)
			seen := map[int64]string{}
			for b, tok := range toks {
				p, err := f.room.Look(context.Background(), "lamp", b, tok)
				if err != nil {
					t.Fatal(err)
				}
				if other, ok := seen[p.Position]; ok {
					t.Errorf("%s and %s both have place %d", other, b, p.Position)
				}
				seen[p.Position] = b
			}
		})
	}
}

// Found by review (promise 1; B6's fix reaches too far). The clock follows the
// sale's start whenever the new start is still ahead, also after the sale
// began (only a drawn draw line is spared): a fifo line is started again
// from place 0, with nothing expired. A product without a window of its own
// sells in its sessions' window, and a session can be redefined at any
// time (PUT /admin/v1/sessions/{id}: no "the sale has started" check), so
// moving the session later while its sale runs does it. A buyer told
// "admitted until T" is then not admitted again until the number comes
// round to their place after the new start, long before T; and every place
// whose turn passed gets a second one.
func TestAStartMovedAfterTheSaleBeganKeepsTurnsTold(t *testing.T) {
	for name, s := range sqlstoretest.Stores(t) {
		t.Run(name, func(t *testing.T) {
			f := newSQLFix(t, s, api.QueueDefinition{Mode: "fifo", Rate: 1, LeadSeconds: 600, WindowSeconds: 3600})
			f.at(-time.Minute)
			var toks []string
			for i := range 20 {
				toks = append(toks, f.join(f.room, fmt.Sprint("b", i)).Token)
			}
			f.at(30 * time.Second) // places up to 30 admitted, each for an hour
			p, err := f.room.Look(context.Background(), "lamp", "b19", toks[19])
			if err != nil || p.Status != "admitted" {
				t.Fatalf("place 20 at 30 s: %+v %v", p, err)
			}
			// The session is moved a minute later (the sale closes for that minute).
			f.items["lamp"].StartsAt = saleStart.Add(90 * time.Second)
			f.at(31 * time.Second)
			f.at(91 * time.Second) // the sale is open again
			if err := f.room.Admit("lamp", "b19", toks[19], f.clock()); err != nil {
				t.Errorf("place 20, told at 30 s it is admitted until %v, at the new start + 1 s: %v", p.AdmittedUntil, err)
			}
		})
	}
}

// Found by review (promises 1/4; B6 by a race). Each coordinator's tend moves the
// clock to the start its own catalog has, and a coordinator's catalog is up
// to a controls refresh (500 ms) behind. A sale start moved later just
// before the old start: coordinator A (which has the move) puts the
// clock at the new start; coordinator B, still with the old start, puts
// it back at "now" (the old start passed) and, the line having started by
// its reckoning, draws the lobby. A drawn line is never moved again, so
// the lobby's turns run from the old start while the sale is closed: when
// it opens ten minutes later every lobby place has passed.
func TestALineFollowsAStartMovedAtTheLastMoment(t *testing.T) {
	for _, mode := range []string{"draw", "fifo"} {
		for name, s := range sqlstoretest.Stores(t) {
			t.Run(mode+"/"+name, func(t *testing.T) {
				f := newSQLFix(t, s, api.QueueDefinition{Mode: mode, Rate: 1, LeadSeconds: 600, WindowSeconds: 30})
				stale := products{"lamp": {ID: "lamp", Stock: 100, StartsAt: saleStart}} // B's catalog, not yet refreshed
				b := f.another(s.Queues, stale)
				f.at(-time.Minute, b)
				toks := map[string]string{}
				for i := range 5 {
					buyer := fmt.Sprint("early", i)
					toks[buyer] = f.join(f.room, buyer).Token
				}
				moved := saleStart.Add(10 * time.Minute)
				f.items["lamp"].StartsAt = moved // the operator postpones the sale, 300 ms before it starts
				f.at(-300 * time.Millisecond)    // A follows
				f.set(200 * time.Millisecond)    // B reads the line before its catalog has the move
				if err := b.Refresh(context.Background()); err != nil {
					t.Fatal(err)
				}
				stale["lamp"].StartsAt = moved // B's catalog catches up
				f.at(time.Second, b)
				f.at(10*time.Minute+time.Second, b) // the sale opens
				for buyer, tok := range toks {
					p, err := f.room.Look(context.Background(), "lamp", buyer, tok)
					if err != nil {
						t.Fatal(err)
					}
					if p.Status == "passed" {
						s, _ := f.room.Summary(context.Background(), "lamp")
						t.Errorf("%s (place %d) a second after the sale opened: %s (the line starts at %v, the sale at %v)", buyer, p.Position, p.Status, s.Starts, moved)
					}
				}
			})
		}
	}
}
