package inventory

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/shardstock/shardstock"
)

// ResyncConfig is a Resync's ports.
type ResyncConfig struct {
	Addrs     []string // the shards' addresses, in index order
	Products  *Catalog
	Catalog   CatalogStore
	Transfers TransferStore
	Orders    OrderStore // nil: no order table (a shard set tested alone)
	Shards    StockShards
	Holds     Holds
	Claims    Claims
	ShardLog  ShardLog         // nil: orders written late are not checked (HoldLate)
	Fenced    func(i int) bool // with ShardLog: whether shard i is fenced now (shard.Fence)
	// FailLost fails an order awaiting payment whose unit its shard lost
	// with its last writes and sold again (or moved off) since: found by
	// HoldLate or by a resync (order.Service.FailLost). nil: HoldLate only
	// logs it, and a resync keeps the shard fenced for an operator.
	FailLost func(ctx context.Context, id, user string) error
	Now      func() time.Time
	Logger   *slog.Logger
}

// Resync brings restarted shards back in line with SQL, and keeps the
// reason a shard stays fenced. Safe for concurrent use.
type Resync struct {
	cfg      ResyncConfig
	problems resyncProblems
	times    syncedTimes
	seen     seenOrders
}

// NewResync returns a Resync over cfg's ports.
func NewResync(cfg ResyncConfig) *Resync {
	orDefaults(&cfg.Now, &cfg.Logger)
	return &Resync{cfg: cfg}
}

// Resync brings shard i back in line with SQL after it restarted (the shard
// set fences it until then: shard/resync.go). What a crash can take from a
// shard is its last writes: settlements, transfers, holds and claims it had
// applied. SQL says what each was (the order table, the transfer log), and
// each is applied again on the shard itself with a script that changes
// nothing when the shard kept it. Per product, in this order:
//
//  1. settlements of the final orders held on the shard: a lost release
//     gives its unit back (a lost confirm moves a locked unit to sold);
//  2. units that came to the shard: transfers in whose units left their
//     source, stock added to it, reversals back to it;
//  3. units that left it: transfers out, exactly as many as SQL says moved
//     (ReplayTransferOut), then the holds of live orders (awaiting payment:
//     locked; paid: sold);
//  4. the per-user limit registers of its buyers, and the sale window.
//
// Why this order: the lost writes happened in some order in which salable
// never went below zero. Steps 1-2 only add salable units and step 3 only
// takes them, so replaying every addition first keeps salable at or above
// the value the real history ended with at every step: a take can only find
// too few units when the shard and SQL disagree beyond a lost second. (Taking
// first, a hold restored before the release of the unit it was sold from
// would find no unit, and a transfer replayed before its units were
// released would take none and be recorded as done.)
//
// It then checks the shard against the transfer log: its allocation must be
// what the split and the transfers gave it, and the product's allocations
// must not sum past its current stock. When a take finds too few units or a
// check fails, the shard stays fenced (Shard returns ErrResyncBlocked, the
// shard overview and the metrics say why) until a later resync (tried every
// second) finds the disagreement gone, or an operator accepts the shard as
// it stands (Accept). A shard that
// lost a product altogether is data loss, not a lost second (allocate and the
// register rebuild handle it). Other errors leave the shard fenced too;
// Resync is tried again.
func (s *Resync) Shard(ctx context.Context, i int) error {
	ctx = shardstock.ResyncContext(ctx)
	s.seen.start(i)
	ids, err := s.cfg.Catalog.ProductIDs(ctx)
	if err != nil {
		return fmt.Errorf("resync shard %d: catalog: %w", i, err)
	}
	ts, err := s.shardTransfers(ctx, i)
	if err != nil {
		return fmt.Errorf("resync shard %d: transfers: %w", i, err)
	}
	var problems, unseen []string
	for _, id := range ids {
		err := s.resyncProduct(ctx, i, id, ts[id])
		var d disagreement
		switch {
		case errors.Is(err, errUnseen):
			unseen = append(unseen, id)
		case errors.As(err, &d):
			problems = append(problems, d.Error())
		case err != nil:
			return fmt.Errorf("resync shard %d: %s: %w", i, id, err)
		}
	}
	s.setResyncProblem(i, strings.Join(problems, "; "))
	if len(problems) > 0 {
		return fmt.Errorf("resync shard %d: %w: %s", i, ErrResyncBlocked, strings.Join(problems, "; "))
	}
	if len(unseen) > 0 {
		return fmt.Errorf("resync shard %d: %w: %s", i, ErrResyncPartial, strings.Join(unseen, ", "))
	}
	return nil
}

