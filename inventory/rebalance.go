package inventory

import (
	"context"
	"errors"
	"fmt"

	"github.com/oklog/ulid/v2"

	"github.com/shardstock/shardstock"
	"github.com/shardstock/shardstock/shard"
)

// Transfers is the durable transfer log and drain list (sqlstore.Store).
type Transfers interface {
	// StartTransfer records t before its first step and returns the record:
	// t, or the transfer recorded under its id before (a retried request).
	StartTransfer(ctx context.Context, t shardstock.Transfer) (shardstock.Transfer, error)
	MarkTransfer(ctx context.Context, id, state string, moved int64) error
	UnfinishedTransfers(ctx context.Context) ([]shardstock.Transfer, error)
	ShardTransfers(ctx context.Context, shard int) ([]shardstock.Transfer, error)
	SetDrained(ctx context.Context, shard int, drained bool) error
	DrainedShards(ctx context.Context) (map[int]bool, error)
}

// A transfer moves salable units between two shards in four steps, each
// safe to repeat: (1) the transfer is recorded in SQL; (2) transfer_out.lua
// takes up to the wanted units off the source (salable and alloc drop
// together) and remembers how many under the transfer id; (3) SQL records
// the count; (4) transfer_in.lua adds them to the destination once; then
// the record is marked done. A crash after any step leaves units only "in
// flight" (off the source, not yet on the destination): never created, and
// Resume — run by every rebalance, drain and reconcile fix — finishes the
// transfer from where it stopped. Conservation holds on each shard at every
// step; Σ alloc ≤ stock, with equality once no transfer is unfinished.

// stepHook, when set (tests), is called after each step; an error stops
// the transfer there, as a crash would.
type stepHook func(step string) error

func (s *Service) step(name string) error {
	if s.hook == nil {
		return nil
	}
	return s.hook(name)
}

// transfer records and runs one transfer; it returns the units moved.
func (s *Service) transfer(ctx context.Context, t shardstock.Transfer) (int64, error) {
	t, err := s.cfg.Transfers.StartTransfer(ctx, t)
	if err != nil {
		return 0, err
	}
	if err := s.step("recorded"); err != nil {
		return 0, err
	}
	return s.finish(ctx, t)
}

// finish completes a recorded transfer from whatever step it reached. A
// stock change is a transfer with one end Outside the shards: an addition
// has no step out (its units come from outside), a removal no step in.
func (s *Service) finish(ctx context.Context, t shardstock.Transfer) (int64, error) {
	n := t.Wanted
	if t.From != Outside {
		var err error
		if n, err = s.shards.TransferOut(ctx, t.From, t.ProductID, t.ID, t.Wanted, t.To); err != nil {
			return 0, err
		}
		if err := s.step("out"); err != nil {
			return 0, err
		}
		if err := s.cfg.Transfers.MarkTransfer(ctx, t.ID, "out", n); err != nil {
			return 0, err
		}
		if err := s.step("marked"); err != nil {
			return 0, err
		}
	}
	if n > 0 && t.To != Outside {
		err := s.shards.TransferIn(ctx, t.To, t.ProductID, t.ID, n, t.From)
		if errors.Is(err, shard.ErrNotOnShard) {
			if t.From == Outside { // nothing left anywhere: the addition did not happen
				return 0, s.cfg.Transfers.MarkTransfer(ctx, t.ID, "reversed", n)
			}
			return s.reverse(ctx, t, n)
		}
		if err != nil {
			return 0, err
		}
	}
	if err := s.step("in"); err != nil {
		return 0, err
	}
	return n, s.cfg.Transfers.MarkTransfer(ctx, t.ID, "done", n)
}

// Outside is the shard index of a stock change's other end: units an
// operator adds come from it, units removed go to it.
const Outside = -1

// reverse puts the n units of transfer t back on its source, because its
// destination lost the product (its data): a recorded step, under its own
// transfer id on the source, so a repeat adds nothing. The transfer ends
// "reversed" and moves nothing.
func (s *Service) reverse(ctx context.Context, t shardstock.Transfer, n int64) (int64, error) {
	if err := s.shards.TransferIn(ctx, t.From, t.ProductID, reversalID(t.ID), n, t.To); err != nil {
		return 0, fmt.Errorf("reverse onto shard %d: %w", t.From, err)
	}
	s.cfg.Logger.Warn("transfer reversed: its destination lost the product", "id", t.ID, "product", t.ProductID,
		"from", t.From, "to", t.To, "units", n)
	return 0, s.cfg.Transfers.MarkTransfer(ctx, t.ID, "reversed", n)
}

// reversalID is the id under which a reversed transfer's units went back
// to its source.
func reversalID(id string) string { return id + "-back" }

// Resume finishes every unfinished transfer and returns them; those that
// still cannot finish (a shard down) are left for the next call, their
// errors combined.
func (s *Service) Resume(ctx context.Context) ([]shardstock.Transfer, error) {
	return s.resume(ctx, "")
}

// resume is Resume for the transfers of product ("": every product).
func (s *Service) resume(ctx context.Context, product string) ([]shardstock.Transfer, error) {
	if s.cfg.Transfers == nil {
		return nil, nil
	}
	open, err := s.cfg.Transfers.UnfinishedTransfers(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", shardstock.ErrUnavailable, err)
	}
	var errs error
	var done []shardstock.Transfer
	for _, t := range open {
		if product != "" && t.ProductID != product {
			continue
		}
		n, err := s.finish(ctx, t)
		if err != nil {
			errs = errors.Join(errs, fmt.Errorf("transfer %s: %w", t.ID, err))
			continue
		}
		t.Moved, t.State = n, "done"
		done = append(done, t)
		s.cfg.Logger.Info("finished an interrupted transfer", "id", t.ID, "product", t.ProductID, "from", t.From, "to", t.To, "units", n)
	}
	return done, errs
}

