// Package waitroom is a product's waiting room in front of its sale: a
// buyer joins and gets a signed place in line, looks at it at the pace the
// room sets, and buys once admitted. The number now serving follows a clock
// every coordinator computes from the line's definition (shardstock.QueueLine),
// read from SQL every half second, so admitting a purchase costs a token
// check and no store or Redis call. Places are handed out by SQL (Store).
// It imports the domain and api (its HTTP answers' bodies and errors).
package waitroom

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"time"

	"github.com/shardstock/shardstock"
	"github.com/shardstock/shardstock/api"
)

// QueueStore keeps the lines, the places and the revoked buyers (sqlstore.Queues).
type QueueStore interface {
	// QueueLines are every product's line.
	QueueLines(ctx context.Context) (map[string]shardstock.QueueLine, error)
	// SaveQueueLine writes l's definition and clock when the stored line is
	// at l.Version (0: none yet), as version l.Version+1; false: another
	// writer was first.
	SaveQueueLine(ctx context.Context, l shardstock.QueueLine) (bool, error)
	// SaveQueueLineBeforeJoins is SaveQueueLine that also needs nobody to
	// have joined since l was read (the stored joined and lobby are l's).
	SaveQueueLineBeforeJoins(ctx context.Context, l shardstock.QueueLine) (bool, error)
	// JoinQueue gives buyer a place in product's line, or the one they have
	// (Position 0: in the lobby of a draw not yet drawn), with the line's
	// version as the place was handed out; a new place is joined at at.
	JoinQueue(ctx context.Context, product, buyer string, at time.Time) (shardstock.QueuePlace, error)
	// QueuePlace is buyer's place (found false: never joined).
	QueuePlace(ctx context.Context, product, buyer string) (p shardstock.QueuePlace, found bool, err error)
	// DrawQueue places the lobby of product's draw line once, in the order
	// shuffle leaves it: how many it placed, or -1 when it was drawn already.
	// The line is marked drawn at now() once the places are written, its
	// version moved on.
	DrawQueue(ctx context.Context, product string, now func() time.Time, shuffle func([]string)) (int64, error)
	RevokeQueue(ctx context.Context, product, buyer string) error
	QueueRevoked(ctx context.Context) (map[string]map[string]bool, error)
	// QueueSecret is the secret every coordinator signs places with,
	// made on first use.
	QueueSecret(ctx context.Context) ([]byte, error)
}

// Products finds a product's definition (inventory.Catalog).
type Products interface {
	Product(ctx context.Context, id string) (*shardstock.Product, error)
}

// Stock counts the units of product on the shards that answer
// (inventory.Views.Stock, in the Units a room reads).
type Stock func(ctx context.Context, product string) (Units, error)

// Units are a product's units a buyer can get now (Salable) and those held
// by reservations that may yet come back (Locked), over the shards that
// answered; Complete: every shard answered with its counts (else both are
// lower bounds).
type Units struct {
	Salable, Locked int64
	Complete        bool
}

// Config wires a Room. Store and Products are required.
type Config struct {
	Store    QueueStore
	Products Products
	Stock    Stock // nil: no sold-out or unlikely answers while waiting
	// Secret signs the places; nil: Store's (one per catalog, shared by its
	// coordinators). An edge that checks places needs it set on both.
	Secret []byte
	Now    func() time.Time
	// Known says whether Now has been set by the shards' clocks (nil:
	// always). Until it has, the room writes nothing and hands out no
	// place: a line's clock is one time for every coordinator, and one
	// written from a coordinator's own clock, off by its skew, held every
	// turn back by as much (found by the model test: a coordinator started
	// while no shard answered, 20 s ahead, stopped a line for 20 s).
	Known  func() bool
	Logger *slog.Logger
	Every  time.Duration // how often the lines are read (default 500ms)
	// Looks is the rate of looks per second one line's waiting buyers are
	// paced to in all (default 1000): Retry-After grows with the line.
	Looks float64
	// DropOut is how many waiting buyers one unit left may serve before
	// the rest are told they are unlikely to get one (default 2).
	DropOut float64
}

// Room is the waiting rooms of every product. Safe for concurrent use.
type Room struct {
	cfg    Config
	signer *signer
	state  atomic.Pointer[state]
	// reads lets one Refresh run at a time, so a slower one never stores
	// an older read: a channel of one, not a mutex, so a caller whose
	// context ends stops waiting for one held up by a shard (and the wait
	// is durable for testing/synctest: a mutex held across the shards'
	// round trips stopped the model test's fake clock).
	reads  chan struct{}
	behind atomic.Bool // a Refresh out of turn is running (catchUp)
	// failing: the lines whose last tend failed (logged once); guarded by reads
	failing map[string]bool
}