// ErrResyncPartial: the resync brought back in line every product this
// coordinator sells, but the catalog has products on shards this
// coordinator does not list, or lists in other places (a rolling grow: a
// coordinator still on the old shard list). Their lost writes are not
// replayed and not checked, so the run must not be put on record as
// resynced: the record speaks for every product, and a coordinator that
// does see them would open its fence from it without replaying, say, a
// drain the shard lost, and sell those units a second time. This
// coordinator may sell on the shard (it sells none of those products);
// the run goes on record when a coordinator with the whole shard list
// resyncs it.
var ErrResyncPartial = errors.New("products this coordinator cannot see whole (SHARDSTOCK_SHARDS lacks or moves their shards) were not resynced")

// errUnseen: a product lives on shards this coordinator lacks (Moved).
var errUnseen = errors.New("the product lives on shards this coordinator does not list")

// ErrResyncBlocked: a restarted shard disagrees with SQL beyond what a lost
// second explains; it stays fenced until they agree.
var ErrResyncBlocked = errors.New("the shard disagrees with the order table and the transfer log; it stays fenced until they agree or an operator accepts it (GET /admin/v1/shards says why; POST /admin/v1/shards/{index}/resync)")

// disagreement is one product's reason to keep a shard fenced.
type disagreement struct {
	product string
	why     string
}

func (d disagreement) Error() string { return d.product + ": " + d.why }

// shardTransfers are the transfers from or to shard i that a resync must
// know of, by product: those whose units left their source, and those only
// started (a stock addition to i, which the resync completes; a transfer
// out of i, whose count only the shard knows).
func (s *Resync) shardTransfers(ctx context.Context, i int) (map[string][]shardstock.Transfer, error) {
	out := map[string][]shardstock.Transfer{}
	ts, err := s.cfg.Transfers.ShardTransfers(ctx, i)
	if err != nil {
		return nil, err
	}
	open, err := s.cfg.Transfers.UnfinishedTransfers(ctx)
	if err != nil {
		return nil, err
	}
	for _, t := range open {
		if t.State == "started" && (t.From == i || t.To == i) {
			ts = append(ts, t)
		}
	}
	for _, t := range ts {
		out[t.ProductID] = append(out[t.ProductID], t)
	}
	return out, nil
}

// liveOn is product id when shard i is one of its live shards (nil: it is
// archived, its keys are gone on purpose, or the product was never put on
// shard i); errUnseen when this coordinator does not have the product's
// shard list (Moved).
func (s *Resync) liveOn(ctx context.Context, i int, id string) (*shardstock.Product, error) {
	p, err := s.cfg.Products.Product(ctx, id)
	if err != nil {
		return nil, err
	}
	if p.Archived {
		return nil, nil
	}
	if p.Moved != "" {
		// Whether shard i holds its units, and what a lost write of it
		// was, only a coordinator with its shard list can tell.
		return nil, errUnseen
	}
	if i >= p.Shards(len(s.cfg.Addrs)) {
		return nil, nil
	}
	on, err := s.cfg.Catalog.InitialisedShards(ctx, id)
	if err != nil || !on[i] {
		return nil, err
	}
	return p, nil
}

func (s *Resync) resyncProduct(ctx context.Context, i int, id string, ts []shardstock.Transfer) error {
	p, err := s.liveOn(ctx, i, id)
	if err != nil || p == nil {
		return err
	}
	c, err := s.cfg.Shards.Counters(ctx, i, id)
	if err != nil {
		return err
	}
	if !c.Known {
		// Not on the shard at all: lost data, not a lost second; its
		// allocation stays given up. But the register rebuilt there for the
		// buyers whose home it is may have come back from a crash without
		// its last writes: claims given back since are taken out (the model
		// test's fast mode: a buyer whose home was wiped, then cut back past
		// the give-back of a cancelled order, was told 409 for good).
		return s.cfg.Shards.RepairRegister(ctx, p, i)
	}
	if s.cfg.Orders != nil { // 1: settlements
		if err := s.replaySettlements(ctx, i, p); err != nil {
			return err
		}
	}
	if err := s.replayTransfersIn(ctx, i, id, ts); err != nil { // 2
		return err
	}
	if err := s.replayTransfersOut(ctx, i, id, ts); err != nil { // 3
		return err
	}
	if s.cfg.Orders != nil {
		if err := s.restoreHolds(ctx, i, p); err != nil {
			return err
		}
	}
	if err := s.cfg.Shards.RepairRegister(ctx, p, i); err != nil { // 4
		return err
	}
	if c, ok := s.cfg.Products.Controls(id); ok && c.WindowSet { // a PATCH the shard may have missed
		if _, err := s.cfg.Shards.SetWindow(ctx, i, p); err != nil && !errors.Is(err, shardstock.ErrNotOnShard) {
			return err
		}
	}
	return s.checkAllocations(ctx, i, p, ts)
}

