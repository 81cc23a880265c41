package shard

import (
	"context"
	"fmt"

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
// It takes the buyer's claim first (claim.go), then tries the shards from a
// random start, skipping shards known empty for p and shards Health reports
// down. Errors: ErrSoldOut when every shard answered empty (or was known
// empty); ErrLimitReached; ErrNotStarted / ErrEnded; otherwise ErrUnavailable
// wrapping every shard's error (go-multierror) — an outage is never
// reported as sold out.
func (s *Set) Reserve(ctx context.Context, p *shardstock.Product, user, id string) (int, error) {
	now := s.cfg.Now()
	skip, soldOut := s.empty.plan(p.ID, len(s.shards), now)
	if soldOut {
		return -1, shardstock.ErrSoldOut
	}
	k := keysFor(p.ID)
	regs, err := s.claim(ctx, k, user, id)
	if err != nil {
		return -1, err
	}
	a := attempt{set: s, k: k, product: p.ID, user: user, id: id, nowMS: now.UnixMilli(), skip: skip}
	idx, err := a.run(ctx)
	if err != nil && !a.uncertain {
		s.unclaim(ctx, k, user, id, regs)
	}
	return idx, err
}

// attempt is one purchase's walk over the shards.
type attempt struct {
	set               *Set
	k                 productKeys
	product, user, id string
	nowMS             int64
	skip              uint64 // shards known empty
	soldOut           int    // shards that answered, or are known, empty
	uncertain         bool   // some shard may have run the script before failing
	errs              *multierror.Error
}

func (a *attempt) run(ctx context.Context) (int, error) {
	n := len(a.set.shards)
	start := a.set.cfg.Rand(n)
	for j := 0; j < n; j++ {
		sh := a.set.shards[(start+j)%n]
		if j > 0 && a.set.cfg.OnFailover != nil {
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

// try asks one shard. done is true when the attempt is over: reserved
// (err nil) or refused for a reason no other shard would change.
func (a *attempt) try(ctx context.Context, sh *Shard) (done bool, err error) {
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
		a.id, a.user, a.nowMS, sh.Index, a.product)
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