// state is what the room last read.
type state struct {
	lines   map[string]shardstock.QueueLine
	revoked map[string]map[string]bool
	left    map[string]Units // units per queued product, when every shard answered
}

// New returns a Room; Start loads it.
func New(cfg Config) *Room {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Every <= 0 {
		cfg.Every = 500 * time.Millisecond
	}
	if cfg.Looks <= 0 {
		cfg.Looks = 1000
	}
	if cfg.DropOut <= 0 {
		cfg.DropOut = 2
	}
	return &Room{cfg: cfg, failing: map[string]bool{}, reads: make(chan struct{}, 1)}
}

// Start reads the secret and the lines. A room that could not read them
// does not start: a purchase it let through unqueued would jump the line.
func (r *Room) Start(ctx context.Context) error {
	secret := r.cfg.Secret
	if secret == nil {
		var err error
		if secret, err = r.cfg.Store.QueueSecret(ctx); err != nil {
			return fmt.Errorf("waiting room: the secret: %w", err)
		}
	}
	r.signer = newSigner(secret, r.cfg.Now)
	return r.Refresh(ctx)
}

// Run refreshes the lines every Every until ctx is done.
func (r *Room) Run(ctx context.Context) {
	t := time.NewTicker(r.cfg.Every)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := r.Refresh(ctx); err != nil && ctx.Err() == nil {
			if !failing {
				r.cfg.Logger.Warn("could not read the waiting rooms; keeping the last ones", "err", err)
			}
			failing = true
		} else if failing {
			r.cfg.Logger.Info("the waiting rooms are read again")
			failing = false
		}
	}
}

// Refresh reads the lines, the revoked buyers and the units left, does
// what each line needs (tend), and keeps what it read for the answers
// that read memory only (Admit, the edge's lines, the metrics).
func (r *Room) Refresh(ctx context.Context) error {
	select {
	case r.reads <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-r.reads }()
	lines, err := r.cfg.Store.QueueLines(ctx)
	if err != nil {
		return err
	}
	revoked, err := r.cfg.Store.QueueRevoked(ctx)
	if err != nil {
		return err
	}
	now := r.cfg.Now()
	left := map[string]Units{}
	changed := false
	known := r.clockKnown()
	for id, l := range lines {
		var units stock
		if r.cfg.Stock != nil {
			if u, err := r.cfg.Stock(ctx, id); err == nil {
				units = stock{n: u.Salable, known: true, complete: u.Complete}
				if u.Complete {
					left[id] = u
				}
			}
		}
		var sale *shardstock.Product // the sale as the catalog has it now (nil: unknown)
		if p, err := r.cfg.Products.Product(ctx, id); err == nil {
			sale = p
		}
		if !known {
			continue // (read as it is: tended once the sale's clock is known)
		}
		wrote, err := r.tend(ctx, l, sale, units, now)
		switch {
		case err != nil && !r.failing[id]:
			// One line's trouble (its store write) leaves the others, and
			// revokes, read as ever.
			r.cfg.Logger.Warn("waiting room: could not tend the line; it is read as it is", "product", id, "err", err)
			r.failing[id] = true
		case err == nil && r.failing[id]:
			r.cfg.Logger.Info("waiting room: the line is tended again", "product", id)
			delete(r.failing, id)
		}
		changed = changed || wrote
	}
	if changed { // read what was written (or what another coordinator wrote first)
		if lines, err = r.cfg.Store.QueueLines(ctx); err != nil {
			return err
		}
	}
	r.state.Store(&state{lines: lines, revoked: revoked, left: left})
	return nil
}

