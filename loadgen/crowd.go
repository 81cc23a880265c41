package loadgen

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/shardstock/shardstock"
	"github.com/shardstock/shardstock/client"
	"github.com/shardstock/shardstock/waitroom"
)

// loadgen --mode crowd: a crowd of buyers in front of a product's waiting
// room. Each joins (solving the line's proof of work), looks at its place
// as the server paces it, and buys once admitted, until it bought or
// learned that it will not (sold out, its turn passed, revoked). The report
// says how closely the line kept the order of joining, how many looks the
// waiting cost the coordinators, how soon the buyers left over learned the
// sale was over, and what a join cost the client's CPU.

// A buyer's outcomes: how its wait ended.
const (
	OutcomeBought    = "bought"
	OutcomeSoldOut   = "sold_out"      // a look said so, or the purchase answered 410
	OutcomeUnlikely  = "unlikely"      // left when told it was unlikely (--leave-unlikely)
	OutcomeLimit     = "limit_reached" // an earlier purchase whose answer was lost got the unit
	OutcomeQueued    = "queued"        // the purchase was spooled (202, a ticket)
	OutcomeWaiting   = "waiting"       // still in line when the run ended
	OutcomeNotJoined = "not_joined"
	OutcomeGaveUp    = "gave_up" // maxTries purchases or joins refused for a passing reason
)

// maxTries bounds a buyer's joins and its purchases.
const maxTries = 10

// crowdBuyer is one simulated buyer. One goroutine holds it at a time (its
// join, then the worker each of its looks went to, handed over through the
// schedule's lock and channel); the report reads it once all have stopped.
type crowdBuyer struct {
	user     string
	batch    int    // the join batch it was sent in: the join order, tied within a batch
	token    string // its place, as last answered
	position int64  // 0: not known yet (in a draw's lobby)
	joined   bool
	lobby    bool          // joined a draw's lobby: placed by the draw
	approach bool          // its next look comes sooner than the Retry-After
	tries    int           // purchases sent
	solve    time.Duration // its proof of work's solve (wall time)
	unlikely bool          // was told it was unlikely to get a unit
	buySent  time.Time     // when the purchase that got a unit was sent
	bought   time.Time     // when its 200 came
	soldOut  time.Time     // when it was told the product sold out
	outcome  string
}

// crowdRun is one crowd mode run.
type crowdRun struct {
	c          config
	cl         *client.Client
	buyers     []crowdBuyer
	mode       string         // the line's, from its public face
	difficulty atomic.Int64   // the line's proof of work, as last learned
	pays       sync.WaitGroup // payments of --pay on their way
	challenge  atomic.Value   // (string) what the work hashes with, as last learned (told once the room opens)
	learnMu    sync.Mutex     // one join at a time reads a stale challenge again
	learnedAt  atomic.Int64   // when the challenge was learned (unix ns)
	bar        *progressbar.ProgressBar

	mu   sync.Mutex    // guards next
	next dueLooks      // buyers waiting for their next look
	kick chan struct{} // (capacity 1) next changed, or every buyer finished
	left atomic.Int64  // buyers not finished
	t    crowdTally
}

// crowdTally is what the crowd's requests saw.
type crowdTally struct {
	mu                  sync.Mutex // guards everything below
	requests, transport int64
	joins               int64
	firstJoin, lastJoin time.Time // the first join sent, the last answered
	looks, approach     int64
	firstLook, lastLook time.Time
	lookSeconds         map[int64]int // looks sent in each second of the Unix clock
	joinLat, lookLat    []time.Duration
	buyLat              []time.Duration
	statuses            map[string]int64 // the purchases' answers
}

// dueLooks is a min-heap of buyers by when they look next.
type dueLooks []dueLook

type dueLook struct {
	at    time.Time
	buyer int
}

