package inventory

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/shardstock/shardstock"
	"github.com/shardstock/shardstock/shard"
)

// A sale's life after its definition: the kill switch, stock added or
// taken back, the window moved, the archive. The definition in the catalog
// never changes (the shards compare it, and a repeated PUT is idempotent
// against it); what an operator changes is kept beside it (Controls), and
// stock changes are transfers from or to Outside in the transfer log, with
// the transfers' crash safety: recorded in SQL before any shard changes,
// each step idempotent per transfer id, finished by Resume.
//
// Every coordinator reads the controls every ControlsEvery (RunControls)
// and drops its cached products when they changed, so a pause or a window
// change is obeyed everywhere within a second, with no Redis call per
// purchase: the purchase path checks the cached product (Product.Open).

// Controls is the catalog of the operators' changes (sqlstore.Store).
type Controls interface {
	ProductControls(ctx context.Context) (map[string]shardstock.Controls, error)
	SetPaused(ctx context.Context, id string, paused bool) error
	SetWindow(ctx context.Context, id string, starts, ends time.Time) error
	SetArchive(ctx context.Context, id string, st shardstock.ArchiveState) error
	RecordArchiveTotals(ctx context.Context, id string, totals []shardstock.ShardTotals) error
	RecordStockChange(ctx context.Context, changeID string, plan []shardstock.Transfer) ([]shardstock.Transfer, error)
	// BindKey records that an Idempotency-Key (its hash) was used for
	// request on product, or returns shardstock.ErrKeyReused when it was
	// first used for another.
	BindKey(ctx context.Context, keyHash, product, request string) error
	ArchiveTotals(ctx context.Context, id string) ([]shardstock.ShardTotals, error)
	StockChanges(ctx context.Context, id string) (added, removed int64, err error)
	OpenOrders(ctx context.Context, id string) (awaiting, unsettled int64, err error)
}

func errArchived(id string) error {
	return shardstock.Conflict("product " + id + " is archived: its shard keys are gone on purpose, and the catalog keeps its final totals")
}

// errNoControls answers the calls of a sale's life without a Controls.
var errNoControls = fmt.Errorf("%w: no catalog of controls configured", shardstock.ErrUnavailable)

func (s *Service) controlsOf(id string) (shardstock.Controls, bool) {
	m := s.controls.Load()
	if m == nil {
		return shardstock.Controls{}, false
	}
	c, ok := (*m)[id]
	return c, ok
}

// RefreshControls reads the controls and the sessions from the catalog;
// when they changed, every cached product is read again on its next use.
func (s *Service) RefreshControls(ctx context.Context) error {
	sessions, err := s.catalog.Sessions(ctx)
	if err != nil {
		return err
	}
	windows := sessionWindows(sessions)
	changed := false
	if old := s.sessions.Load(); old == nil || !maps.Equal(*old, windows) {
		s.sessions.Store(&windows)
		changed = true
	}
	if s.cfg.Controls != nil {
		m, err := s.cfg.Controls.ProductControls(ctx)
		if err != nil {
			return err
		}
		if old := s.controls.Load(); old == nil || !maps.Equal(*old, m) {
			s.controls.Store(&m)
			changed = true
		}
	}
	if changed {
		s.gen.Add(1)
	}
	return nil
}

// sessionWindow is the window a product without one of its own sells in:
// from the earliest start to the latest end of the sessions that list it.
type sessionWindow struct{ StartsAt, EndsAt time.Time }

func sessionWindows(sessions []shardstock.Session) map[string]sessionWindow {
	out := map[string]sessionWindow{}
	for _, ss := range sessions {
		for _, id := range ss.Products {
			w, ok := out[id]
			if !ok || ss.StartsAt.Before(w.StartsAt) {
				w.StartsAt = ss.StartsAt
			}
			if !ok || ss.EndsAt.After(w.EndsAt) {
				w.EndsAt = ss.EndsAt
			}
			out[id] = w
		}
	}
	return out
}

func (s *Service) sessionWindowOf(id string) (sessionWindow, bool) {
	m := s.sessions.Load()
	if m == nil {
		return sessionWindow{}, false
	}
	w, ok := (*m)[id]
	return w, ok
}