// tend does what a line needs from whoever reads it, each write carrying
// the line's version (of several coordinators, one makes it):
//   - before any turn has come, its clock follows its sale's start (sale,
//     when known) to a newer window, so a start moved later or earlier
//     moves every turn with it;
//   - once the sale starts, a draw's lobby is drawn, and the line's first
//     turns come DrawGrace after the draw is written;
//   - a number that ran ahead of its buyers stops a second's worth past the
//     last place handed out (so a crowd arriving later is let in at the
//     rate, not at once), and runs on once its buyers reach it;
//   - while no unit is left (a complete count of 0: every shard answered)
//     the number is held, at the last place handed out if it ran past it,
//     so nobody's turn comes and goes with nothing to buy, and the places
//     next in line get what a release or a stock add brings back (any unit
//     counted, even with a shard down, runs it again).
//
// A write that moves the number back is made only if nobody joined since
// the line was read: a turn told stays told. wrote: something was written,
// or another writer was first.
func (r *Room) tend(ctx context.Context, l shardstock.QueueLine, sale *shardstock.Product, units stock, now time.Time) (wrote bool, err error) {
	save := func(write func(context.Context, shardstock.QueueLine) (bool, error)) (bool, error) {
		saved, err := write(ctx, l)
		if saved {
			l.Version++
			wrote = true
		}
		return saved, err
	}
	if sale != nil && now.Before(l.Starts()) {
		starts := lineStarts(l, sale.StartsAt, now)
		// A catalog behind another coordinator's holds an older start: it
		// moves the line only with a newer window version, to a later
		// start, while both starts are far enough ahead (settleStarts) for
		// every coordinator to read the move before either comes, or once
		// the sale has been open for settleStarts (a session's window has
		// no version: brought forward at the last moment, its line starts
		// up to settleStarts late).
		far := now.Add(settleStarts)
		newer := sale.WindowVersion > l.WindowVersion || sale.WindowVersion == l.WindowVersion &&
			(starts.After(l.Starts()) || starts.After(far) && l.Starts().After(far) || sale.StartsAt.Add(settleStarts).Before(now))
		if !starts.IsZero() && !starts.Equal(l.Starts()) && newer {
			l.Clock, l.Expired, l.WindowVersion = []shardstock.QueueSegment{{At: starts, Rate: l.Running()}}, 0, sale.WindowVersion
			if saved, err := save(r.cfg.Store.SaveQueueLine); err != nil || !saved {
				return true, err
			}
		}
	}
	if now.Before(l.SaleStarts()) {
		return wrote, nil
	}
	if l.Mode == shardstock.QueueDraw && !l.Drawn {
		// The line's version moves on: what follows is written again from
		// the next read.
		_, err := r.draw(ctx, l.Product)
		return true, err
	}
	if now.Before(l.Starts()) { // a draw's grace
		return wrote, nil
	}
	last, serving := l.Clock[len(l.Clock)-1], l.Serving(now)
	switch {
	case l.Running() > 0 && last.Rate > 0 && float64(serving-l.Joined) > 2*l.Rate:
		l.AppendAt(now, l.Joined+int64(math.Ceil(l.Rate)), 0)
		if saved, err := save(r.cfg.Store.SaveQueueLineBeforeJoins); err != nil || !saved {
			return true, err
		}
	case l.Running() > 0 && last.Rate == 0 && l.Joined >= serving:
		l.Append(now, 0, l.Rate)
		if saved, err := save(r.cfg.Store.SaveQueueLine); err != nil || !saved {
			return true, err
		}
	}
	hold := l.Held
	switch {
	case units.known && units.n > 0:
		hold = false
	case units.complete && units.n == 0:
		hold = true
	}
	if hold != l.Held {
		write := r.cfg.Store.SaveQueueLine
		if l.Held = hold; hold && l.Serving(now) > l.Joined {
			// Back to the last place handed out, if nobody joined since
			// (else from the next read): a join while held waits.
			l.AppendAt(now, l.Joined, 0)
			write = r.cfg.Store.SaveQueueLineBeforeJoins
		} else {
			l.Append(now, 0, l.Running())
		}
		if _, err := save(write); err != nil {
			return true, err
		}
	}
	return wrote, nil
}

// stock is a count of the units left: known (it could be read); complete
// (every shard answered: else n is a lower bound).
type stock struct {
	n               int64
	known, complete bool
}

// settleStarts: a line follows a start moved earlier by a catalog without
// a newer window version (a session's) only while both starts are this far
// ahead, so that every coordinator reads the move before either comes, or
// once the sale has been open this long (no catalog is that far behind).
const settleStarts = 5 * time.Second

// lineStarts is when l's clock should start for a sale that starts at
// sale (zero: at once), at now: zero when the line starts as it is (a sale
// without a start that opened when its line was defined).
func lineStarts(l shardstock.QueueLine, sale, now time.Time) time.Time {
	switch {
	case sale.After(now):
		return shardstock.LineStarts(l.Mode, sale)
	case now.Before(l.SaleStarts()): // the sale opened before the line's start
		return shardstock.LineStarts(l.Mode, now)
	}
	return time.Time{}
}

// draw places the lobby of product's draw line, once: how many it drew,
// or -1 when it was drawn already.
func (r *Room) draw(ctx context.Context, product string) (int64, error) {
	n, err := r.cfg.Store.DrawQueue(ctx, product, r.cfg.Now, func(s []string) {
		rand.Shuffle(len(s), func(i, j int) { s[i], s[j] = s[j], s[i] })
	})
	if err != nil {
		return 0, fmt.Errorf("draw %s: %w", product, err)
	}
	return n, nil
}

