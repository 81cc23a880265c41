package shard

import (
	"context"
	"sync"
	"time"
)

// Claims that could not be given back (the buyer's home did not answer) are
// not left to hold the buyer's limit: they wait here and are given back as
// soon as the home answers again. Giving a claim back later is as safe as
// at once — it is only queued when its id certainly has no unit (the
// attempt got none, or its order was released) and will not be tried again
// (an attempt the spool will replay keeps its claim: purchase.go). The queue lives in memory: a
// coordinator that dies with claims in it leaves them (the per-user limit
// errs on the side of refusing), which DESIGN.md lists as a known limit.

// giveBackEvery is how often queued claims are tried again.
var giveBackEvery = time.Second

// maxGiveBacks bounds the queue; past it a claim is logged and dropped.
const maxGiveBacks = 100_000

type giveBack struct {
	sh                *Shard
	product, user, id string
}

type giveBacks struct {
	mu      sync.Mutex
	pending []giveBack
	stop    chan struct{}
	done    chan struct{}
}

func (s *pool) startGiveBacks() {
	s.giveBacks = &giveBacks{stop: make(chan struct{}), done: make(chan struct{})}
	go s.giveBackLoop()
}

// queueGiveBack keeps a claim that could not be given back for later.
func (s *pool) queueGiveBack(g giveBack) {
	q := s.giveBacks
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.pending) >= maxGiveBacks {
		s.cfg.Logger.Error("claim give-back queue full: the buyer's limit stays used by this claim",
			"shard", g.sh.Index, "user", g.user, "claim", g.id)
		return
	}
	q.pending = append(q.pending, g)
}

// PendingGiveBacks is the number of claims waiting to be given back.
func (s *Set) PendingGiveBacks() int {
	s.giveBacks.mu.Lock()
	defer s.giveBacks.mu.Unlock()
	return len(s.giveBacks.pending)
}

func (s *pool) giveBackLoop() {
	defer close(s.giveBacks.done)
	t := time.NewTicker(giveBackEvery)
	defer t.Stop()
	for {
		select {
		case <-s.giveBacks.stop:
			return
		case <-t.C:
			s.retryGiveBacks()
		}
	}
}

// retryGiveBacks tries every queued claim whose register is up once.
func (s *pool) retryGiveBacks() {
	q := s.giveBacks
	q.mu.Lock()
	todo := q.pending
	q.pending = nil
	q.mu.Unlock()
	var keep []giveBack
	for _, g := range todo {
		if s.up(g.sh.Index) {
			_, err := s.runStep(context.Background(), g.sh, step{product: g.product, op: opUnclaim, user: g.user, id: g.id})
			if err == nil {
				s.cfg.Logger.Info("claim given back after its register returned", "shard", g.sh.Index, "user", g.user, "claim", g.id)
				continue
			}
		}
		keep = append(keep, g)
	}
	if len(keep) > 0 {
		q.mu.Lock()
		q.pending = append(keep, q.pending...)
		q.mu.Unlock()
	}
}

func (s *pool) stopGiveBacks() {
	close(s.giveBacks.stop)
	<-s.giveBacks.done
}