// replaySettlements applies on shard i the settlement of every final order
// of p it holds. A hold the shard never had (reserved and settled after the
// point it came back to) changes nothing here: a paid one is restored as
// sold with the live holds; a cancelled one has nothing to give back.
func (s *Resync) replaySettlements(ctx context.Context, i int, p *shardstock.Product) error {
	final, err := s.cfg.Orders.FinalOrders(ctx, p.ID, i)
	if err != nil {
		return err
	}
	applied := 0
	for _, o := range final {
		var changed bool
		if o.Status == shardstock.StatusPaid {
			changed, err = s.cfg.Holds.Confirm(ctx, i, p.ID, o.ID)
		} else {
			changed, err = s.cfg.Holds.Release(ctx, i, p.ID, o.ID)
		}
		switch {
		case errors.Is(err, shardstock.ErrUnknownHold):
		case errors.Is(err, shardstock.ErrHoldReleased), errors.Is(err, shardstock.ErrHoldSold):
			s.cfg.Logger.Error("a restarted shard's hold contradicts its order; see reconcile",
				"shard", i, "product", p.ID, "order", o.ID, "status", o.Status, "err", err)
		case err != nil:
			return err
		case changed:
			applied++
		}
	}
	if applied > 0 {
		s.cfg.Logger.Warn("applied settlements a restarted shard had lost", "shard", i, "product", p.ID, "settlements", applied)
	}
	return nil
}

// replayTransfersIn adds to shard i the units transfers brought it: those
// whose units left their source (out or done; Resume finishes an out one
// later, and its transfer_in then finds the record and adds nothing), stock
// added to it (even one only started: Resume would add it the same way), and
// the units of its reversed transfers that came back.
func (s *Resync) replayTransfersIn(ctx context.Context, i int, id string, ts []shardstock.Transfer) error {
	for _, t := range ts {
		var err error
		switch {
		case t.To == i && t.From == Outside && (t.State == "started" || t.State == "done"):
			err = s.cfg.Shards.TransferIn(ctx, i, id, t.ID, t.Wanted, t.From)
		case t.To == i && t.Moved > 0 && (t.State == "out" || t.State == "done"):
			err = s.cfg.Shards.TransferIn(ctx, i, id, t.ID, t.Moved, t.From)
		case t.From == i && t.State == "reversed" && t.Moved > 0:
			err = s.cfg.Shards.TransferIn(ctx, i, id, reversalID(t.ID), t.Moved, t.To)
		}
		if err != nil && !errors.Is(err, shardstock.ErrNotOnShard) {
			return fmt.Errorf("transfer %s in: %w", t.ID, err)
		}
	}
	return nil
}

// replayTransfersOut takes off shard i the units of every transfer SQL says
// left it, exactly as many as moved. A started one is left to Resume: SQL
// does not know its count yet.
func (s *Resync) replayTransfersOut(ctx context.Context, i int, id string, ts []shardstock.Transfer) error {
	for _, t := range ts {
		if t.From != i || t.State == "started" {
			continue
		}
		_, err := s.cfg.Shards.ReplayTransferOut(ctx, i, id, t.ID, t.Moved, t.To)
		switch {
		case errors.Is(err, shardstock.ErrShortOfUnits):
			return disagreement{id, fmt.Sprintf("transfer %s moved %d units off shard %d and the shard has fewer salable to take again", t.ID, t.Moved, i)}
		case err != nil && !errors.Is(err, shardstock.ErrNotOnShard):
			return fmt.Errorf("transfer %s out: %w", t.ID, err)
		}
	}
	return nil
}

