package waitroom

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardstock/shardstock"
	"github.com/shardstock/shardstock/api"
)

// memStore is Store in memory (sqlstore's is tested on SQL in its own
// package and through the coordinator).
type memStore struct {
	mu      sync.Mutex
	lines   map[string]shardstock.QueueLine
	places  map[string]map[string]shardstock.QueuePlace
	revoked map[string]map[string]bool
	reads   int // QueuePlace calls
}

func newMemStore() *memStore {
	return &memStore{lines: map[string]shardstock.QueueLine{}, places: map[string]map[string]shardstock.QueuePlace{}, revoked: map[string]map[string]bool{}}
}

func (m *memStore) QueueLines(context.Context) (map[string]shardstock.QueueLine, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]shardstock.QueueLine{}
	for k, l := range m.lines {
		l.Clock = slices.Clone(l.Clock)
		out[k] = l
	}
	return out, nil
}

func (m *memStore) SaveQueueLine(_ context.Context, l shardstock.QueueLine) (bool, error) {
	return m.save(l, false)
}

func (m *memStore) SaveQueueLineBeforeJoins(_ context.Context, l shardstock.QueueLine) (bool, error) {
	return m.save(l, true)
}

func (m *memStore) save(l shardstock.QueueLine, sameJoined bool) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	old, ok := m.lines[l.Product]
	if (ok && old.Version != l.Version) || (!ok && l.Version != 0) || sameJoined && (old.Joined != l.Joined || old.Lobby != l.Lobby) {
		return false, nil
	}
	l.Joined, l.Lobby, l.Drawn, l.DrawnAt, l.Version = old.Joined, old.Lobby, old.Drawn, old.DrawnAt, l.Version+1
	m.lines[l.Product] = l
	return true, nil
}

func (m *memStore) JoinQueue(_ context.Context, product, buyer string, at time.Time) (shardstock.QueuePlace, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.lines[product]
	if q, ok := m.places[product][buyer]; ok {
		q.LineVersion = l.Version
		return q, nil
	}
	q := shardstock.QueuePlace{JoinedAt: at, LineVersion: l.Version}
	if l.Mode == shardstock.QueueFIFO || l.Drawn {
		l.Joined++
		q.Position = l.Joined
	} else {
		l.Lobby++
	}
	m.lines[product] = l
	if m.places[product] == nil {
		m.places[product] = map[string]shardstock.QueuePlace{}
	}
	m.places[product][buyer] = q
	return q, nil
}

func (m *memStore) QueuePlace(_ context.Context, product, buyer string) (shardstock.QueuePlace, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reads++
	q, ok := m.places[product][buyer]
	q.LineVersion = m.lines[product].Version
	return q, ok, nil
}

func (m *memStore) DrawQueue(_ context.Context, product string, now func() time.Time, shuffle func([]string)) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.lines[product]
	if l.Drawn {
		return -1, nil
	}
	var lobby []string
	for b, q := range m.places[product] {
		if q.Position == 0 {
			lobby = append(lobby, b)
		}
	}
	slices.Sort(lobby)
	shuffle(lobby)
	for i, b := range lobby {
		q := m.places[product][b]
		q.Position = int64(i + 1)
		m.places[product][b] = q
	}
	l.Drawn, l.DrawnAt, l.Joined, l.Lobby, l.Version = true, now(), int64(len(lobby)), 0, l.Version+1
	m.lines[product] = l
	return int64(len(lobby)), nil
}

func (m *memStore) RevokeQueue(_ context.Context, product, buyer string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.revoked[product] == nil {
		m.revoked[product] = map[string]bool{}
	}
	m.revoked[product][buyer] = true
	return nil
}

func (m *memStore) QueueRevoked(context.Context) (map[string]map[string]bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]map[string]bool{}
	for p, bs := range m.revoked {
		out[p] = map[string]bool{}
		for b := range bs {
			out[p][b] = true
		}
	}
	return out, nil
}

func (m *memStore) QueueSecret(context.Context) ([]byte, error) {
	return []byte("0123456789abcdef0123456789abcdef"), nil
}

type products map[string]*shardstock.Product

func (p products) Product(_ context.Context, id string) (*shardstock.Product, error) {
	if x, ok := p[id]; ok {
		return x, nil
	}
	return nil, shardstock.ErrNotFound
}

