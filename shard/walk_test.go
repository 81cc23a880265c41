package shard

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/shardstock/shardstock"
)

// The purchase protocol without Redis: each case gives the shards' answers
// in the order they are asked, and says what the walk must decide and which
// steps it may send. The same protocol runs against real redis-servers in
// shard_test.go.

// lost is an answer that never came back: the step may have run.
var lost = fmt.Errorf("i/o timeout: %w", context.DeadlineExceeded)

// answer is one shard's reply to one step: a status or an error.
type answer struct {
	status string
	err    error
}

func ok(status string) answer { return answer{status: status} }

var (
	unanswered = answer{err: lost}
	down       = answer{err: errShardDown} // certainly not sent
)

// script answers each shard's steps from its queue and records every step.
type script struct {
	t       *testing.T
	answers map[int][]answer
	sent    []string
}

func (s *script) run(_ context.Context, i int, st step) (string, error) {
	op := st.op
	if st.gen != "" {
		op += ":" + st.gen
	}
	s.sent = append(s.sent, fmt.Sprintf("%d%s", i, op))
	q := s.answers[i]
	if len(q) == 0 {
		s.t.Fatalf("step %d%s not expected (sent so far: %v)", i, op, s.sent)
	}
	s.answers[i] = q[1:]
	return q[0].status, q[0].err
}