func (s *Resync) restoreHolds(ctx context.Context, i int, p *shardstock.Product) error {
	live, err := s.cfg.Orders.LiveOrders(ctx, p.ID, i)
	if err != nil {
		return err
	}
	s.seen.add(i, p.ID, live)
	restored := 0
	for _, o := range live {
		ok, err := s.cfg.Holds.RestoreHold(ctx, i, o, s.cfg.Now().UnixMilli())
		if errors.Is(err, shardstock.ErrShortOfUnits) && o.Status == shardstock.StatusAwaitingPayment && s.cfg.FailLost != nil {
			// Its unit went with the shard's last writes and was sold
			// again or moved off since (the crash took the hold, the
			// shard went on selling: a rebalance, a drain, a purchase);
			// as for an order written after the resync (holdLate), the
			// sale was lost with those writes, and the order must not
			// stand for a unit nobody holds, nor keep the shard fenced
			// for good. A paid order is not failed: that one is for an
			// operator (reconcile), and the fence waits.
			s.cfg.Logger.Error("a restarted shard has no unit left for an order awaiting payment (sold again or moved since its crash): the order fails, a sale lost with the shard's last writes",
				"order", o.ID, "product", p.ID, "shard", i)
			if err := s.cfg.FailLost(ctx, o.ID, o.UserID); err != nil {
				return err
			}
			continue
		}
		if errors.Is(err, shardstock.ErrShortOfUnits) {
			return disagreement{p.ID, fmt.Sprintf("order %s (%s) names shard %d and the shard has no salable unit left to hold for it", o.ID, o.Status, i)}
		}
		if err != nil {
			return err
		}
		if ok {
			restored++
		}
	}
	if restored > 0 {
		s.cfg.Logger.Warn("restored holds a restarted shard had lost", "shard", i, "product", p.ID, "holds", restored)
	}
	return nil
}

// checkAllocations compares shard i's allocation of p with what the split
// and the transfer log gave it, and p's allocations over every shard that
// answers with its current stock: a disagreement keeps the shard fenced.
func (s *Resync) checkAllocations(ctx context.Context, i int, p *shardstock.Product, ts []shardstock.Transfer) error {
	a, err := s.allocationsOn(ctx, i, p, ts)
	if err != nil || a == nil {
		return err
	}
	if a.own.Alloc > a.hi || a.own.Alloc < a.lo {
		return disagreement{p.ID, fmt.Sprintf("shard %d holds an allocation of %d units where the split and the transfer log give it %s",
			i, a.own.Alloc, span(a.lo, a.hi))}
	}
	if a.all && a.sum > a.stock {
		return disagreement{p.ID, fmt.Sprintf("its allocations sum to %d units past its stock of %d", a.sum, a.stock)}
	}
	return nil
}

// allocationCheck is shard i's allocation of a product against the
// transfer log, and the product's allocations against its stock.
type allocationCheck struct {
	lo, hi int64               // what the split and the transfer log give shard i
	own    shardstock.Counters // shard i's counters
	sum    int64               // the allocations of the shards that answered
	all    bool                // every shard answered
	stock  int64               // the current stock, with additions under way
}

// allocationsOn reads the allocation check of p on shard i (nil without a
// transfer log). A transfer out of i that SQL has only as started may or
// may not have run on the shard (its count is in the shard's own record),
// so the allocation may sit below the log's by up to its wanted units.
func (s *Resync) allocationsOn(ctx context.Context, i int, p *shardstock.Product, ts []shardstock.Transfer) (*allocationCheck, error) {
	given, err := allocations(ctx, s.cfg.Transfers, p, len(s.cfg.Addrs))
	if err != nil || given == nil {
		return nil, err
	}
	a := &allocationCheck{hi: given[i], all: true}
	var slack int64
	for _, t := range ts {
		switch {
		case t.To == i && t.From == Outside && t.State == "started":
			a.hi += t.Wanted // added by the resync (allocations counts only done additions)
		case t.To == i && t.From != Outside && t.State == "out":
			a.hi += t.Moved // added by the resync (allocations counts them as in flight)
		case t.From == i && t.State == "started":
			slack += t.Wanted
		}
	}
	a.lo = a.hi - slack
	for j := 0; j < p.Shards(len(s.cfg.Addrs)); j++ {
		c, err := s.cfg.Shards.Counters(ctx, j, p.ID)
		if err != nil {
			if j == i {
				return nil, err
			}
			a.all = false // a shard that cannot answer now: checked at its own resync
			continue
		}
		if j == i {
			a.own = c
		}
		a.sum += c.Alloc
	}
	if a.stock, err = currentStock(ctx, s.cfg.Transfers, p); err != nil {
		return nil, err
	}
	// An addition under way counts: its units may be on their shard
	// already (its coordinator died after that step; every coordinator
	// finishes it, RunResume), and its shard may be this one, whose fence
	// the resume would wait for: not counted, the check would keep the
	// shard fenced for good.
	open, err := s.cfg.Transfers.UnfinishedTransfers(ctx)
	if err != nil {
		return nil, err
	}
	for _, t := range open {
		if t.ProductID == p.ID && t.From == Outside {
			a.stock += t.Wanted
		}
	}
	return a, nil
}

