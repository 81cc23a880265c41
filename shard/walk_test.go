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
	none := -1
	cases := []struct {
		name    string
		first   int    // the shard reserved on first; the home is shard 0
		retry   bool   // the purchase is tried again after ErrUnavailable (the spool)
		skip    uint64 // shards known empty
		probe   uint64 // shards whose empty marks ran out: asked again
		doubt   uint64 // shards a former try left in doubt
		answers map[int][]answer
		// what the caller did about the decision, as Set.walkAndRepair does
		rebuilt []error // the home's register rebuilt (nil) or not, when asked
		behind  int     // walks again after a window refusal: that shard's copy was behind
		// what the walk must decide
		want      decision // all but its err, which is:
		err       error
		wantDoubt uint64
		sent      string // the steps, in order
	}{
		{name: "the home has a unit: one step",
			answers: map[int][]answer{0: {ok("ok")}},
			want:    decision{shard: 0}, sent: "0P"},
		{name: "the home is empty: fail over",
			answers: map[int][]answer{0: {ok("empty")}, 1: {ok("ok")}},
			want:    decision{shard: 1, emptied: 1 << 0}, sent: "0P 1R"},
		{name: "every shard empty: sold out, the claim given back",
			answers: map[int][]answer{0: {ok("empty")}, 1: {ok("empty")}, 2: {ok("empty")}},
			want:    decision{shard: none, giveBack: true, emptied: 0b111}, err: soldOut, sent: "0P 1R 2R"},
		{name: "every shard empty, and the purchase would be retried: sold out is final, the claim given back",
			retry:   true,
			answers: map[int][]answer{0: {ok("empty")}, 1: {ok("empty")}, 2: {ok("empty")}},
			want:    decision{shard: none, giveBack: true, emptied: 0b111}, err: soldOut, sent: "0P 1R 2R"},
		{name: "a shard known empty is not asked, nor marked again",
			skip:    1 << 1,
			answers: map[int][]answer{0: {ok("empty")}, 2: {ok("empty")}},
			want:    decision{shard: none, giveBack: true, emptied: 0b101}, err: soldOut, sent: "0P 2R"},
		{name: "a shard without the product has no unit: counted empty",
			answers: map[int][]answer{0: {ok("empty")}, 1: {ok("unknown")}, 2: {ok("empty")}},
			want:    decision{shard: none, giveBack: true, emptied: 0b111}, err: soldOut, sent: "0P 1R 2R"},
		{name: "the limit is reached at the home: no claim recorded, none to give back",
			answers: map[int][]answer{0: {ok("limit")}},
			want:    decision{shard: none}, err: limit, sent: "0P"},
		{name: "a shard down is skipped, not counted empty: the claim given back",
			answers: map[int][]answer{0: {ok("empty")}, 1: {down}, 2: {ok("empty")}},
			want:    decision{shard: none, giveBack: true, emptied: 0b101}, err: unavailable, sent: "0P 1R 2R"},
		{name: "a shard down, and the purchase will be retried: the claim stays for the retry",
			retry:   true,
			answers: map[int][]answer{0: {ok("empty")}, 1: {down}, 2: {ok("empty")}},
			want:    decision{shard: none, emptied: 0b101}, err: unavailable, sent: "0P 1R 2R"},
		{name: "a shard down, the next has a unit",
			answers: map[int][]answer{0: {ok("empty")}, 1: {down}, 2: {ok("ok")}},
			want:    decision{shard: 2, emptied: 1 << 0}, sent: "0P 1R 2R"},
		{name: "random start: claim at the home, reserve at the pick",
			first:   1,
			answers: map[int][]answer{0: {ok("ok")}, 1: {ok("ok")}},
			want:    decision{shard: 1}, sent: "0C 1R"},
		{name: "random start: a claim step unanswered keeps the claim, asks no one else",
			first:   1,
			answers: map[int][]answer{0: {unanswered}},
			want:    decision{shard: none}, err: unavailable, sent: "0C"},

		// Probed shards: their marks were re-armed for this attempt.
		{name: "a probed shard that answers empty is marked again, one that sold a unit is not",
			probe:   1<<1 | 1<<2,
			answers: map[int][]answer{0: {ok("empty")}, 1: {ok("empty")}, 2: {ok("ok")}},
			want:    decision{shard: 2, emptied: 0b011, unmark: 1 << 2}, sent: "0P 1R 2R"},
		{name: "a probed shard that does not answer loses its mark",
			probe:   1 << 1,
			answers: map[int][]answer{0: {ok("empty")}, 1: {down}, 2: {ok("empty")}},
			want:    decision{shard: none, giveBack: true, emptied: 0b101, unmark: 1 << 1}, err: unavailable, sent: "0P 1R 2R"},
		{name: "a probed shard never asked loses its mark",
			probe:   1 << 2,
			answers: map[int][]answer{0: {ok("ok")}},
			want:    decision{shard: 0, unmark: 1 << 2}, sent: "0P"},

		// The sale window, as each shard's copy has it.
		{name: "the window refuses at the home: nothing claimed, nothing to give back",
			answers: map[int][]answer{0: {ok("ended")}},
			want:    decision{shard: none, window: 1 << 0}, err: shardstock.ErrEnded, sent: "0P"},
		{name: "the window refuses at a shard failed over to: final, the claim given back even for a retry",
			retry:   true,
			answers: map[int][]answer{0: {ok("empty")}, 1: {ok("not_started")}},
			want:    decision{shard: none, giveBack: true, emptied: 1 << 0, window: 1 << 1}, err: shardstock.ErrNotStarted, sent: "0P 1R"},
		{name: "the refusing shard's window was behind: written, and the purchase walked again",
			behind:  1,
			answers: map[int][]answer{0: {ok("empty"), ok("empty")}, 1: {ok("ended"), ok("ok")}},
			want:    decision{shard: 1, emptied: 1 << 0}, sent: "0P 1R 0P 1R"},

		// The home lost its data: its register is rebuilt (register.go).
		{name: "no register at the home: rebuild it; until then the limit cannot be vouched for",
			answers: map[int][]answer{0: {ok("unknown")}},
			want:    decision{shard: none, rebuild: true}, err: unavailable, sent: "0P"},
		{name: "no register at the home, rebuilt: walked again",
			rebuilt: []error{nil},
			answers: map[int][]answer{0: {ok("unknown"), ok("ok")}},
			want:    decision{shard: 0}, sent: "0P 0P"},
		{name: "no register at the home, and the rebuild fails: unavailable",
			rebuilt: []error{errors.New("shard 2 does not answer")},
			answers: map[int][]answer{0: {ok("unknown")}},
			want:    decision{shard: none}, err: unavailable, sent: "0P"},
		{name: "no register at the home even after the rebuild: unavailable",
			rebuilt: []error{nil},
			answers: map[int][]answer{0: {ok("unknown"), ok("unknown")}},
			want:    decision{shard: none}, err: unavailable, sent: "0P 0P"},

		// Unknown outcomes (issue 14, item 1).
		{name: "the home's answer is lost but it reserved: reserved there",
			answers: map[int][]answer{0: {unanswered, ok("held")}},
			want:    decision{shard: 0}, sent: "0P 0Q"},
		{name: "the home's answer is lost and it did not reserve: fenced, asked again",
			answers: map[int][]answer{0: {unanswered, ok("void 1"), ok("ok")}},
			want:    decision{shard: 0}, sent: "0P 0Q 0P:1"},
		{name: "the home cannot be asked after a lost answer: in doubt, nobody else asked, the claim kept",
			answers: map[int][]answer{0: {unanswered, unanswered}},
			want:    decision{shard: none}, err: unavailable, wantDoubt: 1 << 0, sent: "0P 0Q"},
		{name: "a reserve's answer is lost but it reserved: reserved there, no failover",
			answers: map[int][]answer{0: {ok("empty")}, 1: {unanswered, ok("held")}},
			want:    decision{shard: 1, emptied: 1 << 0}, sent: "0P 1R 1Q"},
		{name: "a reserve's answer is lost, the shard is empty after all: sold out is true, the claim given back",
			answers: map[int][]answer{0: {ok("empty")}, 1: {unanswered, ok("void 1"), ok("empty")}, 2: {ok("empty")}},
			want:    decision{shard: none, giveBack: true, emptied: 0b111}, err: soldOut, sent: "0P 1R 1Q 1R:1 2R"},
		{name: "a reserve's answer is lost and the shard cannot be asked: in doubt, no failover, the claim kept",
			answers: map[int][]answer{0: {ok("empty")}, 1: {unanswered, down}},
			want:    decision{shard: none, emptied: 1 << 0}, err: unavailable, wantDoubt: 1 << 1, sent: "0P 1R 1Q"},
		{name: "lost answers again and again: in doubt after two resolves",
			answers: map[int][]answer{0: {ok("empty")}, 1: {unanswered, ok("void 1"), unanswered, ok("void 2"), unanswered}},
			want:    decision{shard: none, emptied: 1 << 0}, err: unavailable, wantDoubt: 1 << 1, sent: "0P 1R 1Q 1R:1 1Q 1R:2"},
		{name: "a former try fenced the id at the home: learn the generation",
			answers: map[int][]answer{0: {ok("void"), ok("void 2"), ok("ok")}},
			want:    decision{shard: 0}, sent: "0P 0Q 0P:2"},

		// A replay of a purchase a former try left in doubt.
		{name: "replay: the shard in doubt holds the id: that is the answer",
			doubt:   1 << 2,
			answers: map[int][]answer{2: {ok("held")}},
			want:    decision{shard: 2}, sent: "2Q"},
		{name: "replay: the shard in doubt did not reserve: the walk goes on",
			doubt:   1 << 2,
			answers: map[int][]answer{0: {ok("empty")}, 1: {ok("empty")}, 2: {ok("void 1"), ok("ok")}},
			want:    decision{shard: 2, emptied: 0b011}, sent: "2Q 0P 1R 2R:1"},
		{name: "replay: a shard known empty but in doubt is asked first, and is the truth",
			doubt: 1 << 1, skip: 1<<1 | 1<<2,
			answers: map[int][]answer{1: {ok("held")}},
			want:    decision{shard: 1}, sent: "1Q"},
		{name: "replay: the shard in doubt is still down: nothing else is asked, the claim kept",
			doubt:   1 << 1,
			answers: map[int][]answer{1: {down}},
			want:    decision{shard: none}, err: unavailable, wantDoubt: 1 << 1, sent: "1Q"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := &script{t: t, answers: tc.answers}
			a := attempt{send: s.run, product: "p", user: "u", id: "r1", n: 3, home: 0, first: tc.first,
				retry: tc.retry, skip: tc.skip, probe: tc.probe, doubt: tc.doubt}
			d := s.decide(&a, tc.rebuilt, tc.behind)
			if got := strings.Join(s.sent, " "); got != tc.sent {
				t.Errorf("steps sent %q, want %q", got, tc.sent)
			}
			switch {
			case tc.err == nil && d.err != nil:
				t.Errorf("err %v, want none", d.err)
			case tc.err != nil && !errors.Is(d.err, tc.err):
				t.Errorf("err %v, want %v", d.err, tc.err)
			}
			if doubt := shardstock.DoubtOf(d.err); doubt != tc.wantDoubt {
				t.Errorf("in doubt %b, want %b", doubt, tc.wantDoubt)
			}
			if d.err = nil; d != tc.want {
				t.Errorf("decided %+v, want %+v", d, tc.want)
			}
			for i, q := range s.answers {
				if len(q) > 0 {
					t.Errorf("shard %d: %d answers never asked for", i, len(q))
				}
			}
		})
	}
}

// decide walks a and carries out its decision as Set.walkAndRepair does, with
// the outcomes given: each register rebuild's, and how many of the
// refusing shards' windows were behind.
func (s *script) decide(a *attempt, rebuilt []error, behind int) decision {
	ctx := context.Background()
	d := a.walk(ctx)
	for _, err := range rebuilt {
		if !d.rebuild {
			s.t.Fatalf("no rebuild asked for: %+v", d)
		}
		d = a.rebuilt(ctx, err)
	}
	for range behind {
		if d.window == 0 {
			s.t.Fatalf("no window refusal to walk again after: %+v", d)
		}
		d = a.walk(ctx)
	}
	return d
}
