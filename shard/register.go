package shard

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/shardstock/shardstock"
)

// Registers that outlive their shard's data, and claims given back.
//
// A buyer's per-user limit register (purchase.go) is the claims hash of the
// product on the buyer's home shard. Init writes the limit into it ('#'),
// so a register is there exactly when the product was initialised on the
// shard and the shard kept its data. A shard that lost its data (restarted
// without its AOF, flushed, replaced) has no register (statusNoRegister),
// and no purchase of its buyers is served until the register is rebuilt:
//
//   - only for a shard the catalog has on record as initialised for the
//     product (a PUT that never reached the shard is repeated, not
//     rebuilt);
//   - from every other shard's holds that are locked or sold (HSCAN) and
//     the order table's live orders (Ledger), for the buyers whose home it
//     is; a shard that cannot answer stops the
//     rebuild, since it may hold units of those buyers;
//   - written once (register.lua refuses to overwrite a register), with no
//     stock: the lost shard's allocation stays given up, so its buyers'
//     purchases fail over to the other shards.
//
// Units the lost shard reserved and never relayed are gone with it, and so
// are their claims: those buyers got an answer for a unit that no longer
// exists (DESIGN.md, "A shard that lost its data"). A hold written on another shard
// while the rebuild reads the holds can be missed; the order table's
// (product, user, seq) key guards that window.

// Inits are the catalog's record of the shards each product was
// initialised on (sqlstore.Catalog): a register rebuild asks only those.
type Inits interface {
	// InitialisedShards lists the shards on record as initialised for product.
	InitialisedShards(ctx context.Context, product string) (map[int]bool, error)
}

// Ledger is the order table's side of a register rebuild (sqlstore.Orders).
type Ledger interface {
	// LiveOrders lists the orders of product held on shard that are
	// awaiting payment or paid.
	LiveOrders(ctx context.Context, product string, shard int) ([]shardstock.Order, error)
	// ReleasedOrders lists the orders of product, on any shard, that were
	// cancelled or failed: their claims are given back for good.
	ReleasedOrders(ctx context.Context, product string) ([]shardstock.Order, error)
}

// registerChunk is how many buyers one register script call writes.
const registerChunk = 500

// errRegisterLost: the buyer's home has no register for the product and it
// could not be rebuilt.
var errRegisterLost = errors.New("no per-user limit register for this product on the shard (lost with its data, or never initialised)")

// rebuildRegister rebuilds p's register on home (once at a time per
// product and shard); a nil error means the register is there now.
func (s *pool) rebuildRegister(ctx context.Context, p *shardstock.Product, home *Shard) error {
	if s.cfg.Ledger == nil || s.cfg.Inits == nil {
		return errRegisterLost
	}
	_, err, _ := s.rebuilds.Do(fmt.Sprintf("%s/%d", p.ID, home.Index), func() (any, error) {
		return nil, s.rebuild(callCtx(ctx), p, home, false)
	})
	return err
}

