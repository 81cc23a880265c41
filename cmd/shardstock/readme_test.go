package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// quickStartStep is one command of the README's quick start and the answer
// the README shows for it.
type quickStartStep struct {
	command, answer string
}

// quickStart reads the quick start's commands from the README: the first
// sh block of the "Quick start" section that runs curl. A command may span
// lines ending in a backslash; a "# " line after it is its answer.
func quickStart(readme string) ([]quickStartStep, error) {
	_, section, ok := strings.Cut(readme, "## Quick start")
	if !ok {
		return nil, fmt.Errorf("no Quick start section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var steps []quickStartStep
	for _, block := range strings.Split(section, "```sh\n")[1:] {
		block, _, _ = strings.Cut(block, "```")
		if !strings.Contains(block, "curl ") {
			continue
		}
		var cmd strings.Builder
		for _, line := range strings.Split(block, "\n") {
			switch {
			case strings.HasPrefix(line, "# ") && len(steps) > 0:
				steps[len(steps)-1].answer = strings.TrimPrefix(line, "# ")
			case strings.HasSuffix(line, "\\"):
				cmd.WriteString(strings.TrimSuffix(line, "\\"))
			case strings.TrimSpace(line) != "":
				cmd.WriteString(line)
				steps = append(steps, quickStartStep{command: cmd.String()})
				cmd.Reset()
			}
		}
	}
	if len(steps) == 0 {
		return nil, fmt.Errorf("no sh block with curl commands in the Quick start section")
	}
	return steps, nil
}

// freshClone clones the repository's committed state into a temporary
// directory and returns it with its README.
func freshClone(t *testing.T) (dir, readme string) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "clone")
	if out, err := exec.Command("git", "clone", "--quiet", repoRoot(t), dir).CombinedOutput(); err != nil {
		t.Fatalf("git clone: %v\n%s", err, out)
	}
	b, err := os.ReadFile(filepath.Join(dir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	return dir, string(b)
}

// TestReadmeQuickStartIsTrue (issue 17): on a fresh clone, `make run` in
// both modes starts, every quick-start command of the README answers what
// the README shows (ids, the shard and the payment deadline aside), and
// `make stop` leaves nothing listening. make test runs it after the other
// tests (SHARDSTOCK_TEST_README=1), when the shared services are stopped:
// the quick start uses the same ports.
func TestReadmeQuickStartIsTrue(t *testing.T) {
	if os.Getenv("SHARDSTOCK_TEST_README") != "1" {
		t.Skip("SHARDSTOCK_TEST_README=1 runs it (make test does, after the other tests)")
	}
	ports := []int{8080, 6479, 6579, 6679, 3406, 9876, 10909, 10911, 10912}
	for _, p := range ports {
		if listening(p) {
			t.Fatalf("port %d is in use: a make run may be running (make stop stops it)", p)
		}
	}
	clone, readme := freshClone(t)
	steps, err := quickStart(readme)
	if err != nil || len(steps) < 5 {
		t.Fatalf("README quick start: %d commands, %v", len(steps), err)
	}
	t.Cleanup(func() { exec.Command("make", "-C", clone, "stop").Run() })
	for _, mode := range []string{"streams", "rocketmq"} {
		t.Run(mode, func(t *testing.T) {
			banner := makeRun(t, clone, mode)
			for _, want := range []string{"sale page", "operators' page", "/admin/", "metrics", "/metrics"} {
				if !strings.Contains(banner, want) {
					t.Errorf("make run does not say where the %q is:\n%s", want, banner)
				}
			}
			if wide := beyondLoopback(t, ports); len(wide) > 0 {
				t.Errorf("listening beyond loopback after make run MQ=%s: %v", mode, wide)
			}
			ids := map[string]string{} // the README's order ids -> this run's
			for _, s := range steps {
				checkStep(t, s, ids)
			}
			if open := openToOthers(filepath.Join(clone, "run", mode)); len(open) > 0 {
				t.Errorf("make run MQ=%s wrote files others may read or write (they name buyers and orders): %v", mode, open)
			}
			if out, err := exec.Command("make", "-C", clone, "stop").CombinedOutput(); err != nil {
				t.Fatalf("make stop: %v\n%s", err, out)
			}
			waitFor(t, 60*time.Second, "nothing listening after make stop", func() (bool, string) {
				var busy []int
				for _, p := range ports {
					if listening(p) {
						busy = append(busy, p)
					}
				}
				return len(busy) == 0, fmt.Sprint("still listening: ", busy)
			})
		})
	}
	if out, err := exec.Command("make", "-C", clone, "reset", "FORCE=1").CombinedOutput(); err != nil {
		t.Fatalf("make reset FORCE=1: %v\n%s", err, out)
	}
	for _, d := range []string{"run/streams", "run/rocketmq"} {
		if _, err := os.Stat(filepath.Join(clone, d)); !os.IsNotExist(err) {
			t.Fatalf("make reset left %s", d)
		}
	}
}

// beyondLoopback lists the listening sockets on ports bound to an address
// other than loopback (from /proc/net/tcp and tcp6).
func beyondLoopback(t *testing.T, ports []int) []string {
	t.Helper()
	want := map[int]bool{}
	for _, p := range ports {
		want[p] = true
	}
	var out []string
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fields := strings.Fields(line)
			if len(fields) < 4 || fields[3] != "0A" { // 0A: LISTEN
				continue
			}
			addr, port, ok := strings.Cut(fields[1], ":")
			n, err := strconv.ParseInt(port, 16, 32)
			if !ok || err != nil || !want[int(n)] {
				continue
			}
			loopback := addr == "0100007F" || // 127.0.0.1, little-endian
				addr == "00000000000000000000000001000000" || // ::1
				addr == "0000000000000000FFFF00000100007F" // ::ffff:127.0.0.1
			if !loopback {
				out = append(out, fmt.Sprintf("%s port %d", addr, n))
			}
		}
	}
	return out
}

