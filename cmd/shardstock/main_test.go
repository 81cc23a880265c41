package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/shardstock/shardstock/config"
	"github.com/shardstock/shardstock/loadgen"
	"github.com/shardstock/shardstock/messaging"
	"github.com/shardstock/shardstock/shard/shardtest"
)

// TestMain lets a test run this binary's main as a child process.
func TestMain(m *testing.M) {
	if os.Getenv("SHARDSTOCK_TEST_AS_MAIN") == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

func env(kv map[string]string) func(string) string {
	return func(k string) string { return kv[k] }
}

func TestConfigErrorsNameTheSetting(t *testing.T) {
	good := map[string]string{"SHARDSTOCK_SHARDS": "redis://127.0.0.1:1/0", "SHARDSTOCK_ADMIN_TOKEN": "0123456789abcdef0123",
		"SHARDSTOCK_PAYMENT_SECRET": strings.Repeat("p", 32)}
	with := func(k, v string) map[string]string {
		m := map[string]string{}
		for a, b := range good {
			m[a] = b
		}
		m[k] = v
		return m
	}
	with2 := func(k1, v1, k2, v2 string) map[string]string {
		m := with(k1, v1)
		m[k2] = v2
		return m
	}
	cases := []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"no shards", with("SHARDSTOCK_SHARDS", ""), nil, "SHARDSTOCK_SHARDS"},
		{"bad shard URL", with("SHARDSTOCK_SHARDS", "redis://127.0.0.1:1/0,http://x"), nil, "SHARDSTOCK_SHARDS: shard 1"},
		{"duplicate shard", with("SHARDSTOCK_SHARDS", "redis://a:1/0,redis://a:1/0"), nil, "SHARDSTOCK_SHARDS: shards 0 and 1"},
		{"no admin token", with("SHARDSTOCK_ADMIN_TOKEN", ""), nil, "SHARDSTOCK_ADMIN_TOKEN"},
		{"short admin token", with("SHARDSTOCK_ADMIN_TOKEN", "abc"), nil, "SHARDSTOCK_ADMIN_TOKEN"},
		{"bad address", with("SHARDSTOCK_HTTP_ADDR", "8080"), nil, "SHARDSTOCK_HTTP_ADDR"},
		{"bad user auth", with("SHARDSTOCK_USER_AUTH", "magic"), nil, "SHARDSTOCK_USER_AUTH"},
		{"bad coalesce", with("SHARDSTOCK_COALESCE", "maybe"), nil, "SHARDSTOCK_COALESCE"},
		{"bad start policy", with("SHARDSTOCK_START", "nowhere"), nil, "SHARDSTOCK_START"},
		{"hmac without a secret", with("SHARDSTOCK_USER_AUTH", "hmac"), nil, "SHARDSTOCK_HMAC_SECRET"},
		{"no payment secret", with("SHARDSTOCK_PAYMENT_SECRET", ""), nil, "SHARDSTOCK_PAYMENT_SECRET"},
		{"hmac without a payment secret", func() map[string]string {
			m := with2("SHARDSTOCK_USER_AUTH", "hmac", "SHARDSTOCK_HMAC_SECRET", strings.Repeat("k", 32))
			delete(m, "SHARDSTOCK_PAYMENT_SECRET")
			return m
		}(), nil, "SHARDSTOCK_PAYMENT_SECRET"},
		{"bad trusted proxies", with("SHARDSTOCK_TRUSTED_PROXIES", "10.0.0.0/99"), nil, "SHARDSTOCK_TRUSTED_PROXIES"},
		{"short payment secret", with("SHARDSTOCK_PAYMENT_SECRET", "short"), nil, "SHARDSTOCK_PAYMENT_SECRET"},
		{"short previous payment secret", with("SHARDSTOCK_PAYMENT_SECRET_PREVIOUS", "short"), nil, "SHARDSTOCK_PAYMENT_SECRET_PREVIOUS"},
		{"previous payment secret alone", func() map[string]string {
			m := with2("SHARDSTOCK_PAYMENT_SECRET_PREVIOUS", strings.Repeat("o", 32), "SHARDSTOCK_DEV", "1")
			delete(m, "SHARDSTOCK_PAYMENT_SECRET")
			return m
		}(), nil, "SHARDSTOCK_PAYMENT_SECRET_PREVIOUS"},
		{"bad dev", with("SHARDSTOCK_DEV", "yes"), nil, "SHARDSTOCK_DEV"},
		{"bad timeout", with("SHARDSTOCK_SHARD_TIMEOUT", "fast"), nil, "SHARDSTOCK_SHARD_TIMEOUT"},
		{"bad log format", with("SHARDSTOCK_LOG_FORMAT", "xml"), nil, "SHARDSTOCK_LOG_FORMAT"},
		{"bad flag value", good, []string{"--shard-timeout", "0s"}, "SHARDSTOCK_SHARD_TIMEOUT"},
		{"broker credentials for streams", with("SHARDSTOCK_MQ_CREDENTIALS", "ak:sk-secret"), nil, "SHARDSTOCK_MQ_CREDENTIALS"},
		{"broker credentials twice", with2("SHARDSTOCK_MQ", "rocketmq://ak:sk-secret@127.0.0.1:9876", "SHARDSTOCK_MQ_CREDENTIALS", "ak:sk-secret"), nil, "SHARDSTOCK_MQ_CREDENTIALS"},
		{"broker credentials without a secret", func() map[string]string {
			return with2("SHARDSTOCK_MQ", "rocketmq://127.0.0.1:9876", "SHARDSTOCK_MQ_CREDENTIALS", "ak")
		}(), nil, "SHARDSTOCK_MQ_CREDENTIALS"},
		{"broker URL without a secret", with("SHARDSTOCK_MQ", "rocketmq://ak@127.0.0.1:9876"), nil, "SHARDSTOCK_MQ"},
		{"broker credentials in a flag", good, []string{"--mq", "rocketmq://ak:sk-secret@127.0.0.1:9876"}, "SHARDSTOCK_MQ"},
		{"stray argument", good, []string{"extra"}, "arguments"},
		{"sqlite in a missing directory", with("SHARDSTOCK_DB", "sqlite:/nonexistent/dir/orders.db"), nil, "SHARDSTOCK_DB: /nonexistent: no such directory"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(append([]string{"serve"}, tc.args...), env(tc.env), &stdout, &stderr)
			lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
			if code != 2 || len(lines) != 1 || !strings.Contains(lines[0], tc.want) {
				t.Fatalf("exit %d, stderr %q; want exit 2 and one line naming %s", code, stderr.String(), tc.want)
			}
			if strings.Contains(stderr.String(), "sk-secret") {
				t.Fatalf("the error shows the secret: %q", stderr.String())
			}
		})
	}
	t.Run("a database CA file without TLS", func(t *testing.T) {
		dir := t.TempDir()
		testCA(t, dir)
		ca := dir + "/ca.crt"
		for _, db := range []string{"sqlite:/tmp/x.db", "mysql://u:p@tcp(h:1)/d", "mysql://u:p@tcp(h:1)/d?tls=false&parseTime=true"} {
			var stdout, stderr bytes.Buffer
			code := run([]string{"serve"}, env(with2("SHARDSTOCK_DB", db, "SHARDSTOCK_DB_CA_FILE", ca)), &stdout, &stderr)
			if code != 2 || !strings.Contains(stderr.String(), "SHARDSTOCK_DB_CA_FILE") || !strings.Contains(stderr.String(), "does not use TLS") {
				t.Fatalf("%s with a CA file: exit %d, stderr %q; want exit 2 saying the DSN does not use TLS", db, code, stderr.String())
			}
		}
		c, err := config.Parse(newFlagSet(), nil, env(with2("SHARDSTOCK_DB", "mysql://u:p@tcp(h:1)/d?tls=true", "SHARDSTOCK_DB_CA_FILE", ca)))
		if err != nil || c.DBCAs == nil {
			t.Fatalf("a CA file with ?tls=true: %v", err)
		}
	})
	t.Run("dev makes up a token", func(t *testing.T) {
		fs := newFlagSet()
		c, err := config.Parse(fs, nil, env(map[string]string{"SHARDSTOCK_SHARDS": "redis://x:1/0", "SHARDSTOCK_DEV": "1"}))
		if err != nil || !c.GeneratedToken || len(c.AdminToken) < 16 {
			t.Fatalf("%+v %v", c, err)
		}
	})
	t.Run("secrets from a file, never from a flag of their own", func(t *testing.T) {
		f := t.TempDir() + "/token"
		os.WriteFile(f, []byte("token-from-a-file-0123456789\n"), 0o600)
		c, err := config.Parse(newFlagSet(), []string{"--admin-token-file", f}, env(map[string]string{"SHARDSTOCK_SHARDS": "redis://x:1/0", "SHARDSTOCK_DEV": "1"}))
		if err != nil || c.AdminToken != "token-from-a-file-0123456789" {
			t.Fatalf("%+v %v", c, err)
		}
		if _, err := config.Parse(newFlagSet(), []string{"--admin-token", "x"}, env(good)); err == nil {
			t.Fatal("--admin-token accepted: a secret in a flag shows in ps")
		}
	})
	t.Run("broker credentials from the environment or a file", func(t *testing.T) {
		want := messaging.Credentials{AccessKey: "shardstock-coordinator", SecretKey: "s3cret"}
		c, err := config.Parse(newFlagSet(), nil, env(with("SHARDSTOCK_MQ", "rocketmq://shardstock-coordinator:s3cret@127.0.0.1:9876?namespace=x")))
		if err != nil || c.MQCredentials != want {
			t.Fatalf("from the URL: %v %v", c, err)
		}
		c, err = config.Parse(newFlagSet(), nil, env(with2("SHARDSTOCK_MQ", "rocketmq://127.0.0.1:9876", "SHARDSTOCK_MQ_CREDENTIALS", "shardstock-coordinator:s3cret")))
		if err != nil || c.MQCredentials != want {
			t.Fatalf("from SHARDSTOCK_MQ_CREDENTIALS: %v %v", c, err)
		}
		f := t.TempDir() + "/coordinator.credentials"
		os.WriteFile(f, []byte("shardstock-coordinator:s3cret\n"), 0o600)
		c, err = config.Parse(newFlagSet(), []string{"--mq", "rocketmq://127.0.0.1:9876", "--mq-credentials-file", f}, env(good))
		if err != nil || c.MQCredentials != want {
			t.Fatalf("from --mq-credentials-file: %v %v", c, err)
		}
		if s := fmt.Sprintf("%v %+v %#v %s", want, want, want, want); strings.Contains(s, "s3cret") {
			t.Fatalf("printed credentials show the secret: %s", s)
		}
		if _, err := config.Parse(newFlagSet(), []string{"--mq-credentials", "a:b"}, env(good)); err == nil {
			t.Fatal("--mq-credentials accepted: a secret in a flag shows in ps")
		}
	})
	t.Run("flag wins over variable", func(t *testing.T) {
		c, err := config.Parse(newFlagSet(), []string{"--http-addr", "127.0.0.1:9999"}, env(good))
		if err != nil || c.HTTPAddr != "127.0.0.1:9999" {
			t.Fatalf("%+v %v", c, err)
		}
	})
}

