// Package shardtest starts real redis-server masters for tests, through the
// same deploy/redis.sh that operators use, each test on its own free ports
// and temporary data dirs, stopped when the test ends.
package shardtest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
)

// Redis is a set of redis-server masters owned by one test.
type Redis struct {
	t      testing.TB
	script string
	dir    string
	opts   Options
	Ports  []int
}

// Options secure the masters. Without ACLUser they run open (no ACL: the
// default user may do anything, which the tests' own clients use). With ACLUser
// ("name:pass") they run as deploy/redis.sh runs them by default: no
// login as the default user, that user as the coordinators' (URLs carry it), and the
// payments and admin users. TLSDir holds ca.crt, server.crt and server.key;
// the masters then listen on TLS only.
type Options struct {
	ACLUser, TLSDir string
}

// Start starts n masters and registers their shutdown with t.Cleanup.
// Without redis-server it skips the test, saying how to install it, or
// fails it under make test (SHARDSTOCK_TEST_REQUIRE_ALL=1, set by
// deploy/with-services.sh), which installs it: there no test may pass by
// skipping.
func Start(t testing.TB, n int) *Redis {
	t.Helper()
	return StartWith(t, n, Options{})
}

// StartWith starts n masters with opts.
func StartWith(t testing.TB, n int, opts Options) *Redis {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		msg, fail := absent(os.Getenv("SHARDSTOCK_TEST_REQUIRE_ALL"))
		if fail {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	r := &Redis{t: t, script: filepath.Join(RepoRoot(t), "deploy", "redis.sh"), dir: t.TempDir(), opts: opts}
	r.Ports = freePorts(t, n)
	r.deploy("start", r.Ports...)
	t.Cleanup(func() { r.deploy("thaw", r.Ports...); r.deploy("kill", r.Ports...) })
	if opts.ACLUser != "" {
		t.Cleanup(r.checkRefusals) // (before the kill: cleanups run last first)
	}
	return r
}

// absent says what to do without redis-server, and whether the test fails
// (requireAll is SHARDSTOCK_TEST_REQUIRE_ALL) rather than skips.
func absent(requireAll string) (msg string, fail bool) {
	if requireAll == "1" {
		return "redis-server is not installed, and SHARDSTOCK_TEST_REQUIRE_ALL=1 (make test) requires every service: deploy/redis.sh install", true
	}
	return "redis-server is not installed: deploy/redis.sh install (make test installs it and runs every test)", false
}

// checkRefusals fails the test when a master refused a command for want of
// permission (its ACL LOG): what the coordinators need, their user must
// have. A test that provokes refusals on purpose calls ForgetRefusals.
func (r *Redis) checkRefusals() {
	r.t.Helper()
	if r.t.Failed() {
		return
	}
	for i, u := range r.URLsAs("admin") {
		opt, err := redis.ParseURL(u)
		if err != nil {
			r.t.Fatal(err)
		}
		c := redis.NewClient(opt)
		if c.Ping(context.Background()).Err() != nil {
			c.Close()
			continue // (a master the test left down keeps no log)
		}
		// (by hand: go-redis's ACLLog cannot parse Redis 7.0's entries)
		entries, err := c.Do(context.Background(), "ACL", "LOG", "20").Slice()
		c.Close()
		if err != nil {
			r.t.Errorf("shard %d: ACL LOG: %v", i, err)
		}
		for _, e := range entries {
			f := fields(e)
			r.t.Errorf("shard %d refused user %v: %v %v (%v, %v times)", i, f["username"], f["context"], f["object"], f["reason"], f["count"])
		}
	}
}

// fields is an ACL LOG entry by name (a map in RESP3, pairs in RESP2).
func fields(e any) map[string]any {
	f := map[string]any{}
	switch e := e.(type) {
	case map[any]any:
		for k, v := range e {
			f[fmt.Sprint(k)] = v
		}
	case []any:
		for i := 0; i+1 < len(e); i += 2 {
			f[fmt.Sprint(e[i])] = e[i+1]
		}
	}
	return f
}

// ForgetRefusals empties the masters' ACL LOG.
func (r *Redis) ForgetRefusals() {
	r.t.Helper()
	for _, u := range r.URLsAs("admin") {
		opt, err := redis.ParseURL(u)
		if err != nil {
			r.t.Fatal(err)
		}
		c := redis.NewClient(opt)
		err = c.Do(context.Background(), "ACL", "LOG", "RESET").Err()
		c.Close()
		if err != nil {
			r.t.Fatalf("ACL LOG RESET: %v", err)
		}
	}
}

// Dir is the masters' data directory (SHARDSTOCK_REDIS_DIR for the deploy
// scripts).
func (r *Redis) Dir() string { return r.dir }

// URLs are the masters' redis:// URLs, index = shard index.
func (r *Redis) URLs() []string {
	urls := make([]string, len(r.Ports))
	user := ""
	if r.opts.ACLUser != "" {
		user = r.opts.ACLUser + "@"
	}
	for i, p := range r.Ports {
		scheme := "redis"
		if r.opts.TLSDir != "" {
			scheme = "rediss"
		}
		urls[i] = fmt.Sprintf("%s://%s127.0.0.1:%d/0", scheme, user, p)
	}
	return urls
}

// URLsAs are the masters' URLs for ACL user name (payments, admin), with
// the password deploy/redis.sh made for it.
func (r *Redis) URLsAs(name string) []string {
	r.t.Helper()
	pass, err := os.ReadFile(filepath.Join(r.dir, "users", name+".password"))
	if err != nil {
		r.t.Fatalf("user %s: %v (the masters run open: no ACLUser in Options)", name, err)
	}
	urls := make([]string, len(r.Ports))
	for i, p := range r.Ports {
		urls[i] = fmt.Sprintf("redis://%s:%s@127.0.0.1:%d/0", name, strings.TrimSpace(string(pass)), p)
	}
	return urls
}

// Kill SIGKILLs master i (a crash).
func (r *Redis) Kill(i int) { r.deploy("kill", r.Ports[i]) }

// Restart starts master i again from its data dir (its AOF).
func (r *Redis) Restart(i int) { r.deploy("start", r.Ports[i]) }

// Wipe restarts master i without its data (a shard that lost it).
func (r *Redis) Wipe(i int) { r.deploy("wipe", r.Ports[i]) }

// Freeze SIGSTOPs master i (it hangs: connections stay open, nothing
// answers); Thaw resumes it.
func (r *Redis) Freeze(i int) { r.deploy("freeze", r.Ports[i]) }

// Thaw SIGCONTs master i.
func (r *Redis) Thaw(i int) { r.deploy("thaw", r.Ports[i]) }

func (r *Redis) deploy(cmd string, ports ...int) {
	r.t.Helper()
	ps := make([]string, len(ports))
	for i, p := range ports {
		ps[i] = strconv.Itoa(p)
	}
	args := []string{r.script, cmd, "--ports", strings.Join(ps, ","), "--dir", r.dir}
	if r.opts.ACLUser != "" {
		args = append(args, "--acl-user", r.opts.ACLUser)
	} else {
		args = append(args, "--open")
	}
	if r.opts.TLSDir != "" {
		args = append(args, "--tls-dir", r.opts.TLSDir)
	}
	c := exec.Command("bash", args...)
	out, err := c.CombinedOutput()
	if err != nil {
		r.t.Fatalf("deploy/redis.sh %s: %v\n%s", cmd, err, out)
	}
}

// freePorts picks n distinct free ports below the kernel's range of
// ephemeral ports (FreePort). Each listener stays open until all are
// picked: a port closed at once can be handed out again by the next pick,
// and two masters given one port are one master (its data dir and pid file
// too) that a test kills twice and counts twice.
func freePorts(t testing.TB, n int) []int {
	ports := make([]int, 0, n)
	for range n {
		ln := listenBelowEphemeral(t)
		defer ln.Close()
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

// FreePort is a free port below the kernel's range of ephemeral ports, for
// a server a test stops and starts again on the same port. A port in that
// range can be taken meanwhile as the local end of an outgoing connection,
// even by a client's own reconnect to that very port (a TCP self-connect:
// with nobody listening on 127.0.0.1:P, a connect from 127.0.0.1:P to it
// succeeds), and the restart then fails with "Address already in use".
func FreePort(t testing.TB) int {
	ln := listenBelowEphemeral(t)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// lowestPort is where the picks start: above the fixed ports of the deploy
// scripts (MariaDB 3406, Redis 6479-6679, 8080, Prometheus 9090, RocketMQ
// 9876 and 10909-10912).
const lowestPort = 15000

func listenBelowEphemeral(t testing.TB) net.Listener {
	hi := ephemeralLow() - 1
	for range 1000 {
		p := lowestPort + rand.IntN(hi-lowestPort+1)
		if ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p)); err == nil {
			return ln
		}
	}
	t.Fatalf("no free port between %d and %d", lowestPort, hi)
	return nil
}

// ephemeralLow is the first port of the kernel's ephemeral range (32768
// when it cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 32768
	}
	lo, err := strconv.Atoi(f[0])
	if err != nil || lo <= lowestPort+100 {
		return 32768
	}
	return lo
}

