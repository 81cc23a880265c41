package inventory

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/shardstock/shardstock"
)

// An order can be written while a restarted shard's resync runs, after
// the resync read the shard's live orders, by a coordinator that has not
// seen the restart yet: its shard is not fenced there, so it judges the
// reservation against the shard's old resync time (Admit) and writes the
// order awaiting payment; its check after the write (HoldLate) reads the
// resync time again, but that time is only put on record once the resync
// is done. Neither the resync nor the writer then puts back a hold the
// crash took, and the order stands for a unit nobody holds: the unit is
// sold again (the model test's fast mode: 3 units answered for a stock of
// 2). CatchUp closes the gap from the resync's side. Every order is then
// checked by one of the two:
//
//   - written before the resync read the live orders: the resync saw it;
//   - its writer's check read the resync time after it went on record:
//     HoldLate finds the reservation late and puts the hold back (the
//     check reads the time afresh after the write: written);
//   - its writer's check read the time before it went on record: then the
//     order was written before that, and CatchUp, which reads the live
//     orders again after it, finds it among those the resync did not see.

// seenOrders are, per shard, the live orders its running resync read
// (restoreHolds), and the products it read them of; none: no resync of
// the shard is running or waiting for CatchUp.
type seenOrders struct {
	mu sync.Mutex
	m  map[int]*seenSet
}

type seenSet struct{ products, orders map[string]bool }

// start begins shard i's set for a new resync.
func (o *seenOrders) start(i int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.m == nil {
		o.m = map[int]*seenSet{}
	}
	o.m[i] = &seenSet{map[string]bool{}, map[string]bool{}}
}

func (o *seenOrders) add(i int, product string, live []shardstock.Order) {
	o.mu.Lock()
	defer o.mu.Unlock()
	set := o.m[i]
	if set == nil {
		return // (a resync's product outside Shard: nothing waits for it)
	}
	set.products[product] = true
	for _, x := range live {
		set.orders[x.ID] = true
	}
}

// of is a copy of shard i's set (an operator's resync may be adding to
// it), nil when none waits for CatchUp.
func (o *seenOrders) of(i int) (copied, set *seenSet) {
	o.mu.Lock()
	defer o.mu.Unlock()
	set = o.m[i]
	if set == nil {
		return nil, nil
	}
	return &seenSet{maps.Clone(set.products), maps.Clone(set.orders)}, set
}

// done drops set, shard i's unless a new resync began another since.
func (o *seenOrders) done(i int, set *seenSet) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.m[i] == set {
		delete(o.m, i)
	}
}

// CatchUp checks the holds of the live orders of shard i that its last
// resync did not see: written after it read them (see above). It runs
// once the resync's time is on record and before its run is (Restarts.
// record), so the fences stay shut until it is done, and each order is
// judged against the new time as HoldLate judges it: its claim and hold
// put back, or an order awaiting payment failed when the unit or the
// limit went to another buyer since. An error (the order table or a shard
// did not answer; a paid order with no unit left, which is an operator's)
// keeps the run off the record: the resync is done again, and its own
// reading of the live orders takes these in.
func (s *Resync) CatchUp(ctx context.Context, i int) error {
	seen, set := s.seen.of(i)
	defer s.seen.done(i, set)
	if seen == nil || s.cfg.Orders == nil || s.cfg.ShardLog == nil {
		return nil
	}
	ctx = shardstock.ResyncContext(ctx)
	s.times.forget(i) // judged against the time just put on record
	caught := 0
	for id := range seen.products {
		// Only the products whose holds the resync restored: one the
		// shard lost altogether has given up its allocation there.
		live, err := s.cfg.Orders.LiveOrders(ctx, id, i)
		if err != nil {
			return fmt.Errorf("catch up shard %d: %s: %w", i, id, err)
		}
		for _, o := range live {
			if seen.orders[o.ID] {
				continue
			}
			caught++
			if err := s.holdLate(ctx, o, o.ReservedAt, time.Time{}); err != nil {
				return fmt.Errorf("catch up shard %d: %w", i, err)
			}
		}
	}
	if caught > 0 {
		s.cfg.Logger.Warn("checked the holds of orders written while their shard's resync ran", "shard", i, "orders", caught)
	}
	return nil
}