func span(lo, hi int64) string {
	if lo == hi {
		return fmt.Sprint(hi)
	}
	return fmt.Sprintf("%d to %d", lo, hi)
}

// resyncProblems are the shards kept fenced by a disagreement, and why.
type resyncProblems struct {
	mu sync.Mutex
	m  map[int]string
}

func (s *Resync) setResyncProblem(i int, why string) {
	s.problems.mu.Lock()
	defer s.problems.mu.Unlock()
	if s.problems.m == nil {
		s.problems.m = map[int]string{}
	}
	if why == "" {
		delete(s.problems.m, i)
		return
	}
	if s.problems.m[i] != why {
		s.cfg.Logger.Error("a restarted shard disagrees with the order table and the transfer log: it stays fenced until they agree or an operator accepts it",
			"shard", i, "why", why, "accept", fmt.Sprintf(`POST /admin/v1/shards/%d/resync {"accept":true}`, i))
	}
	s.problems.m[i] = why
}

// ClearProblem forgets shard i's disagreement (an operator accepted
// the shard as it stands).
func (s *Resync) ClearProblem(i int) { s.setResyncProblem(i, "") }

// Problem is why shard i is kept fenced after its last resync ("":
// it is not).
func (s *Resync) Problem(i int) string {
	s.problems.mu.Lock()
	defer s.problems.mu.Unlock()
	return s.problems.m[i]
}

// Orders written late. The resync reads the live orders once; a
// reservation made on the shard before its crash, whose order row is
// written after that read, is in no live order the resync saw, and its
// hold went with the shard's last second: a reservation the relay had
// given to the broker, or one the order service had read from the outbox
// and was still writing (the database away). Its unit is salable again on
// the shard while its buyer holds an order, and would be sold twice (a
// confirm finding no hold changed nothing). So every order written
// awaiting payment whose reservation is older than its shard's last
// resync (with lateSlack for the clocks of two coordinators) has its hold
// put back, as the resync would have: restore_hold takes a salable unit
// for it, and changes nothing when the hold is there.

// lateSlack is how far past a shard's resync a reservation's time may
// still be from before it: the two times come from the clocks of the
// coordinator that reserved and the one that resynced, each set to the
// shards' time (shard.Clock), so they differ by a round trip or so. Every
// order reserved within it costs a restore_hold call that finds its hold:
// after a coordinator's first start or a shard's restart, for these two
// seconds only.
const lateSlack = 2 * time.Second

// syncedTimes caches each shard's last resync time for a second (every
// order written asks), and keeps the orders to check again once their
// shard's fence opens.
type syncedTimes struct {
	mu    sync.Mutex
	m     map[int]syncedTime
	later []lateOrder
}

type syncedTime struct{ at, read time.Time }

type lateOrder struct {
	o        shardstock.Order
	reserved time.Time
}

// maxLater bounds the orders kept to check again; past it one is logged
// and left to the confirm (Settlements.soldWithoutHold).
const maxLater = 100_000

func (s *Resync) checkLater(o shardstock.Order, reserved time.Time) {
	t := &s.times
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.later) >= maxLater {
		s.cfg.Logger.Error("too many orders to check against a fenced shard's resync; this one is left to its confirm", "order", o.ID, "shard", o.Shard)
		return
	}
	t.later = append(t.later, lateOrder{o, reserved})
}

func (t *syncedTimes) deferred() []lateOrder {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := t.later
	t.later = nil
	return out
}

func (t *syncedTimes) forget(i int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.m, i)
}

// Opened drops the resync time kept for shard i, whose fence opens (after
// a resync, or one another coordinator put on record): a reservation
// relayed since is judged against the new time (Admit, HoldLate). Judged
// against the old one, kept up to a second, one made before the crash was
// taken as made after the resync, and its order written with no hold (the
// model test's fast mode: 4 live orders for a stock of 3).
func (s *Resync) Opened(i int) { s.times.forget(i) }

