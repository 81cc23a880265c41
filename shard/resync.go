package shard

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/shardstock/shardstock"
)

// Crash-consistent shards. With appendfsync everysec a shard whose machine
// crashes comes back from an AOF without up to its last second of writes:
// holds whose orders SQL already has (their units would sell a second
// time), the source side of a transfer whose destination kept its side
// (the units would exist twice), settlements SQL marked done, claims. A
// shard that restarted may therefore not sell again until it has been
// brought back in line with SQL, which is the truth (inventory.Resync does
// that from the order table and the transfer log).
//
// The fence. Every Redis process has a run id, new at each start. When
// Config.Resync is set, each new connection to a shard first reads the
// shard's run id (go-redis OnConnect, before any command on the
// connection); a run id other than the last one resynced fences the shard
// and asks for a resync: the connection is refused (errFenced, certainly
// not sent) unless it is the resync's own (shardstock.ResyncContext), and purchase
// steps are not sent while the shard is fenced. A restarted shard has no
// old connection left, so no command reaches it unchecked. Resynced shards
// (Synced) answer normally again; a coordinator that starts, or one whose
// shard moved to another address, asks once per shard and is answered from
// the record of resynced run ids (the order table) without redoing the work.

// errFenced: the shard restarted and is not resynced yet; nothing was sent.
var errFenced = errors.New("shard restarted and is not back in line with the order table yet (fenced until resynced)")

// fence is one shard's restart fence.
type fence struct {
	mu     sync.Mutex // guards synced and seen
	synced string     // run id last resynced; "": none yet
	seen   string     // run id the last new connection found
	closed atomic.Bool
}

// onConnect is the OnConnect hook of shard i: it compares the shard's run
// id with the last one resynced.
func (s *pool) onConnect(i int) func(context.Context, *redis.Conn) error {
	return func(ctx context.Context, cn *redis.Conn) error {
		info, err := cn.Info(ctx, "server").Result()
		if err != nil {
			return err
		}
		run := runID(info)
		f := &s.shards[i].fence
		f.mu.Lock()
		same := run != "" && run == f.synced
		first := f.synced == ""
		f.seen = run
		f.mu.Unlock()
		if same {
			return nil
		}
		if !f.closed.Swap(true) {
			if first {
				s.cfg.Logger.Info("shard first seen: checking its run id against the order table before it sells", "shard", i, "run_id", run)
			} else {
				s.cfg.Logger.Warn("shard restarted (new run id): fenced until it is back in line with the order table",
					"shard", i, "run_id", run)
			}
		}
		s.cfg.Resync(i, run)
		if shardstock.IsResync(ctx) {
			return nil
		}
		return errFenced
	}
}

func runID(info string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "run_id:"); ok {
			return v
		}
	}
	return ""
}

// fenceHook refuses, while its shard is fenced, every command that is not
// the resync's own. OnConnect checks new connections only, and a connection
// the resync opened goes back to the pool when it is done: without the hook
// any call could take it and reach the shard before it is back in line.
// The connection handshake (and OnConnect's INFO, which asks for the
// resync) is let through, so a new connection still reports a restart.
type fenceHook struct{ f *fence }

// handshake lists the commands go-redis sends while it sets up a connection.
var handshake = map[string]bool{"hello": true, "auth": true, "select": true, "client": true, "info": true}

// refusing reports whether commands under ctx are refused now (the
// handshake's excepted).
func (h fenceHook) refusing(ctx context.Context) bool {
	return h.f.closed.Load() && !shardstock.IsResync(ctx)
}

func (h fenceHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h fenceHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.refusing(ctx) && !handshake[cmd.Name()] {
			cmd.SetErr(errFenced)
			return errFenced
		}
		return next(ctx, cmd)
	}
}

func (h fenceHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !h.refusing(ctx) {
			return next(ctx, cmds)
		}
		for _, cmd := range cmds {
			if !handshake[cmd.Name()] {
				for _, c := range cmds {
					c.SetErr(errFenced)
				}
				return errFenced
			}
		}
		return next(ctx, cmds)
	}
}

// Synced records that shard i, running as run, is back in line with SQL:
// its fence opens, unless the shard restarted again meanwhile (a connection
// found another run id since): that run is resynced in turn.
func (s *Fence) Synced(i int, run string) {
	f := &s.shards[i].fence
	f.mu.Lock()
	defer f.mu.Unlock()
	f.synced = run
	if f.seen == run {
		f.closed.Store(false)
	}
}

// SeenRun is the run id shard i's last new connection found ("": none yet):
// the run an operator accepts when it accepts a kept fence.
func (s *Fence) SeenRun(i int) string {
	f := &s.shards[i].fence
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.seen
}

// Fenced reports whether shard i is fenced (restarted, not resynced yet).
func (s *Fence) Fenced(i int) bool { return s.shards[i].fence.closed.Load() }

// RepairRegister adds to p's register on shard i the claims it lost (from
// the holds on the other shards and the order table), keeping those it has,
// and takes out the claims given back since. A shard with no register for p
// is left alone: the first purchase of a buyer homed there rebuilds it
// (rebuildRegister).
func (s *Stock) RepairRegister(ctx context.Context, p *shardstock.Product, i int) error {
	if s.cfg.Ledger == nil || s.cfg.Inits == nil {
		return errRegisterLost
	}
	sh := s.shards[i]
	var there bool
	err := s.call(ctx, sh, func(ctx context.Context) error {
		var err error
		there, err = sh.Client.HExists(ctx, keysFor(p.ID).claims, "#").Result()
		return err
	})
	if err != nil || !there {
		return err
	}
	return s.rebuild(ctx, p, sh, true)
}
