package shard

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/hashicorp/go-multierror"
	"github.com/redis/go-redis/v9"

	"github.com/shardstock/shardstock"
)

// FindHold looks for hold id among products on every shard at once (one
// pipelined HGET per product and shard). It returns the product, the
// buyer and the shard of the first hold found; found = false with a nil
// error only when every shard answered without it.
func (s *Holds) FindHold(ctx context.Context, products []string, id string) (product, user string, shard int, found bool, err error) {
	type hit struct {
		product, user string
		shard         int
	}
	var (
		mu   sync.Mutex // guards hits and errs
		hits []hit
		errs *multierror.Error
		wg   sync.WaitGroup
	)
	for _, sh := range s.shards {
		wg.Go(func() {
			p, u, ok, err := s.findOn(ctx, sh, products, id)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				errs = multierror.Append(errs, fmt.Errorf("shard %d: find hold: %w", sh.Index, err))
			case ok:
				hits = append(hits, hit{p, u, sh.Index})
			}
		})
	}
	wg.Wait()
	if len(hits) > 0 {
		return hits[0].product, hits[0].user, hits[0].shard, true, nil
	}
	return "", "", -1, false, errs.ErrorOrNil()
}

func (s *pool) findOn(ctx context.Context, sh *Shard, products []string, id string) (product, user string, found bool, err error) {
	if len(products) == 0 {
		return "", "", false, nil
	}
	cmds := make([]*redis.StringCmd, len(products))
	err = s.call(ctx, sh, func(ctx context.Context) error {
		_, err := sh.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, prod := range products {
				cmds[i] = p.HGet(ctx, keysFor(prod).holds, id)
			}
			return nil
		})
		if errors.Is(err, redis.Nil) {
			return nil
		}
		return err
	})
	if err != nil {
		return "", "", false, err
	}
	for i, c := range cmds {
		if v, err := c.Result(); err == nil {
			if f := strings.Fields(v); len(f) >= 2 && f[0] != "V" { // V: a void marker (walk.go), no hold
				return products[i], f[1], true, nil
			}
		}
	}
	return "", "", false, nil
}

// Confirm moves hold id of product on shard i from locked to sold. It
// returns changed = false when it was sold already (a repeat),
// shardstock.ErrHoldReleased when it was released, shardstock.ErrUnknownHold when there is none.
func (s *Holds) Confirm(ctx context.Context, i int, product, id string) (changed bool, err error) {
	k := keysFor(product)
	v, err := s.runScript(ctx, s.shards[i], s.scripts.Confirm, []string{k.stock, k.holds}, id)
	if err != nil {
		return false, fmt.Errorf("shard %d: confirm: %w", i, err)
	}
	return holdResult(v, shardstock.ErrHoldReleased)
}

// Release moves hold id of product on shard i from locked back to
// salable. It returns changed = false when it was released already,
// shardstock.ErrHoldSold when it was sold, shardstock.ErrUnknownHold when there is none.
func (s *Holds) Release(ctx context.Context, i int, product, id string) (changed bool, err error) {
	k := keysFor(product)
	v, err := s.runScript(ctx, s.shards[i], s.scripts.Release, []string{k.stock, k.holds}, id)
	if err != nil {
		return false, fmt.Errorf("shard %d: release: %w", i, err)
	}
	changed, err = holdResult(v, shardstock.ErrHoldSold)
	if changed {
		s.empty.forget(product)
	}
	return changed, err
}

// RestoreHold puts back on shard i the hold of a live order (paid: sold)
// that the shard lost; restored is false when the hold was there.
func (s *Holds) RestoreHold(ctx context.Context, i int, o shardstock.Order, atMS int64) (restored bool, err error) {
	k := keysFor(o.ProductID)
	state := "L"
	if o.Status == shardstock.StatusPaid {
		state = "S"
	}
	v, err := s.runScript(ctx, s.shards[i], s.scripts.RestoreHold, []string{k.stock, k.holds}, o.ID, o.UserID, atMS, state)
	if err != nil {
		return false, fmt.Errorf("shard %d: restore hold %s: %w", i, o.ID, err)
	}
	switch v {
	case "ok":
		return true, nil
	case "exists":
		return false, nil
	case "no_unit":
		return false, fmt.Errorf("shard %d: restore hold %s: %w", i, o.ID, shardstock.ErrShortOfUnits)
	case "unknown":
		return false, fmt.Errorf("shard %d: restore hold %s: %w", i, o.ID, shardstock.ErrNotOnShard)
	}
	return false, fmt.Errorf("shard %d: restore hold %s: %v", i, o.ID, v)
}