func TestHelp(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"help"}, env(nil), &stdout, &stderr); code != 0 || !strings.Contains(stdout.String(), "shardstock serve") {
		t.Fatalf("help: %d %q", code, stdout.String())
	}
	stdout.Reset()
	// Help goes to stdout (so | grep finds it) and never prints a secret
	// or any other value the environment holds.
	secrets := map[string]string{"SHARDSTOCK_ADMIN_TOKEN": "admin-secret-value-0123", "SHARDSTOCK_HMAC_SECRET": "hmac-secret-value",
		"SHARDSTOCK_PAYMENT_SECRET": "payment-secret-value", "SHARDSTOCK_DB": "mysql://u:db-password@tcp(h:1)/d",
		"SHARDSTOCK_MQ": "rocketmq://ak:mq-url-secret@127.0.0.1:9876", "SHARDSTOCK_MQ_CREDENTIALS": "ak:mq-credentials-secret"}
	for _, args := range [][]string{{"serve", "--help"}, {"serve", "-h"}, {"loadgen", "--help"}} {
		stdout.Reset()
		stderr.Reset()
		if code := run(args, env(secrets), &stdout, &stderr); code != 0 || !strings.Contains(stdout.String(), "Usage") {
			t.Fatalf("%v: exit %d, stdout %q, stderr %q", args, code, stdout.String(), stderr.String())
		}
		for _, v := range []string{"admin-secret-value", "hmac-secret-value", "payment-secret-value", "db-password", "mq-url-secret", "mq-credentials-secret"} {
			if strings.Contains(stdout.String()+stderr.String(), v) {
				t.Fatalf("%v prints %q", args, v)
			}
		}
	}
	if !strings.Contains(run2(t, "serve", "--help"), "SHARDSTOCK_SHARDS") {
		t.Fatal("serve --help does not list SHARDSTOCK_SHARDS")
	}
	stderr.Reset()
	if code := run([]string{"serve", "--no-such-flag"}, env(secrets), &stdout, &stderr); code != 2 || strings.Contains(stderr.String(), "admin-secret-value") {
		t.Fatalf("a mistyped flag: exit %d, stderr %q", code, stderr.String())
	}
	if code := run([]string{"bogus"}, env(nil), &stdout, &stderr); code != 2 {
		t.Fatalf("unknown command: exit %d", code)
	}
}