func listening(port int) bool {
	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 200*time.Millisecond)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// makeRun starts `make run MQ=mode` in dir and returns its output up to
// the banner that says it is up; the process group is stopped with the test.
func makeRun(t *testing.T, dir, mode string) string {
	t.Helper()
	cmd := exec.Command("make", "run", "MQ="+mode)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGINT)
		cmd.Wait()
	})
	var (
		mu  sync.Mutex
		buf strings.Builder
	)
	up, ended := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(ended)
		sc := bufio.NewScanner(out)
		var once sync.Once
		for sc.Scan() {
			mu.Lock()
			buf.WriteString(sc.Text() + "\n")
			if strings.Contains(sc.Text(), "Ctrl-C stops the server") {
				once.Do(func() { close(up) })
			}
			mu.Unlock()
		}
	}()
	select {
	case <-up:
	case <-ended:
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("make run MQ=%s ended without coming up:\n%s", mode, buf.String())
	case <-time.After(4 * time.Minute):
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("make run MQ=%s did not come up within 4 min:\n%s", mode, buf.String())
	}
	mu.Lock()
	defer mu.Unlock()
	return buf.String()
}

var (
	orderIDRe    = regexp.MustCompile(`"order_id":"([0-9A-Z]{26})"`)
	queueTokenRe = regexp.MustCompile(`"token":"([A-Za-z0-9_.-]+)"`)
)

// checkStep runs one quick-start command and compares its answer with the
// README's. An order is pending for a moment after the purchase (the README
// says so), so a command is tried again for up to 20 s until it matches.
func checkStep(t *testing.T, s quickStartStep, ids map[string]string) {
	t.Helper()
	command := s.command
	for readme, real := range ids {
		command = strings.ReplaceAll(command, readme, real)
	}
	var got string
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		out, err := exec.CommandContext(ctx, "bash", "-c", command).Output()
		cancel()
		if err != nil {
			t.Fatalf("%s: %v", command, err)
		}
		got = strings.TrimSpace(string(out))
		if s.answer == "" || sameAnswer(s.answer, got) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("README command\n  %s\nanswered\n  %s\nthe README shows\n  %s", command, got, s.answer)
		}
		time.Sleep(250 * time.Millisecond)
	}
	for _, re := range []*regexp.Regexp{orderIDRe, queueTokenRe} {
		if w, g := re.FindStringSubmatch(s.answer), re.FindStringSubmatch(got); w != nil && g != nil {
			if _, seen := ids[w[1]]; !seen {
				ids[w[1]] = g[1]
			}
		}
	}
}