func (h dueLooks) Len() int           { return len(h) }
func (h dueLooks) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h dueLooks) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *dueLooks) Push(x any)        { *h = append(*h, x.(dueLook)) }
func (h *dueLooks) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// runCrowd runs the crowd against c.product's waiting room until every
// buyer finished or c.duration passed. An error means the run could not
// start (no waiting room, no answer).
func runCrowd(ctx context.Context, c config, stderr io.Writer) (*Report, error) {
	ctx, cancel := context.WithTimeout(ctx, c.duration)
	defer cancel()
	conns := c.conns + c.joinBatch
	cl := &client.Client{URL: c.url, Token: c.token, BuyerToken: c.buyerToken, HTTP: &http.Client{Timeout: 10 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns}}}
	r := &crowdRun{c: c, cl: cl, buyers: make([]crowdBuyer, c.buyers), kick: make(chan struct{}, 1),
		t: crowdTally{lookSeconds: map[int64]int{}, statuses: map[string]int64{}}}
	for i := range r.buyers {
		r.buyers[i].user = fmt.Sprintf("lg-%d", i)
	}
	if err := r.open(ctx); err != nil {
		return nil, err
	}
	r.left.Store(int64(c.buyers))
	r.bar = newBar(c, stderr, int64(c.buyers), "buyers done (crowd)", "buyers")
	start := time.Now()
	work := make(chan int)
	var wg sync.WaitGroup
	for range c.conns {
		wg.Go(func() {
			for i := range work {
				r.turn(ctx, i)
			}
		})
	}
	wg.Go(func() { r.joinAll(ctx) })
	r.dispatch(ctx, work)
	wg.Wait()
	r.bar.Finish()
	waiting := false
	for i := range r.buyers {
		if r.buyers[i].outcome == "" {
			r.buyers[i].outcome = OutcomeWaiting
			waiting = true
		}
	}
	r.pays.Wait()
	rep := r.report(ctx, time.Since(start))
	if waiting && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		rep.Crowd.Cut = c.duration.Seconds()
	}
	return rep, nil
}

// open reads the line's public face (its mode and proof of work) and waits
// for it to open.
func (r *crowdRun) open(ctx context.Context) error {
	face, err := r.learn(ctx)
	var refused *client.Error
	switch {
	case errors.As(err, &refused) && refused.Status == http.StatusNotFound:
		return fmt.Errorf("product %s has no waiting room: crowd mode needs one (PUT /admin/v1/products/%s/queue)", r.c.product, r.c.product)
	case err != nil:
		return fmt.Errorf("the waiting room of %s: %w", r.c.product, err)
	}
	r.mode = face.Mode
	if !sleepUntil(ctx, face.OpensAt) {
		return fmt.Errorf("the waiting room of %s opens at %s, after --duration", r.c.product, face.OpensAt.Format(time.RFC3339))
	}
	if face.Difficulty > 0 && face.Challenge == "" {
		r.learn(ctx) // the challenge, told now that the room is open
	}
	return nil
}

// learn looks at the line without a place: its public face, whose
// difficulty the joins then solve.
func (r *crowdRun) learn(ctx context.Context) (client.Place, error) {
	face, err := r.cl.LookQueue(context.WithoutCancel(ctx), r.c.product, r.buyers[0].user, "")
	r.t.count(err)
	if err == nil {
		r.difficulty.Store(int64(face.Difficulty))
		r.challenge.Store(face.Challenge)
		r.learnedAt.Store(time.Now().UnixNano())
	}
	return face, err
}

// fresh reads the challenge again when it is older than 45 s (it changes
// every minute, and the last one is still taken): a solve begun on it then
// is still good when its join arrives. One join reads it; the others wait
// for that read and use it.
func (r *crowdRun) fresh(ctx context.Context) {
	stale := func() bool {
		return r.difficulty.Load() > 0 && time.Since(time.Unix(0, r.learnedAt.Load())) > 45*time.Second
	}
	if !stale() {
		return
	}
	r.learnMu.Lock()
	defer r.learnMu.Unlock()
	if stale() {
		r.learn(ctx)
	}
}

// dispatch hands each buyer to a worker when its look is due, until every
// buyer finished or ctx is done; it closes work.
func (r *crowdRun) dispatch(ctx context.Context, work chan<- int) {
	defer close(work)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		r.mu.Lock()
		if len(r.next) == 0 && r.left.Load() == 0 {
			r.mu.Unlock()
			return
		}
		wait := time.Hour
		if len(r.next) > 0 {
			wait = time.Until(r.next[0].at)
		}
		if wait <= 0 {
			i := heap.Pop(&r.next).(dueLook).buyer
			r.mu.Unlock()
			select {
			case work <- i:
			case <-ctx.Done():
				return
			}
			continue
		}
		r.mu.Unlock()
		timer.Reset(wait)
		select {
		case <-timer.C:
		case <-r.kick:
		case <-ctx.Done():
			return
		}
	}
}

// schedule makes buyer i look again after after.
func (r *crowdRun) schedule(i int, after time.Duration) {
	r.mu.Lock()
	heap.Push(&r.next, dueLook{at: time.Now().Add(after), buyer: i})
	r.mu.Unlock()
	r.wake()
}

func (r *crowdRun) wake() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// nextMove is what a buyer does after an answer: look again after after, or
// leave the line with outcome.
type nextMove struct {
	after   time.Duration
	outcome string
}

func lookIn(d time.Duration) nextMove { return nextMove{after: d} }
func leave(outcome string) nextMove   { return nextMove{outcome: outcome} }

// settle schedules buyer i's next look, or finishes it.
func (r *crowdRun) settle(i int, n nextMove) {
	if n.outcome == "" {
		r.schedule(i, n.after)
		return
	}
	r.buyers[i].outcome = n.outcome
	r.bar.Add(1)
	if r.left.Add(-1) == 0 {
		r.wake()
	}
}