func TestWalkDecidesFromTheShardsAnswers(t *testing.T) {
	soldOut, limit, unavailable := shardstock.ErrSoldOut, shardstock.ErrLimitReached, shardstock.ErrUnavailable
	cases := []struct {
		name    string
		first   int    // the shard reserved on first; the home is shard 0
		skip    uint64 // shards known empty
		doubt   uint64 // shards a former try left in doubt
		answers map[int][]answer
		// what the walk must decide
		shard     int
		err       error
		wantDoubt uint64
		sent      string // the steps, in order
		claimKept bool   // the claim must stay (it may count a unit)
	}{
		{name: "the home has a unit: one step",
			answers: map[int][]answer{0: {ok("ok")}},
			shard:   0, sent: "0P", claimKept: true},
		{name: "the home is empty: fail over",
			answers: map[int][]answer{0: {ok("empty")}, 1: {ok("ok")}},
			shard:   1, sent: "0P 1R", claimKept: true},
		{name: "every shard empty: sold out",
			answers: map[int][]answer{0: {ok("empty")}, 1: {ok("empty")}, 2: {ok("empty")}},
			shard:   -1, err: soldOut, sent: "0P 1R 2R"},
		{name: "a shard known empty is not asked",
			skip:    1 << 1,
			answers: map[int][]answer{0: {ok("empty")}, 2: {ok("empty")}},
			shard:   -1, err: soldOut, sent: "0P 2R"},
		{name: "the limit is reached at the home",
			answers: map[int][]answer{0: {ok("limit")}},
			shard:   -1, err: limit, sent: "0P"},
		{name: "a shard down is skipped, not counted empty",
			answers: map[int][]answer{0: {ok("empty")}, 1: {down}, 2: {ok("empty")}},
			shard:   -1, err: unavailable, sent: "0P 1R 2R"},
		{name: "a shard down, the next has a unit",
			answers: map[int][]answer{0: {ok("empty")}, 1: {down}, 2: {ok("ok")}},
			shard:   2, sent: "0P 1R 2R", claimKept: true},
		{name: "random start: claim at the home, reserve at the pick",
			first:   1,
			answers: map[int][]answer{0: {ok("ok")}, 1: {ok("ok")}},
			shard:   1, sent: "0C 1R", claimKept: true},
		{name: "random start: a claim step unanswered keeps the claim, asks no one else",
			first:   1,
			answers: map[int][]answer{0: {unanswered}},
			shard:   -1, err: unavailable, sent: "0C", claimKept: true},

		// Unknown outcomes (issue 14, item 1).
		{name: "the home's answer is lost but it reserved: reserved there",
			answers: map[int][]answer{0: {unanswered, ok("held")}},
			shard:   0, sent: "0P 0Q", claimKept: true},
		{name: "the home's answer is lost and it did not reserve: fenced, asked again",
			answers: map[int][]answer{0: {unanswered, ok("void 1"), ok("ok")}},
			shard:   0, sent: "0P 0Q 0P:1", claimKept: true},
		{name: "the home cannot be asked after a lost answer: in doubt, nobody else asked",
			answers: map[int][]answer{0: {unanswered, unanswered}},
			shard:   -1, err: unavailable, wantDoubt: 1 << 0, sent: "0P 0Q", claimKept: true},
		{name: "a reserve's answer is lost but it reserved: reserved there, no failover",
			answers: map[int][]answer{0: {ok("empty")}, 1: {unanswered, ok("held")}},
			shard:   1, sent: "0P 1R 1Q", claimKept: true},
		{name: "a reserve's answer is lost, the shard is empty after all: sold out is true",
			answers: map[int][]answer{0: {ok("empty")}, 1: {unanswered, ok("void 1"), ok("empty")}, 2: {ok("empty")}},
			shard:   -1, err: soldOut, sent: "0P 1R 1Q 1R:1 2R"},
		{name: "a reserve's answer is lost and the shard cannot be asked: in doubt, no failover",
			answers: map[int][]answer{0: {ok("empty")}, 1: {unanswered, down}},
			shard:   -1, err: unavailable, wantDoubt: 1 << 1, sent: "0P 1R 1Q", claimKept: true},
		{name: "lost answers again and again: in doubt after two resolves",
			answers: map[int][]answer{0: {ok("empty")}, 1: {unanswered, ok("void 1"), unanswered, ok("void 2"), unanswered}},
			shard:   -1, err: unavailable, wantDoubt: 1 << 1, sent: "0P 1R 1Q 1R:1 1Q 1R:2", claimKept: true},
		{name: "a former try fenced the id at the home: learn the generation",
			answers: map[int][]answer{0: {ok("void"), ok("void 2"), ok("ok")}},
			shard:   0, sent: "0P 0Q 0P:2", claimKept: true},

		// A replay of a purchase a former try left in doubt.
		{name: "replay: the shard in doubt holds the id: that is the answer",
			doubt:   1 << 2,
			answers: map[int][]answer{2: {ok("held")}},
			shard:   2, sent: "2Q", claimKept: true},
		{name: "replay: the shard in doubt did not reserve: the walk goes on",
			doubt:   1 << 2,
			answers: map[int][]answer{0: {ok("empty")}, 1: {ok("empty")}, 2: {ok("void 1"), ok("ok")}},
			shard:   2, sent: "2Q 0P 1R 2R:1", claimKept: true},
		{name: "replay: a shard known empty but in doubt is asked first, and is the truth",
			doubt: 1 << 1, skip: 1<<1 | 1<<2,
			answers: map[int][]answer{1: {ok("held")}},
			shard:   1, sent: "1Q", claimKept: true},
		{name: "replay: the shard in doubt is still down: nothing else is asked",
			doubt:   1 << 1,
			answers: map[int][]answer{1: {down}},
			shard:   -1, err: unavailable, wantDoubt: 1 << 1, sent: "1Q", claimKept: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := &script{t: t, answers: tc.answers}
			a := attempt{send: s.run, product: "p", user: "u", id: "r1", n: 3, home: 0, first: tc.first, skip: tc.skip, doubt: tc.doubt}
			idx, err := a.walk(context.Background())
			if got := strings.Join(s.sent, " "); got != tc.sent {
				t.Errorf("steps sent %q, want %q", got, tc.sent)
			}
			if idx != tc.shard {
				t.Errorf("reserved at %d, want %d (err %v)", idx, tc.shard, err)
			}
			switch {
			case tc.err == nil && err != nil:
				t.Errorf("err %v, want none", err)
			case tc.err != nil && !errors.Is(err, tc.err):
				t.Errorf("err %v, want %v", err, tc.err)
			}
			if d := shardstock.DoubtOf(err); d != tc.wantDoubt {
				t.Errorf("in doubt %b, want %b", d, tc.wantDoubt)
			}
			kept := err == nil || a.uncertain
			if kept != tc.claimKept {
				t.Errorf("claim kept %v, want %v", kept, tc.claimKept)
			}
			for i, q := range s.answers {
				if len(q) > 0 {
					t.Errorf("shard %d: %d answers never asked for", i, len(q))
				}
			}
		})
	}
}
