package shard

import (
	"context"
	"fmt"
	"hash/fnv"
	"math/bits"
	"strconv"
	"time"

	"github.com/shardstock/shardstock"
)

// The purchase protocol: one script execution on one shard per purchase in
// the common case, and a per-user limit that holds across shards.
//
// Every buyer u has one home shard, h(u) = fnv32a(u) mod N. The claims hash
// of a product on h(u) is u's per-user limit register for that product: it
// holds the reservation ids of u's attempts that may have a unit (claims).
// A purchase starts at h(u) with one step, P (purchase.lua): record the
// claim and, when h(u) has a salable unit, reserve it — hold record and
// outbox entry — in the same atomic script. Buyers are spread over the
// shards by the hash as evenly as random picks would spread them, and a
// purchase costs one script execution on one shard, which concurrent
// purchases bound for that shard share (batch.go). Only when h(u) has no
// unit left does the purchase fail over: R steps (reserve only) on the
// other shards in turn, skipping shards known empty or down; when all of
// them are empty, a U step at h(u) gives the claim back and the answer is
// ErrSoldOut. (With Config.Start = StartRandom the first reserve goes to a
// random shard instead: a C step, claim only, at h(u), then R steps from
// that shard on; two executions per purchase.)
//
// Why the limit holds (invariant 4). Let L be u's limit.
//  1. A unit is held for u only by a step that ran after u's claim for the
//     same reservation id was recorded at h(u): P records the claim and
//     reserves in one script; R is sent only after P or C at h(u) answered
//     that the claim is recorded.
//     A step that went unanswered is resolved before the walk moves on
//     (walk.go): an id is held on one shard at most, and an attempt that
//     cannot tell keeps its claim.
//  2. h(u) records a new claim only while it holds fewer than L claims of u,
//     atomically (one script, one shard).
//  3. A claim is removed only when its id has no unit that counts: by its
//     attempt when every shard answered empty or the window closed, and no
//     step of it is in doubt; by the order service once the order is
//     cancelled or failed (final: never a sale again; its release is on its
//     way to the unit's shard, and the order table's seq is freed with it);
//     by Abandon, after every shard answered that it does not hold the id
//     and fenced it there (walk.go), so no step still on its way can take
//     a unit for it afterwards.
//
// So u's units that are held or sold, leaving aside those of final
// cancelled orders on their way back, never outnumber u's claims at h(u),
// which never exceed L. Only h(u) decides for u: there is no second
// register that could fall out of step, so shards failing one after
// another cannot let a buyer past the limit. The price is that while h(u)
// cannot answer, u's purchases are not served — they are ErrUnavailable
// (the buyer gets a spool ticket, replayed in order when h(u) answers) —
// while the other buyers, (N-1)/N of them, buy as before. A shard that
// lost its data lost its registers too: purchases of its buyers stay
// unavailable until the register is rebuilt from the holds on the other
// shards and the order table (register.go). Behind this, the order
// table's unique (product, user, seq) key stays a last guard.
//
// All of this takes a claim h(u) answered for as kept when h(u) restarts
// from its AOF, which holds only with appendfsync always (deploy/redis.sh's
// default): with everysec, Redis answers writes it keeps in memory while
// its background fsync is slow, so even a SIGKILL can take a P's claim
// with its unit, and the buyer, answered for that unit, may buy again
// (TestPerUserLimitUnderSerialFailures). A machine crash of h(u) under
// everysec can lose the last second of its writes, claims included, while
// the units they claimed sit on other shards: the restart fence
// (resync.go) keeps h(u) out of every purchase until its registers are
// repaired from the other shards' holds and the order table.

// Start is a policy for the first shard a purchase reserves on.
type Start int

const (
	// StartHome reserves first at the buyer's home, where the claim is
	// taken: one script execution per purchase (the default).
	StartHome Start = iota
	// StartRandom reserves first at a shard picked uniformly at random:
	// the claim at the home, then the reserve there, two executions (one
	// when the pick is the home).
	StartRandom
)

// ParseStart reads a Start policy: "home" (also "register", its name in
// 0.6.0) or "random".
func ParseStart(s string) (Start, error) {
	switch s {
	case "home", "register":
		return StartHome, nil
	case "random":
		return StartRandom, nil
	}
	return 0, fmt.Errorf("unknown start policy %q (want home or random)", s)
}

// Home is the index of user's home shard for a product that lives on every
// shard: where the user's purchases start and the user's per-user limit
// register is.
func (s *Purchases) Home(user string) int { return s.home(user, len(s.shards)).Index }

// home is user's home among the first n shards.
func (s *pool) home(user string, n int) *Shard { return s.shards[homeIndex(user, n)] }

// homeIndex is the index of user's home among n shards.
func homeIndex(user string, n int) int {
	h := fnv.New32a()
	h.Write([]byte(user))
	return int(h.Sum32() % uint32(n))
}

// KnownSoldOut reports, without a Redis call, that every shard of p
// answered empty within the last EmptyTTL.
func (s *Purchases) KnownSoldOut(p *shardstock.Product) bool {
	return s.empty.known(p.ID, p.Shards(len(s.shards)), s.cfg.Now())
}

