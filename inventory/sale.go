package inventory

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/shardstock/shardstock"
)

// A sale's life after its definition: the kill switch, the window moved,
// the archive (stock added or taken back: Stock). The definition in the
// catalog never changes (the shards compare it, and a repeated PUT is
// idempotent against it); what an operator changes is kept beside it
// (shardstock.Controls), and every coordinator's Catalog reads it within a
// second (controls.go).

// SaleConfig is a Sale's ports.
type SaleConfig struct {
	Addrs    []string // the shards' addresses, in index order
	Products *Catalog
	Catalog  CatalogStore
	Views    *Views
	Controls ControlStore
	Orders   OrderStore
	Shards   StockShards
	Stock    *Stock
	Now      func() time.Time
	Logger   *slog.Logger
}

// Sale steers a sale's life. Safe for concurrent use.
type Sale struct {
	cfg     SaleConfig
	waiting sync.Map // product id -> why its automatic archive waits (the last reason logged)
}

// NewSale returns a Sale over cfg's ports.
func NewSale(cfg SaleConfig) *Sale {
	orDefaults(&cfg.Now, &cfg.Logger)
	return &Sale{cfg: cfg}
}

// Pause turns product id's kill switch on (paused) or off.
func (s *Sale) Pause(ctx context.Context, id string, paused bool) (*ProductStatus, error) {
	if _, err := s.cfg.Products.Product(ctx, id); err != nil {
		return nil, err
	}
	if err := s.cfg.Controls.SetPaused(ctx, id, paused); err != nil {
		return nil, fmt.Errorf("%w: %w", shardstock.ErrUnavailable, err)
	}
	if err := s.cfg.Products.RefreshControls(ctx); err != nil {
		return nil, fmt.Errorf("%w: %w", shardstock.ErrUnavailable, err)
	}
	s.cfg.Logger.Info("product paused", "product", id, "paused", paused)
	return s.cfg.Views.Status(ctx, id)
}

// MoveWindow changes product id's window: ends (nil: unchanged) extends it
// or ends it early; starts (nil: unchanged) may move only while the sale
// has not started. A zero time is no bound. It is recorded in the catalog,
// then written to every shard of the product (the scripts judge by it); a
// shard that cannot answer gets it at its next resync, or from the first
// purchase it refuses for the window (shard.Purchases.Reserve), and the call
// answers ErrUnavailable (a repeat completes it).
func (s *Sale) MoveWindow(ctx context.Context, id string, starts, ends *time.Time) (*ProductStatus, error) {
	p, err := s.cfg.Products.Product(ctx, id)
	if err != nil {
		return nil, err
	}
	if err := unseen(p); err != nil { // (its shards' indexes here are not its own)
		return nil, err
	}
	if p.Archived {
		return nil, errArchived(id)
	}
	next := *p
	now := s.cfg.Now()
	if starts != nil && !starts.Equal(p.StartsAt) {
		if p.StartsAt.IsZero() || !now.Before(p.StartsAt) {
			return nil, shardstock.Conflict("the sale has started: starts_at can no longer move")
		}
		next.StartsAt = starts.UTC()
	}
	if ends != nil {
		next.EndsAt = ends.UTC()
	}
	if !next.StartsAt.IsZero() && !next.EndsAt.IsZero() && !next.EndsAt.After(next.StartsAt) {
		return nil, shardstock.Invalid("ends_at must be after starts_at")
	}
	if err := s.cfg.Controls.SetWindow(ctx, id, next.StartsAt, next.EndsAt); err != nil {
		return nil, fmt.Errorf("%w: %w", shardstock.ErrUnavailable, err)
	}
	if err := s.cfg.Products.RefreshControls(ctx); err != nil {
		return nil, fmt.Errorf("%w: %w", shardstock.ErrUnavailable, err)
	}
	cur, err := s.cfg.Products.Product(ctx, id) // as recorded, with its version (a change made meanwhile is newer)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", shardstock.ErrUnavailable, err)
	}
	var errs error
	for i := range p.Shards(len(s.cfg.Addrs)) {
		_, err := s.cfg.Shards.SetWindow(ctx, i, cur)
		if err != nil && !errors.Is(err, shardstock.ErrNotOnShard) {
			errs = errors.Join(errs, err)
		}
	}
	if errs != nil {
		return nil, fmt.Errorf("%w: the window is recorded, but not every shard has it yet (a repeat, or the shard's resync, completes it): %w", shardstock.ErrUnavailable, errs)
	}
	s.cfg.Logger.Info("sale window moved", "product", id, "starts_at", next.StartsAt, "ends_at", next.EndsAt)
	return s.cfg.Views.Status(ctx, id)
}

// Archive ends product id's life on the shards, once its window has ended
// and every order is final: its final per-shard counters go to the
// catalog, then every key it has on the shards is deleted. Errors:
// ErrConflict naming what blocks it, ErrUnavailable (a repeat resumes it).
func (s *Sale) Archive(ctx context.Context, id string) (*ProductStatus, error) {
	p, err := s.cfg.Products.Product(ctx, id)
	if err != nil {
		return nil, err
	}
	if err := unseen(p); err != nil {
		return nil, err
	}
	c, _ := s.cfg.Products.Controls(id)
	if c.Archive == shardstock.ArchiveNone {
		if err := s.archivable(ctx, p); err != nil {
			return nil, err
		}
		if err := s.recordTotals(ctx, p); err != nil {
			return nil, err
		}
		if err := s.cfg.Controls.SetArchive(ctx, id, shardstock.ArchiveRunning); err != nil {
			return nil, fmt.Errorf("%w: %w", shardstock.ErrUnavailable, err)
		}
	}
	if c.Archive != shardstock.ArchiveDone {
		for i := range p.Shards(len(s.cfg.Addrs)) {
			if err := s.cfg.Shards.DeleteProduct(ctx, i, id); err != nil {
				return nil, fmt.Errorf("%w: archive of %s stopped (a repeat, or the automatic archive, finishes it): %w", shardstock.ErrUnavailable, id, err)
			}
		}
		if err := s.cfg.Controls.SetArchive(ctx, id, shardstock.ArchiveDone); err != nil {
			return nil, fmt.Errorf("%w: %w", shardstock.ErrUnavailable, err)
		}
		s.cfg.Logger.Info("product archived: its shard keys are deleted, the catalog keeps its totals", "product", id)
	}
	if err := s.cfg.Products.RefreshControls(ctx); err != nil {
		return nil, fmt.Errorf("%w: %w", shardstock.ErrUnavailable, err)
	}
	return s.cfg.Views.Status(ctx, id)
}

