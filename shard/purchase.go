package shard

import (
	"context"
	"fmt"
	"hash/fnv"
	"strconv"
	"time"

	"github.com/hashicorp/go-multierror"

	"github.com/shardstock/shardstock"
)

// The purchase protocol: one script execution on one shard per purchase in
// the common case, and a per-user limit that holds across shards.
//
// Every buyer u has one home shard, h(u) = fnv32a(u) mod N. The claims hash
// of a product on h(u) is u's per-user limit register for that product: it
// holds the reservation ids of u's attempts that may have a unit (claims).
// A purchase starts at h(u) with one step, P (purchase.lua): record the
// claim and, when h(u) has a salable unit, reserve it — hold record and
// outbox entry — in the same atomic script. Buyers are spread over the
// shards by the hash as evenly as random picks would spread them, and a
// purchase costs one script execution on one shard, which concurrent
// purchases bound for that shard share (batch.go). Only when h(u) has no
// unit left does the purchase fail over: R steps (reserve only) on the
// other shards in turn, skipping shards known empty or down; when all of
// them are empty, a U step at h(u) gives the claim back and the answer is
// ErrSoldOut. (With Config.Start = StartRandom the first reserve goes to a
// random shard instead: a C step, claim only, at h(u), then R steps from
// that shard on; two executions per purchase.)
//
// Why the limit holds (invariant 4). Let L be u's limit.
//  1. A unit is held for u only by a step that ran after u's claim for the
//     same reservation id was recorded at h(u): P records the claim and
//     reserves in one script; R is sent only after P or C at h(u) answered
//     that the claim is recorded.
//  2. h(u) records a new claim only while it holds fewer than L claims of u,
//     atomically (one script, one shard).
//  3. A claim is removed only when its id has no unit that counts: by its
//     attempt when every shard answered empty or the window closed, and no
//     step of it is in doubt; by the order service once the order is
//     cancelled or failed (final: never a sale again; its release is on its
//     way to the unit's shard, and the order table's seq is freed with it);
//     by Abandon, after checking that no shard holds the id.
//
// So u's units that are held or sold, leaving aside those of final
// cancelled orders on their way back, never outnumber u's claims at h(u),
// which never exceed L. Only h(u) decides for u: there is no second
// register that could fall out of step, so shards failing one after
// another cannot let a buyer past the limit. The price is that while h(u)
// cannot answer, u's purchases are not served — they are ErrUnavailable
// (the buyer gets a spool ticket, replayed in order when h(u) answers) —
// while the other buyers, (N-1)/N of them, buy as before. A shard that
// lost its data lost its registers too: purchases of its buyers stay
// unavailable until the register is rebuilt from the holds on the other
// shards and the order table (register.go). Behind this, the order
// table's unique (product, user, seq) key stays a last guard.
//
// A machine crash of h(u) can lose the last second of its writes, claims
// included, while the units they claimed sit on other shards: the restart
// fence (resync.go) keeps h(u) out of every purchase until its registers
// are repaired from the other shards' holds and the order table.

// Start is a policy for the first shard a purchase reserves on.
type Start int

const (
	// StartHome reserves first at the buyer's home, where the claim is
	// taken: one script execution per purchase (the default).
	StartHome Start = iota
	// StartRandom reserves first at a shard picked uniformly at random:
	// the claim at the home, then the reserve there, two executions (one
	// when the pick is the home).
	StartRandom
)

// ParseStart reads a Start policy: "home" (also "register", its name in
// 0.6.0) or "random".
func ParseStart(s string) (Start, error) {
	switch s {
	case "home", "register":
		return StartHome, nil
	case "random":
		return StartRandom, nil
	}
	return 0, fmt.Errorf("unknown start policy %q (want home or random)", s)
}

// Home is the index of user's home shard for a product that lives on every
// shard: where the user's purchases start and the user's per-user limit
// register is.
func (s *Set) Home(user string) int { return s.home(user, len(s.shards)).Index }

// home is user's home among the first n shards.
func (s *Set) home(user string, n int) *Shard {
	h := fnv.New32a()
	h.Write([]byte(user))
	return s.shards[h.Sum32()%uint32(n)]
}