// RepoRoot is the directory of go.mod above the test's: the checkout whose
// deploy/ scripts a test runs.
func RepoRoot(t testing.TB) string {
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.mod not found above the test's directory")
		}
		dir = parent
	}
}

// Checkpoint copies master i's AOF as it is now: Rewind(i) later puts the
// master back to this point, as a machine crash that lost the writes since
// would (appendfsync everysec loses up to a second of them).
func (r *Redis) Checkpoint(i int) { r.CheckpointAs(i, "checkpoint") }

// Rewind SIGKILLs master i and starts it again from the AOF of its last
// Checkpoint: it comes back without every write since.
func (r *Redis) Rewind(i int) { r.RewindTo(i, "checkpoint") }

// CheckpointAs is Checkpoint under a name, so a test can keep several
// points to go back to; DropCheckpoint removes one.
func (r *Redis) CheckpointAs(i int, name string) {
	r.t.Helper()
	d := filepath.Join(r.dir, strconv.Itoa(r.Ports[i]))
	os.RemoveAll(filepath.Join(d, name))
	if out, err := exec.Command("cp", "-a", filepath.Join(d, "appendonlydir"), filepath.Join(d, name)).CombinedOutput(); err != nil {
		r.t.Fatalf("checkpoint shard %d: %v %s", i, err, out)
	}
}

