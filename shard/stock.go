package shard

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/shardstock/shardstock"
)

// Init allocates product on shard i, once. It returns created = true when
// it wrote the allocation, false when the same definition was there
// already, and shardstock.ErrInitConflict when another one is.
func (s *Stock) Init(ctx context.Context, i int, product string, a shardstock.Allocation) (created bool, err error) {
	sh := s.shards[i]
	k := keysFor(product)
	known := "0"
	if a.Initialised {
		known = "1"
	}
	v, err := s.runScript(ctx, sh, s.scripts.Init, []string{k.stock, k.claims},
		a.Alloc, a.Limit, a.StartsMS, a.EndsMS, a.Definition, a.Epoch, known)
	if err != nil {
		return false, fmt.Errorf("shard %d: init: %w", i, err)
	}
	switch v {
	case "conflict":
		return false, fmt.Errorf("shard %d: %w", i, shardstock.ErrInitConflict)
	case "lost":
		return false, fmt.Errorf("shard %d: %w", i, shardstock.ErrShardLost)
	case "created":
		s.empty.forget(product)
		created = true
	}
	if err := s.call(ctx, sh, func(ctx context.Context) error {
		return sh.Client.SAdd(ctx, productsKey, product).Err()
	}); err != nil {
		return created, fmt.Errorf("shard %d: register product: %w", i, err)
	}
	return created, nil
}

// Counters reads product's counters on shard i.
func (s *Stock) Counters(ctx context.Context, i int, product string) (shardstock.Counters, error) {
	var c shardstock.Counters
	err := s.call(ctx, s.shards[i], func(ctx context.Context) error {
		v, err := s.shards[i].Client.HMGet(ctx, keysFor(product).stock, "alloc", "salable", "locked", "sold").Result()
		if err != nil {
			return err
		}
		c, err = parseCounters(v)
		return err
	})
	if err != nil {
		return c, fmt.Errorf("shard %d: counters: %w", i, err)
	}
	return c, nil
}

// parseCounters reads an HMGET of alloc, salable, locked and sold.
func parseCounters(v []any) (shardstock.Counters, error) {
	var c shardstock.Counters
	if v[0] == nil {
		return c, nil
	}
	c.Known = true
	dst := []*int64{&c.Alloc, &c.Salable, &c.Locked, &c.Sold}
	for j, x := range v {
		n, err := strconv.ParseInt(fmt.Sprint(x), 10, 64)
		if err != nil {
			return c, fmt.Errorf("field %d: %w", j, err)
		}
		*dst[j] = n
	}
	return c, nil
}

func holdResult(v any, wrongState error) (bool, error) {
	switch v {
	case "ok":
		return true, nil
	case "already":
		return false, nil
	case "unknown":
		return false, shardstock.ErrUnknownHold
	case "released", "sold":
		return false, wrongState
	}
	return false, fmt.Errorf("unexpected script reply %v", v)
}

// Ping checks that shard i answers.
func (s *pool) Ping(ctx context.Context, i int) error {
	sh := s.shards[i]
	return s.call(ctx, sh, func(ctx context.Context) error { return sh.Client.Ping(ctx).Err() })
}

// call runs f against sh under the per-call deadline and reports the
// outcome to Health.
func (s *pool) call(ctx context.Context, sh *Shard, f func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	err := f(ctx)
	s.observe(sh.Index, err)
	return err
}

// TransferOut takes up to units salable units of product off shard i for
// transfer id (to shard to) and returns how many it took; a repeat returns
// the first answer. Errors: shardstock.ErrNotOnShard, transport errors.
func (s *Stock) TransferOut(ctx context.Context, i int, product, id string, units int64, to int) (int64, error) {
	return s.transferOut(ctx, i, product, id, units, to, "")
}

// ReplayTransferOut is TransferOut for a transfer SQL says moved exactly
// units off shard i (a resync replaying what a restarted shard lost): it
// takes exactly that many, or, when the shard has fewer salable, none and
// shardstock.ErrShortOfUnits. A shard that kept the transfer answers its record.
func (s *Stock) ReplayTransferOut(ctx context.Context, i int, product, id string, units int64, to int) (int64, error) {
	return s.transferOut(ctx, i, product, id, units, to, "exact")
}

func (s *pool) transferOut(ctx context.Context, i int, product, id string, units int64, to int, mode string) (int64, error) {
	k := keysFor(product)
	v, err := s.runScript(ctx, s.shards[i], s.scripts.TransferOut, []string{k.stock, k.transfers}, id, units, to, mode)
	if err != nil {
		return 0, fmt.Errorf("shard %d: transfer out: %w", i, err)
	}
	switch n, _ := v.(int64); {
	case n == -2:
		return 0, fmt.Errorf("shard %d: transfer %s of %d units: %w", i, id, units, shardstock.ErrShortOfUnits)
	case n < 0:
		return 0, fmt.Errorf("shard %d: %w", i, shardstock.ErrNotOnShard)
	default:
		return n, nil
	}
}