// fixture is a room over a memStore, on a clock the test moves.
type fixture struct {
	t     *testing.T
	room  *Room
	store *memStore
	now   time.Time
	left  map[string]int64 // units left; absent: the shards do not answer
	held  map[string]int64 // units reserved (locked)
	items products
	mu    sync.Mutex // guards left for the rooms' reads
}

// leftOf is a Stock that counts left[product] under mu, every shard
// answering; a product absent from left is a count that failed.
func leftOf(mu *sync.Mutex, left map[string]int64, locked ...map[string]int64) Stock {
	return func(_ context.Context, p string) (Units, error) {
		mu.Lock()
		defer mu.Unlock()
		n, ok := left[p]
		if !ok {
			return Units{}, shardstock.ErrUnavailable
		}
		u := Units{Salable: n, Complete: true}
		for _, l := range locked {
			u.Locked += l[p]
		}
		return u, nil
	}
}

var saleStart = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

func newFixture(t *testing.T, d api.QueueDefinition) *fixture {
	f := &fixture{t: t, store: newMemStore(), now: saleStart.Add(-time.Hour), left: map[string]int64{"lamp": 100}, held: map[string]int64{},
		items: products{"lamp": {ID: "lamp", Stock: 100, StartsAt: saleStart}}}
	f.room = f.another(f.store)
	if _, err := f.room.Define(context.Background(), "lamp", d); err != nil {
		t.Fatal(err)
	}
	return f
}

// another is a room over store on the fixture's clock, products and stock
// (a second coordinator, when store is the fixture's).
func (f *fixture) another(store QueueStore) *Room {
	r := New(Config{Store: store, Products: f.items,
		Now: func() time.Time { return f.now }, DropOut: 2,
		Stock: leftOf(&f.mu, f.left, f.held)})
	if err := r.Start(context.Background()); err != nil {
		f.t.Fatal(err)
	}
	return r
}

func (f *fixture) at(d time.Duration) {
	f.now = saleStart.Add(d)
	if err := f.room.Refresh(context.Background()); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) join(buyer string) Place {
	f.t.Helper()
	p, err := f.room.Join(context.Background(), "lamp", buyer, "")
	if err != nil {
		f.t.Fatalf("%s joins: %v", buyer, err)
	}
	return p
}

func code(err error) string {
	if err == nil {
		return "nil"
	}
	return shardstock.Public(err).Code
}

var fifo = api.QueueDefinition{Mode: "fifo", Rate: 2, LeadSeconds: 600, WindowSeconds: 30}

func TestJoinBeforeTheLineOpensIsRefused(t *testing.T) {
	f := newFixture(t, fifo)
	f.at(-11 * time.Minute)
	if _, err := f.room.Join(context.Background(), "lamp", "ann", ""); code(err) != "not_open" {
		t.Fatalf("join 11 min before a 10-min lead: %v, want not_open", err)
	}
	f.at(-10 * time.Minute)
	if p := f.join("ann"); p.Position != 1 || p.Status != "waiting" {
		t.Fatalf("join at the lead: %+v", p)
	}
}

// TestJoinAfterTheSaleEndedIsRefused (issue 42, finding 5): a join after
// the sale's end got a place, was admitted, and its purchase then answered
// 403 ended.
func TestJoinAfterTheSaleEndedIsRefused(t *testing.T) {
	f := newFixture(t, fifo)
	f.items["lamp"].EndsAt = saleStart.Add(time.Hour)
	f.at(59 * time.Minute)
	f.join("ann")
	f.at(time.Hour)
	if _, err := f.room.Join(context.Background(), "lamp", "ben", ""); code(err) != "ended" {
		t.Fatalf("join at the sale's end: %v, want ended", err)
	}
}