// syncedAt is shard i's last resync time, read at most a second ago and
// after since (a time read before an order's row was written does not
// judge it: CatchUp).
func (s *Resync) syncedAt(ctx context.Context, i int, since time.Time) (time.Time, error) {
	now := time.Now()
	s.times.mu.Lock()
	c, ok := s.times.m[i]
	s.times.mu.Unlock()
	if ok && now.Sub(c.read) < time.Second && c.read.After(since) {
		return c.at, nil
	}
	at, err := s.cfg.ShardLog.SyncedAt(ctx, i)
	if err != nil {
		return time.Time{}, err
	}
	s.times.mu.Lock()
	defer s.times.mu.Unlock()
	if s.times.m == nil {
		s.times.m = map[int]syncedTime{}
	}
	s.times.m[i] = syncedTime{at, now}
	return at, nil
}

// Admit is the status the order of reservation ev is written with
// (order.LateHolds). A reservation made before its shard's last resync and
// relayed since was not seen by that resync: the shard's crash may have
// taken its hold, and its claim when the shard is the buyer's home. Its
// order is written only once both are back: awaiting payment; or failed,
// a sale lost with the shard's last writes, when the buyer has spent the
// limit again since or the unit was sold again. Written first and checked
// after, it stood live with no unit for as long as the check took: 4 live
// orders for a stock of 3, one of them payable (the model test's fast
// mode). An error decides nothing (the shard is being resynced or does not
// answer): the reservation is offered again later. Any other reservation is
// awaiting payment at once.
func (s *Resync) Admit(ctx context.Context, ev shardstock.ReservationEvent) (shardstock.OrderStatus, error) {
	if s.cfg.ShardLog == nil {
		return shardstock.StatusAwaitingPayment, nil
	}
	if s.cfg.Fenced != nil && s.cfg.Fenced(ev.Shard) {
		s.times.forget(ev.Shard) // its resync time is about to change
		return "", fmt.Errorf("%w: shard %d is being brought back in line with the order table", shardstock.ErrUnavailable, ev.Shard)
	}
	late, err := s.late(ctx, ev.Shard, ev.At(), time.Time{})
	if err != nil || !late {
		return shardstock.StatusAwaitingPayment, err
	}
	p, err := s.cfg.Products.Product(ctx, ev.ProductID)
	if err != nil {
		return "", err
	}
	if p.Archived || (p.Moved != "" && !p.OnMaster(ev.Shard, s.cfg.Addrs)) {
		// Gone on purpose; or its shard index names another master here.
		return shardstock.StatusAwaitingPayment, nil
	}
	o := shardstock.Order{ID: ev.ID, UserID: ev.UserID, ProductID: ev.ProductID, Shard: ev.Shard, Status: shardstock.StatusAwaitingPayment}
	// A coordinator on the old shard list of a rolling grow checks the hold
	// on the shard it shares with the product's list: written unchecked,
	// for a coordinator with the whole list whose resync had already run,
	// the order stood with no unit (an oversell, found by the fast mode).
	// It takes the claim back, as any coordinator does, when it lists the
	// buyer's home: skipped there, a buyer whose home lost the claim with
	// the hold bought a third unit of 2 (the model test). A home it lacks
	// is another shard than the one whose crash took the hold, so the claim
	// is left as it is (unless that home lost writes of its own too, which
	// its own resync cannot repair for an order not written yet: a gap
	// left open, docs/TESTING.md).
	_, homeErr := s.cfg.Claims.HomeOf(p, o.UserID)
	lost, restored, err := s.putBack(ctx, p, o, ev.AtMS, homeErr == nil)
	switch {
	case err != nil:
		return "", err
	case lost != "":
		s.cfg.Logger.Error("a reservation relayed after its shard's resync "+lost+": its order is written failed, a sale lost with the shard's last writes",
			"order", ev.ID, "product", ev.ProductID, "shard", ev.Shard, "user", ev.UserID)
		return shardstock.StatusFailed, nil
	case restored:
		s.cfg.Logger.Warn("put back the hold of a reservation relayed after its shard's resync, before writing its order", "order", ev.ID, "product", ev.ProductID, "shard", ev.Shard)
	}
	return shardstock.StatusAwaitingPayment, nil
}

// late says whether a reservation made at on shard i is older than the
// shard's last resync (lateSlack for the clocks), read after since: that
// resync may not have seen it.
func (s *Resync) late(ctx context.Context, i int, at, since time.Time) (bool, error) {
	synced, err := s.syncedAt(ctx, i, since)
	if err != nil {
		return false, err
	}
	return !synced.IsZero() && !at.After(synced.Add(lateSlack)), nil
}

