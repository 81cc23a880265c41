package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// TestAdminCommand (issue 16, item 11): an operator scripts a sale's life
// with shardstock admin against a live server: tables for people, --json
// for scripts, errors on stderr with exit 1, and the token from the
// environment only.
func TestAdminCommand(t *testing.T) {
	r := inMemory(t, 3)
	m := startServer(t, r.URLs())
	putProduct(t, m.URL(), "lamp", `{"stock":90}`)
	getenv := env(map[string]string{"SHARDSTOCK_ADMIN_URL": m.URL(), "SHARDSTOCK_ADMIN_TOKEN": testToken})
	adm := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := run(append([]string{"admin"}, args...), getenv, &out, &errb)
		return code, out.String(), errb.String()
	}
	if code, out, _ := adm("status"); code != 0 || !strings.Contains(out, "lamp") || !strings.Contains(out, "salable") {
		t.Fatalf("status: %d %q", code, out)
	}
	if code, out, _ := adm("pause", "lamp"); code != 0 || !strings.Contains(out, "lamp: paused") {
		t.Fatalf("pause: %d %q", code, out)
	}
	if rep := purchase(t, m.URL(), "lamp", "alice"); rep.str("error") != "paused" {
		t.Fatalf("purchase after admin pause: %d %s", rep.status, rep.raw)
	}
	adm("resume", "lamp")
	if code, out, _ := adm("add", "lamp", "30", "key-1"); code != 0 || !strings.Contains(out, "stock 120") {
		t.Fatalf("add: %d %q", code, out)
	}
	adm("add", "lamp", "30", "key-1") // the same key: nothing more
	code, out, _ := adm("--json", "status", "lamp")
	var v struct{ Stock int64 }
	if code != 0 || json.Unmarshal([]byte(out), &v) != nil || v.Stock != 120 {
		t.Fatalf("--json status after a repeated add: %d %q", code, out)
	}
	if code, out, _ := adm("shards"); code != 0 || strings.Count(out, "true") != 3 {
		t.Fatalf("shards: %d %q", code, out)
	}
	if code, _, errOut := adm("archive", "lamp"); code != 1 || !strings.Contains(errOut, "409") || !strings.Contains(errOut, "has not ended") {
		t.Fatalf("archive during the sale: %d %q", code, errOut)
	}
	if code, _, errOut := adm("add", "lamp", "many"); code != 2 || !strings.Contains(errOut, "positive number") {
		t.Fatalf("bad usage: %d %q", code, errOut)
	}
	var out2, errb bytes.Buffer
	if code := run([]string{"admin", "status"}, env(map[string]string{"SHARDSTOCK_ADMIN_URL": m.URL()}), &out2, &errb); code != 1 || !strings.Contains(errb.String(), "401") {
		t.Fatalf("without a token: %d %q", code, errb.String())
	}
	if code, out, _ := adm("--help"); code != 0 || !strings.Contains(out, "Usage: shardstock admin") {
		t.Fatalf("--help: %d %q", code, out)
	}
	// Tables where the help promises them, and a sale's state as it
	// stands (issue 42, finding 7): an ended sale was listed "on", and
	// reconcile and queue printed raw JSON.
	if code, out, _ := adm("reconcile", "lamp"); code != 0 || !strings.Contains(out, "lamp: in sync with the orders") ||
		!strings.Contains(out, "salable drift") || strings.Contains(out, "{") {
		t.Fatalf("reconcile: %d %q", code, out)
	}
	if code, out, _ := adm("queue", "lamp", "open", "fifo", "50", "60"); code != 0 || !strings.Contains(out, "fifo, 50 places a second, 60s to buy") ||
		!strings.Contains(out, "waiting") || strings.Contains(out, "{") {
		t.Fatalf("queue open: %d %q", code, out)
	}
	if code, out, _ := adm("end", "lamp"); code != 0 || !strings.Contains(out, "lamp: ended") {
		t.Fatalf("end: %d %q", code, out)
	}
	if code, out, _ := adm("status"); code != 0 || !strings.Contains(out, "ended") {
		t.Fatalf("status of an ended sale: %d %q", code, out)
	}
}