func TestFIFOAdmitsInTheOrderOfJoiningAtTheRate(t *testing.T) {
	f := newFixture(t, fifo)
	f.at(-time.Minute)
	tokens := map[string]string{}
	for i := range 6 {
		b := fmt.Sprintf("b%d", i)
		p := f.join(b)
		if p.Position != int64(i+1) {
			t.Fatalf("%s's place %d, want %d", b, p.Position, i+1)
		}
		tokens[b] = p.Token
	}
	if again := f.join("b2"); again.Position != 3 {
		t.Fatalf("a second join gave place %d, want the same 3", again.Position)
	}
	if err := f.room.Admit("lamp", "b0", tokens["b0"], f.now); code(err) != "not_admitted" {
		t.Fatalf("before the start: %v, want not_admitted", err)
	}
	f.at(1 * time.Second) // rate 2: places 1 and 2
	for b, want := range map[string]string{"b0": "nil", "b1": "nil", "b2": "not_admitted", "b5": "not_admitted"} {
		if err := f.room.Admit("lamp", b, tokens[b], f.now); code(err) != want {
			t.Errorf("%s at start+1s: %v, want %s", b, err, want)
		}
	}
	if err := f.room.Admit("lamp", "b1", tokens["b0"], f.now); code(err) != "not_admitted" {
		t.Errorf("b1 with b0's token: %v, want not_admitted (a place is its buyer's only)", err)
	}
	if err := f.room.Admit("lamp", "b1", "", f.now); code(err) != "not_admitted" {
		t.Errorf("b1 with no token: %v, want not_admitted", err)
	}
	p, err := f.room.Look(context.Background(), "lamp", "b5", tokens["b5"])
	if err != nil || p.Status != "waiting" || p.Ahead != 3 || p.WaitSeconds != 2 {
		t.Fatalf("b5 looks at start+1s: %+v %v, want waiting, 3 ahead (places 3-5: 2 is served), 2 s", p, err)
	}
	f.at(31 * time.Second) // b0's turn came at 0.5 s: its window of 30 s is over
	if err := f.room.Admit("lamp", "b0", tokens["b0"], f.now); code(err) != "not_admitted" {
		t.Errorf("b0 after its window: %v, want not_admitted", err)
	}
	if p, _ := f.room.Look(context.Background(), "lamp", "b0", tokens["b0"]); p.Status != "passed" {
		t.Errorf("b0 looks after its window: %s, want passed", p.Status)
	}
	if err := f.room.Admit("lamp", "b5", tokens["b5"], f.now); err != nil {
		t.Errorf("b5 at start+31s: %v", err)
	}
}

func TestAProductWithoutARoomIsNotGated(t *testing.T) {
	f := newFixture(t, fifo)
	if err := f.room.Admit("chair", "ann", "", f.now); err != nil {
		t.Fatalf("a product with no waiting room: %v", err)
	}
	if _, err := f.room.Join(context.Background(), "chair", "ann", ""); code(err) != "not_found" {
		t.Fatalf("join a product with no room: %v, want not_found", err)
	}
}

func TestRevokedPlaceAdmitsNobody(t *testing.T) {
	f := newFixture(t, fifo)
	f.at(0)
	p := f.join("bot")
	f.at(time.Second)
	if err := f.room.Admit("lamp", "bot", p.Token, f.now); err != nil {
		t.Fatal(err)
	}
	if _, err := f.room.Revoke(context.Background(), "lamp", "bot"); err != nil {
		t.Fatal(err)
	}
	if err := f.room.Admit("lamp", "bot", p.Token, f.now); code(err) != "revoked" {
		t.Fatalf("after revoke: %v, want revoked", err)
	}
	if again := f.join("bot"); again.Status != "revoked" {
		t.Fatalf("a revoked buyer joins again: %s, want revoked", again.Status)
	}
}

func TestPauseStopsAndAdvanceMovesNowServing(t *testing.T) {
	f := newFixture(t, fifo)
	f.at(0)
	for i := range 10 {
		f.join(fmt.Sprint("b", i))
	}
	f.at(time.Second)
	s, err := f.room.Pause(context.Background(), "lamp")
	if err != nil || s.Serving != 2 || !s.Paused {
		t.Fatalf("pause: %+v %v", s, err)
	}
	f.at(10 * time.Second)
	if s, _ := f.room.Summary(context.Background(), "lamp"); s.Serving != 2 {
		t.Fatalf("paused 9 s: serving %d, want 2", s.Serving)
	}
	if s, _ := f.room.Advance(context.Background(), "lamp", 5); s.Serving != 7 {
		t.Fatalf("advance 5: serving %d, want 7", s.Serving)
	}
	if s, _ := f.room.Resume(context.Background(), "lamp"); s.Serving != 7 || s.Paused {
		t.Fatalf("resume: %+v", s)
	}
	f.at(11 * time.Second)
	if s, _ := f.room.Summary(context.Background(), "lamp"); s.Serving != 9 {
		t.Fatalf("a second after resume: serving %d, want 9", s.Serving)
	}
}