// putBack takes back the claim (when claim is set: at the buyer's home,
// if that is the shard it went with the hold, and the buyer may have spent
// the limit again since) and then the hold of late reservation o, made at
// atMS. lost says why the sale cannot come back ("": it can): the buyer
// spent the limit again, or the unit was sold again, since the crash took
// them. restored: the hold was put back now. A shard that lost the
// product has given up its allocation (Catalog.allocate): nothing to put
// back. An error decides nothing.
func (s *Resync) putBack(ctx context.Context, p *shardstock.Product, o shardstock.Order, atMS int64, claim bool) (lost string, restored bool, err error) {
	if claim {
		ok, err := s.cfg.Claims.Reclaim(ctx, p, o.UserID, o.ID)
		if err != nil {
			return "", false, err
		}
		if !ok {
			return "lost its claim with the shard's last writes, and its buyer spent the limit again since", false, nil
		}
	}
	restored, err = s.cfg.Holds.RestoreHold(ctx, o.Shard, o, atMS)
	switch {
	case errors.Is(err, shardstock.ErrShortOfUnits):
		return "has no unit left there (sold again)", false, nil
	case errors.Is(err, shardstock.ErrNotOnShard):
		return "", false, nil
	}
	return "", restored, err
}

// HoldLate puts back order o's hold (awaiting payment, just written) on
// its shard when the reservation, made at reserved, is older than the
// shard's last resync (order.LateHolds), read after the order's row was
// written at written: a time read before may be older than a resync that
// ran as the row was written (CatchUp). It never holds the order service
// up: an order whose shard is being resynced, or does not answer, is kept
// and checked again (RecheckLate).
func (s *Resync) HoldLate(ctx context.Context, o shardstock.Order, reserved, written time.Time) {
	if s.cfg.ShardLog == nil {
		return
	}
	if s.cfg.Fenced != nil && s.cfg.Fenced(o.Shard) {
		// Being resynced now, which may not see this order: checked
		// again once the shard is back in line, with its new resync time.
		s.times.forget(o.Shard)
		s.checkLater(o, reserved)
		return
	}
	if err := s.holdLate(ctx, o, reserved, written); err != nil {
		s.checkLater(o, reserved)
	}
}

// RecheckLate checks the orders kept by HoldLate, for every shard whose
// fence is open; those whose shard still does not answer are kept for the
// next call (Restarts.Run calls it every second).
func (s *Resync) RecheckLate(ctx context.Context) {
	for _, d := range s.times.deferred() {
		if s.cfg.Fenced != nil && s.cfg.Fenced(d.o.Shard) {
			s.checkLater(d.o, d.reserved)
			continue
		}
		s.times.forget(d.o.Shard)
		if err := s.holdLate(ctx, d.o, d.reserved, time.Time{}); err != nil {
			s.checkLater(d.o, d.reserved)
		}
	}
}