// sameAnswer compares two JSON answers, leaving out what differs from run
// to run: order ids, the shard a unit landed on, the payment deadline, the
// per-shard counters (they follow the shard), and a waiting room's place
// token, number now serving and admission deadline.
func sameAnswer(want, got string) bool {
	var w, g any
	if json.Unmarshal([]byte(want), &w) != nil || json.Unmarshal([]byte(got), &g) != nil {
		return want == got
	}
	return reflect.DeepEqual(normalise(w, false), normalise(g, false))
}

func normalise(v any, inShards bool) any {
	switch x := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, e := range x {
			switch {
			case k == "order_id" || k == "shard" || k == "pay_by", k == "token" || k == "serving" || k == "admitted_until":
				out[k] = "*"
			case inShards && (k == "salable" || k == "locked" || k == "sold"):
				out[k] = "*"
			default:
				out[k] = normalise(e, inShards || k == "shards")
			}
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = normalise(e, inShards)
		}
		return out
	}
	return v
}

// TestQuickStartParsingAndComparison: the README test reads multi-line
// commands with their answers, and its comparison ignores only what varies
// from run to run.
func TestQuickStartParsingAndComparison(t *testing.T) {
	readme := "x\n## Quick start\n\n```sh\nmake run\n```\n\n```sh\ncurl -s -X PUT \\\n     http://h/p\n# {\"a\":1}\ncurl -s http://h/q\n```\n## Next\n"
	steps, err := quickStart(readme)
	if err != nil || len(steps) != 2 || steps[0].command != "curl -s -X PUT      http://h/p" || steps[0].answer != `{"a":1}` || steps[1].answer != "" {
		t.Fatalf("%q %v", steps, err)
	}
	same := map[string][2]string{
		"another order id and shard": {`{"order_id":"A","shard":1,"status":"paid"}`, `{"order_id":"B","shard":2,"status":"paid"}`},
		"per-shard counters":         {`{"totals":{"sold":1},"shards":[{"index":0,"sold":1}]}`, `{"totals":{"sold":1},"shards":[{"index":0,"sold":0}]}`},
	}
	for what, c := range same {
		if !sameAnswer(c[0], c[1]) {
			t.Errorf("%s: %s and %s should compare equal", what, c[0], c[1])
		}
	}
	differ := map[string][2]string{
		"another status":  {`{"status":"paid"}`, `{"status":"pending"}`},
		"another total":   {`{"totals":{"sold":1}}`, `{"totals":{"sold":2}}`},
		"a missing field": {`{"status":"paid","user_id":"alice"}`, `{"status":"paid"}`},
		"an error":        {`{"status":"reserved"}`, `{"error":"sold_out"}`},
	}
	for what, c := range differ {
		if sameAnswer(c[0], c[1]) {
			t.Errorf("%s: %s and %s compare equal", what, c[0], c[1])
		}
	}
}

// openToOthers lists what under dir others (not its owner, not its group)
// may read or write (issue 25, item 4: the order table, the AOF, the
// broker's store and the logs name buyers and orders). Sockets are left
// out: connecting to one is what a client does, and the server checks who.
func openToOthers(dir string) []string {
	var open []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.Type()&(fs.ModeSocket|fs.ModeSymlink) != 0 {
			return nil
		}
		if fi, err := d.Info(); err == nil && fi.Mode().Perm()&0o006 != 0 {
			rel, _ := filepath.Rel(dir, p)
			open = append(open, fmt.Sprintf("%s (%v)", rel, fi.Mode().Perm()))
		}
		return nil
	})
	return open
}