// rebuild writes p's register on home from the holds on the other shards
// and the order table's live orders held on home: once, or with merge into
// the register that is there (a shard back without its last writes).
func (s *pool) rebuild(ctx context.Context, p *shardstock.Product, home *Shard, merge bool) error {
	on, err := s.cfg.Inits.InitialisedShards(ctx, p.ID)
	if err != nil {
		return fmt.Errorf("register rebuild: catalog: %w", err)
	}
	if !on[home.Index] {
		return errRegisterLost
	}
	claims := map[string][]string{}
	n := p.Shards(len(s.shards))
	for _, sh := range s.shards {
		if sh != home {
			if err := s.scanHolds(ctx, sh, p.ID, home, n, claims); err != nil {
				return fmt.Errorf("register rebuild: shard %d: %w", sh.Index, err)
			}
		}
	}
	// The live orders held on every shard, not only on home: a hold on
	// another shard can be missing from its scan while that shard is back
	// from a crash and not resynced yet (its hold is put back from the
	// order then), and a claim rebuilt without it let its buyer buy past
	// the limit (the model test's fast mode: 3 units of 2).
	for j := range n {
		live, err := s.cfg.Ledger.LiveOrders(ctx, p.ID, j)
		if err != nil {
			return fmt.Errorf("register rebuild: orders: %w", err)
		}
		for _, o := range live {
			if s.home(o.UserID, n) == home {
				claims[o.UserID] = append(claims[o.UserID], o.ID)
			}
		}
	}
	// A claim given back is given back for good, whatever the register or
	// a hold whose release has not landed yet says: a shard cut back past
	// a give-back holds the claim again, and merging only added, so its
	// buyer was refused for a unit they no longer held (issue 40, break 3).
	released, err := s.cfg.Ledger.ReleasedOrders(ctx, p.ID)
	if err != nil {
		return fmt.Errorf("register rebuild: released orders: %w", err)
	}
	for _, o := range released {
		if s.home(o.UserID, n) == home {
			claims[o.UserID] = append(claims[o.UserID], "-"+o.ID)
		}
	}
	mode := "create"
	if merge {
		mode = "merge"
	}
	// Written registerChunk buyers per call, the limit with the last: a
	// shard busy with one script of a million buyers would answer nothing
	// else, its callers would time out, and a retry would send it again.
	users := make([]string, 0, len(claims))
	for u := range claims {
		users = append(users, u)
	}
	var v any
	for start := 0; start == 0 || start < len(users); start += registerChunk {
		end := min(start+registerChunk, len(users))
		more := "more"
		if end == len(users) {
			more = "last"
		}
		args := make([]any, 0, 3+2*(end-start))
		args = append(args, mode, p.PerUserLimit, more)
		for _, u := range users[start:end] {
			args = append(args, u, strings.Join(claims[u], " "))
		}
		var err error
		if v, err = s.runScript(ctx, home, s.scripts.Register, []string{keysFor(p.ID).claims}, args...); err != nil {
			return fmt.Errorf("register rebuild: shard %d: %w", home.Index, err)
		}
		if v == int64(0) { // a 'create' found the register there: nothing to add
			return nil
		}
		mode = "merge" // the rest are added to what this rebuild wrote
	}
	if v == int64(1) && !merge {
		s.cfg.Logger.Warn("per-user limit register rebuilt on a shard that lost its data",
			"shard", home.Index, "product", p.ID, "buyers", len(claims))
	}
	return nil
}

// scanHolds adds the locked or sold holds on sh of buyers whose home (among
// the first n shards) is home to claims.
func (s *pool) scanHolds(ctx context.Context, sh *Shard, product string, home *Shard, n int, claims map[string][]string) error {
	key := keysFor(product).holds
	var cursor uint64
	for {
		var kv []string
		err := s.call(ctx, sh, func(ctx context.Context) error {
			var err error
			kv, cursor, err = sh.Client.HScan(ctx, key, cursor, "", 1000).Result()
			return err
		})
		if err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		for i := 0; i+1 < len(kv); i += 2 {
			f := strings.Fields(kv[i+1])
			if len(f) >= 2 && (f[0] == "L" || f[0] == "S") && s.home(f[1], n) == home {
				claims[f[1]] = append(claims[f[1]], kv[i])
			}
		}
		if cursor == 0 {
			return nil
		}
	}
}

// unclaim gives claim id of user back at the user's home. It runs even if
// the buyer went away; when the home does not answer the claim is given
// back later (giveback.go), and the answer never changes.
func (s *pool) unclaim(ctx context.Context, p *shardstock.Product, user, id string) {
	home := s.home(user, p.Shards(len(s.shards)))
	if _, err := s.runStep(callCtx(ctx), home, step{product: p.ID, op: opUnclaim, user: user, id: id}); err != nil {
		s.cfg.Logger.Warn("claim could not be given back yet; retrying when its register answers",
			"shard", home.Index, "user", user, "claim", id, "err", err)
		s.queueGiveBack(giveBack{sh: home, product: p.ID, user: user, id: id})
	}
}

// HomeOf is the index of user's home shard for p (order.ClaimReturner):
// where the buyer's per-user limit register lives.
func (s *Purchases) HomeOf(p *shardstock.Product, user string) (int, error) {
	home, err := s.homeOf(p, user)
	if err != nil {
		return 0, err
	}
	return home.Index, nil
}