// fresh is product's line at version v or later: this room's copy, or
// the lines read again when the buyer was told something from a newer one
// (by another coordinator, or by a change this one has not read yet).
func (r *Room) fresh(ctx context.Context, product string, v int64) (shardstock.QueueLine, error) {
	if l, ok := r.line(product); ok && l.Version >= v {
		return l, nil
	}
	if err := r.Refresh(ctx); err != nil {
		return shardstock.QueueLine{}, unavailable(err)
	}
	l, ok := r.line(product)
	if !ok {
		return shardstock.QueueLine{}, noRoom(product)
	}
	return l, nil
}

// catchUp reads the lines now, in the background (once at a time): a
// purchase showed this room is behind.
func (r *Room) catchUp() {
	if !r.behind.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer r.behind.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := r.Refresh(ctx); err != nil {
			r.cfg.Logger.Warn("could not read the waiting rooms", "err", err)
		}
	}()
}

// Queued reports whether product sells through a waiting room.
func (r *Room) Queued(product string) bool {
	_, ok := r.line(product)
	return ok
}

func (r *Room) line(product string) (shardstock.QueueLine, bool) {
	st := r.state.Load()
	if st == nil {
		return shardstock.QueueLine{}, false
	}
	l, ok := st.lines[product]
	return l, ok
}

func (r *Room) revoked(product, buyer string) bool {
	st := r.state.Load()
	return st != nil && st.revoked[product][buyer]
}

// Admit lets buyer's purchase of product through when the product has no
// waiting room, or token is buyer's admitted place in it: ErrNotAdmitted
// or ErrRevoked otherwise. It reads nothing but memory.
func (r *Room) Admit(product, buyer, token string, now time.Time) error {
	l, ok := r.line(product)
	if !ok {
		return nil
	}
	if token == "" {
		return shardstock.ErrNotAdmitted
	}
	if !r.clockKnown() { // (now is this coordinator's own clock: a turn judged by it may be off by the skew)
		return unavailable(errClockUnknown)
	}
	t, err := r.signer.verify(token, product, buyer)
	if err != nil {
		return notAdmitted(err.Error())
	}
	if r.revoked(product, buyer) {
		return shardstock.ErrRevoked
	}
	pos := t.Position
	if pos == 0 {
		return notAdmitted("your place is drawn when the sale starts: look at the queue for it")
	}
	if t.LineVersion > l.Version {
		// The buyer was told their turn from a line this coordinator has
		// not read yet (it does within Every): neither yes nor no.
		r.catchUp()
		return fmt.Errorf("%w: the waiting room changed a moment ago: try again", shardstock.ErrUnavailable)
	}
	_, until, admitted, passed := l.Turn(pos, t.JoinedAt, now)
	switch {
	case passed:
		return notAdmitted(fmt.Sprintf("your turn (place %d) passed%s", pos, at(until)))
	case !admitted:
		return notAdmitted(fmt.Sprintf("not your turn yet: place %d, now serving %d", pos, l.Serving(now)))
	}
	return nil
}

func at(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return " at " + t.UTC().Format(time.RFC3339)
}

func notAdmitted(msg string) error {
	return &shardstock.Error{Code: shardstock.ErrNotAdmitted.Code, Message: msg}
}

// Place is a buyer's view of their place (the body of QueuePath's answers).
// Status: "waiting", "admitted", "passed" (the turn went by unused),
// "held" (every unit is reserved by others; some may come back),
// "sold_out" (no unit left to wait for: none salable or reserved, every
// shard answering), "revoked", "lobby" (a draw's place, given at the
// start), or "not_joined".
type Place struct {
	Status        string    `json:"status"`
	Mode          string    `json:"mode"`
	Position      int64     `json:"position,omitempty"`
	Serving       int64     `json:"serving"`
	Ahead         int64     `json:"ahead,omitempty"`
	WaitSeconds   float64   `json:"wait_seconds,omitempty"`
	AdmittedUntil time.Time `json:"admitted_until,omitzero"`
	Unlikely      bool      `json:"unlikely,omitempty"` // more buyers ahead than units left can serve
	Difficulty    int       `json:"difficulty,omitempty"`
	// Challenge is what a join's proof of work hashes with (WorkInput),
	// told once the room is open; it changes every WorkSlot.
	Challenge string    `json:"challenge,omitempty"`
	OpensAt   time.Time `json:"opens_at,omitzero"`
	Token     string    `json:"token,omitempty"`
	// RetryAfter is when to look again (the Retry-After header).
	RetryAfter time.Duration `json:"-"`
}

