package shard

import (
	"context"
	"errors"
	"fmt"
	"math/bits"

	"github.com/hashicorp/go-multierror"

	"github.com/shardstock/shardstock"
)

// The walk: one purchase's decisions, apart from Redis. It sees the shards
// only through send (a stepFunc), one purchase step on shard i
// (purchase.lua), and returns a decision: the shard that holds the unit or
// the buyer's answer, and what Set.reserve is to do about it (give the
// claim back, mark shards empty, rebuild the home's register, write a
// shard's sale window and walk again). So the whole protocol is tested
// from tables of answers and decisions (walk_test.go), as well as on real
// redis-servers (shard_test.go).
//
// Unknown outcomes. A P or R step that was sent and not answered (its
// deadline passed, its connection broke) may have run, or may still run
// later: a slow shard can execute a script after its caller gave up on it.
// Failing over at that point could hold the id on two shards, and telling
// the buyer "sold out", or giving the claim back, could be a lie. So an
// unknown outcome is resolved before anything else is decided: a Q step
// asks that shard whether the id holds a unit there ("held": the step ran,
// and that is the buyer's answer) and, when not, fences the id there with
// a void marker of a new generation, which every step of the id sent
// before the Q finds and leaves alone (purchase.lua). Nothing sent earlier
// can take a unit after that, and the walk goes on: it asks the same shard
// again for the new generation, and fails over as usual from there. When
// the Q goes unanswered too, the shard stays in doubt: the walk stops with
// an *shardstock.InDoubt (ErrUnavailable) naming it, the buyer's claim
// stays, and the purchase's next try (the spool's replay) resolves it
// first. So:
//   - an id is held on at most one shard: no step goes to another shard
//     while one is in doubt;
//   - a buyer is told "reserved" for a unit that is held for them, and is
//     told "sold out" or gets their claim back only when every shard
//     answered for this id.
//
// A C or U step (the claim alone) that goes unanswered changes no unit:
// the claim is kept (uncertain) and given back only when the order ends,
// which errs on the side of the per-user limit.

// stepFunc runs one purchase step on shard i and returns the script's
// answer: the one seam between the protocol and Redis. Errors that prove
// the step was not sent are the ones notSent knows; any other leaves its
// outcome unknown.
type stepFunc func(ctx context.Context, i int, st step) (string, error)

// errNoRegister: the buyer's home has no per-user limit register for the
// product (it lost its data); the decision asks for it to be rebuilt.
var errNoRegister = errors.New("no per-user limit register at the buyer's home")

// maxResolves bounds the resolve-and-ask-again rounds on one shard within
// one walk; past it the shard is left in doubt.
const maxResolves = 2

// decision is what a walk decided, for Set.reserve to carry out (the shape
// of raft's Ready): the walk only sends steps; the rest is the caller's.
type decision struct {
	shard int   // the shard that holds the unit; -1: none
	err   error // with shard -1, the buyer's answer (an *shardstock.InDoubt names the shards in doubt)
	// giveBack: give the claim back at the home. It was recorded, no step
	// is in doubt, and the purchase is over: it will not be tried again,
	// or a retry would not change its answer (sold out, window closed).
	giveBack bool
	emptied  uint64 // shards that answered empty: mark them (emptyMarks.settle)
	unmark   uint64 // shards probed (their marks re-armed for this attempt) that did not answer empty: clear the marks
	// rebuild: the home has no register for the product. err stands unless
	// the caller rebuilds it and hands the outcome to rebuilt.
	rebuild bool
	// window: the shard (its bit) that refused for its copy of the sale
	// window, 0: none. err stands unless that copy was behind the catalog:
	// then the caller writes the catalog's and walks again.
	window uint64
}

// attempt is one purchase's walk over the shards.
type attempt struct {
	send           stepFunc
	product        string
	user, id       string
	asOf           string // unix ms the sale window is checked at; "": now
	retry          bool   // ErrUnavailable is not the end: the purchase is tried again with the same id
	n              int    // the shards the product lives on: 0..n-1
	home           int    // the buyer's home: the claim register
	first          int    // the shard reserved on first (the home, or a random pick)
	skip           uint64 // shards known empty: not asked, counted empty
	probe          uint64 // shards whose empty marks ran out: asked, and unmarked unless they answer empty
	doubt          uint64 // shards in doubt: resolved first; on return, those still in doubt
	onFailover     func() // optional: told each move to another shard
	gens           map[int]string
	tried, emptied uint64 // shards asked to reserve; shards that answered empty
	empties        int    // shards that answered, or are known, empty
	claimed        bool   // the home recorded the claim
	uncertain      bool   // a claim step went unanswered, or a shard is in doubt: the claim stays
	final          bool   // the answer will not change on a retry (window closed, sold out)
	closed         uint64 // the shard (its bit) that refused for its window
	errs           *multierror.Error
}

