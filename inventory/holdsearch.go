package inventory

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/shardstock/shardstock"
)

// HoldSearch is the order service's search for a reservation that has no
// order row yet (order.HoldFinder): on this coordinator's shards; and when
// none holds it while a product lives on shards this coordinator does not
// list (a rolling grow, this coordinator still on the old list), it says
// it cannot tell rather than "not found". Answered "not found", a payment
// success for an order held on a new shard, its row not written yet, was
// refused for good ("does not exist here") on the old-list coordinator and
// dead-lettered: the money taken, the order cancelled unpaid (the model
// test's fast mode).
type HoldSearch struct {
	Holds    Holds
	Products *Catalog
	// Now is the sale's clock (the one windows are judged by); nil: every
	// product is searched.
	Now func() time.Time
	// Keep is how long a reservation may stay without its order row
	// (twice the fail-fast age: older ids are not searched for at all).
	Keep time.Duration
}

// FindHold is Holds', or ErrUnavailable (and Permanent) when the hold
// may be on a shard this coordinator lacks. It searches only the products
// that may hold a reservation still without its order row (MayHold): a
// made-up id looked at every product on every shard (issue 41, finding 2).
// A product whose catalog entry cannot be read is searched all the same.
func (h HoldSearch) FindHold(ctx context.Context, products []string, id string) (string, string, int, bool, error) {
	cands := make([]string, 0, len(products))
	read := make(map[string]*shardstock.Product, len(products)) // (for the look at Moved below: one catalog read each)
	for _, pid := range products {
		p, err := h.Products.Product(ctx, pid)
		if err == nil {
			read[pid] = p
		}
		if err != nil || h.Now == nil || MayHold(p, h.Now(), h.Keep) {
			cands = append(cands, pid)
		}
	}
	product, user, shard, found, err := h.Holds.FindHold(ctx, cands, id)
	if found || err != nil {
		return product, user, shard, found, err
	}
	for _, pid := range cands {
		p, ok := read[pid]
		if !ok {
			var err error
			if p, err = h.Products.Product(ctx, pid); errors.Is(err, shardstock.ErrNotFound) {
				continue
			} else if err != nil {
				return "", "", -1, false, err
			}
		}
		if p.Moved != "" && !p.Archived {
			// Permanent for this process, until it restarts on the whole
			// list: a message consumer parks it, for a coordinator with
			// the whole list to claim once it has idled ClaimIdle (retried
			// here every few seconds, it would never idle that long).
			return "", "", -1, false, shardstock.Permanent(fmt.Errorf("%w: reservation %s may be held on a shard this coordinator does not list: %s", shardstock.ErrUnavailable, id, p.Moved))
		}
	}
	return "", "", -1, false, nil
}

// holdSkew is the margin MayHold leaves around a window for the sale's
// clock here and the shards' that judged it.
const holdSkew = time.Minute

// MayHold reports whether p may hold, at now (the sale's clock), a
// reservation still without its order row, which is at most keep old: a
// purchase is made only while its sale is open, so a product whose window
// (as defined: no operator ever changed it) has not started yet, or ended
// more than keep ago, holds none; nor does an archived one (its shard keys
// are gone). A window an operator changed, or a session's (which an
// operator may move), may have been open then and not now, so such a
// product may hold one whatever its window says.
func MayHold(p *shardstock.Product, now time.Time, keep time.Duration) bool {
	switch {
	case p.Archived:
		return false
	case p.WindowVersion != 0 || p.SessionWindow:
		return true
	case !p.StartsAt.IsZero() && p.StartsAt.After(now.Add(holdSkew)):
		return false
	case keep > 0 && !p.EndsAt.IsZero() && p.EndsAt.Add(keep+holdSkew).Before(now):
		return false
	}
	return true
}