// holdLate is HoldLate on a shard that is not fenced. A hold put back for
// an order paid, cancelled or failed since (its settlement found no hold
// and changed nothing) is settled at once. A shard with no salable unit
// left for it sold the unit again before the order came: that is logged
// for reconcile (nothing a retry can change). An order cancelled or failed
// before the check gets neither its hold nor its claim back: its claim was
// given back (or is about to be), and taken back now it stayed for good, a
// 409 to a buyer below the limit (found reading the code: a check kept for
// a fenced shard ran after the cancel's give-back).
func (s *Resync) holdLate(ctx context.Context, o shardstock.Order, reserved, since time.Time) error {
	late, err := s.late(ctx, o.Shard, reserved, since)
	if err != nil || !late {
		return err
	}
	p, err := s.cfg.Products.Product(ctx, o.ProductID)
	if err != nil {
		return err
	}
	if p.Archived || p.Moved != "" {
		return nil // gone on purpose; or this coordinator's resyncs skip it (ErrResyncPartial), and one with its list restores its holds
	}
	if done, err := s.ended(ctx, o); err != nil || done {
		if err == nil {
			err = s.giveUpLate(ctx, p, o)
		}
		return err
	}
	// Its claim first: putting the hold back without it left the buyer
	// holding more units than the limit on the shards (the model test's
	// fast mode). With no claim or unit left for it, the sale was lost with
	// the shard's last writes (as a reservation whose outbox entry was
	// lost is), and the order must not stand for a unit nobody holds.
	at := reserved
	if at.IsZero() { // not known (CatchUp): the hold's time is now
		at = s.cfg.Now()
	}
	lost, restored, err := s.putBack(ctx, p, o, at.UnixMilli(), true)
	switch {
	case err != nil:
		return err
	case lost != "" && o.Status == shardstock.StatusPaid: // (CatchUp's)
		return fmt.Errorf("paid order %s %s: an operator's (reconcile); the shard's resync is done again", o.ID, lost)
	case lost == "" && !restored:
		return s.settleLate(ctx, p, o) // (a try before may have put it back and failed to settle it)
	case lost != "":
		s.cfg.Logger.Error("an order written after its shard's resync "+lost+": the order fails, a sale lost with the shard's last writes",
			"order", o.ID, "product", o.ProductID, "shard", o.Shard, "user", o.UserID)
		if s.cfg.FailLost != nil {
			if err := s.cfg.FailLost(ctx, o.ID, o.UserID); err != nil {
				return err
			}
		}
		// The claim taken back above stays with an order that ended before
		// FailLost (cancelled, its give-back done as the claim was taken
		// back): it goes back now. No hold of it is there (no unit was).
		if done, err := s.ended(ctx, o); err != nil || !done {
			return err
		}
		return s.cfg.Claims.GiveBack(ctx, p, o.UserID, o.ID)
	}
	s.cfg.Logger.Warn("put back the hold of an order written after its shard's resync", "order", o.ID, "product", o.ProductID, "shard", o.Shard)
	return s.settleLate(ctx, p, o)
}

// ended says whether order o is cancelled or failed now (read from SQL;
// without an order table, as o says).
func (s *Resync) ended(ctx context.Context, o shardstock.Order) (bool, error) {
	if s.cfg.Orders != nil {
		now, err := s.cfg.Orders.Order(ctx, o.ID)
		if err != nil || now == nil {
			return false, err
		}
		o = *now
	}
	return o.Status == shardstock.StatusCancelled || o.Status == shardstock.StatusFailed, nil
}

// giveUpLate ends the check of late order o, cancelled or failed: a hold a
// try before put back is released (none there: the shard's crash took it,
// and the resync counted its unit salable), and then its claim is given
// back, in case a try before took it back after the cancel's give-back
// (given back first, the buyer could hold the released unit and a new one
// at once).
func (s *Resync) giveUpLate(ctx context.Context, p *shardstock.Product, o shardstock.Order) error {
	_, err := s.cfg.Holds.Release(ctx, o.Shard, o.ProductID, o.ID)
	switch {
	case errors.Is(err, shardstock.ErrUnknownHold), errors.Is(err, shardstock.ErrNotOnShard):
	case errors.Is(err, shardstock.ErrHoldSold):
		s.cfg.Logger.Error("a late order's hold contradicts its order; see reconcile",
			"shard", o.Shard, "product", o.ProductID, "order", o.ID, "err", err)
		return nil // (nothing a retry changes)
	case err != nil:
		return err
	}
	return s.cfg.Claims.GiveBack(ctx, p, o.UserID, o.ID)
}

// settleLate settles the hold of late order o, now on its shard, when the
// order was paid, cancelled or failed since (its settlement found no hold
// and changed nothing); a cancelled or failed one's claim is given back
// after (giveUpLate): the give-back of its cancel may have run before the
// claim was taken back.
func (s *Resync) settleLate(ctx context.Context, p *shardstock.Product, o shardstock.Order) error {
	if s.cfg.Orders == nil {
		return nil
	}
	now, err := s.cfg.Orders.Order(ctx, o.ID)
	switch {
	case err != nil:
		return err // checked again: the hold is there now, so only its settlement is left
	case now == nil || now.Status == shardstock.StatusAwaitingPayment:
		return nil
	case now.Status != shardstock.StatusPaid:
		return s.giveUpLate(ctx, p, o)
	}
	_, err = s.cfg.Holds.Confirm(ctx, o.Shard, o.ProductID, o.ID)
	if errors.Is(err, shardstock.ErrUnknownHold) || errors.Is(err, shardstock.ErrHoldReleased) {
		s.cfg.Logger.Error("a late order's hold contradicts its order; see reconcile",
			"shard", o.Shard, "product", o.ProductID, "order", o.ID, "status", now.Status, "err", err)
		return nil // (nothing a retry changes)
	}
	return err
}
