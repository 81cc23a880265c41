package inventory

import (
	"context"
	"errors"
	"fmt"

	"github.com/shardstock/shardstock"
)

// AcceptResync is the operator's answer to shard i kept fenced by a
// disagreement (Shard, ErrResyncBlocked): the shard is taken as it stands,
// with two conditions, so that accepting can never oversell. Per product,
// every live order's hold is restored first (RestoreHold); an order the
// shard has no unit for refuses the call (cancel it first). Then
// units the shard holds past what the split and the transfer log give it,
// or past the product's stock with the other shards' allocations, are
// written off its salable units (taken off sale for good; the stock in SQL
// is unchanged, since the shard held units that SQL never gave it). When
// those units are not all salable (they are held for orders) nothing is
// written off and the call is refused: cancel orders or add stock first.
// Units the shard has fewer of than the log says stay lost (reconcile
// shows them as drift; stock added puts them back on sale). It returns
// what it did, for the operator; run is the shard's run id, which makes a
// repeated call write nothing more.
func (s *Resync) Accept(ctx context.Context, i int, run string) ([]string, error) {
	ctx = shardstock.ResyncContext(ctx)
	ids, err := s.cfg.Catalog.ProductIDs(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: catalog: %w", shardstock.ErrUnavailable, err)
	}
	ts, err := s.shardTransfers(ctx, i)
	if err != nil {
		return nil, fmt.Errorf("%w: transfers: %w", shardstock.ErrUnavailable, err)
	}
	type writeOff struct {
		id string
		n  int64
	}
	var plan []writeOff
	for _, id := range ids {
		p, err := s.liveOn(ctx, i, id)
		if errors.Is(err, errUnseen) { // the record this puts down would speak for it (ErrResyncPartial)
			return nil, shardstock.Conflict(fmt.Sprintf("%s lives on shards this coordinator does not list (SHARDSTOCK_SHARDS): accept shard %d from a coordinator with the whole shard list", id, i))
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", shardstock.ErrUnavailable, id, err)
		}
		if p == nil {
			continue
		}
		if s.cfg.Orders != nil { // every live order's unit held first: one without is an oversold unit
			var d disagreement
			if err := s.restoreHolds(ctx, i, p); errors.As(err, &d) {
				return nil, shardstock.Conflict(d.Error() + ": accepting the shard would leave that order without a unit. Cancel it, then call again")
			} else if err != nil {
				return nil, fmt.Errorf("%w: %w", shardstock.ErrUnavailable, err)
			}
		}
		a, err := s.allocationsOn(ctx, i, p, ts[id])
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", shardstock.ErrUnavailable, id, err)
		}
		if a == nil || !a.own.Known {
			continue
		}
		excess := max(0, a.own.Alloc-a.hi)
		if a.all {
			excess = max(excess, a.sum-a.stock)
		}
		if excess > a.own.Salable {
			return nil, shardstock.Conflict(fmt.Sprintf("shard %d holds %d units of %s past what the transfer log and the stock allow, and only %d of them are salable: accepting it would oversell. Cancel orders held there, or add stock, then call again",
				i, excess, id, a.own.Salable))
		}
		if excess > 0 {
			plan = append(plan, writeOff{id, excess})
		}
	}
	actions := []string{}
	for _, w := range plan {
		_, err := s.cfg.Shards.ReplayTransferOut(ctx, i, w.id, "accept-"+run, w.n, Outside)
		if errors.Is(err, shardstock.ErrShortOfUnits) {
			return actions, shardstock.Conflict(fmt.Sprintf("shard %d: %s's salable units changed while it was accepted; call again", i, w.id))
		}
		if err != nil {
			return actions, fmt.Errorf("%w: %w", shardstock.ErrUnavailable, err)
		}
		actions = append(actions, fmt.Sprintf("wrote off %d salable units of %s that shard %d held past the transfer log and the stock", w.n, w.id, i))
	}
	if len(actions) == 0 {
		actions = append(actions, fmt.Sprintf("shard %d taken as it stands: it holds no unit past what the transfer log and the stock allow (units it lacks show as drift in reconcile)", i))
	}
	return actions, nil
}
