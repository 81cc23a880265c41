package inventory

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/shardstock/shardstock"
)

// HoldFinder finds a reservation's hold on this coordinator's shards
// (shard.Set; order.HoldFinder).
type HoldFinder interface {
	FindHold(ctx context.Context, products []string, id string) (product, user string, shard int, found bool, err error)
}

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
	Finder   HoldFinder
	Products Products
}

// FindHold is Finder's, or ErrUnavailable (and Permanent) when the hold
// may be on a shard this coordinator lacks. It looks only among the
// products that may hold reservation id (MayHold): a made-up id stamped
// now looked at every product on every shard (issue 41, finding 2).
func (h HoldSearch) FindHold(ctx context.Context, products []string, id string) (string, string, int, bool, error) {
	var cands []*shardstock.Product
	for _, pid := range products {
		p, err := h.Products.Product(ctx, pid)
		switch {
		case errors.Is(err, shardstock.ErrNotFound):
			continue
		case err != nil:
			return "", "", -1, false, err
		}
		if MayHold(p, id) {
			cands = append(cands, p)
		}
	}
	ids := make([]string, len(cands))
	for i, p := range cands {
		ids[i] = p.ID
	}
	product, user, shard, found, err := h.Finder.FindHold(ctx, ids, id)
	if found || err != nil {
		return product, user, shard, found, err
	}
	for _, p := range cands {
		if p.Moved != "" {
			// Permanent for this process, until it restarts on the whole
			// list: a message consumer parks it, for a coordinator with
			// the whole list to claim once it has idled ClaimIdle (retried
			// here every few seconds, it would never idle that long).
			return "", "", -1, false, shardstock.Permanent(fmt.Errorf("%w: reservation %s may be held on a shard this coordinator does not list: %s", shardstock.ErrUnavailable, id, p.Moved))
		}
	}
	return "", "", -1, false, nil
}

// holdSkew is the clock difference between the coordinator that made a
// reservation's id and the shards that judged its sale open that MayHold
// allows for.
const holdSkew = time.Minute

// MayHold reports whether p may hold a hold of reservation id. An id is a
// ULID stamped when its purchase was made, and a purchase is made only
// while its sale is open: a product whose window (as defined: no operator
// ever changed it) did not contain that time holds none, nor does an
// archived one (its shard keys are gone). A window an operator changed, or
// a session's (which an operator may move), may have been open then and
// not now, so such a product may hold any; so may any product for an id
// that is not a ULID.
func MayHold(p *shardstock.Product, id string) bool {
	if p.Archived {
		return false
	}
	u, err := ulid.ParseStrict(id)
	if err != nil || p.WindowVersion != 0 || p.SessionWindow {
		return true
	}
	t := ulid.Time(u.Time())
	return (p.StartsAt.IsZero() || !t.Before(p.StartsAt.Add(-holdSkew))) && (p.EndsAt.IsZero() || !t.After(p.EndsAt.Add(holdSkew)))
}