// KnownSoldOut reports, without a Redis call, that every shard of p
// answered empty within the last EmptyTTL.
func (s *Set) KnownSoldOut(p *shardstock.Product) bool {
	return s.empty.known(p.ID, p.Shards(len(s.shards)), s.cfg.Now())
}

// shardsOf is how many shards p lives on, or ErrUnavailable when this
// coordinator has fewer (it was started with a shorter SHARDSTOCK_SHARDS).
func (s *Set) shardsOf(p *shardstock.Product) (int, error) {
	n := p.Shards(len(s.shards))
	if n > len(s.shards) {
		return 0, fmt.Errorf("%w: product %s lives on %d shards, this coordinator has %d", shardstock.ErrUnavailable, p.ID, n, len(s.shards))
	}
	return n, nil
}

// Reserve holds one unit of product p for user under reservation id and
// returns the shard that holds it. The hold record and its outbox entry
// are written by the same script, so a reserved unit cannot lose its order.
// Errors: ErrSoldOut when every shard answered empty (or was known empty);
// ErrLimitReached; ErrNotStarted / ErrEnded; otherwise ErrUnavailable
// wrapping every shard's error (go-multierror) — an outage is never
// reported as sold out. On ErrUnavailable the buyer's claim is given back
// when no step of the attempt is in doubt.
func (s *Set) Reserve(ctx context.Context, p *shardstock.Product, user, id string) (int, error) {
	return s.reserve(ctx, p, user, id, time.Time{}, false)
}

// ReserveRetryable is Reserve for a purchase that will be tried again with
// the same reservation id when it ends ErrUnavailable (the disk spool): its
// claim then stays for the retry, which finds it recorded. A purchase that
// will not be tried again after all must be Abandoned. The sale window is
// checked at asOf (zero: now): a purchase taken in time and replayed after
// the window closed is still served; the hold carries the real time.
func (s *Set) ReserveRetryable(ctx context.Context, p *shardstock.Product, user, id string, asOf time.Time) (int, error) {
	return s.reserve(ctx, p, user, id, asOf, true)
}

func (s *Set) reserve(ctx context.Context, p *shardstock.Product, user, id string, asOf time.Time, keep bool) (int, error) {
	n, err := s.shardsOf(p)
	if err != nil {
		return -1, err
	}
	skip, soldOut := s.empty.plan(p.ID, n, s.cfg.Now())
	if soldOut {
		return -1, shardstock.ErrSoldOut
	}
	a := attempt{set: s, p: p, n: n, user: user, id: id, skip: skip}
	if !asOf.IsZero() {
		a.asOf = strconv.FormatInt(asOf.UnixMilli(), 10)
	}
	idx, err := a.walk(ctx)
	if err != nil && a.claimed && !a.uncertain && (!keep || a.final) {
		s.unclaim(ctx, p, user, id)
	}
	return idx, err
}

// attempt is one purchase's walk over the shards.
type attempt struct {
	set      *Set
	p        *shardstock.Product
	n        int // the shards p lives on: 0..n-1
	user, id string
	asOf     string // unix ms the sale window is checked at; "": now
	skip     uint64 // shards known empty
	tried    uint64 // shards asked to reserve
	empties  int    // shards that answered, or are known, empty
	claimed  bool   // the home recorded the claim
	// uncertain: a step may have run on a shard that did not answer, so
	// the attempt may hold a unit there; its claim must stay.
	uncertain bool
	final     bool // the answer will not change on a retry (window closed)
	errs      *multierror.Error
}

func (a *attempt) walk(ctx context.Context) (int, error) {
	n := a.n
	home := a.set.home(a.user, n)
	first, op := home, opPurchase
	if a.set.cfg.Start == StartRandom {
		if first = a.set.shards[a.set.cfg.Rand(n)]; first != home {
			op = opClaim
		}
	}
	if done, idx, err := a.atHome(ctx, home, op); done {
		return idx, err
	}
	for j := 0; j < n; j++ {
		sh := a.set.shards[(first.Index+j)%n]
		if a.tried&(1<<sh.Index) != 0 {
			continue
		}
		if a.tried != 0 && a.set.cfg.OnFailover != nil {
			a.set.cfg.OnFailover()
		}
		if done, err := a.reserveOn(ctx, sh); done {
			if err != nil {
				return -1, err
			}
			return sh.Index, nil
		}
	}
	if a.empties == n {
		a.final = true
		return -1, shardstock.ErrSoldOut
	}
	return -1, fmt.Errorf("%w: %w", shardstock.ErrUnavailable, a.errs.ErrorOrNil())
}