// Join gives buyer a place in product's line (the same one again on a
// second join). work is the proof of work when the line asks for one.
func (r *Room) Join(ctx context.Context, product, buyer, work string) (Place, error) {
	l, ok := r.line(product)
	if !ok {
		return Place{}, noRoom(product)
	}
	if !r.clockKnown() {
		return Place{}, unavailable(errClockUnknown)
	}
	now := r.cfg.Now()
	if opens := l.SaleStarts().Add(-l.Lead); now.Before(opens) {
		return Place{}, &shardstock.Error{Code: shardstock.ErrQueueNotOpen.Code,
			Message: "the waiting room opens at " + opens.UTC().Format(time.RFC3339)}
	}
	if ch := challenge(r.signer.secret, product, now); !WorkOK(product, buyer, ch, work, l.Difficulty) &&
		!WorkOK(product, buyer, challenge(r.signer.secret, product, now.Add(-WorkSlot)), work, l.Difficulty) {
		return Place{}, &shardstock.Error{Code: shardstock.ErrWorkRequired.Code, Message: fmt.Sprintf(
			"send {\"work\": nonce} where SHA-256 of %q + nonce begins with %d zero bits (the challenge changes every minute: look at the line for the latest)",
			WorkInput(product, buyer, ch), l.Difficulty)}
	}
	if p, err := r.cfg.Products.Product(ctx, product); err != nil {
		return Place{}, err
	} else if p.Archived || (!p.EndsAt.IsZero() && !now.Before(p.EndsAt)) {
		// (A place after the end was admitted, and its purchase then
		// answered 403 ended.)
		return Place{}, shardstock.ErrEnded
	}
	if l.Mode == shardstock.QueueDraw && !l.Drawn && !now.Before(l.SaleStarts()) {
		// The start came and this room has not read the draw: read the
		// lines (drawing them, unless another coordinator did or the start
		// moved), so this join does not go into a lobby drawn already.
		var err error
		if l, err = r.fresh(ctx, product, l.Version+1); err != nil {
			return Place{}, err
		}
		if l.Mode == shardstock.QueueDraw && !l.Drawn && !now.Before(l.SaleStarts()) {
			if _, err := r.draw(ctx, product); err != nil {
				return Place{}, unavailable(err)
			}
		}
	}
	q, err := r.cfg.Store.JoinQueue(ctx, product, buyer, now)
	if err != nil {
		return Place{}, unavailable(err)
	}
	if l, err = r.fresh(ctx, product, q.LineVersion); err != nil {
		return Place{}, err
	}
	return r.place(l, product, buyer, q, now)
}

// Look tells buyer, holding token (or none), where they stand in
// product's line, with a fresh token when their place changed (drawn).
func (r *Room) Look(ctx context.Context, product, buyer, token string) (Place, error) {
	l, ok := r.line(product)
	if !ok {
		return Place{}, noRoom(product)
	}
	now := r.cfg.Now()
	if token == "" {
		p := Place{Status: "not_joined", Mode: string(l.Mode), Serving: l.Serving(now), Difficulty: l.Difficulty,
			OpensAt: l.SaleStarts().Add(-l.Lead), RetryAfter: time.Second}
		if l.Difficulty > 0 && !now.Before(p.OpensAt) {
			p.Challenge = challenge(r.signer.secret, product, now) // (only once the room is open)
		}
		return p, nil
	}
	t, err := r.signer.verify(token, product, buyer)
	if err != nil {
		return Place{}, notAdmitted(err.Error())
	}
	q := t.QueuePlace
	if q.Position == 0 && !l.Drawn && t.LineVersion <= l.Version && !r.revoked(product, buyer) {
		// In a lobby not drawn yet: nothing to read (a look was a SQL
		// read, and looks are many; issue 41, finding 3). A draw is seen
		// here within a refresh, long before its first turn (DrawGrace).
		return r.place(l, product, buyer, q, now)
	}
	if q.Position == 0 {
		p, found, err := r.cfg.Store.QueuePlace(ctx, product, buyer)
		if err != nil {
			return Place{}, unavailable(err)
		}
		if !found {
			return Place{}, notAdmitted("no place of yours in this line: join again")
		}
		q = p
	}
	if l, err = r.fresh(ctx, product, max(q.LineVersion, t.LineVersion)); err != nil {
		return Place{}, err
	}
	return r.place(l, product, buyer, q, now)
}

