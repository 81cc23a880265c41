package shardtest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardstock/shardstock/lua"
)

func memClient(t *testing.T, url string) *redis.Client {
	t.Helper()
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout, opt.MaxRetries = 300*time.Millisecond, 300*time.Millisecond, 300*time.Millisecond, -1
	c := redis.NewClient(opt)
	t.Cleanup(func() { c.Close() })
	return c
}

func runID(t *testing.T, c *redis.Client) string {
	t.Helper()
	info, err := c.Info(context.Background(), "server").Result()
	if err != nil {
		t.Fatalf("INFO server: %v", err)
	}
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "run_id:"); ok {
			return v
		}
	}
	t.Fatalf("no run_id in %q", info)
	return ""
}

// TestMemLifecycle: kill, restart, freeze, wipe, rewind on an in-memory
// master, seen by a go-redis client as the coordinators see a real one.
func TestMemLifecycle(t *testing.T) {
	ctx := context.Background()
	mem := StartMem(t, 1, Options{ACLUser: "shardstock:pw"})
	c := memClient(t, mem.URLs()[0])
	admin := memClient(t, mem.URLsAs("admin")[0])

	// ACL: no login, wrong password refused; users log in.
	anon := memClient(t, strings.Replace(mem.URLs()[0], "shardstock:pw@", "", 1))
	if err := anon.Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Fatalf("ping without a user: %v, want NOAUTH", err)
	}
	bad := memClient(t, strings.Replace(mem.URLs()[0], ":pw@", ":nope@", 1))
	if err := bad.Ping(ctx).Err(); err == nil {
		t.Fatal("wrong password let in")
	}
	if err := admin.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}

	run0 := runID(t, c)
	if err := c.HSet(ctx, "h", "a", 1).Err(); err != nil {
		t.Fatal(err)
	}
	size0 := mem.AOFSize(0)
	if size0 <= 0 {
		t.Fatalf("AOF measure %d after a write", size0)
	}
	c.HGet(ctx, "h", "a")
	if got := mem.AOFSize(0); got != size0 {
		t.Fatalf("a read grew the AOF measure %d -> %d", size0, got)
	}

	mem.Kill(0)
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("a killed master answered")
	}
	if mem.AOFSize(0) != -1 {
		t.Fatal("AOFSize of a killed master")
	}
	mem.Restart(0)
	if run := runID(t, c); run == run0 || run == "" {
		t.Fatalf("run id after restart %q (was %q)", run, run0)
	}
	if v := c.HGet(ctx, "h", "a").Val(); v != "1" {
		t.Fatalf("after restart h.a = %q", v)
	}

	// Freeze: the connection hangs (a new one too), Thaw: it answers.
	mem.Freeze(0)
	start := time.Now()
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("a frozen master answered")
	}
	if time.Since(start) < 250*time.Millisecond {
		t.Fatalf("frozen master refused at once instead of hanging: %v", time.Since(start))
	}
	mem.Thaw(0)
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("thawed: %v", err)
	}

	// A shebang script (as lua/confirm.lua) through EVALSHA, NOSCRIPT, EVAL.
	s := redis.NewScript("#!lua flags=allow-oom\nredis.call('XADD', KEYS[1], '*', 'n', ARGV[1]) return redis.call('TIME')[1]")
	for n := range 3 {
		if err := s.Run(ctx, c, []string{"out"}, n).Err(); err != nil {
			t.Fatalf("shebang script: %v", err)
		}
	}
	if err := c.XGroupCreate(ctx, "out", "g", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "c1", Streams: []string{"out", ">"}, Count: 1, Block: -1}).Result(); err != nil {
		t.Fatal(err)
	}
	mem.CheckpointAs(0, "cp")
	ids := c.XRange(ctx, "out", "-", "+").Val()
	info := c.XInfoStream(ctx, "out").Val()
	if info.EntriesAdded != 3 || info.Length != 3 {
		t.Fatalf("XINFO STREAM %+v", info)
	}
	cpSize := mem.AOFSize(0)
	// an XREADGROUP that delivers nothing new is no write (as in Redis; one
	// of the pending history, "0", counts a delivery: XCLAIM in the AOF)
	c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "c2", Streams: []string{"out", ">"}, Count: 10, Block: -1})
	c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "c2", Streams: []string{"out", ">"}, Count: 10, Block: -1})
	cpSize = mem.AOFSize(0)
	c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "c2", Streams: []string{"out", ">"}, Count: 10, Block: -1})
	if got := mem.AOFSize(0); got != cpSize {
		t.Fatalf("an XREADGROUP that delivered nothing grew the AOF measure %d -> %d", cpSize, got)
	}
	mem.CheckpointAs(0, "cp")
	// writes after the checkpoint, then a crash back to it
	s.Run(ctx, c, []string{"out"}, 9)
	c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "c1", Streams: []string{"out", ">"}, Count: 10, Block: -1})
	c.HSet(ctx, "h", "b", 2)
	if mem.AOFSize(0) <= cpSize {
		t.Fatal("writes did not grow the AOF measure")
	}
	run1 := runID(t, c)
	mem.RewindTo(0, "cp")
	if run := runID(t, c); run == run1 {
		t.Fatal("same run id after a rewind")
	}
	if mem.AOFSize(0) != cpSize {
		t.Fatalf("AOF measure after rewind %d, want %d", mem.AOFSize(0), cpSize)
	}
	if c.HExists(ctx, "h", "b").Val() {
		t.Fatal("a write after the checkpoint survived the rewind")
	}
	after := c.XRange(ctx, "out", "-", "+").Val()
	if len(after) != 3 || after[2].ID != ids[2].ID {
		t.Fatalf("stream after rewind %v, want %v", after, ids)
	}
	if p := c.XPending(ctx, "out", "g").Val(); p.Count != 3 {
		t.Fatalf("pending after rewind %+v, want the 3 read before the checkpoint", p)
	}
	if info := c.XInfoStream(ctx, "out").Val(); info.EntriesAdded != 3 {
		t.Fatalf("entries-added after rewind %d", info.EntriesAdded)
	}
	// the checkpoint stays usable, and rewinding twice gives the same
	s.Run(ctx, c, []string{"out"}, 10)
	mem.RewindTo(0, "cp")
	if n := c.XLen(ctx, "out").Val(); n != 3 {
		t.Fatalf("second rewind: %d entries", n)
	}

	mem.Wipe(0)
	if n := c.DBSize(ctx).Val(); n != 0 {
		t.Fatalf("wiped master holds %d keys", n)
	}
	if mem.AOFSize(0) != 0 {
		t.Fatal("AOF measure after wipe")
	}
}

