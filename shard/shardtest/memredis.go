package shardtest

// Mem: the masters of Redis as in-memory servers (miniredis) in the test's
// process, with the operations of *Redis (kill, restart, freeze, wipe,
// machine crash back to a checkpoint), for tests that want many short
// histories rather than real redis-servers.
//
// Each master is one fixed loopback port. Behind it runs one "process": a
// miniredis.Miniredis with a run id of its own. Kill closes it (the port
// refuses connections); Restart starts a new one on the same port with the
// data the old one had (as an AOF would give back), a new run id and no
// script cache; a checkpoint is a deep copy of miniredis's databases, so a
// rewind puts back exactly what was there (stream ids, consumer groups and
// their pending entries included), not a replay of the commands.
//
// A pre-hook on every command of a process does what miniredis does not:
// it holds commands while the master is frozen, answers INFO (run_id,
// aof_current_size, used_memory) and CLIENT SETINFO, turns the scripts'
// `#!lua flags=...` first line into a comment (and EVALSHA of the sha the
// client computed into the sha miniredis stored), and counts the writes
// that changed something (AOFSize).

import (
	"crypto/rand"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"hash/maphash"
	"maps"
	"net"
	"reflect"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/Shopify/toxiproxy/v2"
	"github.com/alicebob/miniredis/v2"
	"github.com/alicebob/miniredis/v2/server"
)

// Mem is a set of in-memory masters owned by one test.
type Mem struct {
	t      testing.TB
	opts   Options
	Ports  []int
	shards []*memShard
	users  map[string]string // ACL users: name -> password (ACLUser's and admin, payments)
	// pipes: no port; connections are net.Pipe's made by Dial, through
	// each master's link (StartMemNet).
	pipes bool
	links []*memLink
}

// memShard is one master: its port, the process running on it (nil while
// killed), the data it keeps while down, and its checkpoints.
type memShard struct {
	mu          sync.Mutex
	i, port     int
	proc        *memProc
	down        memData // while killed: what a restart gets back
	aof         atomic.Int64
	checkpoints map[string]memData
}

// memData is a master's data at one moment: a deep copy of miniredis's
// databases (the unexported map[int]*RedisDB), its write count, and when it
// was taken (TTLs run on from there).
type memData struct {
	dbs   reflect.Value // invalid: empty
	aof   int64
	at    time.Time
	added map[string]int64 // entries ever added to each stream (XINFO STREAM entries-added)
}

// memProc is one run of a master (a "process").
type memProc struct {
	m     *miniredis.Miniredis
	run   string
	shard *memShard
	srv   *server.Server

	mu     sync.Mutex
	frozen chan struct{} // non-nil while frozen; closed by Thaw or Kill
	dead   bool
	shas   map[string]string // the sha a client computed -> the sha miniredis stored the script under
	lastFP uint64
	auth   bool             // connections must log in
	added  map[string]int64 // entries ever added to each stream
	xadd   sync.Mutex       // one top-level XADD counted at a time

	outer sync.Map // *server.Peer -> true while the hook re-dispatches its command
}

// StartMem starts n in-memory masters, stopped when the test ends. With
// opts.ACLUser ("name:pass") every connection must log in (AUTH/HELLO
// with a user): URLs carry that user, URLsAs("admin"/"payments") others.
// miniredis checks passwords only, not ACL rules: every user may run
// every command. TLSDir is not supported.
func StartMem(t testing.TB, n int, opts Options) *Mem {
	t.Helper()
	return startMem(t, n, opts, false)
}

// StartMemNet is StartMem with no port at all: the masters are reached
// only through Dial (go-redis's Options.Dialer), on net.Pipe connections,
// each through a link that can be cut or slowed (Cut, Slow, Mend) as
// toxiproxy would. Nothing touches a socket, so it runs inside a
// testing/synctest bubble, on the bubble's fake clock.
func StartMemNet(t testing.TB, n int, opts Options) *Mem {
	t.Helper()
	return startMem(t, n, opts, true)
}