// atHome runs the first step at the buyer's home: the claim, and with op P
// the reserve. done is true when the attempt is over.
func (a *attempt) atHome(ctx context.Context, home *Shard, op string) (done bool, idx int, err error) {
	if op == opPurchase {
		a.tried |= 1 << home.Index
	}
	status, err := a.step(ctx, home, op)
	if status == "unknown" {
		if err = a.set.rebuildRegister(ctx, a.p, home); err == nil {
			status, err = a.step(ctx, home, op)
		}
		if err == nil && status == "unknown" {
			err = errRegisterLost
		}
	}
	if err != nil {
		a.fail(home, fmt.Errorf("per-user limit register: %w", err))
		return true, -1, fmt.Errorf("%w: the buyer's home shard cannot vouch for the per-user limit: %w", shardstock.ErrUnavailable, a.errs.ErrorOrNil())
	}
	switch status {
	case "ok", "dup":
		a.claimed = true
		if op == opPurchase {
			a.reserved(home)
			return true, home.Index, nil
		}
		return false, -1, nil
	case "empty":
		a.claimed = true
		a.emptyAt(home)
		return false, -1, nil
	}
	return true, -1, a.refused(home, status)
}

// reserveOn asks one shard to reserve for the claim held at the home.
// done is true when the attempt is over: reserved (err nil) or refused
// for a reason no other shard would change.
func (a *attempt) reserveOn(ctx context.Context, sh *Shard) (done bool, err error) {
	a.tried |= 1 << sh.Index
	if a.skip&(1<<sh.Index) != 0 {
		a.empties++
		return false, nil
	}
	status, err := a.step(ctx, sh, opReserve)
	if err != nil {
		a.fail(sh, err)
		return false, nil
	}
	switch status {
	case "ok", "dup":
		a.reserved(sh)
		return true, nil
	case "empty", "unknown":
		// "unknown": the shard does not hold this catalog product — it lost
		// its data (its allocation is given up, see inventory.allocate) or
		// was never initialised. Either way it has no unit to sell, which is
		// an answer, not an outage.
		a.emptyAt(sh)
		return false, nil
	}
	return true, a.refused(sh, status)
}

// step runs one purchase step on sh unless Health says sh is down.
func (a *attempt) step(ctx context.Context, sh *Shard, op string) (string, error) {
	if !a.set.up(sh.Index) {
		return "", errShardDown
	}
	status, err := a.set.runStep(ctx, sh, step{product: a.p.ID, op: op, user: a.user, id: a.id, asOf: a.asOf})
	if err != nil && !notSent(err) {
		a.uncertain = true
	}
	return status, err
}

func (a *attempt) reserved(sh *Shard) {
	if a.skip != 0 {
		a.set.empty.unmark(a.p.ID, sh.Index)
	}
}

func (a *attempt) emptyAt(sh *Shard) {
	a.set.empty.mark(a.p.ID, sh.Index, a.n, a.set.cfg.Now())
	a.empties++
}

// refused maps a step's refusal to the buyer's error.
func (a *attempt) refused(sh *Shard, status string) error {
	switch status {
	case "limit":
		return shardstock.ErrLimitReached
	case "not_started":
		a.final = true
		return shardstock.ErrNotStarted
	case "ended":
		a.final = true
		return shardstock.ErrEnded
	}
	a.fail(sh, fmt.Errorf("unexpected purchase status %q", status))
	return fmt.Errorf("%w: %w", shardstock.ErrUnavailable, a.errs.ErrorOrNil())
}

func (a *attempt) fail(sh *Shard, err error) {
	a.errs = multierror.Append(a.errs, fmt.Errorf("shard %d (%s): %w", sh.Index, sh.Addr, err))
}

// runStep runs one purchase step on sh through its batcher under the
// per-call deadline and reports the outcome to Health.
func (s *Set) runStep(ctx context.Context, sh *Shard, st step) (string, error) {
	if sh.fence.closed.Load() {
		s.observe(sh.Index, errFenced)
		return "", errFenced
	}
	status, err := sh.steps.run(ctx, st)
	s.observe(sh.Index, err)
	return status, err
}