// place is buyer's Place q, with its token.
func (r *Room) place(l shardstock.QueueLine, product, buyer string, q shardstock.QueuePlace, now time.Time) (Place, error) {
	pos := q.Position
	q.LineVersion = max(q.LineVersion, l.Version)
	tok, err := r.signer.sign(product, buyer, ticket{QueuePlace: q, Mode: string(l.Mode)}, now)
	if err != nil {
		return Place{}, err
	}
	serving := l.Serving(now)
	p := Place{Mode: string(l.Mode), Position: pos, Serving: serving, Difficulty: l.Difficulty, Token: tok}
	waiting := max(l.Joined-serving, 0)
	pace := time.Duration(min(max(float64(waiting)/r.cfg.Looks, 1), 60) * float64(time.Second))
	switch {
	case r.revoked(product, buyer):
		p.Status, p.RetryAfter = "revoked", time.Hour
		return p, nil
	case pos == 0:
		p.Status, p.RetryAfter = "lobby", min(max(l.Starts().Sub(now), time.Second), pace)
		return p, nil
	}
	from, until, admitted, passed := l.Turn(pos, q.JoinedAt, now)
	switch {
	case admitted: // never told sold out: the purchase answers what the shards say
		p.Status, p.AdmittedUntil, p.RetryAfter = "admitted", until, time.Second
		return p, nil
	case passed:
		p.Status, p.RetryAfter = "passed", time.Hour
		return p, nil
	}
	p.Status = "waiting"
	// The buyers between the last admitted place and this one: place 1
	// while nobody is served has nobody ahead (it said 1).
	p.Ahead = max(pos-serving-1, 0)
	if !from.IsZero() {
		p.WaitSeconds = math.Ceil(from.Sub(now).Seconds())
		pace = min(pace, max(from.Sub(now), time.Second))
	}
	p.RetryAfter = pace
	if u, known := r.left(product); known {
		switch {
		case u.Salable == 0 && u.Locked == 0:
			p.Status = "sold_out"
		case u.Salable == 0:
			// Reserved, not sold: a lapse or a cancel brings a unit back
			// to the places next in line (invariant 7: never "sold out"
			// while it may not be).
			p.Status = "held"
		case float64(p.Ahead+1) > float64(u.Salable)*r.cfg.DropOut: // (those ahead and this buyer)
			p.Unlikely = true
		}
	}
	return p, nil
}

func (r *Room) left(product string) (Units, bool) {
	st := r.state.Load()
	if st == nil {
		return Units{}, false
	}
	n, ok := st.left[product]
	return n, ok
}

// clockKnown: Config.Known.
func (r *Room) clockKnown() bool { return r.cfg.Known == nil || r.cfg.Known() }

var errClockUnknown = errors.New("the sale's clock is not known yet (no shard has told this coordinator its time): try again in a moment")

func unavailable(err error) error {
	return fmt.Errorf("%w: waiting room: %w", shardstock.ErrUnavailable, err)
}

func noRoom(product string) error {
	return &shardstock.Error{Code: shardstock.ErrNotFound.Code, Message: "product " + product + " has no waiting room"}
}

// Define sets product's waiting room: a new line starts its clock at the
// sale's start (now, for a sale already open); a line defined again keeps
// its places and clock, and a new rate runs from now.
func (r *Room) Define(ctx context.Context, product string, d api.QueueDefinition) (Summary, error) {
	if err := check(d); err != nil {
		return Summary{}, err
	}
	p, err := r.cfg.Products.Product(ctx, product)
	if err != nil {
		return Summary{}, err
	}
	return r.change(ctx, product, true, func(l *shardstock.QueueLine, now time.Time) error {
		mode := shardstock.QueueMode(d.Mode)
		if l.Version > 0 && l.Mode != mode && l.Joined+l.Lobby > 0 {
			return shardstock.Conflict("the line has buyers: its mode cannot change")
		}
		if window := time.Duration(d.WindowSeconds) * time.Second; l.Version > 0 && window < l.Window && !now.Before(l.Starts()) {
			// Every turn is computed with the window: a shorter one would
			// end turns already told.
			return shardstock.Conflict(fmt.Sprintf("turns have come: window_seconds can grow, not shrink below %d", int64(l.Window/time.Second)))
		}
		l.Mode, l.Lead, l.Window, l.Difficulty = mode, time.Duration(d.LeadSeconds)*time.Second, time.Duration(d.WindowSeconds)*time.Second, d.Difficulty
		switch {
		case l.Version == 0:
			l.Rate, l.Clock = d.Rate, []shardstock.QueueSegment{{At: shardstock.LineStarts(mode, later(p.StartsAt, now)), Rate: d.Rate}}
			l.WindowVersion = p.WindowVersion
		case l.Rate != d.Rate:
			l.Rate = d.Rate
			if l.Running() > 0 {
				l.Append(later(now, l.Starts()), 0, d.Rate)
			}
		}
		return nil
	})
}

func check(d api.QueueDefinition) error {
	switch {
	case d.Mode != string(shardstock.QueueFIFO) && d.Mode != string(shardstock.QueueDraw):
		return shardstock.Invalid(`mode must be "fifo" or "draw"`)
	case !(d.Rate >= 0.001) || d.Rate > 1e6:
		return shardstock.Invalid("rate must be 0.001 to 1000000 places a second")
	case d.LeadSeconds < 0 || d.LeadSeconds > 7*24*3600:
		return shardstock.Invalid("lead_seconds must be 0 to 604800")
	case d.WindowSeconds < 1 || d.WindowSeconds > 24*3600:
		return shardstock.Invalid("window_seconds must be 1 to 86400")
	case d.Difficulty < 0 || d.Difficulty > MaxDifficulty:
		return shardstock.Invalid(fmt.Sprintf("difficulty must be 0 to %d", MaxDifficulty))
	}
	return nil
}