func startMem(t testing.TB, n int, opts Options, pipes bool) *Mem {
	if opts.TLSDir != "" {
		t.Fatal("shardtest.StartMem: TLS is not supported")
	}
	mem := &Mem{t: t, opts: opts, users: map[string]string{}, pipes: pipes}
	if pipes {
		for range n {
			mem.Ports = append(mem.Ports, 6379)
			mem.links = append(mem.links, &memLink{conns: map[*linkConn]struct{}{}})
		}
	} else {
		mem.Ports = freePorts(t, n)
	}
	if opts.ACLUser != "" {
		name, pass, ok := strings.Cut(opts.ACLUser, ":")
		if !ok {
			t.Fatalf("ACLUser %q: want name:pass", opts.ACLUser)
		}
		mem.users[name] = pass
		for _, u := range []string{"admin", "payments"} {
			if _, ok := mem.users[u]; !ok {
				mem.users[u] = randomHex(12)
			}
		}
	}
	for i, p := range mem.Ports {
		sh := &memShard{i: i, port: p, checkpoints: map[string]memData{}}
		mem.shards = append(mem.shards, sh)
		if err := mem.start(sh, memData{}); err != nil {
			t.Fatalf("in-memory master %d: %v", i, err)
		}
	}
	t.Cleanup(func() {
		for _, sh := range mem.shards {
			sh.mu.Lock()
			mem.stop(sh)
			sh.mu.Unlock()
		}
	})
	return mem
}

// BehindToxiproxy is Redis.BehindToxiproxy for in-memory master i.
func (mem *Mem) BehindToxiproxy(t testing.TB, i int) (*toxiproxy.Proxy, []string) {
	t.Helper()
	return behindToxiproxy(t, i, mem.Ports[i], mem.URLs())
}

// URLs are the masters' redis:// URLs, index = shard index (with
// Options.ACLUser in them when set).
func (mem *Mem) URLs() []string {
	user := ""
	if mem.opts.ACLUser != "" {
		user = mem.opts.ACLUser + "@"
	}
	urls := make([]string, len(mem.Ports))
	for i := range mem.Ports {
		urls[i] = fmt.Sprintf("redis://%s%s/0", user, mem.addr(i))
	}
	return urls
}

// memHostPrefix: with pipes, master i's host is memHostPrefix and i+1, a
// loopback address nothing listens on, which only Dial knows. An IP, not a
// name: go-redis resolves a client's host name when it is made
// (maintnotifications.DetectEndpointType), and a lookup of a made-up name
// waits for the resolver in real time, which the fake clock of the model
// test's fast mode waited for at every coordinator start.
const memHostPrefix = "127.100.0."

// addr is master i's host:port: a loopback port, or with pipes an address
// only Dial knows.
func (mem *Mem) addr(i int) string {
	if mem.pipes {
		return fmt.Sprintf("%s%d:%d", memHostPrefix, i+1, mem.Ports[i])
	}
	return fmt.Sprintf("127.0.0.1:%d", mem.Ports[i])
}

// URLsAs are the masters' URLs for user name (admin, payments, or
// ACLUser's). Without Options.ACLUser the masters run open and these are
// URLs().
func (mem *Mem) URLsAs(name string) []string {
	if mem.opts.ACLUser == "" {
		return mem.URLs()
	}
	pass, ok := mem.users[name]
	if !ok {
		mem.t.Fatalf("no user %s on the in-memory masters", name)
	}
	urls := make([]string, len(mem.Ports))
	for i := range mem.Ports {
		urls[i] = fmt.Sprintf("redis://%s:%s@%s/0", name, pass, mem.addr(i))
	}
	return urls
}

// Kill stops master i as a SIGKILL would: its port refuses connections,
// those open are closed. Its data is kept for Restart.
func (mem *Mem) Kill(i int) {
	sh := mem.shards[i]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	mem.stop(sh)
}

