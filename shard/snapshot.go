package shard

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/shardstock/shardstock"
)

// Snapshot reads every shard at once, one pipelined round trip per shard,
// whatever the number of products.
func (s *Stock) Snapshot(ctx context.Context, products []string) []shardstock.ShardSnapshot {
	out := make([]shardstock.ShardSnapshot, len(s.shards))
	var wg sync.WaitGroup
	for i, sh := range s.shards {
		wg.Go(func() { out[i] = s.snapshotOne(ctx, sh, products) })
	}
	wg.Wait()
	return out
}

func (s *pool) snapshotOne(ctx context.Context, sh *Shard, products []string) shardstock.ShardSnapshot {
	snap := shardstock.ShardSnapshot{Index: sh.Index, Addr: sh.Addr, Products: make(map[string]shardstock.Counters, len(products)), Pool: poolStats(sh.Client.PoolStats())}
	counters := make([]*redis.SliceCmd, len(products))
	outboxes := make([]*redis.IntCmd, len(products))
	var settle *redis.IntCmd
	var memory *redis.StringCmd
	snap.Err = s.call(ctx, sh, func(ctx context.Context) error {
		_, err := sh.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, prod := range products {
				k := keysFor(prod)
				counters[i] = p.HMGet(ctx, k.stock, "alloc", "salable", "locked", "sold")
				outboxes[i] = p.XLen(ctx, k.outbox)
			}
			settle = p.XLen(ctx, SettleKey)
			memory = p.Info(ctx, "memory")
			return nil
		})
		if errors.Is(err, redis.Nil) {
			return nil
		}
		return err
	})
	if snap.Err != nil {
		return snap
	}
	for i, prod := range products {
		if v, err := counters[i].Result(); err == nil {
			if c, err := parseCounters(v); err == nil {
				snap.Products[prod] = c
			}
		}
		snap.Outbox += outboxes[i].Val()
	}
	snap.Settle = settle.Val()
	snap.UsedMemory, snap.MaxMemory = memoryOf(memory.Val())
	return snap
}

// poolStats are go-redis's pool counts as the domain names them.
func poolStats(p *redis.PoolStats) *shardstock.PoolStats {
	return &shardstock.PoolStats{Total: p.TotalConns, Idle: p.IdleConns, Hits: p.Hits, Misses: p.Misses, Timeouts: p.Timeouts}
}

// memoryOf reads used_memory and maxmemory from INFO memory.
func memoryOf(info string) (used, max int64) {
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			used, _ = strconv.ParseInt(v, 10, 64)
		} else if v, ok := strings.CutPrefix(line, "maxmemory:"); ok {
			max, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	return used, max
}

// Memory is shard i's used_memory and maxmemory (0: no limit), from INFO
// memory.
func (s *Set) Memory(ctx context.Context, i int) (used, max int64, err error) {
	var info string
	err = s.call(ctx, s.shards[i], func(ctx context.Context) error {
		var err error
		info, err = s.shards[i].Client.Info(ctx, "memory").Result()
		return err
	})
	used, max = memoryOf(info)
	return used, max, err
}