// Pause stops the number now serving; Resume runs it again at the rate.
func (r *Room) Pause(ctx context.Context, product string) (Summary, error) {
	return r.change(ctx, product, false, func(l *shardstock.QueueLine, now time.Time) error {
		if !l.Paused {
			l.Paused = true
			l.Append(later(now, l.Starts()), 0, 0)
		}
		return nil
	})
}

// Resume runs a paused line's clock again.
func (r *Room) Resume(ctx context.Context, product string) (Summary, error) {
	return r.change(ctx, product, false, func(l *shardstock.QueueLine, now time.Time) error {
		if l.Paused {
			l.Paused = false
			l.Append(later(now, l.Starts()), 0, l.Running())
		}
		return nil
	})
}

// Advance admits by more places at once.
func (r *Room) Advance(ctx context.Context, product string, by int64) (Summary, error) {
	if by < 1 || by > 1e9 {
		return Summary{}, shardstock.Invalid("by must be 1 to 1000000000")
	}
	return r.change(ctx, product, false, func(l *shardstock.QueueLine, now time.Time) error {
		if l.Held {
			// Places let in now would have nothing to buy, and their turns
			// would pass before a unit comes back.
			return shardstock.Conflict("no unit is left: the line waits for one to come back (a release or a stock add), and moves on by itself")
		}
		l.Append(later(now, l.Starts()), by, l.Running())
		return nil
	})
}

// Revoke makes buyer's place admit nobody, on every coordinator within a
// refresh.
func (r *Room) Revoke(ctx context.Context, product, buyer string) (Summary, error) {
	if !shardstock.ValidID(buyer) {
		return Summary{}, shardstock.Invalid("user must be 1-64 characters of [A-Za-z0-9_-]")
	}
	if _, ok := r.line(product); !ok {
		if err := r.Refresh(ctx); err != nil {
			return Summary{}, unavailable(err)
		}
		if _, ok := r.line(product); !ok {
			return Summary{}, noRoom(product)
		}
	}
	if err := r.cfg.Store.RevokeQueue(ctx, product, buyer); err != nil {
		return Summary{}, unavailable(err)
	}
	if err := r.Refresh(ctx); err != nil {
		return Summary{}, unavailable(err)
	}
	return r.Summary(ctx, product)
}

// change applies f to product's line as stored, again when another writer
// was first; create: a missing line is made (else ErrNotFound).
func (r *Room) change(ctx context.Context, product string, create bool, f func(l *shardstock.QueueLine, now time.Time) error) (Summary, error) {
	if !r.clockKnown() {
		return Summary{}, unavailable(errClockUnknown)
	}
	for range 10 {
		lines, err := r.cfg.Store.QueueLines(ctx)
		if err != nil {
			return Summary{}, unavailable(err)
		}
		l, ok := lines[product]
		if !ok && !create {
			return Summary{}, noRoom(product)
		}
		l.Product = product
		was := l.Mode
		if err := f(&l, r.cfg.Now()); err != nil {
			return Summary{}, err
		}
		save := r.cfg.Store.SaveQueueLine
		if l.Version > 0 && l.Mode != was { // the mode is the joins' too: none may slip in between
			save = r.cfg.Store.SaveQueueLineBeforeJoins
		}
		saved, err := save(ctx, l)
		if err != nil {
			return Summary{}, unavailable(err)
		}
		if saved {
			if err := r.Refresh(ctx); err != nil {
				return Summary{}, unavailable(err)
			}
			return r.Summary(ctx, product)
		}
	}
	return Summary{}, errors.New("waiting room: the line kept changing under this change")
}

// Summary is a line as operators see it (GET AdminQueuePath).
type Summary struct {
	Product       string    `json:"product"`
	Mode          string    `json:"mode"`
	Rate          float64   `json:"rate"`
	LeadSeconds   int64     `json:"lead_seconds"`
	WindowSeconds int64     `json:"window_seconds"`
	Difficulty    int       `json:"difficulty"`
	Paused        bool      `json:"paused"`
	Held          bool      `json:"held,omitempty"` // no unit left: the number waits for one to come back
	Starts        time.Time `json:"starts_at"`
	Joined        int64     `json:"joined"`
	Serving       int64     `json:"serving"`
	Waiting       int64     `json:"waiting"`
	Drawn         bool      `json:"drawn,omitempty"`
	Revoked       int       `json:"revoked"`
}