// Restart starts master i again, as a new process (new run id, no
// scripts) with the data it had. A running master is left alone (as
// deploy/redis.sh start).
func (mem *Mem) Restart(i int) {
	sh := mem.shards[i]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.proc != nil {
		return
	}
	if err := mem.start(sh, sh.down); err != nil {
		mem.t.Fatalf("restart in-memory master %d: %v", i, err)
	}
}

// Wipe restarts master i without its data.
func (mem *Mem) Wipe(i int) {
	sh := mem.shards[i]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	mem.stop(sh)
	if err := mem.start(sh, memData{}); err != nil {
		mem.t.Fatalf("wipe in-memory master %d: %v", i, err)
	}
}

// Freeze makes master i hang as under SIGSTOP: it accepts connections,
// and no command (the connection's handshake included) is answered until
// Thaw (or Kill).
func (mem *Mem) Freeze(i int) {
	sh := mem.shards[i]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if p := sh.proc; p != nil {
		p.mu.Lock()
		if p.frozen == nil {
			p.frozen = make(chan struct{})
		}
		p.mu.Unlock()
	}
}

// Thaw lets a frozen master i answer again.
func (mem *Mem) Thaw(i int) {
	sh := mem.shards[i]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if p := sh.proc; p != nil {
		p.thaw()
	}
}

// Checkpoint keeps master i's data as it is now: Rewind(i) later puts the
// master back to this point.
func (mem *Mem) Checkpoint(i int) { mem.CheckpointAs(i, "checkpoint") }

// Rewind is RewindTo the last Checkpoint.
func (mem *Mem) Rewind(i int) { mem.RewindTo(i, "checkpoint") }

// CheckpointAs is Checkpoint under a name.
func (mem *Mem) CheckpointAs(i int, name string) {
	sh := mem.shards[i]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.proc == nil {
		sh.checkpoints[name] = memData{dbs: deepCopy(sh.down.dbs, nil), aof: sh.down.aof, at: sh.down.at, added: maps.Clone(sh.down.added)}
		return
	}
	sh.checkpoints[name] = sh.proc.data()
}

// DropCheckpoint forgets master i's checkpoint name.
func (mem *Mem) DropCheckpoint(i int, name string) {
	sh := mem.shards[i]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	delete(sh.checkpoints, name)
}

// RewindTo is a machine crash of master i: it stops, and starts again as a
// new process with the data of checkpoint name (every write since is lost).
func (mem *Mem) RewindTo(i int, name string) {
	sh := mem.shards[i]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	cp, ok := sh.checkpoints[name]
	if !ok {
		mem.t.Fatalf("rewind in-memory master %d: no checkpoint %q", i, name)
	}
	mem.stop(sh)
	if err := mem.start(sh, cp); err != nil {
		mem.t.Fatalf("rewind in-memory master %d: %v", i, err)
	}
}

// AOFSize is a measure of master i's writes, as the size of its AOF would
// be: it grows by the length of each command that changed its data (an
// XREADGROUP that delivered nothing, a script that only read, grow nothing),
// goes back with a rewind, is 0 after a wipe. -1 while killed. Also
// answered as aof_current_size in INFO persistence.
func (mem *Mem) AOFSize(i int) int64 {
	sh := mem.shards[i]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.proc == nil {
		return -1
	}
	return sh.aof.Load()
}