// archivable says what keeps p from being archived now, if anything.
func (s *Sale) archivable(ctx context.Context, p *shardstock.Product) error {
	if p.EndsAt.IsZero() || s.cfg.Now().Before(p.EndsAt) {
		return shardstock.Conflict(fmt.Sprintf("the sale of %s has not ended (ends_at %s): end it first (shardstock admin end %s, or PATCH its ends_at)", p.ID, formatTime(p.EndsAt), p.ID))
	}
	awaiting, unsettled, err := s.cfg.Orders.OpenOrders(ctx, p.ID)
	if err != nil {
		return fmt.Errorf("%w: %w", shardstock.ErrUnavailable, err)
	}
	if awaiting > 0 {
		return shardstock.Conflict(fmt.Sprintf("%d orders of %s await payment", awaiting, p.ID))
	}
	if unsettled > 0 {
		return shardstock.Conflict(fmt.Sprintf("%d settlements of %s are not applied on the shards yet", unsettled, p.ID))
	}
	if _, err := s.cfg.Stock.Resume(ctx, p.ID); err != nil {
		return shardstock.Conflict(fmt.Sprintf("a transfer of %s cannot finish now: %v", p.ID, err))
	}
	return nil
}

// recordTotals keeps p's final counters of every shard in the catalog;
// every shard must answer, and hold no unit locked (a reservation whose
// order row is not written yet, or a settlement on its way).
func (s *Sale) recordTotals(ctx context.Context, p *shardstock.Product) error {
	var totals []shardstock.ShardTotals
	for i := range p.Shards(len(s.cfg.Addrs)) {
		c, err := s.cfg.Shards.Counters(ctx, i, p.ID)
		if err != nil {
			return fmt.Errorf("%w: shard %d must answer to archive %s: %w", shardstock.ErrUnavailable, i, p.ID, err)
		}
		if c.Locked > 0 {
			return shardstock.Conflict(fmt.Sprintf("shard %d still holds %d locked units of %s (reservations or settlements on their way)", i, c.Locked, p.ID))
		}
		totals = append(totals, shardstock.ShardTotals{Shard: i, Alloc: c.Alloc, Salable: c.Salable, Locked: c.Locked, Sold: c.Sold})
	}
	if err := s.cfg.Controls.RecordArchiveTotals(ctx, p.ID, totals); err != nil {
		return fmt.Errorf("%w: %w", shardstock.ErrUnavailable, err)
	}
	return nil
}

// DefaultArchiveEvery is how often RunArchive looks.
const DefaultArchiveEvery = time.Minute

// RunArchive archives, every every (0: DefaultArchiveEvery) until ctx
// ends, the products whose window ended more than after ago and whose
// orders are final (ArchiveDue). Every coordinator may run it: an archive
// is idempotent.
func (s *Sale) RunArchive(ctx context.Context, after, every time.Duration) {
	if every <= 0 {
		every = DefaultArchiveEvery
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := s.ArchiveDue(ctx, after); err != nil && ctx.Err() == nil {
			s.cfg.Logger.Warn("automatic archive: will try again", "err", err)
		}
	}
}

// ArchiveDue archives every product whose window ended more than after ago
// and whose orders are final, and finishes archives that stopped midway;
// products that are not ready yet are left for the next call.
func (s *Sale) ArchiveDue(ctx context.Context, after time.Duration) error {
	ids, err := s.cfg.Catalog.ProductIDs(ctx)
	if err != nil {
		return err
	}
	var errs error
	for _, id := range ids {
		p, err := s.cfg.Products.Product(ctx, id)
		if err != nil {
			errs = errors.Join(errs, err)
			continue
		}
		if p.Moved != "" {
			continue // (a coordinator with its shard list archives it)
		}
		c, _ := s.cfg.Products.Controls(id)
		due := c.Archive == shardstock.ArchiveRunning ||
			c.Archive == shardstock.ArchiveNone && !p.EndsAt.IsZero() && s.cfg.Now().After(p.EndsAt.Add(after))
		if !due {
			continue
		}
		_, err = s.Archive(ctx, id)
		switch {
		case errors.Is(err, shardstock.ErrConflict):
			s.waits(id, err.Error())
		case err != nil:
			errs = errors.Join(errs, err)
		default:
			s.waiting.Delete(id)
		}
	}
	return errs
}

// waits logs why product id's automatic archive waits, once for each
// reason: an archive refused with a conflict (orders not final, units
// still locked on a shard, a transfer that cannot finish) is tried again
// at the next look, and an operator whose sale never archives learns why.
func (s *Sale) waits(id, why string) {
	if last, ok := s.waiting.Swap(id, why); ok && last == why {
		return
	}
	s.cfg.Logger.Info("automatic archive waits; it is tried again", "product", id, "why", why)
}
