package inventory

import (
	"context"
	"fmt"

	"github.com/shardstock/shardstock"
)

// AuditConfig is an Audit's ports.
type AuditConfig struct {
	Addrs     []string // the shards' addresses, in index order
	Views     *Views
	Orders    OrderStore
	Transfers TransferStore
	Stock     *Stock
}

// Audit compares a product's shards with SQL, and puts right what is safe
// to. Safe for concurrent use.
type Audit struct{ cfg AuditConfig }

// NewAudit returns an Audit over cfg's ports.
func NewAudit(cfg AuditConfig) *Audit { return &Audit{cfg: cfg} }

// ShardDrift compares one shard's counters with the orders that name it.
type ShardDrift struct {
	Index  int                    `json:"index"`
	Up     bool                   `json:"up"`
	Shard  *shardstock.Totals     `json:"counters,omitempty"`
	Orders shardstock.OrderCounts `json:"orders"`
	// LockedDrift = locked - orders awaiting payment: above zero while
	// reservations are not yet orders or releases not yet applied.
	LockedDrift int64 `json:"locked_drift"`
	// SoldDrift = sold - paid orders: above zero never happens; below zero
	// while confirmations are on their way.
	SoldDrift int64 `json:"sold_drift"`
	// AllocDrift = alloc - what SQL says the shard was given (its share of
	// the split plus the transfers in, minus those out); SalableDrift =
	// salable - (that allocation - awaiting - paid orders). Zero when the
	// shard kept every write; otherwise units exist twice or went missing
	// (a restarted shard is resynced before it sells: see Resync).
	AllocDrift   int64 `json:"alloc_drift"`
	SalableDrift int64 `json:"salable_drift"`
}

// Reconciliation is the report of one product.
type Reconciliation struct {
	Product   string       `json:"product"`
	Shards    []ShardDrift `json:"shards"`
	InSync    bool         `json:"in_sync"`
	Resettled int64        `json:"resettled"`
	Actions   []string     `json:"actions"`
}

// Reconcile compares each shard's counters of product with the order table.
// A shard that does not answer is not compared (the report says so). With
// fix, it does what is safe on the shards that answered and drift: it marks
// their final orders for settlement again, so every paid unit is confirmed
// and every released one released (settlements are idempotent, so this
// cannot double count). It never edits counters directly, and never queues
// work for a shard that is down.
func (s *Audit) Reconcile(ctx context.Context, product string, fix bool) (*Reconciliation, error) {
	st, err := s.cfg.Views.Status(ctx, product)
	if err != nil {
		return nil, err
	}
	if st.Archived {
		return nil, errArchived(product)
	}
	counts, err := s.cfg.Orders.CountsByShard(ctx, product)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", shardstock.ErrUnavailable, err)
	}
	r := &Reconciliation{Product: product, InSync: true, Actions: []string{}}
	given, err := allocations(ctx, s.cfg.Transfers, &st.Product, len(s.cfg.Addrs))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", shardstock.ErrUnavailable, err)
	}
	var drifting []int
	for _, sh := range st.Shards {
		if !sh.Up {
			r.Actions = append(r.Actions, fmt.Sprintf("shard %d did not answer: not compared (reconcile again when it is back)", sh.Index))
		}
		d := ShardDrift{Index: sh.Index, Up: sh.Up, Orders: counts[sh.Index]}
		if sh.Up && sh.Salable != nil {
			d.Shard = &shardstock.Totals{Salable: *sh.Salable, Locked: *sh.Locked, Sold: *sh.Sold}
			d.LockedDrift = *sh.Locked - d.Orders.AwaitingPayment
			d.SoldDrift = *sh.Sold - d.Orders.Paid
			if given != nil {
				d.AllocDrift = *sh.Alloc - given[sh.Index]
				d.SalableDrift = *sh.Salable - (given[sh.Index] - d.Orders.AwaitingPayment - d.Orders.Paid)
			}
		}
		lostData := sh.Up && d.Shard == nil && d.Orders.AwaitingPayment+d.Orders.Paid > 0
		if lostData {
			r.Actions = append(r.Actions, fmt.Sprintf("shard %d holds no data for %s while orders name it: it lost its data; its allocation is given up", sh.Index, product))
		}
		if d.AllocDrift != 0 {
			r.Actions = append(r.Actions, fmt.Sprintf("shard %d holds %d units more than the split and the transfers gave it (alloc drift): look before selling on", sh.Index, d.AllocDrift))
		}
		r.InSync = r.InSync && sh.Up && !lostData && d.LockedDrift == 0 && d.SoldDrift == 0 && d.AllocDrift == 0 && d.SalableDrift == 0
		if d.Shard != nil && (d.LockedDrift != 0 || d.SoldDrift != 0) {
			drifting = append(drifting, sh.Index)
		}
		r.Shards = append(r.Shards, d)
	}
	if fix {
		resumed, err := s.cfg.Stock.Resume(ctx, "")
		for _, t := range resumed {
			r.Actions = append(r.Actions, fmt.Sprintf("finished interrupted transfer %s: %d units shard %d -> %d", t.ID, t.Moved, t.From, t.To))
		}
		if err != nil {
			return r, fmt.Errorf("%w: %w", shardstock.ErrUnavailable, err)
		}
	}
	if fix && len(drifting) > 0 {
		n, err := s.cfg.Orders.Resettle(ctx, product, drifting)
		if err != nil {
			return r, fmt.Errorf("%w: %w", shardstock.ErrUnavailable, err)
		}
		r.Resettled = n
		r.Actions = append(r.Actions, fmt.Sprintf("marked %d final orders on shards %v for settlement again", n, drifting))
	}
	return r, nil
}

// allocations is what SQL says each shard of p was given: its share of the
// split, plus the transfers that reached it, minus those that left it (a
// reversed transfer's units came back); the coordinator has shards shards.
func allocations(ctx context.Context, h TransferStore, p *shardstock.Product, shards int) (map[int]int64, error) {
	n := p.Shards(shards)
	given := map[int]int64{}
	for i, a := range split(p, n) {
		given[i] = a
	}
	for i := 0; i < n; i++ {
		ts, err := h.ShardTransfers(ctx, i)
		if err != nil {
			return nil, err
		}
		for _, t := range ts {
			if t.ProductID == p.ID && t.From == Outside && t.To == i && t.State == "done" {
				given[i] += t.Moved // stock an operator added
				continue
			}
			if t.ProductID != p.ID || t.From != i {
				continue // each transfer once, from its source's list
			}
			given[t.From] -= t.Moved
			switch t.State {
			case "done":
				given[t.To] += t.Moved
			case "reversed":
				given[t.From] += t.Moved
			}
		}
	}
	return given, nil
}