// start runs a new process on sh's port with data d (sh.mu held).
func (mem *Mem) start(sh *memShard, d memData) error {
	m := miniredis.NewMiniRedis()
	if d.dbs.IsValid() {
		deepCopyInto(field(reflect.ValueOf(m).Elem(), "dbs"), d.dbs, m)
	}
	m.ClockTTL(true)
	if !d.at.IsZero() {
		m.FastForward(time.Since(d.at)) // TTLs ran on while it was down, as PEXPIREAT in an AOF
	}
	for u, p := range mem.users {
		m.RequireUserAuth(u, p)
	}
	p := &memProc{m: m, run: randomHex(20), shard: sh, shas: map[string]string{}, auth: len(mem.users) > 0, added: maps.Clone(d.added)}
	if p.added == nil {
		p.added = map[string]int64{}
	}
	sh.aof.Store(d.aof)
	var err error
	if mem.pipes { // (miniredis starts without a listener at its first Dial)
		var c net.Conn
		if c, err = m.Dial(); err == nil {
			c.Close()
		}
	} else {
		for range 50 { // (the port of a process just closed: its listener may linger a moment)
			if err = m.StartAddr(fmt.Sprintf("127.0.0.1:%d", sh.port)); err == nil {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if err != nil {
		return err
	}
	p.srv = m.Server()
	p.lastFP = p.fingerprint()
	p.srv.SetPreHook(p.hook)
	sh.proc = p
	return nil
}

// stop ends sh's process, keeping its data (sh.mu held).
func (mem *Mem) stop(sh *memShard) {
	p := sh.proc
	if p == nil {
		return
	}
	p.mu.Lock()
	p.dead = true
	p.mu.Unlock()
	p.thaw()
	p.m.Close()
	sh.down = p.data()
	sh.proc = nil
}

func (p *memProc) thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.frozen != nil {
		close(p.frozen)
		p.frozen = nil
	}
}

// data is a deep copy of the process's databases now.
func (p *memProc) data() memData {
	p.m.Lock()
	defer p.m.Unlock()
	p.mu.Lock()
	added := maps.Clone(p.added)
	p.mu.Unlock()
	return memData{dbs: deepCopy(field(reflect.ValueOf(p.m).Elem(), "dbs"), nil), aof: p.shard.aof.Load(), at: time.Now(), added: added}
}

// hook runs before every command miniredis dispatches; true: done here.
func (p *memProc) hook(c *server.Peer, cmd string, args ...string) bool {
	if _, ok := p.outer.Load(c); ok {
		return false // our own re-dispatch
	}
	if nested(c) { // a script's redis.call (miniredis holds its lock)
		if cmd == "XADD" && len(args) > 0 {
			p.countXadd(c, cmd, args, false)
			return true
		}
		return false
	}
	p.mu.Lock()
	frozen, dead := p.frozen, p.dead
	p.mu.Unlock()
	if frozen != nil {
		<-frozen
		p.mu.Lock()
		dead = p.dead
		p.mu.Unlock()
	}
	if dead {
		c.Close()
		return true
	}
	switch cmd {
	case "INFO":
		if p.needsAuth(c) {
			c.WriteError("NOAUTH Authentication required.")
		} else {
			c.WriteBulk(p.info(args))
		}
		return true
	case "XINFO":
		if len(args) == 2 && strings.EqualFold(args[0], "STREAM") {
			if p.needsAuth(c) {
				c.WriteError("NOAUTH Authentication required.")
			} else {
				p.xinfoStream(c, args[1])
			}
			return true
		}
		return false
	case "XADD":
		if len(args) > 0 {
			p.countXadd(c, cmd, args, true)
			p.counted(cmd, args)
			return true
		}
	case "CLIENT":
		if len(args) > 0 && strings.EqualFold(args[0], "SETINFO") {
			c.WriteOK()
			return true
		}
		return false
	case "EVAL", "EVAL_RO":
		if len(args) > 0 {
			args = append([]string(nil), args...)
			args[0] = p.script(args[0])
		}
	case "SCRIPT":
		if len(args) > 1 && strings.EqualFold(args[0], "LOAD") {
			args = append([]string(nil), args...)
			args[1] = p.script(args[1])
		}
	case "EVALSHA", "EVALSHA_RO":
		if len(args) > 0 {
			p.mu.Lock()
			if s, ok := p.shas[strings.ToLower(args[0])]; ok {
				args = append([]string(nil), args...)
				args[0] = s
			}
			p.mu.Unlock()
		}
	}
	p.outer.Store(c, true)
	p.srv.Dispatch(c, append([]string{cmd}, args...))
	p.outer.Delete(c)
	if !readOnly[cmd] && !p.srv.IsReadOnlyCommand(cmd) {
		p.counted(cmd, args)
	}
	return true
}

// countXadd runs an XADD and counts the entry it added (locking: a
// top-level command, not a script's, which runs under miniredis's lock).
func (p *memProc) countXadd(c *server.Peer, cmd string, args []string, locking bool) {
	key := args[0]
	state := func() (bool, string) {
		if locking {
			p.m.Lock()
			defer p.m.Unlock()
		}
		return p.stream(key)
	}
	if locking {
		p.xadd.Lock()
		defer p.xadd.Unlock()
	}
	existed, before := state()
	p.outer.Store(c, true)
	p.srv.Dispatch(c, append([]string{cmd}, args...))
	p.outer.Delete(c)
	exists, after := state()
	if !exists || after == before {
		return
	}
	p.mu.Lock()
	if !existed {
		p.added[key] = 0
	}
	p.added[key]++
	p.mu.Unlock()
}

// stream is whether stream key exists in db 0 and its last id (m's lock
// held).
func (p *memProc) stream(key string) (bool, string) {
	s, ok := p.streamKey(key)
	if !ok {
		return false, ""
	}
	return true, field(s, "lastAllocatedID").String()
}

func (p *memProc) streamKey(key string) (reflect.Value, bool) {
	dbs := field(reflect.ValueOf(p.m).Elem(), "dbs")
	db := dbs.MapIndex(reflect.ValueOf(0))
	if !db.IsValid() || db.IsNil() {
		return reflect.Value{}, false
	}
	s := field(db.Elem(), "streamKeys").MapIndex(reflect.ValueOf(key))
	if !s.IsValid() || s.IsNil() {
		return reflect.Value{}, false
	}
	return s.Elem(), true
}

// xinfoStream answers XINFO STREAM key as Redis 7 does (miniredis answers
// length and last-generated-id only), entries-added included.
func (p *memProc) xinfoStream(c *server.Peer, key string) {
	p.m.Lock()
	defer p.m.Unlock()
	dbs := field(reflect.ValueOf(p.m).Elem(), "dbs")
	if db := dbs.MapIndex(reflect.ValueOf(0)); db.IsValid() && !db.IsNil() {
		if t, ok := field(db.Elem(), "keys").Interface().(map[string]string)[key]; ok && t != "stream" {
			c.WriteError("WRONGTYPE Operation against a key holding the wrong kind of value")
			return
		}
	}
	s, ok := p.streamKey(key)
	if !ok {
		c.WriteError("ERR no such key")
		return
	}
	entries := field(s, "entries").Interface().([]miniredis.StreamEntry)
	p.mu.Lock()
	added := p.added[key]
	p.mu.Unlock()
	if added < int64(len(entries)) {
		added = int64(len(entries)) // (a stream from before the count: at least what it holds)
	}
	entry := func(e *miniredis.StreamEntry) {
		if e == nil {
			c.WriteNull()
			return
		}
		c.WriteLen(2)
		c.WriteBulk(e.ID)
		c.WriteStrings(e.Values)
	}
	first := "0-0"
	var fe, le *miniredis.StreamEntry
	if len(entries) > 0 {
		fe, le = &entries[0], &entries[len(entries)-1]
		first = fe.ID
	}
	last := field(s, "lastAllocatedID").String()
	if last == "" {
		last = "0-0"
	}
	c.WriteMapLen(10)
	c.WriteBulk("length")
	c.WriteInt(len(entries))
	c.WriteBulk("radix-tree-keys")
	c.WriteInt(1)
	c.WriteBulk("radix-tree-nodes")
	c.WriteInt(2)
	c.WriteBulk("last-generated-id")
	c.WriteBulk(last)
	c.WriteBulk("max-deleted-entry-id")
	c.WriteBulk("0-0")
	c.WriteBulk("entries-added")
	c.WriteInt(int(added))
	c.WriteBulk("recorded-first-entry-id")
	c.WriteBulk(first)
	c.WriteBulk("groups")
	c.WriteInt(field(s, "groups").Len())
	c.WriteBulk("first-entry")
	entry(fe)
	c.WriteBulk("last-entry")
	entry(le)
}

// readOnly are commands that never write, beyond those miniredis marks so.
var readOnly = map[string]bool{"PING": true, "HELLO": true, "AUTH": true, "CLIENT": true, "SELECT": true, "ECHO": true,
	"INFO": true, "SCRIPT": true, "COMMAND": true, "QUIT": true, "XINFO": true, "XPENDING": true, "XRANGE": true, "XLEN": true,
	"HSCAN": true, "SCAN": true, "TIME": true, "MEMORY": true, "DBSIZE": true, "TYPE": true, "EXISTS": true, "KEYS": true}

// counted adds a write command to the AOF measure if it changed the data.
func (p *memProc) counted(cmd string, args []string) {
	fp := p.fingerprint()
	p.mu.Lock()
	defer p.mu.Unlock()
	if fp == p.lastFP {
		return
	}
	p.lastFP = fp
	n := len(cmd)
	for _, a := range args {
		n += len(a) + 8
	}
	p.shard.aof.Add(int64(n))
}

// script is a script's text as miniredis can run it: a `#!lua ...` first
// line (flags miniredis rejects) becomes a comment. The sha the client
// computed from the text it sent is remembered for EVALSHA.
func (p *memProc) script(src string) string {
	if !strings.HasPrefix(src, "#!") {
		return src
	}
	out := "--" + src
	sent, stored := sha1.Sum([]byte(src)), sha1.Sum([]byte(out))
	p.mu.Lock()
	p.shas[hex.EncodeToString(sent[:])] = hex.EncodeToString(stored[:])
	p.mu.Unlock()
	return out
}

// info answers INFO [section...] with the fields the coordinators and the
// tests read.
func (p *memProc) info(args []string) string {
	p.m.Lock()
	used := 1 << 20
	for _, db := range mapValues(field(reflect.ValueOf(p.m).Elem(), "dbs")) {
		used += 200 * field(db.Elem(), "keys").Len()
	}
	p.m.Unlock()
	used += int(p.shard.aof.Load())
	sections := map[string]string{
		"server": fmt.Sprintf("# Server\r\nredis_version:7.2.0\r\nredis_mode:standalone\r\nos:miniredis\r\nrun_id:%s\r\ntcp_port:%d\r\n",
			p.run, p.shard.port),
		"clients": fmt.Sprintf("# Clients\r\nconnected_clients:%d\r\n", p.srv.ClientsLen()),
		"memory": fmt.Sprintf("# Memory\r\nused_memory:%d\r\nmaxmemory:0\r\nmaxmemory_policy:noeviction\r\nmem_clients_normal:0\r\nmem_aof_buffer:0\r\n",
			used),
		"persistence": fmt.Sprintf("# Persistence\r\nloading:0\r\naof_enabled:1\r\naof_current_size:%d\r\n", p.shard.aof.Load()),
		"stats": fmt.Sprintf("# Stats\r\ntotal_connections_received:%d\r\ntotal_commands_processed:%d\r\n",
			p.srv.TotalConnections(), p.srv.TotalCommands()),
		"replication": "# Replication\r\nrole:master\r\nconnected_slaves:0\r\n",
	}
	order := []string{"server", "clients", "memory", "persistence", "stats", "replication"}
	want := order
	if len(args) > 0 {
		want = nil
		for _, a := range args {
			switch a = strings.ToLower(a); a {
			case "all", "everything", "default":
				want = order
			default:
				want = append(want, a)
			}
		}
	}
	var b strings.Builder
	for _, s := range want {
		if v, ok := sections[s]; ok {
			b.WriteString(v)
			b.WriteString("\r\n")
		}
	}
	return b.String()
}

// needsAuth reports whether connection c must still log in.
func (p *memProc) needsAuth(c *server.Peer) bool {
	if !p.auth {
		return false
	}
	if c.Ctx == nil {
		return true
	}
	v := reflect.ValueOf(c.Ctx)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return true
	}
	f := v.Elem().FieldByName("authenticated")
	return !f.IsValid() || !f.Bool()
}

// nested reports whether c is the connection miniredis makes for a
// script's redis.call (its context says so).
func nested(c *server.Peer) bool {
	if c.Ctx == nil {
		return false
	}
	v := reflect.ValueOf(c.Ctx)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return false
	}
	f := v.Elem().FieldByName("nested")
	return f.IsValid() && f.Bool()
}

