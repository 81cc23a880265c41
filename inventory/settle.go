package inventory

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/shardstock/shardstock"
)

// SettlementsConfig is a Settlements' ports.
type SettlementsConfig struct {
	Addrs    []string // the shards' addresses, in index order
	Products *Catalog
	Orders   OrderStore // nil: no order table (a shard set tested alone)
	Holds    Holds
	OnSettle func(action shardstock.Action) // optional: a settlement was applied (metrics)
	Logger   *slog.Logger
}

// Settlements apply pay results to the shards. Safe for concurrent use.
type Settlements struct{ cfg SettlementsConfig }

// NewSettlements returns Settlements over cfg's ports.
func NewSettlements(cfg SettlementsConfig) *Settlements {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Settlements{cfg: cfg}
}

// Settle applies a settlement (pay result) to the shard that holds the
// unit, and to no other shard, once the order table bears it out
// (authentic; ErrSettlementRefused otherwise): confirm moves it locked -> sold; release
// (and release_duplicate, a second hold of one reservation) moves it
// locked -> salable. The buyer's per-user limit claim goes back through the
// order service (order.Service.ReturnClaims), so a settlement never waits
// for the buyer's home shard. Only a locked hold moves, so
// duplicates and late arrivals change nothing. A hold in a state the order
// row contradicts, or missing, is logged for reconcile and acknowledged
// (retrying cannot change it). Errors are transport failures: the caller
// must offer the settlement again.
func (s *Settlements) Settle(ctx context.Context, st shardstock.Settlement) error {
	if p, err := s.cfg.Products.Product(ctx, st.ProductID); err == nil && p.Moved != "" && !p.OnMaster(st.Shard, s.cfg.Addrs) {
		// Its shard index would name another master: wait until the
		// shard list is put back (the settlement is retried). A shard
		// this coordinator has in the product's own place (a rolling
		// grow: the product lives on more shards than this coordinator
		// lists) is settled here: a settlement touches its shard only,
		// and one refused here would be read again by this coordinator
		// every few seconds and never reach one that has the whole list.
		return fmt.Errorf("%w: %s", shardstock.ErrUnavailable, p.Moved)
	}
	if err := s.authentic(ctx, st); err != nil {
		return err
	}
	var err error
	if st.Action == shardstock.Confirm {
		_, err = s.cfg.Holds.Confirm(ctx, st.Shard, st.ProductID, st.OrderID)
		if errors.Is(err, shardstock.ErrUnknownHold) {
			err = s.soldWithoutHold(ctx, st)
		}
	} else {
		_, err = s.cfg.Holds.Release(ctx, st.Shard, st.ProductID, st.OrderID)
	}
	switch {
	case errors.Is(err, shardstock.ErrUnknownHold), errors.Is(err, shardstock.ErrHoldReleased), errors.Is(err, shardstock.ErrHoldSold):
		s.cfg.Logger.Error("settlement contradicts the hold on its shard; see reconcile",
			"order", st.OrderID, "product", st.ProductID, "shard", st.Shard, "action", st.Action, "err", err)
	case err != nil:
		return err
	}
	if s.cfg.OnSettle != nil {
		s.cfg.OnSettle(st.Action)
	}
	return nil
}

// soldWithoutHold handles a confirm whose shard has no hold for its paid
// order: the shard lost it (cut back past the reservation, and the order
// came after the resync and after HoldLate could put it back). Its unit is
// salable there: it is taken as sold now, before another buyer gets it; a
// confirm that changed nothing would leave sold below the paid orders and
// the unit on sale. With no unit left, it was sold again already (logged
// for reconcile, as ErrUnknownHold).
func (s *Settlements) soldWithoutHold(ctx context.Context, st shardstock.Settlement) error {
	o := shardstock.Order{ID: st.OrderID, UserID: st.UserID, ProductID: st.ProductID, Shard: st.Shard, Status: shardstock.StatusPaid}
	restored, err := s.cfg.Holds.RestoreHold(ctx, st.Shard, o, time.Now().UnixMilli())
	switch {
	case errors.Is(err, shardstock.ErrShortOfUnits), errors.Is(err, shardstock.ErrNotOnShard):
		return shardstock.ErrUnknownHold
	case err != nil:
		return err
	case restored:
		s.cfg.Logger.Warn("a paid order's hold was lost with its shard's last writes: its unit is taken as sold now",
			"order", st.OrderID, "product", st.ProductID, "shard", st.Shard)
	}
	return nil
}

// ErrSettlementRefused: the order table does not bear a settlement out (it
// was forged, or contradicts its order). It changed nothing; the transport
// moves it to its dead-letter stream or topic with the reason: it is
// shardstock.Refused.
var ErrSettlementRefused = shardstock.Refused(errors.New("the order table does not bear the settlement out"))

// authentic checks st against its order's row. Only the order service
// settles a unit: it publishes a confirm for an order it made paid and a
// release for one it made cancelled or failed, each for the shard that
// holds the order, and a release_duplicate for a second hold of one
// reservation on a shard other than the order's. Anything else on a
// settle stream or topic (an XADD by whoever reaches the shard, a message
// on the broker) would free or sell a unit its buyer still holds: it is
// refused. Without an order table (a shard set tested alone) there is
// nothing to ask.
func (s *Settlements) authentic(ctx context.Context, st shardstock.Settlement) error {
	if s.cfg.Orders == nil {
		return nil
	}
	o, err := s.cfg.Orders.Order(ctx, st.OrderID)
	if err != nil {
		return fmt.Errorf("%w: check settlement of %s: %w", shardstock.ErrUnavailable, st.OrderID, err)
	}
	if why := contradiction(o, st); why != "" {
		return fmt.Errorf("%w: %s", ErrSettlementRefused, why)
	}
	return nil
}

// contradiction says how order o contradicts settlement st ("": it does
// not).
func contradiction(o *shardstock.Order, st shardstock.Settlement) string {
	switch {
	case o == nil:
		return fmt.Sprintf("%s of order %s: no such order", st.Action, st.OrderID)
	case o.ProductID != st.ProductID || o.UserID != st.UserID:
		return fmt.Sprintf("%s of order %s names %s's %s; the order is %s's %s", st.Action, o.ID, st.UserID, st.ProductID, o.UserID, o.ProductID)
	case st.Action == shardstock.ReleaseDuplicate:
		if o.Shard == st.Shard {
			return fmt.Sprintf("release_duplicate of order %s on shard %d, the shard that holds the order", o.ID, st.Shard)
		}
	case o.Shard != st.Shard:
		return fmt.Sprintf("%s of order %s on shard %d; the order is held on shard %d", st.Action, o.ID, st.Shard, o.Shard)
	case st.Action == shardstock.Confirm && o.Status != shardstock.StatusPaid,
		st.Action == shardstock.Release && o.Status != shardstock.StatusCancelled && o.Status != shardstock.StatusFailed:
		return fmt.Sprintf("%s of order %s, which is %s", st.Action, o.ID, o.Status)
	case st.Action != shardstock.Confirm && st.Action != shardstock.Release:
		return fmt.Sprintf("unknown action %q for order %s", st.Action, o.ID)
	}
	return ""
}
