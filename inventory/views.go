package inventory

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/shardstock/shardstock"
)

// ViewsConfig is a Views' ports.
type ViewsConfig struct {
	Addrs     []string // the shards' addresses, in index order
	Products  *Catalog
	Catalog   CatalogStore
	Shards    StockShards
	Transfers TransferStore // the units operators added or took back since a definition
	Controls  ControlStore  // archived products' final totals
	Fence     Fence
	Problems  *Resync
	Breakers  func() []string // optional: each shard's breaker state, for the shard overview
	Now       func() time.Time
}

// Views read the stock: a product's status shard by shard, the buyers'
// live stock, the shared snapshot for the metrics and the sale report, and
// the shard overview. Safe for concurrent use.
type Views struct {
	cfg  ViewsConfig
	snap snapshotCache
}

// NewViews returns Views over cfg's ports.
func NewViews(cfg ViewsConfig) *Views {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Views{cfg: cfg, snap: snapshotCache{turn: make(chan struct{}, 1)}}
}

// ShardStock is a product's stock on one shard; counts are nil when the
// shard could not answer.
type ShardStock struct {
	Index   int    `json:"index"`
	Addr    string `json:"addr"`
	Up      bool   `json:"up"`
	Salable *int64 `json:"salable,omitempty"`
	Locked  *int64 `json:"locked,omitempty"`
	Sold    *int64 `json:"sold,omitempty"`
	Alloc   *int64 `json:"alloc,omitempty"`
	Error   string `json:"error,omitempty"`
}

// ProductStatus is a product's definition and its stock on every shard.
type ProductStatus struct {
	shardstock.Product
	// Stock (in Product) is the current total: the definition's, plus the
	// units operators added since, minus those they took back.
	Paused   bool              `json:"paused"`
	Archived bool              `json:"archived"`
	Totals   shardstock.Totals `json:"totals"`
	Shards   []ShardStock      `json:"shards"`
}

// Statuses reads every product in the catalog, as Status does. Errors:
// ErrUnavailable, and Status's.
func (s *Views) Statuses(ctx context.Context) ([]*ProductStatus, error) {
	ids, err := s.cfg.Catalog.ProductIDs(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", shardstock.ErrUnavailable, err)
	}
	out := make([]*ProductStatus, 0, len(ids))
	for _, id := range ids {
		st, err := s.Status(ctx, id)
		if err != nil {
			return nil, err
		}
		out = append(out, st)
	}
	return out, nil
}

// Status reads product id on every shard at once. Totals sum the shards
// that answered. Errors: ErrNotFound, ErrUnavailable (from Product).
func (s *Views) Status(ctx context.Context, id string) (*ProductStatus, error) {
	p, err := s.cfg.Products.Product(ctx, id)
	if err != nil {
		return nil, err
	}
	st := &ProductStatus{Product: *p, Paused: p.Paused, Archived: p.Archived, Shards: make([]ShardStock, len(s.cfg.Addrs))}
	if st.Stock, err = currentStock(ctx, s.cfg.Transfers, p); err != nil {
		return nil, fmt.Errorf("%w: %w", shardstock.ErrUnavailable, err)
	}
	if p.Archived {
		return st, s.archivedStatus(ctx, st)
	}
	var wg sync.WaitGroup
	for i, addr := range s.cfg.Addrs {
		wg.Go(func() {
			ss := ShardStock{Index: i, Addr: addr}
			c, err := s.cfg.Shards.Counters(ctx, i, id)
			if err != nil {
				ss.Error = err.Error()
			} else {
				ss.Up = true
				if c.Known { // else the shard does not hold the product (lost data): no counts
					ss.Alloc, ss.Salable, ss.Locked, ss.Sold = &c.Alloc, &c.Salable, &c.Locked, &c.Sold
				}
			}
			st.Shards[i] = ss
		})
	}
	wg.Wait()
	for _, ss := range st.Shards {
		if ss.Up && ss.Salable != nil {
			st.Totals.Salable += *ss.Salable
			st.Totals.Locked += *ss.Locked
			st.Totals.Sold += *ss.Sold
		}
	}
	return st, nil
}

// ShardHealth is one line of the shard overview.
type ShardHealth struct {
	Index     int    `json:"index"`
	Addr      string `json:"addr"`
	Up        bool   `json:"up"`
	LastError string `json:"last_error"`
	Breaker   string `json:"breaker,omitempty"` // closed, open or half_open
	// Fenced: the shard restarted and sells nothing until it is back in
	// line with the order table; ResyncProblem says why a resync keeps it
	// fenced (it is tried again every second and opens once the
	// disagreement is gone, or when an operator accepts it: POST
	// /admin/v1/shards/{index}/resync).
	Fenced        bool   `json:"fenced"`
	ResyncProblem string `json:"resync_problem,omitempty"`
}

// Shards pings every shard at once and reports which answer.
func (s *Views) Shards(ctx context.Context) []ShardHealth {
	out := make([]ShardHealth, len(s.cfg.Addrs))
	var wg sync.WaitGroup
	for i, addr := range s.cfg.Addrs {
		wg.Go(func() {
			out[i] = ShardHealth{Index: i, Addr: addr, Up: true, Fenced: s.cfg.Fence.Fenced(i), ResyncProblem: s.cfg.Problems.Problem(i)}
			if err := s.cfg.Fence.Ping(ctx, i); err != nil {
				out[i].Up, out[i].LastError = false, err.Error()
			}
		})
	}
	wg.Wait()
	if s.cfg.Breakers != nil {
		for i, b := range s.cfg.Breakers() {
			out[i].Breaker = b
		}
	}
	return out
}

// currentStock is p's stock as its definition and the stock changes since
// make it.
func currentStock(ctx context.Context, c TransferStore, p *shardstock.Product) (int64, error) {
	added, removed, err := c.StockChanges(ctx, p.ID)
	if err != nil {
		return 0, err
	}
	return p.Stock + added - removed, nil
}

// archivedStatus is the view of an archived product: the totals the
// catalog kept.
func (s *Views) archivedStatus(ctx context.Context, st *ProductStatus) error {
	totals, err := s.cfg.Controls.ArchiveTotals(ctx, st.ID)
	if err != nil {
		return fmt.Errorf("%w: %w", shardstock.ErrUnavailable, err)
	}
	st.Shards = st.Shards[:0]
	for _, t := range totals {
		sh := ShardStock{Index: t.Shard, Up: true, Alloc: &t.Alloc, Salable: &t.Salable, Locked: &t.Locked, Sold: &t.Sold}
		if t.Shard < len(s.cfg.Addrs) {
			sh.Addr = s.cfg.Addrs[t.Shard]
		}
		st.Shards = append(st.Shards, sh)
		st.Totals.Salable += t.Salable
		st.Totals.Locked += t.Locked
		st.Totals.Sold += t.Sold
	}
	return nil
}