// homeOf is user's home shard for p, when this coordinator has it in the
// place p was defined with: also for a product that lives on more shards
// than it lists (the old list of a rolling grow), whose buyers homed on the
// shards it shares get their claims taken back and given back here.
func (s *pool) homeOf(p *shardstock.Product, user string) (*Shard, error) {
	n := p.Shards(len(s.shards))
	i := homeIndex(user, n)
	// (A product defined before its shards' addresses were recorded cannot
	// be checked index by index: on a coordinator with fewer shards than
	// it lives on, it is refused, as before.)
	if !p.OnMaster(i, s.Addrs()) || (p.ShardAddrs == nil && n > len(s.shards)) {
		why := p.Moved
		if why == "" {
			why = fmt.Sprintf("product %s lives on %d shards, this coordinator has %d", p.ID, n, len(s.shards))
		}
		return nil, fmt.Errorf("%w: the buyer's home is shard %d: %s", shardstock.ErrUnavailable, i, why)
	}
	return s.shards[i], nil
}

// Reclaim records claim id of user for p at the user's home again, as the
// purchase that reserved it did (a 'K' step: a 'C' without the sale
// window, which may have ended since the reservation): for a hold put back after its shard lost it with its last
// writes (inventory.Resync.HoldLate), whose claim, on that shard when it is
// the buyer's home, may have gone with them. ok is false when the buyer's
// claims fill the limit without it: they spent it again since, and the
// reservation cannot be theirs any more. A home with no register is ok: its
// rebuild counts the order (register.go).
func (s *Purchases) Reclaim(ctx context.Context, p *shardstock.Product, user, id string) (ok bool, err error) {
	home, err := s.homeOf(p, user)
	if err != nil {
		return false, err
	}
	st, err := s.runStep(ctx, home, step{product: p.ID, op: opReclaim, user: user, id: id})
	if err != nil {
		return false, fmt.Errorf("shard %d: reclaim: %w", home.Index, err)
	}
	switch readReply(opReclaim, st).status {
	case statusOK, statusNoRegister:
		return true, nil
	case statusLimit:
		return false, nil
	}
	return false, fmt.Errorf("shard %d: reclaim: unexpected status %q", home.Index, st)
}

// GiveBack gives the buyer's claim id on product back at the buyer's home
// (after the order was cancelled or failed), so the buyer may buy again.
// An error means the home did not answer (or this coordinator does not
// have it where p was defined): the caller (the order service's sweep,
// order.ClaimReturner) keeps the give-back and tries it again.
func (s *Purchases) GiveBack(ctx context.Context, p *shardstock.Product, user, id string) error {
	home, err := s.homeOf(p, user)
	if err != nil {
		return err
	}
	if _, err := s.runStep(ctx, home, step{product: p.ID, op: opUnclaim, user: user, id: id}); err != nil {
		return fmt.Errorf("shard %d: give claim back: %w", home.Index, err)
	}
	return nil
}

// Abandon gives back the claim of a ReserveRetryable attempt that ended
// ErrUnavailable and will not be tried again after all (the spool refused
// it, or the buyer hung up). Every shard is asked with a Q step (walk.go),
// which also fences the id there, so no step of the attempt still on its
// way can take a unit after the claim is gone. The claim stays when some
// shard holds the id (held is that shard: a step whose answer was lost
// took the unit, and its order will come) or cannot answer (err: that
// unit may exist). held is -1 when the claim was given back. Only the
// shards in doubt (the attempt's shardstock.InDoubt) are asked: every other
// one answered for certain, or was never sent a step.
func (s *Purchases) Abandon(ctx context.Context, p *shardstock.Product, user, id string, doubt uint64) (held int, err error) {
	n, err := s.shardsOf(p)
	if err != nil {
		return -1, err
	}
	ctx = callCtx(ctx)
	for i := range n {
		if doubt&(1<<i) == 0 {
			continue
		}
		answer, err := s.stepOn(ctx, i, step{product: p.ID, op: opResolve, user: user, id: id})
		if err != nil {
			return -1, fmt.Errorf("shard %d: %w", i, err)
		}
		if readReply(opResolve, answer).status != statusVoid {
			return i, nil
		}
	}
	s.unclaim(ctx, p, user, id)
	return -1, nil
}