// Summary is product's line now.
func (r *Room) Summary(ctx context.Context, product string) (Summary, error) {
	l, ok := r.line(product)
	if !ok {
		return Summary{}, noRoom(product)
	}
	now := r.cfg.Now()
	s := summary(l, now)
	s.Revoked = len(r.state.Load().revoked[product])
	return s, nil
}

func summary(l shardstock.QueueLine, now time.Time) Summary {
	serving := l.Serving(now)
	return Summary{Product: l.Product, Mode: string(l.Mode), Rate: l.Rate, LeadSeconds: int64(l.Lead / time.Second),
		WindowSeconds: int64(l.Window / time.Second), Difficulty: l.Difficulty, Paused: l.Paused, Held: l.Held, Starts: l.SaleStarts(),
		Joined: l.Joined + l.Lobby, Serving: serving, Waiting: max(l.Joined-serving, 0) + l.Lobby, Drawn: l.Drawn}
}

// EdgeLines are the waiting rooms for an edge that checks places before
// the coordinators do (deploy/nginx/limiter.lua), one line each:
//
//	queue ID N         every place up to N may be admitted by now+ahead (the
//	                   edge's copy is up to a second or two old; the
//	                   coordinator checks exactly)
//	passed ID P W      a place up to P whose buyer joined W ms or more
//	                   before the edge's now has had its turn (PassedBefore)
//	revoked ID BUYER   BUYER's place admits nobody
func (r *Room) EdgeLines(now time.Time, ahead time.Duration) string {
	st := r.state.Load()
	if st == nil {
		return ""
	}
	var b strings.Builder
	for id, l := range st.lines {
		n := l.Serving(now)
		if !l.Paused && !l.Held { // a stopped idle line moves on at its rate when buyers reach it
			n += int64(math.Ceil(l.Rate * ahead.Seconds()))
		}
		fmt.Fprintf(&b, "queue %s %d\n", id, n)
		if p, w := PassedBefore(&l, now); p > 0 {
			fmt.Fprintf(&b, "passed %s %d %d\n", id, p, w.Milliseconds())
		}
		for buyer := range st.revoked[id] {
			fmt.Fprintf(&b, "revoked %s %s\n", id, buyer)
		}
	}
	return b.String()
}

// EdgeSkew is the clock difference between an edge and the sale's clock
// and the age of the edge's copy of the lines, together, that
// PassedBefore allows for: an edge whose copy is at most 2 s old (it keeps
// a passed line 2 s past its last fetch) and whose clock runs at most 3 s
// ahead never turns a buyer away before their turn is over.
const EdgeSkew = 5 * time.Second

// PassedBefore is the turns' end an edge may judge by itself: every place
// pos <= p whose buyer joined at j, with j + w <= the edge's now, had its
// turn by now (p is 0 when none can be said to have). w is the line's
// window and EdgeSkew.
//
// Why: a turn runs from max(TurnAt(pos), joined, a draw's DrawnAt +
// DrawGrace) for Window (QueueLine.Turn). Let cut = now - Window -
// EdgeSkew and p the lowest number served at any time from cut to now.
// Then the number stood at pos or above all along since cut, so pos's
// turn came by cut, and it is over once its buyer's own start (joined) is
// a Window past. A rebase back that the edge's copy has not seen yet (a
// second or two old) comes after now: its places were held by nobody then,
// so a buyer holding one now joined after now, and j + w <= the edge's now
// fails while the edge's clock and copy are within EdgeSkew. A place at or
// below Expired is passed unless taken after the clock's start, and then
// its turn starts when it was taken: j + w <= now covers both. A draw's
// places wait for DrawnAt + DrawGrace: none is said passed until that is
// before cut. (A window raised by an operator reaches the edge with its
// next copy, a second or so later.)
func PassedBefore(l *shardstock.QueueLine, now time.Time) (p int64, w time.Duration) {
	w = l.Window + EdgeSkew
	cut := now.Add(-w)
	if l.Mode == shardstock.QueueDraw && (l.DrawnAt.IsZero() || l.DrawnAt.Add(shardstock.DrawGrace).After(cut)) {
		return 0, w
	}
	p = l.Serving(cut)
	for _, s := range l.Clock {
		if s.At.After(cut) && !s.At.After(now) {
			p = min(p, s.Base) // (within a stretch the number only grows)
		}
	}
	return max(p, l.Expired), w
}

// Lines are every line's summary (metrics).
func (r *Room) Lines() []Summary {
	st := r.state.Load()
	if st == nil {
		return nil
	}
	now := r.cfg.Now()
	out := make([]Summary, 0, len(st.lines)) // never nil: an empty list is []
	for _, l := range st.lines {
		s := summary(l, now)
		s.Revoked = len(st.revoked[l.Product])
		out = append(out, s)
	}
	return out
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
