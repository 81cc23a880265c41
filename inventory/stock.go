package inventory

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/shardstock/shardstock"
)

// StockConfig is a Stock's ports.
type StockConfig struct {
	Addrs     []string // the shards' addresses, in index order
	Products  *Catalog
	Catalog   CatalogStore
	Views     *Views
	Transfers TransferStore
	ShardLog  ShardLog
	Shards    StockShards
	Logger    *slog.Logger
	// AfterStep, if set (tests), is called after each step of a transfer;
	// an error stops the transfer there, as a crash would.
	AfterStep func(step string) error
}

// Stock moves salable units: on and off sale (ChangeStock), between shards
// (Rebalance), off a shard (Drain), each move a transfer that Resume
// finishes after a crash. Safe for concurrent use.
type Stock struct {
	cfg  StockConfig
	hook stepHook // tests: stop a transfer after a step
}

// NewStock returns a Stock over cfg's ports.
func NewStock(cfg StockConfig) *Stock {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Stock{cfg: cfg, hook: cfg.AfterStep}
}

// ChangeStock adds units to product id, spread over its live shards that
// are not drained, or takes up to remove salable units back off sale
// (never a locked or sold one). key, when set, makes the call idempotent:
// a repeat with the same key changes nothing more (the Idempotency-Key
// header). Each shard's part is a transfer from or to Outside; all of them
// are recorded together before the first runs, and a retry with the same
// key finishes that plan (it never plans again: the salable units moved).
func (s *Stock) ChangeStock(ctx context.Context, id string, add, remove int64, key string) (*ProductStatus, error) {
	if (add > 0) == (remove > 0) || add < 0 || remove < 0 || add > shardstock.MaxStock || remove > shardstock.MaxStock {
		return nil, shardstock.Invalid(`give one of "add" or "remove", a number of units from 1 to 2^40`)
	}
	p, err := s.cfg.Products.Product(ctx, id)
	if err != nil {
		return nil, err
	}
	if p.Archived {
		return nil, errArchived(id)
	}
	if err := unseen(p); err != nil {
		return nil, err
	}
	if err := s.bindKey(ctx, id, key, add, remove); err != nil {
		return nil, err
	}
	st, err := s.cfg.Views.Status(ctx, id)
	if err != nil {
		return nil, err
	}
	drained, err := s.cfg.ShardLog.DrainedShards(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", shardstock.ErrUnavailable, err)
	}
	changeID := stockChangeID(id, key)
	plan, err := changePlan(changeID, id, st.Shards[:min(p.Shards(len(s.cfg.Addrs)), len(st.Shards))], drained, add, remove)
	if err != nil {
		return nil, err
	}
	plan, err = s.cfg.Transfers.RecordStockChange(ctx, changeID, plan)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", shardstock.ErrUnavailable, err)
	}
	if err := s.step("recorded"); err != nil {
		return nil, err
	}
	var moved int64
	for _, t := range plan {
		n, err := s.finish(ctx, t)
		if err != nil {
			return nil, fmt.Errorf("%w: stock change on shard %d (a repeat with the same Idempotency-Key completes it): %w",
				shardstock.ErrUnavailable, max(t.From, t.To), err)
		}
		moved += n
	}
	s.cfg.Logger.Info("stock changed", "product", id, "added", add, "remove_asked", remove, "units", moved, "change", changeID)
	return s.cfg.Views.Status(ctx, id)
}

// bindKey ties key (if any) to this product and request: the same key sent
// with another product or another add/remove is refused
// (shardstock.ErrKeyReused, 422), instead of answering 200 for the first
// request's change while this one changes nothing.
func (s *Stock) bindKey(ctx context.Context, id, key string, add, remove int64) error {
	if key == "" {
		return nil
	}
	request := fmt.Sprintf("add %d", add)
	if remove > 0 {
		request = fmt.Sprintf("remove %d", remove)
	}
	h := sha256.Sum256([]byte(key))
	err := s.cfg.Transfers.BindKey(ctx, hex.EncodeToString(h[:]), id, request)
	if err != nil && !errors.Is(err, shardstock.ErrKeyReused) {
		return fmt.Errorf("%w: %w", shardstock.ErrUnavailable, err)
	}
	return err
}

