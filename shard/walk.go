package shard

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"strings"

	"github.com/hashicorp/go-multierror"

	"github.com/shardstock/shardstock"
)

// The walk: one purchase's decisions, apart from Redis. It sees the shards
// only through send (a stepFunc), one purchase step on shard i
// (purchase.lua), so the protocol is tested from tables of answers
// (walk_test.go) as well as on real redis-servers (shard_test.go).
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

// stepFunc runs one purchase step on shard i: the one seam between the
// protocol and Redis. Errors that prove the step was not sent are the ones
// notSent knows; any other leaves its outcome unknown.
type stepFunc func(ctx context.Context, i int, st step) (string, error)

// opResolve is the Q step (purchase.lua).
const opResolve = "Q"

// errNoRegister: the buyer's home answered "unknown" for the claim (it has
// no per-user limit register for the product); the caller rebuilds it.
var errNoRegister = errors.New("no per-user limit register at the buyer's home")

// maxResolves bounds the resolve-and-ask-again rounds on one shard within
// one walk; past it the shard is left in doubt.
const maxResolves = 2

// attempt is one purchase's walk over the shards.
type attempt struct {
	send           stepFunc
	product        string
	user, id       string
	asOf           string // unix ms the sale window is checked at; "": now
	n              int    // the shards the product lives on: 0..n-1
	home           int    // the buyer's home: the claim register
	first          int    // the shard reserved on first (the home, or a random pick)
	skip           uint64 // shards known empty: not asked, counted empty
	doubt          uint64 // shards in doubt: resolved first; on return, those still in doubt
	onFailover     func() // optional: told each move to another shard
	gens           map[int]string
	tried, emptied uint64 // shards asked to reserve; shards that answered empty
	empties        int    // shards that answered, or are known, empty
	claimed        bool   // the home recorded the claim
	uncertain      bool   // a claim step went unanswered, or a shard is in doubt: the claim stays
	final          bool   // the answer will not change on a retry (window closed, sold out)
	closedAt       int    // the shard that refused for its window, -1: none
	errs           *multierror.Error
}

// again resets what a walk found, for a second walk of the same attempt.
func (a *attempt) again() {
	a.tried, a.emptied, a.empties, a.errs = 0, 0, 0, nil
	a.final, a.closedAt = false, -1
}

// walk decides the purchase: the shard that holds the unit, or the error.
func (a *attempt) walk(ctx context.Context) (int, error) {
	for d := a.doubt; d != 0; d &= d - 1 {
		i := bits.TrailingZeros64(d)
		held, err := a.resolve(ctx, i)
		if err != nil {
			a.fail(i, fmt.Errorf("a former try's outcome here is still unknown: %w", err))
			return -1, a.inDoubt()
		}
		a.doubt &^= 1 << i
		if held {
			a.claimed = true
			return i, nil
		}
	}
	homeOp := opPurchase
	if a.first != a.home {
		homeOp = opClaim
	} else {
		a.tried |= 1 << a.home
	}
	status, err := a.call(ctx, a.home, homeOp)
	if status == "unknown" {
		return -1, errNoRegister
	}
	if err != nil {
		a.fail(a.home, fmt.Errorf("per-user limit register: %w", err))
		if a.doubt != 0 {
			return -1, a.inDoubt()
		}
		return -1, fmt.Errorf("%w: the buyer's home shard cannot vouch for the per-user limit: %w", shardstock.ErrUnavailable, a.errs.ErrorOrNil())
	}
	switch status {
	case "ok", "dup":
		a.claimed = true
		if homeOp == opPurchase {
			return a.home, nil
		}
	case "empty":
		a.claimed = true
		a.emptyAt(a.home)
	default:
		return -1, a.refused(a.home, status)
	}
	for j := 0; j < a.n; j++ {
		i := (a.first + j) % a.n
		if a.tried&(1<<i) != 0 {
			continue
		}
		if a.tried != 0 && a.onFailover != nil {
			a.onFailover()
		}
		if done, err := a.reserveOn(ctx, i); done {
			if err != nil {
				return -1, err
			}
			return i, nil
		}
		if a.doubt != 0 {
			return -1, a.inDoubt()
		}
	}
	if a.empties == a.n {
		a.final = true
		return -1, shardstock.ErrSoldOut
	}
	return -1, fmt.Errorf("%w: %w", shardstock.ErrUnavailable, a.errs.ErrorOrNil())
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
	status, err := a.call(ctx, i, opReserve)
	if err != nil {
		a.fail(i, err)
		return false, nil
	}
	switch status {
	case "ok", "dup":
		return true, nil
	case "empty", "unknown":
		// "unknown": the shard does not hold this catalog product — it lost
		// its data (its allocation is given up, see inventory.allocate) or
		// was never initialised. Either way it has no unit to sell, which is
		// an answer, not an outage.
		a.emptyAt(i)
		return false, nil
	}
	return true, a.refused(i, status)
}

// call runs step op on shard i and resolves an unknown outcome or a void
// answer of a P or R step (see above): its status is then the truth for
// this id on shard i. With an error, nothing more is known; if shard i is
// in doubt, its bit is set in a.doubt.
func (a *attempt) call(ctx context.Context, i int, op string) (string, error) {
	for round := 0; ; round++ {
		status, err := a.send(ctx, i, step{product: a.product, op: op, user: a.user, id: a.id, asOf: a.asOf, gen: a.gens[i]})
		unknown := err != nil && !notSent(err)
		if op != opPurchase && op != opReserve {
			a.uncertain = a.uncertain || unknown
			return status, err
		}
		if !unknown && status != "void" {
			return status, err
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
			return "ok", nil
		}
	}
}

// resolve runs a Q step on shard i: held is true when the id holds a unit
// there; otherwise the id is fenced there under a new generation, which
// the walk's next step on i carries.
func (a *attempt) resolve(ctx context.Context, i int) (held bool, err error) {
	status, err := a.send(ctx, i, step{product: a.product, op: opResolve, user: a.user, id: a.id})
	if err != nil {
		return false, err
	}
	if status == "held" {
		return true, nil
	}
	gen, ok := strings.CutPrefix(status, "void ")
	if !ok {
		return false, fmt.Errorf("unexpected resolve status %q", status)
	}
	if a.gens == nil {
		a.gens = make(map[int]string, 1)
	}
	a.gens[i] = gen
	return false, nil
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

func (a *attempt) emptyAt(i int) {
	a.emptied |= 1 << i
	a.empties++
}

// refused maps a step's refusal to the buyer's error.
func (a *attempt) refused(i int, status string) error {
	switch status {
	case "limit":
		return shardstock.ErrLimitReached
	case "not_started":
		a.final, a.closedAt = true, i
		return shardstock.ErrNotStarted
	case "ended":
		a.final, a.closedAt = true, i
		return shardstock.ErrEnded
	}
	a.fail(i, fmt.Errorf("unexpected purchase status %q", status))
	return fmt.Errorf("%w: %w", shardstock.ErrUnavailable, a.errs.ErrorOrNil())
}

func (a *attempt) fail(i int, err error) {
	a.errs = multierror.Append(a.errs, fmt.Errorf("shard %d: %w", i, err))
}