// fingerprint sums what a write changes: each key's version (miniredis
// counts every change of a key), and per stream its last id, its length
// and its groups' positions and pending entries (XREADGROUP, XACK and
// XAUTOCLAIM do not count as changes of the key).
func (p *memProc) fingerprint() uint64 {
	p.m.Lock()
	defer p.m.Unlock()
	var sum uint64
	var h maphash.Hash
	h.SetSeed(fpSeed)
	add := func(parts ...any) { // (an entry's hash, summed: the maps' order does not count)
		h.Reset()
		for _, part := range parts {
			switch x := part.(type) {
			case string:
				h.WriteString(x)
			case int:
				maphash.WriteComparable(&h, int64(x))
			case int64:
				maphash.WriteComparable(&h, x)
			case uint64:
				maphash.WriteComparable(&h, x)
			}
			h.WriteByte(0)
		}
		sum += h.Sum64()
	}
	for _, db := range mapValues(field(reflect.ValueOf(p.m).Elem(), "dbs")) {
		d := db.Elem()
		kv := field(d, "keyVersion")
		it := kv.MapRange()
		for it.Next() {
			add("v", it.Key().String(), it.Value().Uint())
		}
		st := field(d, "streamKeys")
		its := st.MapRange()
		for its.Next() {
			s := its.Value().Elem()
			add("s", its.Key().String(), field(s, "lastAllocatedID").String(), field(s, "entries").Len())
			gs := field(s, "groups").MapRange()
			for gs.Next() {
				g := gs.Value().Elem()
				pend := field(g, "pending")
				var deliveries int64
				for j := range pend.Len() {
					deliveries += field(pend.Index(j), "deliveryCount").Int()
					add("p", its.Key().String(), gs.Key().String(), field(pend.Index(j), "id").String(), field(pend.Index(j), "consumer").String())
				}
				add("g", its.Key().String(), gs.Key().String(), field(g, "lastID").String(), pend.Len(), deliveries, field(g, "consumers").Len())
			}
		}
	}
	return sum
}