// Rebalance is what a rebalance did.
type Rebalance struct {
	Product   string                `json:"product"`
	Resumed   []shardstock.Transfer `json:"resumed"`
	Transfers []shardstock.Transfer `json:"transfers"`
	Shards    []ShardStock          `json:"shards"`
	// Stuck lists the product's unfinished transfers that could not finish
	// now (a shard down): they do not stop the rebalance, and the next one
	// tries them again.
	Stuck []string `json:"stuck,omitempty"`
}

// Rebalance spreads product's salable units evenly over the live shards
// that are not drained, and moves every salable unit off drained ones.
// Shards that cannot answer keep their units. It first finishes the
// product's own interrupted transfers; one that cannot finish now is
// reported (Stuck) and holds up nothing — another product's never does.
// Errors: ErrNotFound, ErrUnavailable (with the transfers done so far in
// the report).
func (s *Service) Rebalance(ctx context.Context, product string) (*Rebalance, error) {
	if s.cfg.Transfers == nil {
		return nil, fmt.Errorf("%w: no transfer log configured", shardstock.ErrUnavailable)
	}
	rep := &Rebalance{Product: product, Resumed: []shardstock.Transfer{}, Transfers: []shardstock.Transfer{}}
	resumed, err := s.resume(ctx, product)
	rep.Resumed = append(rep.Resumed, resumed...)
	if err != nil {
		rep.Stuck = append(rep.Stuck, err.Error())
	}
	st, err := s.Status(ctx, product)
	if err != nil {
		return rep, err
	}
	if st.Archived {
		return rep, errArchived(product)
	}
	drained, err := s.cfg.Transfers.DrainedShards(ctx)
	if err != nil {
		return rep, fmt.Errorf("%w: %w", shardstock.ErrUnavailable, err)
	}
	for _, t := range plan(st.Shards, drained, product) {
		n, err := s.transfer(ctx, t)
		if err != nil {
			return rep, fmt.Errorf("%w: transfer %d units %d->%d: %w", shardstock.ErrUnavailable, t.Wanted, t.From, t.To, err)
		}
		t.Moved, t.State = n, "done"
		rep.Transfers = append(rep.Transfers, t)
	}
	after, err := s.Status(ctx, product)
	if err == nil {
		rep.Shards = after.Shards
	}
	return rep, nil
}

// plan pairs shards above their target with shards below it. Targets: 0
// on drained shards, the total spread evenly (within one unit) on the others.
func plan(shards []ShardStock, drained map[int]bool, product string) []shardstock.Transfer {
	var total int64
	var live []int
	for _, sh := range shards {
		if !sh.Up || sh.Salable == nil {
			continue
		}
		total += *sh.Salable
		if !drained[sh.Index] {
			live = append(live, sh.Index)
		}
	}
	if len(live) == 0 {
		return nil
	}
	target := map[int]int64{}
	for k, n := range shardstock.SplitStock(total, len(live), 0) {
		target[live[k]] = n
	}
	type delta struct {
		shard int
		n     int64
	}
	var over, under []delta
	for _, sh := range shards {
		if !sh.Up || sh.Salable == nil {
			continue
		}
		switch d := *sh.Salable - target[sh.Index]; {
		case d > 0:
			over = append(over, delta{sh.Index, d})
		case d < 0:
			under = append(under, delta{sh.Index, -d})
		}
	}
	var out []shardstock.Transfer
	for len(over) > 0 && len(under) > 0 {
		n := min(over[0].n, under[0].n)
		out = append(out, shardstock.Transfer{ID: ulid.Make().String(), ProductID: product, From: over[0].shard, To: under[0].shard, Wanted: n})
		over[0].n -= n
		under[0].n -= n
		if over[0].n == 0 {
			over = over[1:]
		}
		if under[0].n == 0 {
			under = under[1:]
		}
	}
	return out
}

// Drain takes shard out of rotation for maintenance (drained = true): it is
// put on the drained list and every product's salable units move off it, so
// purchases find it empty and skip it; holds on it still settle there.
// drained = false puts it back (a rebalance then spreads units onto it).
// It returns the units moved per product.
func (s *Service) Drain(ctx context.Context, shard int, drained bool) (map[string]int64, error) {
	if shard < 0 || shard >= len(s.shards.Addrs()) {
		return nil, shardstock.ErrNotFound
	}
	if s.cfg.Transfers == nil {
		return nil, fmt.Errorf("%w: no transfer log configured", shardstock.ErrUnavailable)
	}
	if err := s.cfg.Transfers.SetDrained(ctx, shard, drained); err != nil {
		return nil, fmt.Errorf("%w: %w", shardstock.ErrUnavailable, err)
	}
	moved := map[string]int64{}
	if !drained {
		return moved, nil
	}
	ids, err := s.catalog.ProductIDs(ctx)
	if err != nil {
		return moved, fmt.Errorf("%w: %w", shardstock.ErrUnavailable, err)
	}
	var errs error
	for _, id := range ids {
		rep, err := s.Rebalance(ctx, id)
		if errors.Is(err, shardstock.ErrConflict) {
			continue // archived: nothing on the shards to move
		}
		if err != nil {
			errs = errors.Join(errs, err) // the other products still drain
		}
		for _, t := range rep.Transfers {
			if t.From == shard {
				moved[id] += t.Moved
			}
		}
	}
	return moved, errs
}