// stockChangeID names a stock change: from the request's idempotency key
// when there is one (the same key, the same transfer ids), else new.
func stockChangeID(product, key string) string {
	if key == "" {
		return "c" + ulid.Make().String()
	}
	h := sha256.Sum256([]byte(product + "\x00" + key))
	return "k" + hex.EncodeToString(h[:12])
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

func (s *Stock) step(name string) error {
	if s.hook == nil {
		return nil
	}
	return s.hook(name)
}

// transfer records and runs one transfer; it returns the units moved.
func (s *Stock) transfer(ctx context.Context, t shardstock.Transfer) (int64, error) {
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
func (s *Stock) finish(ctx context.Context, t shardstock.Transfer) (int64, error) {
	n := t.Wanted
	switch {
	case t.From == Outside:
	case t.State == "out":
		n = t.Moved // the step out is done and counted in SQL (a resync replays it on a shard that lost it)
	default:
		var err error
		n, err = s.cfg.Shards.TransferOut(ctx, t.From, t.ProductID, t.ID, t.Wanted, t.To)
		if errors.Is(err, shardstock.ErrNotOnShard) {
			// The source lost its data: whether this step ran before (its
			// record went with the data) nobody can tell, and the units it
			// would take are given up with the shard's allocation anyway
			// (Catalog.allocate). Counted as moving none, so a removal
			// never takes the stock below units the lost shard may have
			// sold; retried, it would fail for good and hold up the
			// product's archive (found by the model test's fast mode).
			s.cfg.Logger.Warn("a transfer's source lost the product: it moves nothing, the units are given up with the shard's data",
				"id", t.ID, "product", t.ProductID, "shard", t.From)
			return 0, s.cfg.Transfers.MarkTransfer(ctx, t.ID, "done", 0)
		}
		if err != nil {
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
		err := s.cfg.Shards.TransferIn(ctx, t.To, t.ProductID, t.ID, n, t.From)
		if errors.Is(err, shardstock.ErrNotOnShard) {
			// The destination lost its data since: whether the units
			// reached it before (and were sold there: the coordinator died
			// after this step) nobody can tell now, its record of the step
			// went with the data. They count as moved, given up with the
			// rest of its allocation (Catalog.allocate). Put back on the
			// source, units sold on the destination before it lost them
			// would be sold a second time: 7 orders on a stock of 5 for an
			// addition, 4 on a stock of 3 for a rebalance's transfer (both
			// found by the model test's fast mode). Giving them up can only
			// sell less.
			s.cfg.Logger.Warn("a transfer's destination lost the product: its units count as moved, given up with the shard's data",
				"id", t.ID, "product", t.ProductID, "from", t.From, "to", t.To, "units", n)
			return n, s.cfg.Transfers.MarkTransfer(ctx, t.ID, "done", n)
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

// reversalID is the id under which a reversed transfer's units went back
// to its source. No transfer is reversed any more (see finish); records
// of reversed transfers written before are still read (resync, reconcile).
func reversalID(id string) string { return id + "-back" }

// Resume finishes every unfinished transfer of product ("": of every
// product) and returns them; those that still cannot finish (a shard down)
// are left for the next call, their errors combined.
func (s *Stock) Resume(ctx context.Context, product string) ([]shardstock.Transfer, error) {
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
		if err := s.reaches(ctx, t); err != nil {
			errs = errors.Join(errs, fmt.Errorf("transfer %s: %w", t.ID, err))
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

// reaches says why this coordinator cannot run transfer t's steps (nil:
// it can): its product lives on shards this coordinator does not list, or
// lists in other places (a rolling grow).
func (s *Stock) reaches(ctx context.Context, t shardstock.Transfer) error {
	p, err := s.cfg.Products.Product(ctx, t.ProductID)
	if err != nil {
		return err
	}
	return unseen(p)
}

// unseen refuses to move the stock of a product this coordinator cannot
// see whole (Moved: a rolling grow, a coordinator still on the old shard
// list), or to write its window or archive it: its shards here are not
// all of its own, by index. Its resync of a restarted shard skips such a product
// (ErrResyncPartial), so a shard it has may not be back in line for it
// yet: units moved on it now would be moved on counters a crash left
// behind, and the resync that replays the lost moves later would find
// them gone. A coordinator with the product's shard list moves them.
func unseen(p *shardstock.Product) error {
	if p.Moved == "" {
		return nil
	}
	return &shardstock.Error{Code: shardstock.ErrUnavailable.Code, Message: p.Moved + " (a coordinator with the product's shard list does it)"}
}

// RunResume finishes interrupted transfers by itself until ctx is done,
// every interval: one that was unfinished at the last look and still is
// (a coordinator died between its steps, or a shard was down) is resumed.
// A transfer only started is left one interval to its own request. Every
// step is safe to run twice, and its record only moves forward, so a
// resume beside the request that is still running it changes nothing.
// Without it, units an addition put on a shard before its coordinator died
// would be salable past the stock until an operator's rebalance, drain or
// reconcile fix ran Resume.
func (s *Stock) RunResume(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	seen := map[string]bool{}
	logged := map[string]bool{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		open, err := s.cfg.Transfers.UnfinishedTransfers(ctx)
		if err != nil {
			continue // the database is away: the next look
		}
		now := map[string]bool{}
		for _, tr := range open {
			now[tr.ID] = true
			if !seen[tr.ID] {
				continue
			}
			if err := s.reaches(ctx, tr); err != nil {
				if !logged[tr.ID] {
					logged[tr.ID] = true
					s.cfg.Logger.Warn("an interrupted transfer is left to another coordinator", "id", tr.ID, "product", tr.ProductID, "err", err)
				}
				continue
			}
			if _, err := s.finish(ctx, tr); err != nil {
				if !logged[tr.ID] {
					logged[tr.ID] = true
					s.cfg.Logger.Warn("an interrupted transfer could not finish yet; will retry", "id", tr.ID, "product", tr.ProductID, "err", err)
				}
				continue
			}
			s.cfg.Logger.Info("finished an interrupted transfer", "id", tr.ID, "product", tr.ProductID, "from", tr.From, "to", tr.To)
		}
		seen = now
		for id := range logged {
			if !now[id] {
				delete(logged, id)
			}
		}
	}
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
func (s *Stock) Rebalance(ctx context.Context, product string) (*Rebalance, error) {
	rep := &Rebalance{Product: product, Resumed: []shardstock.Transfer{}, Transfers: []shardstock.Transfer{}}
	resumed, err := s.Resume(ctx, product)
	rep.Resumed = append(rep.Resumed, resumed...)
	if err != nil {
		rep.Stuck = append(rep.Stuck, err.Error())
	}
	st, err := s.cfg.Views.Status(ctx, product)
	if err != nil {
		return rep, err
	}
	if st.Archived {
		return rep, errArchived(product)
	}
	if err := unseen(&st.Product); err != nil {
		return rep, err
	}
	drained, err := s.cfg.ShardLog.DrainedShards(ctx)
	if err != nil {
		return rep, fmt.Errorf("%w: %w", shardstock.ErrUnavailable, err)
	}
	for _, t := range rebalancePlan(st.Shards, drained, product) {
		n, err := s.transfer(ctx, t)
		if err != nil {
			return rep, fmt.Errorf("%w: transfer %d units %d->%d: %w", shardstock.ErrUnavailable, t.Wanted, t.From, t.To, err)
		}
		t.Moved, t.State = n, "done"
		rep.Transfers = append(rep.Transfers, t)
	}
	after, err := s.cfg.Views.Status(ctx, product)
	if err == nil {
		rep.Shards = after.Shards
	}
	return rep, nil
}

// Drain takes shard out of rotation for maintenance (drained = true): it is
// put on the drained list and every product's salable units move off it, so
// purchases find it empty and skip it; holds on it still settle there.
// drained = false puts it back (a rebalance then spreads units onto it).
// It returns the units moved per product.
func (s *Stock) Drain(ctx context.Context, shard int, drained bool) (map[string]int64, error) {
	if shard < 0 || shard >= len(s.cfg.Addrs) {
		return nil, shardstock.ErrNoShard
	}
	if err := s.cfg.ShardLog.SetDrained(ctx, shard, drained); err != nil {
		return nil, fmt.Errorf("%w: %w", shardstock.ErrUnavailable, err)
	}
	moved := map[string]int64{}
	if !drained {
		return moved, nil
	}
	ids, err := s.cfg.Catalog.ProductIDs(ctx)
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
