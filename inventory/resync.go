package inventory

import (
	"context"
	"errors"
	"fmt"

	"github.com/shardstock/shardstock"
	"github.com/shardstock/shardstock/shard"
)

// Resync brings shard i back in line with SQL after it restarted (the shard
// set fences it until then: shard/resync.go). What a crash can take from a
// shard is the last writes before it; the order table and the transfer log
// say what they were, and each is re-applied with an operation that changes
// nothing when the shard kept it:
//
//   - transfers whose units left their source: transfer_out again on the
//     source (the transfer id's record went with the lost writes, so the
//     units are taken off again, exactly as many as moved) and transfer_in
//     on the destination of a finished transfer;
//   - holds of live orders on the shard (awaiting payment: locked; paid:
//     sold), so a unit SQL sold is never salable again;
//   - settlements of final orders on the shard, sent again (a lost confirm
//     or release);
//   - the per-user limit registers of the buyers homed on it, repaired with
//     the claims they lost.
//
// It then checks that the product's allocations do not sum past its stock.
// A shard that lost a product altogether is data loss, not a lost second
// (allocate and the register rebuild handle it). Errors leave the shard
// fenced; Resync is tried again.
func (s *Service) Resync(ctx context.Context, i int) error {
	ctx = shard.ResyncContext(ctx)
	ids, err := s.catalog.ProductIDs(ctx)
	if err != nil {
		return fmt.Errorf("resync shard %d: catalog: %w", i, err)
	}
	if s.cfg.Transfers != nil {
		if err := s.resyncTransfers(ctx, i); err != nil {
			return err
		}
	}
	for _, id := range ids {
		if err := s.resyncProduct(ctx, i, id); err != nil {
			return fmt.Errorf("resync shard %d: %s: %w", i, id, err)
		}
	}
	return nil
}

func (s *Service) resyncTransfers(ctx context.Context, i int) error {
	ts, err := s.cfg.Transfers.ShardTransfers(ctx, i)
	if err != nil {
		return fmt.Errorf("resync shard %d: transfers: %w", i, err)
	}
	for _, t := range ts {
		switch {
		case t.From == i:
			_, err = s.shards.TransferOut(ctx, i, t.ProductID, t.ID, t.Moved, t.To)
			if err == nil && t.State == "reversed" {
				err = s.shards.TransferIn(ctx, i, t.ProductID, reversalID(t.ID), t.Moved, t.To)
			}
		case t.To == i && t.State == "done":
			err = s.shards.TransferIn(ctx, i, t.ProductID, t.ID, t.Moved, t.From)
		}
		if err != nil && !errors.Is(err, shard.ErrNotOnShard) {
			return fmt.Errorf("resync shard %d: transfer %s: %w", i, t.ID, err)
		}
	}
	return nil
}

func (s *Service) resyncProduct(ctx context.Context, i int, id string) error {
	p, err := s.Product(ctx, id)
	if err != nil {
		return err
	}
	if p.Archived || p.Moved != "" {
		return nil // its keys are gone on purpose, or this shard index is another master now
	}
	on, err := s.catalog.InitialisedShards(ctx, id)
	if err != nil || i >= p.Shards(len(s.shards.Addrs())) || !on[i] {
		return err
	}
	c, err := s.shards.Counters(ctx, i, id)
	if err != nil || !c.Known {
		return err // not on the shard at all: lost data, not a lost second
	}
	if s.ledger != nil {
		if err := s.restoreHolds(ctx, i, p); err != nil {
			return err
		}
		if _, err := s.ledger.Resettle(ctx, id, []int{i}); err != nil {
			return err
		}
	}
	if err := s.shards.RepairRegister(ctx, p, i); err != nil {
		return err
	}
	if c, ok := s.controlsOf(id); ok && c.WindowSet { // a PATCH the shard may have missed
		if err := s.shards.SetWindow(ctx, i, id, unixMS(p.StartsAt), unixMS(p.EndsAt)); err != nil && !errors.Is(err, shard.ErrNotOnShard) {
			return err
		}
	}
	return s.checkAllocations(ctx, p)
}

func (s *Service) restoreHolds(ctx context.Context, i int, p *shardstock.Product) error {
	live, err := s.ledger.LiveOrders(ctx, p.ID, i)
	if err != nil {
		return err
	}
	restored := 0
	for _, o := range live {
		ok, err := s.shards.RestoreHold(ctx, i, o, s.cfg.Now().UnixMilli())
		if err != nil {
			return err
		}
		if ok {
			restored++
		}
	}
	if restored > 0 {
		s.cfg.Logger.Warn("restored holds a restarted shard had lost", "shard", i, "product", p.ID, "holds", restored)
	}
	return nil
}

// checkAllocations logs an error when p's allocations over its shards sum
// past its stock: units exist twice somewhere, and an operator must look.
func (s *Service) checkAllocations(ctx context.Context, p *shardstock.Product) error {
	var alloc int64
	for j := 0; j < p.Shards(len(s.shards.Addrs())); j++ {
		c, err := s.shards.Counters(ctx, j, p.ID)
		if err != nil {
			return nil // a shard that cannot answer now: checked at its own resync
		}
		alloc += c.Alloc
	}
	stock, err := s.currentStock(ctx, p)
	if err != nil {
		return err
	}
	if alloc > stock {
		s.cfg.Logger.Error("allocations sum past the stock after a resync", "product", p.ID, "alloc", alloc, "stock", stock)
	}
	return nil
}