// fpSeed is the fingerprints' hash seed (one per process: a fingerprint
// is only compared with the last one).
var fpSeed = maphash.MakeSeed()

func mapValues(m reflect.Value) []reflect.Value {
	keys := m.MapKeys()
	sort.Slice(keys, func(a, b int) bool { return fmt.Sprint(keys[a]) < fmt.Sprint(keys[b]) })
	out := make([]reflect.Value, len(keys))
	for i, k := range keys {
		out[i] = m.MapIndex(k)
	}
	return out
}

// field is struct v's field name, readable and settable although
// unexported (v must be addressable).
func field(v reflect.Value, name string) reflect.Value {
	key := fieldKey{v.Type(), name}
	idx, ok := fieldIndex.Load(key)
	if !ok {
		f, found := v.Type().FieldByName(name)
		if !found {
			panic("miniredis has no field " + name + " in " + v.Type().String() + ": shardtest/memredis.go needs updating")
		}
		idx, _ = fieldIndex.LoadOrStore(key, f.Index)
	}
	return open(v.FieldByIndex(idx.([]int)))
}

// fieldIndex caches field's look-ups (a fingerprint after every write
// makes thousands: by name, they were a tenth of the fast mode's time).
var fieldIndex sync.Map // fieldKey → []int

type fieldKey struct {
	t    reflect.Type
	name string
}

