package inventory

import (
	"context"
	"errors"

	"github.com/shardstock/shardstock"
	"github.com/shardstock/shardstock/shard"
)

// Settle applies a settlement (pay result) to the shard that holds the
// unit: confirm moves it locked -> sold; release moves it locked -> salable
// and gives the buyer's claim back; release_duplicate releases a second
// hold of one reservation and keeps the claim. Only a locked hold moves, so
// duplicates and late arrivals change nothing. A hold in a state the order
// row contradicts, or missing, is logged for reconcile and acknowledged
// (retrying cannot change it). Errors are transport failures: the caller
// must offer the settlement again.
func (s *Service) Settle(ctx context.Context, st shardstock.Settlement) error {
	var err error
	if st.Action == shardstock.Confirm {
		_, err = s.store.Confirm(ctx, st.Shard, st.ProductID, st.OrderID)
	} else {
		_, err = s.store.Release(ctx, st.Shard, st.ProductID, st.OrderID)
	}
	switch {
	case errors.Is(err, shard.ErrUnknownHold), errors.Is(err, shard.ErrHoldReleased), errors.Is(err, shard.ErrHoldSold):
		s.cfg.Logger.Error("settlement contradicts the hold on its shard; see reconcile",
			"order", st.OrderID, "product", st.ProductID, "shard", st.Shard, "action", st.Action, "err", err)
	case err != nil:
		return err
	}
	if st.Action == shardstock.Release {
		if err := s.store.ReleaseClaim(ctx, st.ProductID, st.UserID, st.OrderID); err != nil {
			return err
		}
	}
	if s.cfg.OnSettle != nil {
		s.cfg.OnSettle(st.Action)
	}
	return nil
}
