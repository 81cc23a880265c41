package shard

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/hashicorp/go-multierror"

	"github.com/shardstock/shardstock"
)

// KnownSoldOut reports, without a Redis call, that every shard answered
// empty for product within the last EmptyTTL.
func (s *Set) KnownSoldOut(product string) bool {
	return s.empty.known(product, len(s.shards), s.cfg.Now())
}

// Reserve holds one unit of product p for user under reservation id on one
// shard and returns that shard's index. The hold record and its outbox entry
// are written by the same script, so a reserved unit cannot lose its order.
//
// It takes the buyer's claim first (claim.go), then tries the shards from
// the start Config.Start picks, skipping shards known empty for p and shards
// Health reports down; when the start is the buyer's last claim register,
// the last claim and the first reserve are one call. Errors: ErrSoldOut
// when every shard answered empty (or was known empty); ErrLimitReached;
// ErrNotStarted / ErrEnded; otherwise ErrUnavailable wrapping every shard's
// error (go-multierror) — an outage is never reported as sold out.
func (s *Set) Reserve(ctx context.Context, p *shardstock.Product, user, id string) (int, error) {
	return s.ReserveAsOf(ctx, p, user, id, time.Time{})
}

// ReserveAsOf is Reserve with the sale window checked at asOf instead of
// now (zero: now): a purchase taken in time and replayed from the spool
// after the window closed is still served. The hold and its outbox entry
// carry the real time.
func (s *Set) ReserveAsOf(ctx context.Context, p *shardstock.Product, user, id string, asOf time.Time) (int, error) {
	now := s.cfg.Now()
	skip, soldOut := s.empty.plan(p.ID, len(s.shards), now)
	if soldOut {
		return -1, shardstock.ErrSoldOut
	}
	a := attempt{set: s, k: keysFor(p.ID), product: p.ID, user: user, id: id, nowMS: now.UnixMilli(), skip: skip}
	if !asOf.IsZero() {
		a.asOf = strconv.FormatInt(asOf.UnixMilli(), 10)
	}
	idx, err := a.run(ctx)
	if err != nil && !a.uncertain {
		s.unclaim(ctx, a.k, user, id, a.claims.held)
	}
	return idx, err
}

// attempt is one purchase's walk over the shards.
type attempt struct {
	set               *Set
	k                 productKeys
	product, user, id string
	nowMS             int64
	asOf              string // unix ms the sale window is checked at; "": now
	skip              uint64 // shards known empty
	tried             uint64 // shards asked to reserve
	soldOut           int    // shards that answered, or are known, empty
	uncertain         bool   // some shard may have run a reserve before failing
	claims            claims
	errs              *multierror.Error
}

func (a *attempt) run(ctx context.Context) (int, error) {
	n := len(a.set.shards)
	regs := a.set.registers(a.user)
	last := regs[len(regs)-1]
	start := last.Index
	if a.set.cfg.Start != StartRegister {
		start = a.set.cfg.Rand(n)
	}
	fused := start == last.Index
	for _, sh := range regs[:len(regs)-1] {
		if err := a.claimOn(ctx, sh); err != nil {
			return -1, err
		}
	}
	if !fused {
		if err := a.claimOn(ctx, last); err != nil {
			return -1, err
		}
	} else if done, err := a.claimReserve(ctx, last); done {
		a.mergeBack(ctx)
		if err != nil {
			return -1, err
		}
		return last.Index, nil
	}
	if err := a.claims.granted(); err != nil {
		return -1, err
	}
	a.mergeBack(ctx)
	for j := 0; j < n; j++ {
		sh := a.set.shards[(start+j)%n]
		if a.tried&(1<<sh.Index) != 0 {
			continue
		}
		if a.tried != 0 && a.set.cfg.OnFailover != nil {
			a.set.cfg.OnFailover()
		}
		done, err := a.try(ctx, sh)
		if done && err != nil {
			return -1, err
		}
		if done {
			return sh.Index, nil
		}
	}
	if a.soldOut == n {
		return -1, shardstock.ErrSoldOut
	}
	return -1, fmt.Errorf("%w: %w", shardstock.ErrUnavailable, a.errs.ErrorOrNil())
}

// claimReserve asks the last register for the claim and, if it grants it,
// to reserve (claim_reserve.lua). done is as for try; a refused claim is
// done with ErrLimitReached.
func (a *attempt) claimReserve(ctx context.Context, sh *Shard) (done bool, err error) {
	a.tried |= 1 << sh.Index
	if !a.set.up(sh.Index) {
		a.claims.down(sh)
		a.fail(sh, errShardDown)
		return false, nil
	}
	v, err := a.set.run(ctx, sh, a.set.scripts.ClaimReserve,
		[]string{a.k.stock, a.k.claims, a.k.holds, a.k.buyers, a.k.outbox},
		claimArgs([]any{a.user, a.id, a.nowMS, sh.Index, a.product, a.asOf}, a.claims.known)...)
	var r []string
	if err == nil {
		r, err = replyStrings(v, 2)
	}
	if err != nil {
		a.uncertain = a.uncertain || !notSent(err)
		a.claims.note(sh, "", nil, err)
		a.fail(sh, err)
		return false, nil
	}
	if err := a.claims.note(sh, r[0], r[2:], nil); err != nil {
		return true, err
	}
	if r[0] != "ok" {
		return a.outcome(sh, "unknown") // the product is not on this shard
	}
	return a.outcome(sh, r[1])
}

// try asks one shard to reserve. done is true when the attempt is over:
// reserved (err nil) or refused for a reason no other shard would change.
func (a *attempt) try(ctx context.Context, sh *Shard) (done bool, err error) {
	a.tried |= 1 << sh.Index
	if a.skip&(1<<sh.Index) != 0 {
		a.soldOut++
		return false, nil
	}
	if !a.set.up(sh.Index) {
		a.fail(sh, errShardDown)
		return false, nil
	}
	v, err := a.set.run(ctx, sh, a.set.scripts.Reserve,
		[]string{a.k.stock, a.k.holds, a.k.buyers, a.k.outbox},
		a.id, a.user, a.nowMS, sh.Index, a.product, a.asOf)
	if err != nil {
		a.uncertain = a.uncertain || !notSent(err)
		a.fail(sh, err)
		return false, nil
	}
	return a.outcome(sh, fmt.Sprint(v))
}

func (a *attempt) outcome(sh *Shard, status string) (bool, error) {
	switch status {
	case "ok", "duplicate":
		if a.skip != 0 {
			a.set.empty.unmark(a.product, sh.Index)
		}
		return true, nil
	case "sold_out", "unknown":
		// "unknown": the shard does not hold this catalog product — it lost
		// its data (its allocation is given up, see inventory.allocate) or
		// was never initialised. Either way it has no unit to sell, which is
		// an answer, not an outage.
		a.set.empty.mark(a.product, sh.Index, len(a.set.shards), a.set.cfg.Now())
		a.soldOut++
		return false, nil
	case "limit":
		return true, shardstock.ErrLimitReached
	case "not_started":
		return true, shardstock.ErrNotStarted
	case "ended":
		return true, shardstock.ErrEnded
	}
	a.fail(sh, fmt.Errorf("product not initialised here (%q)", status))
	return false, nil
}

func (a *attempt) fail(sh *Shard, err error) {
	a.errs = multierror.Append(a.errs, fmt.Errorf("shard %d (%s): reserve: %w", sh.Index, sh.Addr, err))
}