// joinAll joins the buyers in batches of c.joinBatch sent at once, a batch
// every joinBatch/joinRate seconds (0: no pause) and never before the last
// one was answered, so that the batches' order is the order the server saw.
func (r *crowdRun) joinAll(ctx context.Context) {
	var every time.Duration
	if r.c.joinRate > 0 {
		every = time.Duration(float64(r.c.joinBatch) / r.c.joinRate * float64(time.Second))
	}
	tick := time.Now()
	for first, batch := 0, 0; first < len(r.buyers); first, batch = first+r.c.joinBatch, batch+1 {
		if !sleepUntil(ctx, tick) {
			for i := first; i < len(r.buyers); i++ {
				r.settle(i, leave(OutcomeNotJoined))
			}
			return
		}
		var wg sync.WaitGroup
		for i := first; i < min(first+r.c.joinBatch, len(r.buyers)); i++ {
			wg.Go(func() { r.join(ctx, i, batch) })
		}
		wg.Wait()
		tick = tick.Add(every)
		if now := time.Now(); tick.Before(now) { // behind: on at once, but no burst to catch up
			tick = now
		}
	}
}

// join joins buyer i, solving the line's proof of work when it asks for
// one, and schedules its first look.
func (r *crowdRun) join(ctx context.Context, i, batch int) {
	b := &r.buyers[i]
	b.batch = batch
	for range maxTries {
		r.fresh(ctx)
		work := r.solve(b)
		sent := time.Now()
		p, err := r.cl.JoinQueue(context.WithoutCancel(ctx), r.c.product, b.user, work)
		r.t.join(sent, err)
		if err == nil {
			b.joined, b.lobby = true, p.Status == "lobby"
			r.settle(i, r.follow(b, p))
			return
		}
		var refused *client.Error
		switch {
		case errors.As(err, &refused) && refused.Code == shardstock.ErrWorkRequired.Code:
			r.learn(ctx) // the line asks for (more) work than last known, or has a new challenge
			continue
		case errors.As(err, &refused) && !passing(refused) && refused.Code != shardstock.ErrQueueNotOpen.Code:
			r.settle(i, leave("refused:"+refused.Code))
			return
		}
		if !sleepUntil(ctx, time.Now().Add(time.Second)) {
			break
		}
	}
	r.settle(i, leave(OutcomeNotJoined))
}

// passing reports whether a refusal may pass (429, 5xx): try again later.
func passing(e *client.Error) bool {
	return e.Status == http.StatusTooManyRequests || e.Status >= 500
}

// solve is the nonce of b's join when the line asks for work, timed.
func (r *crowdRun) solve(b *crowdBuyer) string {
	d := int(r.difficulty.Load())
	if d <= 0 {
		return ""
	}
	t0 := time.Now()
	ch, _ := r.challenge.Load().(string)
	nonce := waitroom.Solve(r.c.product, b.user, ch, d)
	b.solve = time.Since(t0)
	return nonce
}

// turn is buyer i's look, and its purchase when the look admits it.
func (r *crowdRun) turn(ctx context.Context, i int) {
	b := &r.buyers[i]
	ctx = context.WithoutCancel(ctx) // a request started runs to its answer (the client's timeout bounds it)
	sent := time.Now()
	p, err := r.cl.LookQueue(ctx, r.c.product, b.user, b.token)
	r.t.look(sent, b.approach, err)
	switch {
	case err != nil:
		r.settle(i, afterRefusal(err))
	case p.Status == "admitted":
		r.follow(b, p)
		r.settle(i, r.buy(ctx, b))
	default:
		r.settle(i, r.follow(b, p))
	}
}

// afterRefusal is what a buyer does when a look got no place: look again
// in a second when no answer came or the refusal may pass; else give up.
func afterRefusal(err error) nextMove {
	var refused *client.Error
	if errors.As(err, &refused) && !passing(refused) {
		return leave("refused:" + refused.Code)
	}
	return lookIn(time.Second)
}

// follow takes in p, buyer b's place as answered, and says when b looks
// again, or the outcome that ends its wait (admitted: look at once).
func (r *crowdRun) follow(b *crowdBuyer, p client.Place) nextMove {
	if p.Token != "" {
		b.token = p.Token
	}
	if p.Position > 0 {
		b.position = p.Position
	}
	b.unlikely = b.unlikely || p.Unlikely
	switch p.Status {
	case "admitted":
		return lookIn(0)
	case "sold_out":
		b.soldOut = time.Now()
		return leave(OutcomeSoldOut)
	case "passed", "revoked":
		return leave(p.Status)
	case "waiting", "lobby", "held": // (held: every unit reserved; some may come back)
		if p.Unlikely && r.c.leaveUnlikely {
			return leave(OutcomeUnlikely)
		}
		return lookIn(r.pace(b, p))
	}
	return leave("refused:" + p.Status)
}

