package inventory

import (
	"context"
	"errors"
	"fmt"

	"github.com/shardstock/shardstock"
	"github.com/shardstock/shardstock/shard"
)

// Settle applies a settlement (pay result) to the shard that holds the
// unit, and to no other shard: confirm moves it locked -> sold; release
// (and release_duplicate, a second hold of one reservation) moves it
// locked -> salable. The buyer's per-user limit claim goes back through the
// order service (order.Service.ReturnClaims), so a settlement never waits
// for the buyer's home shard. Only a locked hold moves, so
// duplicates and late arrivals change nothing. A hold in a state the order
// row contradicts, or missing, is logged for reconcile and acknowledged
// (retrying cannot change it). Errors are transport failures: the caller
// must offer the settlement again.
func (s *Service) Settle(ctx context.Context, st shardstock.Settlement) error {
	if p, err := s.Product(ctx, st.ProductID); err == nil && p.Moved != "" {
		// Its shard index would name another master: wait until the
		// shard list is put back (the settlement is retried).
		return fmt.Errorf("%w: %s", shardstock.ErrUnavailable, p.Moved)
	}
	var err error
	if st.Action == shardstock.Confirm {
		_, err = s.shards.Confirm(ctx, st.Shard, st.ProductID, st.OrderID)
	} else {
		_, err = s.shards.Release(ctx, st.Shard, st.ProductID, st.OrderID)
	}
	switch {
	case errors.Is(err, shard.ErrUnknownHold), errors.Is(err, shard.ErrHoldReleased), errors.Is(err, shard.ErrHoldSold):
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
