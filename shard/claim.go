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
// h): the registers converge whenever both answer. A claim is granted when
// every register that answered accepted it and at least one answered; a
// refusal by either gives back what was taken and answers ErrLimitReached;
// no answer from either answers ErrUnavailable (the limit cannot be vouched
// for, so nothing is sold). The claim is given back when the attempt ends
// with no unit for certain (sold out, window closed); it is kept when a
// reserve may have run on a shard that stopped answering mid-call, because
// that unit may exist.
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

// registers returns the buyer's claim registers: home, then backup.
func (s *Set) registers(user string) []*Shard {
	h := fnv.New32a()
	h.Write([]byte(user))
	home := int(h.Sum32() % uint32(len(s.shards)))
	if len(s.shards) == 1 {
		return s.shards[:1]
	}
	return []*Shard{s.shards[home], s.shards[(home+1)%len(s.shards)]}
}

// claimReply is a register's answer: its status and the ids it now holds.
type claimReply struct {
	status string
	ids    []string
}

func (s *Set) claimOn(ctx context.Context, sh *Shard, k productKeys, user, id string, known []string) (claimReply, error) {
	args := make([]any, 0, 2+len(known))
	args = append(args, user, id)
	for _, x := range known {
		args = append(args, x)
	}
	v, err := s.run(ctx, sh, s.scripts.Claim, []string{k.stock, k.claims}, args...)
	if err != nil {
		return claimReply{}, err
	}
	arr, ok := v.([]any)
	if !ok || len(arr) == 0 {
		return claimReply{}, fmt.Errorf("claim: unexpected reply %v", v)
	}
	r := claimReply{status: fmt.Sprint(arr[0])}
	for _, x := range arr[1:] {
		r.ids = append(r.ids, fmt.Sprint(x))
	}
	return r, nil
}

// claim takes claim id for user (see above). It returns the registers that
// may hold the claim, for unclaim; ErrLimitReached; or ErrUnavailable with
// the registers' errors.
func (s *Set) claim(ctx context.Context, k productKeys, user, id string) ([]*Shard, error) {
	var (
		held, answered []*Shard
		known, first   []string
		errs           *multierror.Error
	)
	for _, sh := range s.registers(user) {
		if !s.up(sh.Index) {
			errs = multierror.Append(errs, fmt.Errorf("shard %d: claim: %w", sh.Index, errShardDown))
			continue
		}
		r, err := s.claimOn(ctx, sh, k, user, id, known)
		switch {
		case err != nil:
			errs = multierror.Append(errs, fmt.Errorf("shard %d: claim: %w", sh.Index, err))
			if !notSent(err) {
				held = append(held, sh)
			}
			continue
		case r.status == "limit":
			s.unclaim(ctx, k, user, id, held)
			return nil, shardstock.ErrLimitReached
		case r.status != "ok":
			errs = multierror.Append(errs, fmt.Errorf("shard %d: claim: product not initialised here", sh.Index))
			continue
		}
		if len(answered) == 0 {
			first = r.ids
		}
		held, answered, known = append(held, sh), append(answered, sh), r.ids
	}
	if len(answered) == 0 {
		s.unclaim(ctx, k, user, id, held)
		return nil, fmt.Errorf("%w: per-user limit registers: %w", shardstock.ErrUnavailable, errs.ErrorOrNil())
	}
	if len(answered) == 2 && len(known) > len(first) {
		// The backup knew claims the home did not: write them back.
		if _, err := s.claimOn(callCtx(ctx), answered[0], k, user, id, known); err != nil {
			s.cfg.Logger.Warn("claim merge-back failed", "shard", answered[0].Index, "err", err)
		}
	}
	return held, nil
}

// unclaim gives claim id back on regs. It runs even if the buyer went away;
// a failure is logged (the buyer's limit stays used by a claim with no unit
// until the registers are reconciled) and never changes the answer.
func (s *Set) unclaim(ctx context.Context, k productKeys, user, id string, regs []*Shard) {
	ctx = callCtx(ctx)
	for _, sh := range regs {
		if _, err := s.run(ctx, sh, s.scripts.Unclaim, []string{k.claims}, user, id); err != nil {
			s.cfg.Logger.Warn("claim could not be given back", "shard", sh.Index, "user", user, "claim", id, "err", err)
		}
	}
}