// walk decides the purchase. A second walk of the same attempt (after its
// decision asked for a register rebuild or a window written) starts afresh
// but for the claim and the doubts, which stand.
func (a *attempt) walk(ctx context.Context) decision {
	a.tried, a.emptied, a.empties, a.errs = 0, 0, 0, nil
	a.final, a.closed = false, 0
	if d, done := a.resolveDoubts(ctx); done {
		return d
	}
	if d, done := a.atHome(ctx); done {
		return d
	}
	return a.failOver(ctx)
}

// rebuilt decides after the caller tried to rebuild the home's register:
// without it (err) the per-user limit cannot be vouched for; with it the
// purchase is walked again, and a home still without one is not rebuilt
// twice.
func (a *attempt) rebuilt(ctx context.Context, err error) decision {
	if err != nil {
		return a.decide(-1, a.homeFailed(fmt.Errorf("rebuild: %w", err)))
	}
	d := a.walk(ctx)
	d.rebuild = false
	return d
}

// decide is the decision of a walk that ends with the unit at shard i, or
// with the answer err.
func (a *attempt) decide(i int, err error) decision {
	d := decision{shard: i, err: err, emptied: a.emptied, unmark: a.probe &^ a.emptied, window: a.closed}
	if err != nil {
		d.shard = -1
		d.giveBack = a.claimed && !a.uncertain && (!a.retry || a.final)
	}
	return d
}

// resolveDoubts resolves the shards a former try left in doubt before
// anything else; done when one holds the id, or cannot tell yet.
func (a *attempt) resolveDoubts(ctx context.Context) (d decision, done bool) {
	for left := a.doubt; left != 0; left &= left - 1 {
		i := bits.TrailingZeros64(left)
		held, err := a.resolve(ctx, i)
		if err != nil {
			a.fail(i, fmt.Errorf("a former try's outcome here is still unknown: %w", err))
			return a.decide(-1, a.inDoubt()), true
		}
		a.doubt &^= 1 << i
		if held {
			a.claimed = true
			return a.decide(i, nil), true
		}
	}
	return d, false
}

// atHome records the claim at the buyer's home: with a P step, which
// reserves there too, or with a C step when the purchase reserves first
// elsewhere. done unless the claim is recorded and the walk goes on.
func (a *attempt) atHome(ctx context.Context) (d decision, done bool) {
	op := opPurchase
	if a.first != a.home {
		op = opClaim
	} else {
		a.tried |= 1 << a.home
	}
	st, err := a.call(ctx, a.home, op)
	switch {
	case st == statusNoRegister:
		d = a.decide(-1, a.homeFailed(errNoRegister))
		d.rebuild = true
		return d, true
	case err != nil:
		err = a.homeFailed(err)
		if a.doubt != 0 {
			err = a.inDoubt()
		}
		return a.decide(-1, err), true
	case st == statusOK || st == statusDup:
		a.claimed = true
		if op == opPurchase {
			return a.decide(a.home, nil), true
		}
		return d, false
	case st == statusEmpty:
		a.claimed = true
		a.emptyAt(a.home)
		return d, false
	}
	return a.decide(-1, a.refused(a.home, st)), true
}

// failOver asks the shards not tried yet in turn, from the first, to
// reserve for the claim held at the home.
func (a *attempt) failOver(ctx context.Context) decision {
	for j := 0; j < a.n; j++ {
		i := (a.first + j) % a.n
		if a.tried&(1<<i) != 0 {
			continue
		}
		if a.tried != 0 && a.onFailover != nil {
			a.onFailover()
		}
		if done, err := a.reserveOn(ctx, i); done {
			return a.decide(i, err)
		}
		if a.doubt != 0 {
			return a.decide(-1, a.inDoubt())
		}
	}
	if a.empties == a.n {
		a.final = true
		return a.decide(-1, shardstock.ErrSoldOut)
	}
	return a.decide(-1, fmt.Errorf("%w: %w", shardstock.ErrUnavailable, a.errs.ErrorOrNil()))
}

