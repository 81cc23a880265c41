package shard

import (
	"context"
	"fmt"
	"hash/fnv"

	"github.com/hashicorp/go-multierror"

	"github.com/shardstock/shardstock"
)

// The per-user limit across shards (invariant 4).
//
// A buyer's units may sit on any shard, so no single reserve script can see
// them all. Before any stock is reserved, the attempt takes a claim, named by
// its reservation id, in the buyer's claim registers: the claims hash of the
// product on the buyer's home shard h = fnv32a(user) mod N and on its
// backup b = h+1 mod N (one register when N = 1). Each register call is one
// atomic script that refuses a new claim when the register already holds
// limit claims for the buyer, and otherwise records it.
//
// The protocol: claim on h, then on b (always this order), passing along the
// ids h holds so that b merges them in (and ids b knew are written back to
// h): the registers converge whenever both answer. An id passed along counts
// in a register only once that register grants it itself: the attempt's own
// claim id, passed from h to b, is checked against b's limit like any new
// claim (b may know claims h lost or never saw).
//
// A claim is granted when every register that answered accepted it and at
// least one answered; a refusal by either gives back what was taken and
// answers ErrLimitReached; no answer from either answers ErrUnavailable (the
// limit cannot be vouched for, so nothing is sold). The claim is given back
// when the attempt ends with no unit for certain (sold out, window closed);
// it is kept when a reserve may have run on a shard that stopped answering
// mid-call, because that unit may exist.
//
// When the purchase's walk over the shards starts at b (always with
// Config.Start = StartRegister, one time in N with random starts), the claim
// on b and the first reserve are one script call (claim_reserve.lua). The
// reserve runs only if b grants the claim, after h has been asked, so the
// rule above is unchanged, and the purchase costs two round trips instead
// of three.
//
// Why the limit holds. Every granted claim was accepted atomically by at
// least one register, and a register accepts only while it holds fewer than
// limit claims of the buyer; claims are removed only when their attempt
// certainly got no unit. Two attempts that both reached a common register
// are therefore serialised there (h is always asked first, so concurrent
// attempts meet at h when it is up, and at b when h is down). The only way
// to exceed the limit is two grants with no register in common: one while b
// was unreachable (seen only by h) and one while h was unreachable (seen
// only by b), with no attempt of the same buyer answered by both in between
// (which would have merged them). That needs two different shards to fail
// in turn, the second before the first is back, with the buyer buying in
// each window; the shard-recovery work (ha) closes it by merging a returning
// shard's registers before it is trusted again. The per-shard buyers count
// in reserve.lua and the unique (product, user, n) key of the order table
// are further guards behind this one.

// registers returns the buyer's claim registers in the order they are
// asked: home, then backup.
func (s *Set) registers(user string) []*Shard {
	h := fnv.New32a()
	h.Write([]byte(user))
	home := int(h.Sum32() % uint32(len(s.shards)))
	if len(s.shards) == 1 {
		return s.shards[:1]
	}
	return []*Shard{s.shards[home], s.shards[(home+1)%len(s.shards)]}
}

// claims is one attempt's progress through the buyer's registers.
type claims struct {
	held     []*Shard // registers that may hold the claim (for unclaim)
	answered []*Shard // registers that granted it
	first    []string // ids the first granting register held
	known    []string // ids the last granting register held
	errs     *multierror.Error
}

// note takes one register's answer to the claim: ErrLimitReached when it
// refused, nil otherwise (an error or an "unknown" is recorded; the claim
// is then granted only if another register answers).
func (c *claims) note(sh *Shard, status string, ids []string, err error) error {
	switch {
	case err != nil:
		c.errs = multierror.Append(c.errs, fmt.Errorf("shard %d: claim: %w", sh.Index, err))
		if !notSent(err) {
			c.held = append(c.held, sh)
		}
	case status == "limit":
		return shardstock.ErrLimitReached
	case status != "ok":
		c.errs = multierror.Append(c.errs, fmt.Errorf("shard %d: claim: product not initialised here", sh.Index))
	default:
		if len(c.answered) == 0 {
			c.first = ids
		}
		c.held, c.answered, c.known = append(c.held, sh), append(c.answered, sh), ids
	}
	return nil
}

// down records a register Health says is down (not asked).
func (c *claims) down(sh *Shard) {
	c.errs = multierror.Append(c.errs, fmt.Errorf("shard %d: claim: %w", sh.Index, errShardDown))
}

// granted reports whether the claim stands: at least one register granted
// it (and none refused, or note would have said so).
func (c *claims) granted() error {
	if len(c.answered) == 0 {
		return fmt.Errorf("%w: per-user limit registers: %w", shardstock.ErrUnavailable, c.errs.ErrorOrNil())
	}
	return nil
}

// claimArgs are a claim script's ARGV after the fixed ones: the ids the
// buyer's other register holds.
func claimArgs(fixed []any, known []string) []any {
	args := make([]any, 0, len(fixed)+len(known))
	args = append(args, fixed...)
	for _, x := range known {
		args = append(args, x)
	}
	return args
}

// replyStrings reads a script's array reply of strings.
func replyStrings(v any, min int) ([]string, error) {
	arr, ok := v.([]any)
	if !ok || len(arr) < min {
		return nil, fmt.Errorf("unexpected script reply %v", v)
	}
	out := make([]string, len(arr))
	for i, x := range arr {
		out[i], _ = x.(string)
	}
	return out, nil
}

// claimOn asks register sh for the claim and notes its answer.
func (a *attempt) claimOn(ctx context.Context, sh *Shard) error {
	if !a.set.up(sh.Index) {
		a.claims.down(sh)
		return nil
	}
	v, err := a.set.run(ctx, sh, a.set.scripts.Claim, []string{a.k.stock, a.k.claims},
		claimArgs([]any{a.user, a.id}, a.claims.known)...)
	var r []string
	if err == nil {
		r, err = replyStrings(v, 1)
	}
	if err != nil {
		return a.claims.note(sh, "", nil, err)
	}
	return a.claims.note(sh, r[0], r[1:], nil)
}

// mergeBack writes the ids the last register knew back to the first when
// the first did not know them all (the registers converge).
func (a *attempt) mergeBack(ctx context.Context) {
	c := &a.claims
	if len(c.answered) != 2 || len(c.known) <= len(c.first) {
		return
	}
	sh := c.answered[0]
	if _, err := a.set.run(callCtx(ctx), sh, a.set.scripts.Claim, []string{a.k.stock, a.k.claims},
		claimArgs([]any{a.user, a.id}, c.known)...); err != nil {
		a.set.cfg.Logger.Warn("claim merge-back failed", "shard", sh.Index, "err", err)
	}
}

// unclaim gives claim id back on regs. It runs even if the buyer went away;
// a register that does not answer gets the claim back later (giveback.go),
// and the answer never changes.
func (s *Set) unclaim(ctx context.Context, k productKeys, user, id string, regs []*Shard) {
	ctx = callCtx(ctx)
	for _, sh := range regs {
		if _, err := s.run(ctx, sh, s.scripts.Unclaim, []string{k.claims}, user, id); err != nil {
			s.cfg.Logger.Warn("claim could not be given back yet; retrying when its register answers",
				"shard", sh.Index, "user", user, "claim", id, "err", err)
			s.queueGiveBack(giveBack{sh: sh, k: k, user: user, id: id})
		}
	}
}