// open makes an addressable value obtained through unexported fields
// readable and settable.
func open(v reflect.Value) reflect.Value {
	return reflect.NewAt(v.Type(), unsafe.Pointer(v.UnsafeAddr())).Elem()
}

var (
	miniredisPtr = reflect.TypeOf((*miniredis.Miniredis)(nil))
	timeType     = reflect.TypeOf(time.Time{})
)

// deepCopy is a copy of v sharing nothing with it; pointers to a
// Miniredis (a database's master) become master.
func deepCopy(v reflect.Value, master *miniredis.Miniredis) reflect.Value {
	if !v.IsValid() {
		return v
	}
	out := reflect.New(v.Type()).Elem()
	deepCopyInto(out, v, master)
	return out
}

// deepCopyInto sets dst (addressable) to a deep copy of src.
func deepCopyInto(dst, src reflect.Value, master *miniredis.Miniredis) {
	c := copier{master: master, seen: map[uintptr]reflect.Value{}}
	c.into(dst, src)
}

type copier struct {
	master *miniredis.Miniredis
	seen   map[uintptr]reflect.Value // pointers and maps copied: cycles (a group's stream) stay cycles
}

func (c *copier) into(dst, src reflect.Value) {
	if src.CanAddr() {
		src = open(src)
	}
	dst = open(dst)
	switch src.Kind() {
	case reflect.Pointer:
		switch {
		case src.Type() == miniredisPtr: // (nil in a checkpoint: the process it is put into)
			if c.master == nil {
				dst.SetZero()
			} else {
				dst.Set(reflect.ValueOf(c.master))
			}
		case src.IsNil():
			dst.SetZero()
		default:
			if n, ok := c.seen[src.Pointer()]; ok {
				dst.Set(n)
				return
			}
			n := reflect.New(src.Type().Elem())
			c.seen[src.Pointer()] = n
			c.into(n.Elem(), src.Elem())
			dst.Set(n)
		}
	case reflect.Map:
		if src.IsNil() {
			dst.SetZero()
			return
		}
		if n, ok := c.seen[src.Pointer()]; ok {
			dst.Set(n)
			return
		}
		n := reflect.MakeMapWithSize(src.Type(), src.Len())
		c.seen[src.Pointer()] = n
		it := src.MapRange()
		for it.Next() {
			k := reflect.New(src.Type().Key()).Elem()
			tk := reflect.New(src.Type().Key()).Elem()
			tk.Set(it.Key())
			c.into(k, tk)
			v := reflect.New(src.Type().Elem()).Elem()
			tv := reflect.New(src.Type().Elem()).Elem()
			tv.Set(it.Value())
			c.into(v, tv)
			n.SetMapIndex(k, v)
		}
		dst.Set(n)
	case reflect.Slice:
		if src.IsNil() {
			dst.SetZero()
			return
		}
		n := reflect.MakeSlice(src.Type(), src.Len(), src.Len())
		for j := range src.Len() {
			c.into(n.Index(j), src.Index(j))
		}
		dst.Set(n)
	case reflect.Array:
		for j := range src.Len() {
			c.into(dst.Index(j), src.Index(j))
		}
	case reflect.Struct:
		switch {
		case src.Type() == timeType:
			dst.Set(src)
		case src.Type().PkgPath() == "sync":
			dst.SetZero() // (a lock is not data: the copy's is free)
		default:
			for j := range src.NumField() {
				c.into(dst.Field(j), src.Field(j))
			}
		}
	default: // numbers, strings, bools, interfaces, funcs, channels
		dst.Set(src)
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