// reserveOn asks shard i to reserve for the claim held at the home. done
// is true when the attempt is over: reserved (err nil) or refused for a
// reason no other shard would change.
func (a *attempt) reserveOn(ctx context.Context, i int) (done bool, err error) {
	a.tried |= 1 << i
	if a.skip&(1<<i) != 0 {
		a.empties++
		return false, nil
	}
	st, err := a.call(ctx, i, opReserve)
	if err != nil {
		a.fail(i, err)
		return false, nil
	}
	switch st {
	case statusOK, statusDup:
		return true, nil
	case statusEmpty, statusNotHere:
		// Not here: the shard does not hold this catalog product — it lost
		// its data (its allocation is given up, see inventory.allocate) or
		// was never initialised. Either way it has no unit to sell, which is
		// an answer, not an outage.
		a.emptyAt(i)
		return false, nil
	}
	return true, a.refused(i, st)
}

// call runs step op on shard i and resolves an unknown outcome or a void
// answer of a P or R step (see above): its status is then the truth for
// this id on shard i. With an error, nothing more is known; if shard i is
// in doubt, its bit is set in a.doubt.
func (a *attempt) call(ctx context.Context, i int, op string) (status, error) {
	for round := 0; ; round++ {
		r, err := a.step(ctx, i, step{product: a.product, op: op, user: a.user, id: a.id, asOf: a.asOf, gen: a.gens[i]})
		unknown := err != nil && !notSent(err)
		if op != opPurchase && op != opReserve {
			a.uncertain = a.uncertain || unknown
			return r.status, err
		}
		if !unknown && r.status != statusVoid {
			return r.status, err
		}
		if err == nil {
			err = errors.New("fenced under another generation")
		}
		if round == maxResolves {
			a.inDoubtAt(i)
			return "", fmt.Errorf("outcome unknown after %d resolves: %w", round, err)
		}
		held, rerr := a.resolve(ctx, i)
		if rerr != nil {
			a.inDoubtAt(i)
			return "", fmt.Errorf("outcome unknown (%w), and asking the shard failed: %w", err, rerr)
		}
		if held {
			return statusOK, nil
		}
	}
}

// resolve runs a Q step on shard i: held is true when the id holds a unit
// there; otherwise the id is fenced there under a new generation, which
// the walk's next step on i carries.
func (a *attempt) resolve(ctx context.Context, i int) (held bool, err error) {
	r, err := a.step(ctx, i, step{product: a.product, op: opResolve, user: a.user, id: a.id})
	switch {
	case err != nil:
		return false, err
	case r.status == statusHeld:
		return true, nil
	case r.status != statusVoid || r.gen == "":
		return false, fmt.Errorf("unexpected resolve status %q", r.status)
	}
	if a.gens == nil {
		a.gens = make(map[int]string, 1)
	}
	a.gens[i] = r.gen
	return false, nil
}

// step sends st to shard i and reads the answer.
func (a *attempt) step(ctx context.Context, i int, st step) (reply, error) {
	s, err := a.send(ctx, i, st)
	return readReply(st.op, s), err
}

func (a *attempt) inDoubtAt(i int) {
	a.doubt |= 1 << i
	a.uncertain = true
}

// inDoubt is the error of a walk stopped by shards in doubt.
func (a *attempt) inDoubt() error {
	a.uncertain = true
	return &shardstock.InDoubt{Shards: a.doubt,
		Err: fmt.Errorf("%w: a step's outcome is unknown and could not be resolved yet: %w", shardstock.ErrUnavailable, a.errs.ErrorOrNil())}
}

// homeFailed is the answer when the buyer's home cannot vouch for the
// per-user limit (err says why).
func (a *attempt) homeFailed(err error) error {
	a.fail(a.home, fmt.Errorf("per-user limit register: %w", err))
	return fmt.Errorf("%w: the buyer's home shard cannot vouch for the per-user limit: %w", shardstock.ErrUnavailable, a.errs.ErrorOrNil())
}

func (a *attempt) emptyAt(i int) {
	a.emptied |= 1 << i
	a.empties++
}

// refused maps a step's refusal to the buyer's error.
func (a *attempt) refused(i int, st status) error {
	switch st {
	case statusLimit:
		return shardstock.ErrLimitReached
	case statusNotStarted:
		a.final, a.closed = true, 1<<i
		return shardstock.ErrNotStarted
	case statusEnded:
		a.final, a.closed = true, 1<<i
		return shardstock.ErrEnded
	}
	a.fail(i, fmt.Errorf("unexpected purchase status %q", st))
	return fmt.Errorf("%w: %w", shardstock.ErrUnavailable, a.errs.ErrorOrNil())
}

func (a *attempt) fail(i int, err error) {
	a.errs = multierror.Append(a.errs, fmt.Errorf("shard %d: %w", i, err))
}