// DropCheckpoint removes master i's checkpoint name.
func (r *Redis) DropCheckpoint(i int, name string) {
	os.RemoveAll(filepath.Join(r.dir, strconv.Itoa(r.Ports[i]), name))
}

// RewindTo is Rewind to the checkpoint name.
func (r *Redis) RewindTo(i int, name string) {
	r.t.Helper()
	r.Kill(i)
	d := filepath.Join(r.dir, strconv.Itoa(r.Ports[i]))
	os.RemoveAll(filepath.Join(d, "appendonlydir"))
	if out, err := exec.Command("cp", "-a", filepath.Join(d, name), filepath.Join(d, "appendonlydir")).CombinedOutput(); err != nil {
		r.t.Fatalf("rewind shard %d: %v %s", i, err, out)
	}
	r.Restart(i)
}

// BehindToxiproxy puts a Toxiproxy proxy (a real fault-injecting proxy, run
// in the test's process) in front of master i, stopped when the test ends.
// It returns the proxy, to add toxics to, and the shard URLs with master
// i's through it.
func (r *Redis) BehindToxiproxy(t testing.TB, i int) (*toxiproxy.Proxy, []string) {
	t.Helper()
	return behindToxiproxy(t, i, r.Ports[i], r.URLs())
}

// behindToxiproxy is BehindToxiproxy for master i on port, of urls.
func behindToxiproxy(t testing.TB, i, port int, urls []string) (*toxiproxy.Proxy, []string) {
	t.Helper()
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	upstream := fmt.Sprintf("127.0.0.1:%d", port)
	listen := fmt.Sprintf("127.0.0.1:%d", FreePort(t)) // (a cut link is a stop, its mend a start on the same port)
	proxy := toxiproxy.NewProxy(srv, fmt.Sprintf("shard%d", i), listen, upstream)
	if err := proxy.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Stop)
	urls[i] = strings.Replace(urls[i], upstream, proxy.Listen, 1)
	return proxy, urls
}
