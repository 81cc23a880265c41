package inventory

import (
	"context"
	"fmt"
	"time"

	"github.com/shardstock/shardstock"
)

// snapshotTTL is how long one read of every shard serves the metrics
// collector and the public stock view: a scrape or a page poll never costs
// one Redis call per product.
const snapshotTTL = time.Second

type snapshotCache struct {
	// turn guards the fields below, held during a refresh so that callers
	// share it: a channel of one, not a mutex, so a caller whose context
	// ends stops waiting for a refresh held up by a shard (and a wait is
	// durable for testing/synctest: a mutex held across a shard's round
	// trip stopped the model test's fake clock).
	turn     chan struct{}
	at       time.Time
	products []string
	shards   []shardstock.ShardSnapshot
}

// Snapshot returns every shard's counters of every catalog product and
// its stream backlogs, read at most once per second (pipelined, one round
// trip per shard). Errors: ErrUnavailable when the catalog cannot answer;
// a shard that cannot answer has Err set.
func (s *Views) Snapshot(ctx context.Context) ([]string, []shardstock.ShardSnapshot, error) {
	c := &s.snap
	select {
	case c.turn <- struct{}{}:
	case <-ctx.Done():
		return nil, nil, fmt.Errorf("%w: shard snapshot: %w", shardstock.ErrUnavailable, ctx.Err())
	}
	defer func() { <-c.turn }()
	if now := s.cfg.Now(); now.Sub(c.at) < snapshotTTL && c.shards != nil {
		return c.products, c.shards, nil
	}
	all, err := s.cfg.Catalog.ProductIDs(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: catalog: %w", shardstock.ErrUnavailable, err)
	}
	ids := all[:0:0]
	for _, id := range all {
		if c, ok := s.cfg.Products.Controls(id); !ok || c.Archive == shardstock.ArchiveNone {
			ids = append(ids, id) // an archived product has no keys left to read
		}
	}
	c.products, c.shards, c.at = ids, s.cfg.Shards.Snapshot(ctx, ids), s.cfg.Now()
	return c.products, c.shards, nil
}

// Salable returns every live product's salable units per shard, from the
// shared snapshot (-1 for a shard that did not answer or does not hold
// the product): what the sale report samples.
func (s *Views) Salable(ctx context.Context) (map[string][]int64, error) {
	ids, snaps, err := s.Snapshot(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string][]int64, len(ids))
	for _, id := range ids {
		v := make([]int64, len(snaps))
		for i, sn := range snaps {
			v[i] = -1
			if c, ok := sn.Products[id]; sn.Err == nil && ok && c.Known {
				v[i] = c.Salable
			}
		}
		out[id] = v
	}
	return out, nil
}

// StockOf returns a product's stock: its definition's, changed by the
// units operators added or took back since.
func (s *Views) StockOf(ctx context.Context, id string) (int64, error) {
	p, err := s.cfg.Products.Product(ctx, id)
	if err != nil {
		return 0, err
	}
	return currentStock(ctx, s.cfg.Transfers, p)
}

// ShardView is one shard's share of a product, as buyers see it.
type ShardView struct {
	Index   int    `json:"index"`
	Up      bool   `json:"up"`
	Salable *int64 `json:"salable,omitempty"`
	Alloc   *int64 `json:"alloc,omitempty"`
}

// StockView is a product's public live stock.
type StockView struct {
	ID       string    `json:"id"`
	Title    string    `json:"title,omitempty"`
	Stock    int64     `json:"stock"`
	StartsAt time.Time `json:"starts_at,omitzero"`
	EndsAt   time.Time `json:"ends_at,omitzero"`
	Salable  int64     `json:"salable"` // over the shards that answered
	// Locked are the units reserved and not yet paid or given back, over
	// the shards that answered (for the waiting rooms' "held"; not shown).
	Locked int64       `json:"-"`
	Shards []ShardView `json:"shards"`
	Now    time.Time   `json:"now"` // the server's clock, for countdowns
}

// Complete says whether every shard answered with its counts: else
// Salable and Locked are lower bounds (a waiting room says sold_out only on
// a complete count).
func (v *StockView) Complete() bool {
	for _, sh := range v.Shards {
		if !sh.Up || sh.Salable == nil {
			return false
		}
	}
	return true
}

// Stock returns product id's live stock from the shared snapshot.
// Errors: ErrNotFound, ErrUnavailable.
func (s *Views) Stock(ctx context.Context, id string) (*StockView, error) {
	p, err := s.cfg.Products.Product(ctx, id)
	if err != nil {
		return nil, err
	}
	_, shards, err := s.Snapshot(ctx)
	if err != nil {
		return nil, err
	}
	v := &StockView{ID: p.ID, Title: p.Title, Stock: p.Stock, StartsAt: p.StartsAt, EndsAt: p.EndsAt, Now: s.cfg.Now()}
	for _, sh := range shards {
		sv := ShardView{Index: sh.Index, Up: sh.Err == nil}
		if c, ok := sh.Products[id]; ok && sv.Up && c.Known {
			sv.Salable, sv.Alloc = &c.Salable, &c.Alloc
			v.Salable += c.Salable
			v.Locked += c.Locked
		}
		v.Shards = append(v.Shards, sv)
	}
	return v, nil
}