func TestALineAheadOfItsBuyersLetsALateCrowdInAtTheRate(t *testing.T) {
	f := newFixture(t, fifo)
	f.at(time.Minute) // nobody came: the clock would be at 120
	var toks []string
	for i := range 50 {
		toks = append(toks, f.join(fmt.Sprint("late", i)).Token)
	}
	admitted := 0
	for i, tok := range toks {
		if f.room.Admit("lamp", fmt.Sprint("late", i), tok, f.now) == nil {
			admitted++
		}
	}
	if admitted > 2*int(fifo.Rate) {
		t.Fatalf("%d of a late crowd of 50 admitted at once, want at most about a second's rate (%g)", admitted, fifo.Rate)
	}
}

func TestWaitingBuyersLearnSoldOutAndUnlikelyButNotFromAnOutage(t *testing.T) {
	f := newFixture(t, fifo)
	f.at(0)
	var toks []string
	for i := range 10 {
		toks = append(toks, f.join(fmt.Sprint("b", i)).Token)
	}
	f.left["lamp"] = 2 // drop-out factor 2: 4 places ahead can still hope
	f.at(500 * time.Millisecond)
	look := func(i int) Place {
		p, err := f.room.Look(context.Background(), "lamp", fmt.Sprint("b", i), toks[i])
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	if p := look(4); p.Unlikely || p.Status != "waiting" {
		t.Errorf("place 5, 3 ahead, 2 left: %+v, want waiting and likely", p)
	}
	if p := look(9); !p.Unlikely {
		t.Errorf("place 10, 8 ahead, 2 left: %+v, want unlikely", p)
	}
	delete(f.left, "lamp") // the shards do not answer
	f.at(600 * time.Millisecond)
	if p := look(9); p.Status != "waiting" {
		t.Errorf("an outage: %s, want waiting (never sold out)", p.Status)
	}
	// Every unit reserved, none sold (issue 41, finding 5): a lapse or a
	// cancel may bring one back, so a waiting buyer is told "held", not
	// "sold_out" (honest buyers gave up, persistent ones got the units).
	f.left["lamp"], f.held["lamp"] = 0, 2
	f.at(650 * time.Millisecond)
	if p := look(9); p.Status != "held" {
		t.Errorf("every unit reserved, none sold: %s, want held", p.Status)
	}
	f.held["lamp"] = 0
	f.at(700 * time.Millisecond)
	if p := look(9); p.Status != "sold_out" {
		t.Errorf("nothing left: %s, want sold_out", p.Status)
	}
	if p := look(0); p.Status != "admitted" {
		t.Errorf("an admitted buyer, nothing left by the last count: %s, want admitted (the purchase tells what the shards say)", p.Status)
	}
}

func TestProofOfWork(t *testing.T) {
	d := fifo
	d.Difficulty = 12
	f := newFixture(t, d)
	f.at(0)
	if _, err := f.room.Join(context.Background(), "lamp", "ann", ""); code(err) != "work_required" {
		t.Fatalf("join without work: %v, want work_required", err)
	}
	face, err := f.room.Look(context.Background(), "lamp", "ann", "")
	if err != nil || face.Challenge == "" {
		t.Fatalf("the line's face once open: %+v %v, want a challenge", face, err)
	}
	ch := face.Challenge
	bobs := Solve("lamp", "bob", ch, 12)
	if WorkOK("lamp", "ann", ch, bobs, 12) {
		t.Fatalf("bob's work %q is ann's too (1 in 4096): pick another buyer", bobs)
	}
	if _, err := f.room.Join(context.Background(), "lamp", "ann", bobs); code(err) != "work_required" {
		t.Fatalf("join with another buyer's work: %v, want work_required", err)
	}
	if _, err := f.room.Join(context.Background(), "lamp", "ann", Solve("lamp", "ann", ch, 12)); err != nil {
		t.Fatalf("join with work: %v", err)
	}
}

// TestProofOfWorkCannotBeDoneInAdvance (issue 41, finding 4): the work's
// input was only the product and the buyer, so a bot did it before the
// room opened and joined first. Now it hashes a challenge the room tells
// only once it is open, which changes every minute: work on any other
// input (none, a guess, a challenge two slots old) is refused, and the
// last slot's is still taken (a buyer who got it late in its slot has a
// slot more to finish).
func TestProofOfWorkCannotBeDoneInAdvance(t *testing.T) {
	d := fifo
	d.Difficulty = 10
	f := newFixture(t, d)
	opens := saleStart.Add(-time.Duration(d.LeadSeconds) * time.Second)
	f.now = opens.Add(-time.Minute)
	if face, _ := f.room.Look(context.Background(), "lamp", "bot", ""); face.Challenge != "" {
		t.Fatalf("the line's face before the room opens: challenge %q, want none", face.Challenge)
	}
	early := []string{Solve("lamp", "bot", "", 10), Solve("lamp", "bot", "guess", 10)}
	f.now = opens
	face, err := f.room.Look(context.Background(), "lamp", "bot", "")
	if err != nil || face.Challenge == "" {
		t.Fatalf("the line's face as it opens: %+v %v", face, err)
	}
	for _, w := range early {
		if WorkOK("lamp", "bot", face.Challenge, w, 10) {
			continue // (1 in 1024: this work happens to fit the challenge too)
		}
		if _, err := f.room.Join(context.Background(), "lamp", "bot", w); code(err) != "work_required" {
			t.Fatalf("work done before the room opened: %v, want work_required", err)
		}
	}
	late := Solve("lamp", "ann", face.Challenge, 10)
	f.now = opens.Add(WorkSlot) // the next slot: the last one's challenge still taken
	if _, err := f.room.Join(context.Background(), "lamp", "ann", late); err != nil {
		t.Fatalf("work on the last slot's challenge: %v", err)
	}
	stale := Solve("lamp", "cat", face.Challenge, 10)
	f.now = opens.Add(2 * WorkSlot)
	if next, _ := f.room.Look(context.Background(), "lamp", "cat", ""); !WorkOK("lamp", "cat", next.Challenge, stale, 10) {
		if _, err := f.room.Join(context.Background(), "lamp", "cat", stale); code(err) != "work_required" {
			t.Fatalf("work on a challenge two slots old: %v, want work_required", err)
		}
	}
}

func TestDrawPlacesTheLobbyUniformly(t *testing.T) {
	// 6 buyers in the lobby, drawn 3000 times: each buyer's place is
	// uniform over 1..6 (chi-square, 5 degrees of freedom, p = 0.001:
	// 20.52), and later arrivals queue after them in order.
	const n, rounds = 6, 3000
	counts := [n][n]int{}
	for range rounds {
		f := newFixture(t, api.QueueDefinition{Mode: "draw", Rate: 1, LeadSeconds: 600, WindowSeconds: 30})
		f.at(-time.Minute)
		for i := range n {
			if p := f.join(fmt.Sprint("b", i)); p.Status != "lobby" || p.Position != 0 {
				t.Fatalf("a join before the draw: %+v, want the lobby", p)
			}
		}
		f.at(0)
		for i := range n {
			q, _, _ := f.store.QueuePlace(context.Background(), "lamp", fmt.Sprint("b", i))
			counts[i][q.Position-1]++
		}
		if p := f.join("late"); p.Position != n+1 {
			t.Fatalf("a join after the draw: place %d, want %d", p.Position, n+1)
		}
	}
	for i := range n {
		chi := 0.0
		want := float64(rounds) / n
		for _, c := range counts[i] {
			chi += (float64(c) - want) * (float64(c) - want) / want
		}
		if chi > 20.52 || math.IsNaN(chi) {
			t.Errorf("buyer %d's places %v: chi-square %.1f > 20.52", i, counts[i], chi)
		}
	}
}

func TestALobbyTokenGetsItsPlaceAtTheDraw(t *testing.T) {
	f := newFixture(t, api.QueueDefinition{Mode: "draw", Rate: 100, LeadSeconds: 600, WindowSeconds: 30})
	f.at(-time.Minute)
	tok := f.join("ann").Token
	if err := f.room.Admit("lamp", "ann", tok, f.now); code(err) != "not_admitted" {
		t.Fatalf("a lobby token before the start: %v", err)
	}
	// Looks in the lobby before the draw are answered from memory (issue
	// 41, finding 3: each was a SQL read).
	for range 10 {
		if p, err := f.room.Look(context.Background(), "lamp", "ann", tok); err != nil || p.Status != "lobby" {
			t.Fatalf("a look in the lobby: %+v %v", p, err)
		}
	}
	if f.store.reads != 0 {
		t.Fatalf("10 looks in the lobby read the store %d times, want none", f.store.reads)
	}
	f.at(time.Second) // drawn now, and the line's first turns come the draw's grace later
	p, err := f.room.Look(context.Background(), "lamp", "ann", tok)
	if err != nil || p.Position != 1 || p.Status != "waiting" || p.WaitSeconds != 2 {
		t.Fatalf("look after the draw, before the grace: %+v %v, want place 1 waiting 2 s (the grace from the draw)", p, err)
	}
	f.at(time.Second + shardstock.DrawGrace + 100*time.Millisecond)
	if err := f.room.Admit("lamp", "ann", p.Token, f.now); err != nil {
		t.Fatalf("the drawn token after the grace: %v", err)
	}
}

func TestDefinitionsAreChecked(t *testing.T) {
	f := newFixture(t, fifo)
	for _, d := range []api.QueueDefinition{{Mode: "lifo", Rate: 1, WindowSeconds: 1}, {Mode: "fifo", Rate: 0, WindowSeconds: 1},
		{Mode: "fifo", Rate: 1, WindowSeconds: 0}, {Mode: "fifo", Rate: 1, WindowSeconds: 1, Difficulty: 29}, {Mode: "fifo", Rate: math.NaN(), WindowSeconds: 1},
		{Mode: "fifo", Rate: 1e-12, WindowSeconds: 1}} {
		if _, err := f.room.Define(context.Background(), "lamp", d); code(err) != "bad_request" {
			t.Errorf("define %+v: %v, want bad_request", d, err)
		}
	}
	if _, err := f.room.Define(context.Background(), "chair", fifo); !errors.Is(err, shardstock.ErrNotFound) {
		t.Errorf("define for no product: %v, want not_found", err)
	}
	f.at(0)
	f.join("ann")
	if _, err := f.room.Define(context.Background(), "lamp", api.QueueDefinition{Mode: "draw", Rate: 1, WindowSeconds: 1}); code(err) != "conflict" {
		t.Errorf("change the mode of a line with buyers: %v, want conflict", err)
	}
}

// While no unit is left the number now serving waits, so the places next
// in line, not those whose turn would have come and gone with nothing to
// buy, get the units a release brings back.
func TestTheLineWaitsWhileNothingIsLeftAndMovesOnAtARelease(t *testing.T) {
	f := newFixture(t, fifo)
	f.at(-time.Minute)
	var toks []string
	for i := range 40 {
		toks = append(toks, f.join(fmt.Sprint("b", i)).Token)
	}
	f.at(time.Second) // rate 2: places 1 and 2
	f.left["lamp"] = 0
	f.at(1500 * time.Millisecond)
	s, _ := f.room.Summary(context.Background(), "lamp")
	if !s.Held || s.Serving != 3 {
		t.Fatalf("nothing left at 1.5 s: %+v, want held at 3", s)
	}
	f.at(10 * time.Second)
	if s, _ := f.room.Summary(context.Background(), "lamp"); s.Serving != 3 {
		t.Fatalf("held 8.5 s: serving %d, want still 3", s.Serving)
	}
	if p, _ := f.room.Look(context.Background(), "lamp", "b3", toks[3]); p.Status != "sold_out" {
		t.Fatalf("place 4 while held: %s, want sold_out", p.Status)
	}
	f.left["lamp"] = 1 // a release
	f.at(11 * time.Second)
	f.at(11600 * time.Millisecond)
	if err := f.room.Admit("lamp", "b3", toks[3], f.now); err != nil {
		t.Fatalf("place 4, next after the release: %v", err)
	}
	if err := f.room.Admit("lamp", "b30", toks[30], f.now); code(err) != "not_admitted" {
		t.Fatalf("place 31 after the release: %v, want not_admitted", err)
	}
	paused, err := f.room.Pause(context.Background(), "lamp")
	if err != nil {
		t.Fatal(err)
	}
	f.left["lamp"] = 0
	f.at(12 * time.Second)
	f.left["lamp"] = 5
	f.at(13 * time.Second)
	if s, _ := f.room.Summary(context.Background(), "lamp"); !s.Paused || s.Held {
		t.Fatalf("units back while paused by the operator: %+v, want paused and not held", s)
	}
	f.at(20 * time.Second)
	if s, _ := f.room.Summary(context.Background(), "lamp"); s.Serving != paused.Serving {
		t.Fatalf("the operator's pause moved from %d to %d", paused.Serving, s.Serving)
	}
}

// After an idle spell (the number ran ahead, was moved back, and its old
// stretches expired), a buyer who joins late is admitted from their join,
// not told their turn passed before they came.
func TestALateJoinAfterAnIdleSpellIsAdmittedNotPassed(t *testing.T) {
	f := newFixture(t, fifo)
	f.at(0)
	f.join("ann")
	for i := range 90 { // a minute and a half of nobody, read every second
		f.at(time.Duration(i) * time.Second)
	}
	if l, _ := f.room.line("lamp"); len(l.Clock) > 3 {
		t.Fatalf("an idle line read 90 times has %d clock segments, want it stopped once", len(l.Clock))
	}
	p := f.join("bob")
	if p.Position != 2 || p.Status != "admitted" || !p.AdmittedUntil.Equal(f.now.Add(30*time.Second)) {
		t.Fatalf("bob joins after the idle spell: %+v, want place 2 admitted for the window from now", p)
	}
	if err := f.room.Admit("lamp", "bob", p.Token, f.now.Add(29*time.Second)); err != nil {
		t.Fatalf("bob buys within his window: %v", err)
	}
	if err := f.room.Admit("lamp", "bob", p.Token, f.now.Add(31*time.Second)); code(err) != "not_admitted" {
		t.Fatalf("bob buys after his window: %v, want not_admitted", err)
	}
}

// hookStore runs afterRead once, after the next read of the lines (to
// put a join between a coordinator's read and its write).
type hookStore struct {
	*memStore
	afterRead func()
}

func (h *hookStore) QueueLines(ctx context.Context) (map[string]shardstock.QueueLine, error) {
	l, err := h.memStore.QueueLines(ctx)
	if f := h.afterRead; f != nil {
		h.afterRead = nil
		f()
	}
	return l, err
}

// A coordinator that moves an idle line back from a read taken before
// some joins does not take back the turns those joins were told of; and a
// coordinator that has not read the move answers a token issued on it
// with "try again", not with its own older line.
func TestMovingAnIdleLineBackNeverTakesBackATurnAlreadyTold(t *testing.T) {
	f := newFixture(t, fifo)
	hooked := &hookStore{memStore: f.store}
	a, b, c := f.another(hooked), f.another(f.store), f.another(f.store)
	f.now = saleStart
	for _, r := range []*Room{b, c} {
		if err := r.Refresh(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	f.now = saleStart.Add(time.Minute) // the number ran ahead to 120 with nobody in line
	if l, _ := b.line("lamp"); l.Serving(f.now) < 100 {
		t.Fatalf("b serves %d: the line did not run ahead", l.Serving(f.now))
	}
	tokens := map[string]string{}
	hooked.afterRead = func() { // a has read the line with nobody in it
		for i := range 5 {
			buyer := fmt.Sprint("b", i)
			p, err := b.Join(context.Background(), "lamp", buyer, "")
			if err != nil || p.Status != "admitted" {
				t.Fatalf("%s joins on b: %+v %v, want admitted", buyer, p, err)
			}
			tokens[buyer] = p.Token
		}
	}
	for range 2 { // the write from the old read loses; the next read moves it back
		if err := a.Refresh(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	l, _ := a.line("lamp")
	if l.Serving(f.now) > 5+2 {
		t.Fatalf("the line serves %d after the idle spell, want it moved back to the 5 in line and a second's rate", l.Serving(f.now))
	}
	if err := b.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	for buyer, tok := range tokens {
		for name, r := range map[string]*Room{"a": a, "b": b} {
			if err := r.Admit("lamp", buyer, tok, f.now); err != nil {
				t.Errorf("%s, told admitted, buys on %s after the move: %v", buyer, name, err)
			}
		}
	}
	late, err := b.Join(context.Background(), "lamp", "late", "")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Admit("lamp", "late", late.Token, f.now); code(err) != "unavailable" {
		t.Fatalf("c, which has not read the move, admits a place issued on it: %v, want unavailable", err)
	}
}

// A draw line's lobby counts as joined, and its mode cannot change under
// it (an earlier version let a draw line turn fifo with buyers in the
// lobby, who then never got a place).
func TestALobbyKeepsItsDrawLine(t *testing.T) {
	f := newFixture(t, api.QueueDefinition{Mode: "draw", Rate: 1, LeadSeconds: 600, WindowSeconds: 30})
	f.at(-time.Minute)
	f.join("ann")
	if _, err := f.room.Define(context.Background(), "lamp", fifo); code(err) != "conflict" {
		t.Fatalf("change a line with one in the lobby to fifo: %v, want conflict", err)
	}
	f.at(-time.Minute)
	if s, err := f.room.Summary(context.Background(), "lamp"); err != nil || s.Joined != 1 || s.Waiting != 1 {
		t.Fatalf("summary with one in the lobby: %+v %v, want 1 joined and waiting", s, err)
	}
}

// A join just after the start, before this coordinator has read the draw,
// queues after the lobby instead of joining the draw.
func TestAJoinAfterTheStartIsNotDrawnWithTheLobby(t *testing.T) {
	f := newFixture(t, api.QueueDefinition{Mode: "draw", Rate: 1, LeadSeconds: 600, WindowSeconds: 30})
	f.at(-time.Minute)
	for i := range 3 {
		f.join(fmt.Sprint("early", i))
	}
	f.now = saleStart.Add(100 * time.Millisecond) // no read since the start
	if p := f.join("late"); p.Position != 4 || p.Status == "lobby" {
		t.Fatalf("a join after the start: %+v, want place 4 behind the drawn lobby", p)
	}
}

// A sale's start moved after its line was defined moves the line's clock
// with it, so no turn comes and goes before anyone can buy.
func TestALineFollowsItsSalesStart(t *testing.T) {
	f := newFixture(t, fifo)
	f.at(-time.Minute)
	ann := f.join("ann")
	f.items["lamp"].StartsAt = saleStart.Add(time.Hour)
	f.at(-30 * time.Second)
	f.at(10 * time.Second)
	if err := f.room.Admit("lamp", "ann", ann.Token, f.now); code(err) != "not_admitted" {
		t.Fatalf("ann at the old start+10s: %v, want not_admitted (the sale starts an hour later)", err)
	}
	f.at(time.Hour + time.Second)
	if err := f.room.Admit("lamp", "ann", ann.Token, f.now); err != nil {
		t.Fatalf("ann a second after the new start: %v, want admitted", err)
	}
	if s, _ := f.room.Summary(context.Background(), "lamp"); !s.Starts.Equal(saleStart.Add(time.Hour)) {
		t.Fatalf("the line starts at %v, want the sale's new start", s.Starts)
	}
}

// TestARoomWhoseClockIsNotKnownWritesNothing: a coordinator no shard has
// told the sale's time yet (its own clock 20 s ahead) reads the lines but
// writes none (a hold its count calls for waits) and hands out no place:
// a line clock written 20 s ahead held every turn back by 20 s (the model
// test). Once its clock is known, it tends the line as any other.
func TestARoomWhoseClockIsNotKnownWritesNothing(t *testing.T) {
	f := newFixture(t, fifo)
	f.at(-time.Minute)
	bob := f.join("bob") // place 1: admitted from the start
	f.at(time.Second)
	var known atomic.Bool
	ahead := New(Config{Store: f.store, Products: f.items, Now: func() time.Time { return f.now.Add(20 * time.Second) },
		Known: known.Load, Stock: leftOf(&f.mu, f.left)})
	if err := ahead.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.left["lamp"] = 0 // sold out: the line is to be held
	f.mu.Unlock()
	version := func() (int64, bool) {
		lines, err := f.store.QueueLines(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return lines["lamp"].Version, lines["lamp"].Held
	}
	before, _ := version()
	if err := ahead.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if v, held := version(); v != before || held {
		t.Fatalf("the line after a refresh with the clock not known: version %d (was %d), held %v; want unchanged", v, before, held)
	}
	if _, err := ahead.Join(context.Background(), "lamp", "ann", ""); code(err) != "unavailable" {
		t.Fatalf("a join with the clock not known: %v, want unavailable", err)
	}
	if _, err := ahead.Define(context.Background(), "lamp", fifo); code(err) != "unavailable" {
		t.Fatalf("a definition with the clock not known: %v, want unavailable", err)
	}
	if err := ahead.Admit("lamp", "bob", bob.Token, f.now.Add(20*time.Second)); code(err) != "unavailable" {
		t.Fatalf("a purchase with an admitted place, the clock not known: %v, want unavailable (its turn judged by a clock 20 s off)", err)
	}
	known.Store(true)
	if err := ahead.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, held := version(); !held {
		t.Fatal("the line with the clock known and nothing left: not held")
	}
}