// pace is when b looks again after p: at the Retry-After (whole seconds,
// 1 at least), or, with --approach, sooner when the server's wait (whole
// seconds, rounded up) says the turn may come first: a second before the
// turn by that wait, then every --approach in its last second. So a buyer
// buys within about --approach of its turn, and the order of purchases
// measures the line, not the resolution of Retry-After.
func (r *crowdRun) pace(b *crowdBuyer, p client.Place) time.Duration {
	after := p.RetryAfter
	if after <= 0 {
		after = time.Second
	}
	b.approach = false
	if r.c.approach <= 0 || p.Status != "waiting" || p.WaitSeconds <= 0 {
		return after
	}
	soon := r.c.approach
	if p.WaitSeconds > 1 {
		soon = time.Duration(p.WaitSeconds-1) * time.Second
	}
	if soon < after {
		b.approach = true
		return soon
	}
	return after
}

// pay pays order id of user, again while the order is not written yet
// (409) or the server cannot take it (5xx), for up to 15 s.
func (r *crowdRun) pay(ctx context.Context, id, user string) {
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		err := r.cl.PayOrder(ctx, id, user, true)
		var refused *client.Error
		if err == nil || !errors.As(err, &refused) || (refused.Status != http.StatusConflict && refused.Status < 500) || time.Now().After(deadline) {
			if err != nil {
				r.t.count(err)
			}
			return
		}
	}
}

// buy sends b's purchase with its place: the outcome, or when to look
// again (the look then says what became of the place).
func (r *crowdRun) buy(ctx context.Context, b *crowdBuyer) nextMove {
	b.tries++
	sent := time.Now()
	a, err := r.cl.PurchaseInLine(ctx, r.c.product, b.user, b.token)
	r.t.purchase(sent, a.Status, err)
	switch {
	case err == nil && a.Status == http.StatusOK:
		b.buySent, b.bought = sent, time.Now()
		if r.c.pay && a.OrderID != "" {
			// A unit reserved and never paid comes back: the line cannot
			// tell those still waiting that it sold out until it is paid.
			r.pays.Go(func() { r.pay(context.WithoutCancel(ctx), a.OrderID, b.user) })
		}
		return leave(OutcomeBought)
	case err == nil && a.Status == http.StatusGone:
		b.soldOut = time.Now()
		return leave(OutcomeSoldOut)
	case err == nil && a.Status == http.StatusAccepted:
		return leave(OutcomeQueued)
	case err == nil && a.Status == http.StatusConflict:
		return leave(OutcomeLimit)
	case err == nil && (a.Code == shardstock.ErrRevoked.Code || a.Code == shardstock.ErrEnded.Code):
		return leave(a.Code)
	case b.tries >= maxTries:
		return leave(OutcomeGaveUp)
	case err == nil && a.Status == http.StatusTooManyRequests:
		return lookIn(max(a.RetryAfter, time.Second))
	case err == nil && a.Status == http.StatusForbidden && a.Code == shardstock.ErrNotAdmitted.Code && r.c.approach > 0:
		return lookIn(r.c.approach) // at the edge of the turn: the look tells
	case err != nil, a.Status == http.StatusForbidden, a.Status >= 500:
		// No answer (whether a unit was reserved is unknown: the next
		// purchase finds out, 409), paused, not started, an outage.
		return lookIn(time.Second)
	}
	return leave(fmt.Sprintf("refused:%d", a.Status))
}

func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// count counts a request.
func (t *crowdTally) count(err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.countLocked(err)
}

func (t *crowdTally) countLocked(err error) {
	t.requests++
	var refused *client.Error
	if err != nil && !errors.As(err, &refused) {
		t.transport++
	}
}

func (t *crowdTally) join(sent time.Time, err error) {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.countLocked(err)
	t.joins++
	t.joinLat = append(t.joinLat, now.Sub(sent))
	if t.firstJoin.IsZero() {
		t.firstJoin = sent
	}
	t.lastJoin = now
}

func (t *crowdTally) look(sent time.Time, approach bool, err error) {
	took := time.Since(sent)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.countLocked(err)
	t.looks++
	if approach {
		t.approach++
	}
	t.lookLat = append(t.lookLat, took)
	t.lookSeconds[sent.Unix()]++
	if t.firstLook.IsZero() {
		t.firstLook = sent
	}
	t.lastLook = sent
}

func (t *crowdTally) purchase(sent time.Time, status int, err error) {
	took := time.Since(sent)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.countLocked(err)
	if err != nil {
		return
	}
	t.buyLat = append(t.buyLat, took)
	t.statuses[fmt.Sprint(status)]++
}