// windowBehind is called when shard i refused a purchase of p for its sale
// window. The shards judge by their copy of the window, which an
// operator's change may not have reached (the shard was down, or a resync
// wrote an older copy after it). When this coordinator's catalog says the
// sale is open at asOf (zero: now), it writes its window to shard i, and
// reports whether the shard's copy was behind (changed): then the refusal
// was not the truth, and the purchase is asked again. A coordinator whose
// catalog is older than the shard's copy changes nothing (the version).
func (s *pool) windowBehind(ctx context.Context, p *shardstock.Product, i int, asOf time.Time) bool {
	if asOf.IsZero() {
		asOf = s.cfg.Now()
	}
	if p.WindowVersion == 0 || p.Open(asOf) != nil {
		return false
	}
	changed, err := s.setWindow(ctx, i, p)
	if err != nil {
		return false
	}
	if changed {
		s.cfg.Logger.Warn("a shard's sale window was behind the catalog's: written, and the purchase asked again", "shard", i, "product", p.ID,
			"starts_at", p.StartsAt, "ends_at", p.EndsAt, "version", p.WindowVersion)
	}
	return changed
}

// shardsOf is how many shards p lives on, or ErrUnavailable when this
// coordinator has fewer (it was started with a shorter SHARDSTOCK_SHARDS).
func (s *pool) shardsOf(p *shardstock.Product) (int, error) {
	n := p.Shards(len(s.shards))
	if n > len(s.shards) {
		return 0, fmt.Errorf("%w: product %s lives on %d shards, this coordinator has %d", shardstock.ErrUnavailable, p.ID, n, len(s.shards))
	}
	return n, nil
}

// Reserve holds one unit of product p for user under reservation id and
// returns the shard that holds it. The hold record and its outbox entry
// are written by the same script, so a reserved unit cannot lose its order.
// Errors: ErrSoldOut when every shard answered empty (or was known empty);
// ErrLimitReached; ErrNotStarted / ErrEnded; otherwise ErrUnavailable
// wrapping every shard's error (go-multierror) — an outage is never
// reported as sold out. On ErrUnavailable the buyer's claim is given back
// when no step of the attempt is in doubt.
func (s *Purchases) Reserve(ctx context.Context, p *shardstock.Product, user, id string) (int, error) {
	return s.reserve(ctx, p, user, id, time.Time{}, false, 0)
}

// ReserveRetryable is Reserve for a purchase that will be tried again with
// the same reservation id when it ends ErrUnavailable (the disk spool): its
// claim then stays for the retry, which finds it recorded. A purchase that
// will not be tried again after all must be Abandoned. The sale window is
// checked at asOf (zero: now): a purchase taken in time and replayed after
// the window closed is still served; the hold carries the real time.
//
// doubt is the shards a former try of the same id left in doubt (the
// Shards of the *shardstock.InDoubt it ended with): they are resolved
// first (walk.go). An attempt that ends with shards in doubt returns an
// *shardstock.InDoubt, which wraps ErrUnavailable.
func (s *Purchases) ReserveRetryable(ctx context.Context, p *shardstock.Product, user, id string, asOf time.Time, doubt uint64) (int, error) {
	return s.reserve(ctx, p, user, id, asOf, true, doubt)
}

func (s *pool) reserve(ctx context.Context, p *shardstock.Product, user, id string, asOf time.Time, retry bool, doubt uint64) (int, error) {
	n, err := s.shardsOf(p)
	if err != nil {
		return -1, err
	}
	skip, probe, soldOut := s.empty.plan(p.ID, n, s.cfg.Now())
	if soldOut && doubt == 0 { // with a doubt, the id may hold a unit on a shard marked empty
		return -1, shardstock.ErrSoldOut
	}
	a := &attempt{send: s.stepOn, product: p.ID, user: user, id: id, asOf: asOfArg(asOf), retry: retry, n: n,
		home: s.home(user, n).Index, skip: skip, probe: probe, doubt: doubt, onFailover: s.cfg.OnFailover}
	a.first = a.home
	if s.cfg.Start == StartRandom {
		a.first = s.cfg.Rand(n)
	}
	d := s.walkAndRepair(ctx, a, p, asOf)
	s.empty.settle(p.ID, n, d.emptied, d.unmark, s.cfg.Now())
	if d.giveBack {
		s.unclaim(ctx, p, user, id)
	}
	return d.shard, d.err
}

// walkAndRepair walks a, and walks it again after doing what its decision
// asks for: the home's register rebuilt (once), the sale window written to
// a shard whose copy was behind (at most n times).
func (s *pool) walkAndRepair(ctx context.Context, a *attempt, p *shardstock.Product, asOf time.Time) decision {
	d := a.walk(ctx)
	if d.rebuild {
		d = a.rebuilt(ctx, s.rebuildRegister(ctx, p, s.shards[a.home]))
	}
	for k := 0; k < a.n && d.window != 0 && s.windowBehind(ctx, p, bits.TrailingZeros64(d.window), asOf); k++ {
		d = a.walk(ctx)
	}
	return d
}

// asOfArg is t as purchase.lua takes the time a window is checked at:
// unix ms, "" for the zero time (now).
func asOfArg(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return strconv.FormatInt(t.UnixMilli(), 10)
}

// stepOn runs one purchase step on shard i (attempt.send): errShardDown,
// unsent, when Health says the shard is down.
func (s *pool) stepOn(ctx context.Context, i int, st step) (string, error) {
	if !s.up(i) {
		return "", errShardDown
	}
	return s.runStep(ctx, s.shards[i], st)
}

// runStep runs one purchase step on sh through its batcher under the
// per-call deadline and reports the outcome to Health.
func (s *pool) runStep(ctx context.Context, sh *Shard, st step) (string, error) {
	if sh.fence.closed.Load() {
		s.observe(sh.Index, errFenced)
		return "", errFenced
	}
	status, err := sh.steps.submit(ctx, st)
	s.observe(sh.Index, err)
	return status, err
}