// run2 runs the command and returns its stdout.
func run2(t *testing.T, args ...string) string {
	var stdout, stderr bytes.Buffer
	run(args, env(nil), &stdout, &stderr)
	return stdout.String()
}

// TestGracefulShutdown runs the server as a child process, holds a purchase
// in flight (every shard frozen), sends SIGTERM, then thaws the shards: the
// in-flight purchase must complete with its answer and the process exit 0.
func TestGracefulShutdown(t *testing.T) {
	r := shardtest.Start(t, 3)
	addr := freeAddr(t)
	cmd := exec.Command(os.Args[0], "serve")
	cmd.Env = append(os.Environ(), "SHARDSTOCK_TEST_AS_MAIN=1", "SHARDSTOCK_HTTP_ADDR="+addr,
		"SHARDSTOCK_SHARDS="+strings.Join(r.URLs(), ","), "SHARDSTOCK_ADMIN_TOKEN="+testToken, "SHARDSTOCK_DEV=1",
		"SHARDSTOCK_SHARD_TIMEOUT=3s", "SHARDSTOCK_DB=sqlite:"+t.TempDir()+"/orders.db")
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	logs := collect(out)
	defer cmd.Process.Kill()
	base := "http://" + addr
	waitReady(t, base)
	if rep := putProduct(t, base, "g", `{"stock":10}`); rep.status != 201 {
		t.Fatalf("define: %d %s", rep.status, rep.raw)
	}
	for i := range r.Ports {
		r.Freeze(i)
	}
	got := make(chan reply, 1)
	go func() { got <- purchase(t, base, "g", "patient") }()
	time.Sleep(300 * time.Millisecond) // the purchase is now waiting on a frozen shard
	cmd.Process.Signal(syscall.SIGTERM)
	time.Sleep(300 * time.Millisecond)
	for i := range r.Ports {
		r.Thaw(i)
	}
	select {
	case rep := <-got:
		if rep.status != 200 {
			t.Fatalf("in-flight purchase: %d %s", rep.status, rep.raw)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("in-flight purchase never answered")
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit: %v\n%s", err, logs())
	}
	if !strings.Contains(logs(), "stopped") {
		t.Fatalf("no shutdown log:\n%s", logs())
	}
}

func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// waitReady waits for a server started by the test (a race build, on a
// shared 2-core box) to answer /readyz.
func waitReady(t *testing.T, base string) {
	t.Helper()
	if _, ok := readyWithin(base, 15*time.Second); !ok {
		t.Fatal("server never became ready")
	}
}

// readyWithin polls base's /readyz until it answers 200 or d has passed, and
// says how long that took.
func readyWithin(base string, d time.Duration) (time.Duration, bool) {
	start := time.Now()
	for time.Since(start) < d {
		if resp, err := testHTTP.Get(base + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return time.Since(start), true
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return time.Since(start), false
}

// collect reads r in the background; the returned func gives what was read.
func collect(r io.Reader) func() string {
	var (
		mu  sync.Mutex // guards buf
		buf strings.Builder
	)
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			mu.Lock()
			fmt.Fprintln(&buf, sc.Text())
			mu.Unlock()
		}
	}()
	return func() string {
		mu.Lock()
		defer mu.Unlock()
		return buf.String()
	}
}

// TestLoadgenSmoke runs the load generator in race mode against a server:
// it sells exactly the stock to distinct buyers and its invariant check
// passes.
func TestLoadgenSmoke(t *testing.T) {
	r := inMemory(t, 3)
	m := startServer(t, r.URLs())
	putProduct(t, m.URL(), "lg", `{"stock":200}`)
	var stdout, stderr bytes.Buffer
	code := run([]string{"loadgen", "--url", m.URL(), "--product", "lg", "--buyers", "500", "--conns", "16",
		"--mode", "race", "--duration", "30s", "--admin-token", testToken, "--json", "--progress=false"}, env(nil), &stdout, &stderr)
	var rep loadgen.Report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil || code != 0 {
		t.Fatalf("exit %d, report %s %v; stderr %s", code, stdout.String(), err, stderr.String())
	}
	if rep.Statuses["200"] != 200 || !rep.OK || rep.Errors != 0 {
		t.Fatalf("report: %+v", rep)
	}
}

// TestAMisspeltSettingIsNamed (issue 42, finding 2): a SHARDSTOCK_*
// variable that is nearly a setting was left out without a word; the
// deploy scripts' and the tests' own variables are not settings and are
// not mistaken for one.
func TestAMisspeltSettingIsNamed(t *testing.T) {
	stray, nearest := config.StrayVariables([]string{
		"SHARDSTOCK_SHARD=redis://x", "SHARDSTOCK_PAYMENTS_SECRET=p", "shardstock_db=sqlite:x", "SHARDSTOCK_SHARD_TIMOUT=1s",
		"SHARDSTOCK_SHARDS=redis://y", "SHARDSTOCK_REDIS_DIR=/tmp", "SHARDSTOCK_MODEL_FAST=1", "SHARDSTOCK_ADMIN_URL=http://x",
		"SHARDSTOCK_A=1", "SHARDSTOCK_RMQ_HOST=h", "PATH=/bin", "SHARDSTOCK_TEST_REQUIRE_ALL=1",
	})
	got := fmt.Sprint(stray, nearest)
	want := fmt.Sprint([]string{"SHARDSTOCK_SHARD", "SHARDSTOCK_PAYMENTS_SECRET", "shardstock_db", "SHARDSTOCK_SHARD_TIMOUT"},
		[]string{"SHARDSTOCK_SHARDS", "SHARDSTOCK_PAYMENT_SECRET", "SHARDSTOCK_DB", "SHARDSTOCK_SHARD_TIMEOUT"})
	if got != want {
		t.Fatalf("stray variables %s, want %s", got, want)
	}
}