// TestMemCommands: the commands the stock path sends (shard/, messaging/,
// lua/*.lua) on miniredis, through the hook.
func TestMemCommands(t *testing.T) {
	ctx := context.Background()
	mem := StartMem(t, 1, Options{})
	c := memClient(t, mem.URLs()[0])
	sc := lua.NewScripts()
	// every embedded script compiles and runs (a wrong-arity call errors from Lua, not from the parser)
	for name, s := range map[string]*redis.Script{"purchase": sc.Purchase, "init": sc.Init, "confirm": sc.Confirm, "release": sc.Release,
		"register": sc.Register, "restore_hold": sc.RestoreHold, "transfer_out": sc.TransferOut, "transfer_in": sc.TransferIn,
		"window": sc.Window, "budget": sc.Budget, "ack": sc.Ack} {
		err := s.Load(ctx, c).Err()
		if err != nil {
			t.Errorf("SCRIPT LOAD %s: %v", name, err)
			continue
		}
		if ok := c.ScriptExists(ctx, s.Hash()).Val(); len(ok) != 1 {
			t.Errorf("SCRIPT EXISTS %s: %v", name, ok)
		}
	}
	check := func(what string, err error) {
		t.Helper()
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Errorf("%s: %v", what, err)
		}
	}
	check("XGROUP CREATE MKSTREAM", c.XGroupCreateMkStream(ctx, "s", "g", "$").Err())
	for range 5 {
		check("XADD", c.XAdd(ctx, &redis.XAddArgs{Stream: "s", Values: []string{"k", "v"}}).Err())
	}
	msgs, err := c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "a", Streams: []string{"s", ">"}, Count: 5, Block: 10 * time.Millisecond}).Result()
	check("XREADGROUP", err)
	if len(msgs) != 1 || len(msgs[0].Messages) != 5 {
		t.Fatalf("XREADGROUP %v", msgs)
	}
	_, _, err = c.XAutoClaim(ctx, &redis.XAutoClaimArgs{Stream: "s", Group: "g", Consumer: "b", MinIdle: 0, Start: "0", Count: 2}).Result()
	check("XAUTOCLAIM", err)
	check("XACK", c.XAck(ctx, "s", "g", msgs[0].Messages[0].ID).Err())
	ids := []any{"g"}
	for _, m := range msgs[0].Messages[1:3] {
		ids = append(ids, m.ID)
	}
	v, err := sc.Ack.Run(ctx, c, []string{"s"}, ids...).Result()
	check("ack.lua (XACK, XPENDING, XTRIM MINID, XDEL)", err)
	t.Logf("ack.lua: %v; XLEN %d", v, c.XLen(ctx, "s").Val())
	check("XTRIM MINID", c.XTrimMinID(ctx, "s", "0-1").Err())
	check("XINFO STREAM", c.XInfoStream(ctx, "s").Err())
	check("XINFO GROUPS", c.XInfoGroups(ctx, "s").Err())
	check("XPENDING ext", c.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: "s", Group: "g", Start: "-", End: "+", Count: 10}).Err())
	check("HSET", c.HSet(ctx, "h", "a", 1, "b", 2).Err())
	_, _, err = c.HScan(ctx, "h", 0, "*", 10).Result()
	check("HSCAN", err)
	_, _, err = c.Scan(ctx, 0, "*", 10).Result()
	check("SCAN", err)
	check("TIME", c.Time(ctx).Err())
	check("INFO memory", c.Info(ctx, "memory").Err())
	check("INFO persistence", c.Info(ctx, "persistence").Err())
	check("SCRIPT FLUSH", c.ScriptFlush(ctx).Err())
	check("FLUSHALL", c.FlushAll(ctx).Err())
}