// TransferIn adds transfer id's units of product to shard i, once.
func (s *Stock) TransferIn(ctx context.Context, i int, product, id string, units int64, from int) error {
	k := keysFor(product)
	v, err := s.runScript(ctx, s.shards[i], s.scripts.TransferIn, []string{k.stock, k.transfers}, id, units, from)
	if err != nil {
		return fmt.Errorf("shard %d: transfer in: %w", i, err)
	}
	if n, _ := v.(int64); n < 0 {
		return fmt.Errorf("shard %d: %w", i, shardstock.ErrNotOnShard)
	}
	s.empty.forget(product)
	return nil
}

// SetWindow writes p's sale window (StartsAt, EndsAt, at WindowVersion) to
// shard i, where the scripts judge purchases by it; a zero time is no
// bound. changed is false when the shard had that window already, or a
// newer version of it (lua/window.lua). Errors: shardstock.ErrNotOnShard, transport
// errors.
func (s *Stock) SetWindow(ctx context.Context, i int, p *shardstock.Product) (changed bool, err error) {
	return s.setWindow(ctx, i, p)
}

// setWindow is SetWindow, for the purchase path too (windowBehind).
func (s *pool) setWindow(ctx context.Context, i int, p *shardstock.Product) (changed bool, err error) {
	v, err := s.runScript(ctx, s.shards[i], s.scripts.Window, []string{keysFor(p.ID).stock},
		shardstock.UnixMS(p.StartsAt), shardstock.UnixMS(p.EndsAt), p.WindowVersion)
	if err != nil {
		return false, fmt.Errorf("shard %d: window: %w", i, err)
	}
	n, _ := v.(int64)
	if n == 0 {
		return false, fmt.Errorf("shard %d: %w", i, shardstock.ErrNotOnShard)
	}
	return n == 1, nil
}

// DeleteProduct removes every key of product from shard i (its archive):
// first from the shard's product list, so no consumer starts reading its
// outbox again, then the keys themselves with UNLINK, which frees a large
// hash (a million holds) in Redis's background thread instead of blocking
// the shard while it does. A repeat changes nothing.
func (s *Stock) DeleteProduct(ctx context.Context, i int, product string) error {
	sh := s.shards[i]
	k := keysFor(product)
	err := s.call(ctx, sh, func(ctx context.Context) error {
		if err := sh.Client.SRem(ctx, productsKey, product).Err(); err != nil {
			return err
		}
		return sh.Client.Unlink(ctx, k.stock, k.holds, k.claims, k.outbox, k.transfers).Err()
	})
	if err != nil {
		return fmt.Errorf("shard %d: delete %s: %w", i, product, err)
	}
	s.empty.forget(product)
	return nil
}

// Time is shard i's clock (TIME): the clock the scripts judge sale windows by.
func (s *Set) Time(ctx context.Context, i int) (time.Time, error) {
	var t time.Time
	// A fenced shard answers its clock too (TIME reads nothing it could
	// have lost): a coordinator starts with every shard fenced until its
	// run is checked, and a clock measured only after that served its first
	// purchases on its own clock, off the shards' by its skew.
	err := s.call(shardstock.ResyncContext(ctx), s.shards[i], func(ctx context.Context) error {
		var err error
		t, err = s.shards[i].Client.Time(ctx).Result()
		return err
	})
	return t, err
}

// budgetKey is the order-creation budget every coordinator shares.
const budgetKey = "ss:order-budget"

// TakeBudget takes up to want tokens of the cluster's order-creation
// budget (rate per second, burst) and returns how many it got. The bucket
// lives on the first shard that answers, in index order: while shard 0 is
// down the next one holds it (for that while, a coordinator that still
// reaches shard 0 may take from a second bucket: the budget is at most
// doubled, never lost). Errors: no shard answered.
func (s *Set) TakeBudget(ctx context.Context, rate float64, burst, want int) (int, error) {
	var errs error
	for _, sh := range s.shards {
		v, err := s.runScript(ctx, sh, s.scripts.Budget, []string{budgetKey}, rate, burst, want)
		if err != nil {
			errs = errors.Join(errs, fmt.Errorf("shard %d: budget: %w", sh.Index, err))
			continue
		}
		n, _ := v.(int64)
		return int(n), nil
	}
	return 0, errs
}
