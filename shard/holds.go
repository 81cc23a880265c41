package shard

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/hashicorp/go-multierror"
	"github.com/redis/go-redis/v9"
)

// FindHold looks for hold id among products on every shard at once (one
// pipelined HGET per product and shard). It returns the product, the
// buyer and the shard of the first hold found; found = false with a nil
// error only when every shard answered without it.
func (s *Set) FindHold(ctx context.Context, products []string, id string) (product, user string, shard int, found bool, err error) {
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

func (s *Set) findOn(ctx context.Context, sh *Shard, products []string, id string) (product, user string, found bool, err error) {
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