// RunControls refreshes the controls every `every` until ctx is done.
func (s *Service) RunControls(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	failing := false
	for {
		if err := s.RefreshControls(ctx); err != nil && ctx.Err() == nil {
			if !failing {
				s.cfg.Logger.Warn("could not read the product controls; keeping the last ones", "err", err)
			}
			failing = true
		} else {
			failing = false
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Pause turns product id's kill switch on (paused) or off.
func (s *Service) Pause(ctx context.Context, id string, paused bool) (*ProductStatus, error) {
	if s.cfg.Controls == nil {
		return nil, errNoControls
	}
	if _, err := s.Product(ctx, id); err != nil {
		return nil, err
	}
	if err := s.cfg.Controls.SetPaused(ctx, id, paused); err != nil {
		return nil, fmt.Errorf("%w: %w", shardstock.ErrUnavailable, err)
	}
	if err := s.RefreshControls(ctx); err != nil {
		return nil, fmt.Errorf("%w: %w", shardstock.ErrUnavailable, err)
	}
	s.cfg.Logger.Info("product paused", "product", id, "paused", paused)
	return s.Status(ctx, id)
}

// MoveWindow changes product id's window: ends (nil: unchanged) extends it
// or ends it early; starts (nil: unchanged) may move only while the sale
// has not started. A zero time is no bound. It is recorded in the catalog,
// then written to every shard of the product (the scripts judge by it); a
// shard that cannot answer gets it at its next resync, or from the first
// purchase it refuses for the window (shard.Set.Reserve), and the call
// answers ErrUnavailable (a repeat completes it).
func (s *Service) MoveWindow(ctx context.Context, id string, starts, ends *time.Time) (*ProductStatus, error) {
	if s.cfg.Controls == nil {
		return nil, errNoControls
	}
	p, err := s.Product(ctx, id)
	if err != nil {
		return nil, err
	}
	if p.Archived {
		return nil, errArchived(id)
	}
	next := *p
	now := s.cfg.Now()
	if starts != nil && !starts.Equal(p.StartsAt) {
		if p.StartsAt.IsZero() || !now.Before(p.StartsAt) {
			return nil, shardstock.Conflict("the sale has started: starts_at can no longer move")
		}
		next.StartsAt = starts.UTC()
	}
	if ends != nil {
		next.EndsAt = ends.UTC()
	}
	if !next.StartsAt.IsZero() && !next.EndsAt.IsZero() && !next.EndsAt.After(next.StartsAt) {
		return nil, shardstock.Invalid("ends_at must be after starts_at")
	}
	if err := s.cfg.Controls.SetWindow(ctx, id, next.StartsAt, next.EndsAt); err != nil {
		return nil, fmt.Errorf("%w: %w", shardstock.ErrUnavailable, err)
	}
	if err := s.RefreshControls(ctx); err != nil {
		return nil, fmt.Errorf("%w: %w", shardstock.ErrUnavailable, err)
	}
	cur, err := s.Product(ctx, id) // as recorded, with its version (a change made meanwhile is newer)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", shardstock.ErrUnavailable, err)
	}
	var errs error
	for i := range p.Shards(len(s.shards.Addrs())) {
		_, err := s.shards.SetWindow(ctx, i, cur)
		if err != nil && !errors.Is(err, shard.ErrNotOnShard) {
			errs = errors.Join(errs, err)
		}
	}
	if errs != nil {
		return nil, fmt.Errorf("%w: the window is recorded, but not every shard has it yet (a repeat, or the shard's resync, completes it): %w", shardstock.ErrUnavailable, errs)
	}
	s.cfg.Logger.Info("sale window moved", "product", id, "starts_at", next.StartsAt, "ends_at", next.EndsAt)
	return s.Status(ctx, id)
}

// ChangeStock adds units to product id, spread over its live shards that
// are not drained, or takes up to remove salable units back off sale
// (never a locked or sold one). key, when set, makes the call idempotent:
// a repeat with the same key changes nothing more (the Idempotency-Key
// header). Each shard's part is a transfer from or to Outside; all of them
// are recorded together before the first runs, and a retry with the same
// key finishes that plan (it never plans again: the salable units moved).
func (s *Service) ChangeStock(ctx context.Context, id string, add, remove int64, key string) (*ProductStatus, error) {
	if s.cfg.Controls == nil || s.cfg.Transfers == nil {
		return nil, errNoControls
	}
	if (add > 0) == (remove > 0) || add < 0 || remove < 0 || add > shardstock.MaxStock || remove > shardstock.MaxStock {
		return nil, shardstock.Invalid(`give one of "add" or "remove", a number of units from 1 to 2^40`)
	}
	p, err := s.Product(ctx, id)
	if err != nil {
		return nil, err
	}
	if p.Archived {
		return nil, errArchived(id)
	}
	if err := s.bindKey(ctx, id, key, add, remove); err != nil {
		return nil, err
	}
	st, err := s.Status(ctx, id)
	if err != nil {
		return nil, err
	}
	drained, err := s.cfg.Transfers.DrainedShards(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", shardstock.ErrUnavailable, err)
	}
	changeID := stockChangeID(id, key)
	var plan []shardstock.Transfer
	if add > 0 {
		var live []int
		up := 0
		for _, sh := range st.Shards[:p.Shards(len(s.shards.Addrs()))] {
			if sh.Up {
				up++
			}
			if sh.Up && sh.Alloc != nil && !drained[sh.Index] {
				live = append(live, sh.Index)
			}
		}
		switch {
		case len(live) > 0:
		case up == 0: // an outage: try again
			return nil, fmt.Errorf("%w: no shard of %s answers to put units on", shardstock.ErrUnavailable, id)
		default: // the operator's own doing: say what to change
			return nil, shardstock.Conflict(fmt.Sprintf("no shard of %s can take units: each one that answers is drained "+
				"or does not hold the product; put a shard back (POST /admin/v1/shards/{index}/drain {\"drained\": false}) first", id))
		}
		for j, n := range shardstock.SplitStock(add, len(live), spreadOffset(changeID, len(live))) {
			if n > 0 {
				plan = append(plan, shardstock.Transfer{ID: changeID + "-" + strconv.Itoa(live[j]), ProductID: id,
					From: Outside, To: live[j], Wanted: n})
			}
		}
	} else {
		shards := slices.Clone(st.Shards)
		slices.SortStableFunc(shards, func(a, b ShardStock) int { return int(salable(b) - salable(a)) })
		left := remove
		for _, sh := range shards {
			if left == 0 || salable(sh) == 0 {
				break
			}
			n := min(left, salable(sh))
			plan = append(plan, shardstock.Transfer{ID: changeID + "-" + strconv.Itoa(sh.Index), ProductID: id,
				From: sh.Index, To: Outside, Wanted: n})
			left -= n
		}
	}
	plan, err = s.cfg.Controls.RecordStockChange(ctx, changeID, plan)
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
	return s.Status(ctx, id)
}

func salable(sh ShardStock) int64 {
	if !sh.Up || sh.Salable == nil {
		return 0
	}
	return *sh.Salable
}

// bindKey ties key (if any) to this product and request: the same key sent
// with another product or another add/remove is refused
// (shardstock.ErrKeyReused, 422), instead of answering 200 for the first
// request's change while this one changes nothing.
func (s *Service) bindKey(ctx context.Context, id, key string, add, remove int64) error {
	if key == "" {
		return nil
	}
	request := fmt.Sprintf("add %d", add)
	if remove > 0 {
		request = fmt.Sprintf("remove %d", remove)
	}
	h := sha256.Sum256([]byte(key))
	err := s.cfg.Controls.BindKey(ctx, hex.EncodeToString(h[:]), id, request)
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

// currentStock is p's stock as its definition and the stock changes since
// make it.
func (s *Service) currentStock(ctx context.Context, p *shardstock.Product) (int64, error) {
	if s.cfg.Controls == nil {
		return p.Stock, nil
	}
	added, removed, err := s.cfg.Controls.StockChanges(ctx, p.ID)
	if err != nil {
		return 0, err
	}
	return p.Stock + added - removed, nil
}

// Archive ends product id's life on the shards, once its window has ended
// and every order is final: its final per-shard counters go to the
// catalog, then every key it has on the shards is deleted. Errors:
// ErrConflict naming what blocks it, ErrUnavailable (a repeat resumes it).
func (s *Service) Archive(ctx context.Context, id string) (*ProductStatus, error) {
	if s.cfg.Controls == nil {
		return nil, errNoControls
	}
	p, err := s.Product(ctx, id)
	if err != nil {
		return nil, err
	}
	c, _ := s.controlsOf(id)
	if c.Archive == shardstock.ArchiveNone {
		if err := s.archivable(ctx, p); err != nil {
			return nil, err
		}
		if err := s.recordTotals(ctx, p); err != nil {
			return nil, err
		}
		if err := s.cfg.Controls.SetArchive(ctx, id, shardstock.ArchiveRunning); err != nil {
			return nil, fmt.Errorf("%w: %w", shardstock.ErrUnavailable, err)
		}
	}
	if c.Archive != shardstock.ArchiveDone {
		for i := range p.Shards(len(s.shards.Addrs())) {
			if err := s.shards.DeleteProduct(ctx, i, id); err != nil {
				return nil, fmt.Errorf("%w: archive of %s stopped (a repeat, or the automatic archive, finishes it): %w", shardstock.ErrUnavailable, id, err)
			}
		}
		if err := s.cfg.Controls.SetArchive(ctx, id, shardstock.ArchiveDone); err != nil {
			return nil, fmt.Errorf("%w: %w", shardstock.ErrUnavailable, err)
		}
		s.cfg.Logger.Info("product archived: its shard keys are deleted, the catalog keeps its totals", "product", id)
	}
	if err := s.RefreshControls(ctx); err != nil {
		return nil, fmt.Errorf("%w: %w", shardstock.ErrUnavailable, err)
	}
	return s.Status(ctx, id)
}

// archivable says what keeps p from being archived now, if anything.
func (s *Service) archivable(ctx context.Context, p *shardstock.Product) error {
	if p.EndsAt.IsZero() || s.cfg.Now().Before(p.EndsAt) {
		return shardstock.Conflict(fmt.Sprintf("the sale of %s has not ended (ends_at %s): PATCH ends_at to end it", p.ID, formatTime(p.EndsAt)))
	}
	awaiting, unsettled, err := s.cfg.Controls.OpenOrders(ctx, p.ID)
	if err != nil {
		return fmt.Errorf("%w: %w", shardstock.ErrUnavailable, err)
	}
	if awaiting > 0 {
		return shardstock.Conflict(fmt.Sprintf("%d orders of %s await payment", awaiting, p.ID))
	}
	if unsettled > 0 {
		return shardstock.Conflict(fmt.Sprintf("%d settlements of %s are not applied on the shards yet", unsettled, p.ID))
	}
	if _, err := s.resume(ctx, p.ID); err != nil {
		return shardstock.Conflict(fmt.Sprintf("a transfer of %s cannot finish now: %v", p.ID, err))
	}
	return nil
}

// recordTotals keeps p's final counters of every shard in the catalog;
// every shard must answer, and hold no unit locked (a reservation whose
// order row is not written yet, or a settlement on its way).
func (s *Service) recordTotals(ctx context.Context, p *shardstock.Product) error {
	var totals []shardstock.ShardTotals
	for i := range p.Shards(len(s.shards.Addrs())) {
		c, err := s.shards.Counters(ctx, i, p.ID)
		if err != nil {
			return fmt.Errorf("%w: shard %d must answer to archive %s: %w", shardstock.ErrUnavailable, i, p.ID, err)
		}
		if c.Locked > 0 {
			return shardstock.Conflict(fmt.Sprintf("shard %d still holds %d locked units of %s (reservations or settlements on their way)", i, c.Locked, p.ID))
		}
		totals = append(totals, shardstock.ShardTotals{Shard: i, Alloc: c.Alloc, Salable: c.Salable, Locked: c.Locked, Sold: c.Sold})
	}
	if err := s.cfg.Controls.RecordArchiveTotals(ctx, p.ID, totals); err != nil {
		return fmt.Errorf("%w: %w", shardstock.ErrUnavailable, err)
	}
	return nil
}

// ArchiveDue archives every product whose window ended more than after ago
// and whose orders are final, and finishes archives that stopped midway;
// products that are not ready yet are left for the next call.
func (s *Service) ArchiveDue(ctx context.Context, after time.Duration) error {
	ids, err := s.catalog.ProductIDs(ctx)
	if err != nil {
		return err
	}
	var errs error
	for _, id := range ids {
		p, err := s.Product(ctx, id)
		if err != nil {
			errs = errors.Join(errs, err)
			continue
		}
		c, _ := s.controlsOf(id)
		due := c.Archive == shardstock.ArchiveRunning ||
			c.Archive == shardstock.ArchiveNone && !p.EndsAt.IsZero() && s.cfg.Now().After(p.EndsAt.Add(after))
		if !due {
			continue
		}
		if _, err := s.Archive(ctx, id); err != nil && !errors.Is(err, shardstock.ErrConflict) {
			errs = errors.Join(errs, err)
		}
	}
	return errs
}

// archivedStatus is the view of an archived product: the totals the
// catalog kept.
func (s *Service) archivedStatus(ctx context.Context, st *ProductStatus) error {
	totals, err := s.cfg.Controls.ArchiveTotals(ctx, st.ID)
	if err != nil {
		return fmt.Errorf("%w: %w", shardstock.ErrUnavailable, err)
	}
	st.Shards = st.Shards[:0]
	for _, t := range totals {
		sh := ShardStock{Index: t.Shard, Up: true, Alloc: &t.Alloc, Salable: &t.Salable, Locked: &t.Locked, Sold: &t.Sold}
		if t.Shard < len(s.shards.Addrs()) {
			sh.Addr = s.shards.Addrs()[t.Shard]
		}
		st.Shards = append(st.Shards, sh)
		st.Totals.Salable += t.Salable
		st.Totals.Locked += t.Locked
		st.Totals.Sold += t.Sold
	}
	return nil
}

func formatTime(t time.Time) string {
	if t.IsZero() {
		return "none"
	}
	return t.UTC().Format(time.RFC3339)
}
