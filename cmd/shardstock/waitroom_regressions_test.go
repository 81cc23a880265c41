package main

// Regression tests from the third review of the waiting room (2026-12-03),
// on real coordinators and real Redis shards.

import (
	"fmt"
	"testing"
	"time"

	"github.com/shardstock/shardstock/api"
	"github.com/shardstock/shardstock/shard/shardtest"
)

// Promise 6 (no stuck line). A product without a window of its own sells
// in its sessions' window (inventory/catalog.go: StartsAt from the
// sessions), and a session change does not change Product.WindowVersion
// (it counts the product's own controls). tend follows a start only for
// a newer WindowVersion "or the same version and a later start": for a
// session-windowed product every move is the same version, so the line
// follows a session moved later and never one moved earlier. A session
// brought forward (or a postponement undone) opens the sale on the shards
// while the line's clock keeps the old, later start: every queued buyer
// waits, serving 0, until then (nobody can buy a queued product without
// an admitted place).
func TestALineFollowsASessionMovedEarlier(t *testing.T) {
	r := inMemory(t, 3)
	m := startServer(t, r.URLs())
	base := m.URL()
	now := time.Now().UTC()
	if rep := putProduct(t, base, "qsess", `{"stock":5,"per_user_limit":1}`); rep.status/100 != 2 {
		t.Fatalf("define: %d %s", rep.status, rep.raw)
	}
	session := func(starts time.Time) {
		t.Helper()
		rep := adminDo(t, "PUT", base+"/admin/v1/sessions/evening", fmt.Sprintf(`{"title":"Evening","starts_at":%q,"ends_at":%q,"products":["qsess"]}`,
			starts.Format(time.RFC3339Nano), now.Add(3*time.Hour).Format(time.RFC3339Nano)))
		if rep.status/100 != 2 {
			t.Fatalf("session: %d %s", rep.status, rep.raw)
		}
	}
	queueStarts := func() time.Time {
		rep := adminDo(t, "GET", base+api.AdminBase+api.Path(api.AdminQueuePath, "qsess"), "")
		at, _ := time.Parse(time.RFC3339Nano, rep.str("starts_at"))
		return at
	}
	later := now.Add(time.Hour).Truncate(time.Second)
	session(later)
	time.Sleep(1500 * time.Millisecond) // the controls refresh
	if rep := adminDo(t, "PUT", base+api.AdminBase+api.Path(api.AdminQueuePath, "qsess"), `{"mode":"fifo","rate":10,"lead_seconds":7200,"window_seconds":60}`); rep.status != 200 {
		t.Fatalf("define the queue: %d %s", rep.status, rep.raw)
	}
	if got := queueStarts(); !got.Equal(later) {
		t.Fatalf("the line starts at %v, want the session's %v", got, later)
	}
	ann := joinQueue(t, base, "qsess", "ann")
	soon := time.Now().Add(3 * time.Second).UTC().Truncate(time.Millisecond)
	session(soon) // the operator opens the sale early
	// A move to a start this close is followed once the sale has been
	// open for the settle time (a stale catalog might hold the old one).
	time.Sleep(time.Until(soon) + 5*time.Second + 1500*time.Millisecond)
	look := lookQueue(t, base, "qsess", "ann", ann.str("token"))
	if got := queueStarts(); got.After(soon.Add(6*time.Second)) || look.str("status") != "admitted" {
		t.Errorf("the session now starts at %v (the sale is open); the line still starts at %v; ann (place 1, rate 10/s) is %s",
			soon, got, look.raw)
	}
}

// Promise 6 (a held line runs on once units come back) during a shard
// outage. unitsLeft answers an error unless every shard answers, so the
// room treats a count with a shard down as unknown both ways: it never
// holds on it (right: an outage is not a sell-out) but it never unholds on
// it either, although units salable on the shards that answer are a
// certain lower bound. A sold-out, held line whose buyers cancel (or whose
// payments fail) while one shard is down stays held: the released units
// sit salable on live shards, the buyers next in line are never admitted
// to them, until the dead shard is back.
func TestAHeldLineRunsOnWhenUnitsComeBackDuringAnOutage(t *testing.T) {
	r := shardtest.Start(t, 3)
	m := startServer(t, r.URLs())
	base := m.URL()
	starts := time.Now().Add(2 * time.Second).UTC()
	if rep := putProduct(t, base, "qout", fmt.Sprintf(`{"stock":3,"per_user_limit":1,"starts_at":%q}`, starts.Format(time.RFC3339Nano))); rep.status/100 != 2 {
		t.Fatalf("define: %d %s", rep.status, rep.raw)
	}
	if rep := adminDo(t, "PUT", base+api.AdminBase+api.Path(api.AdminQueuePath, "qout"), `{"mode":"fifo","rate":0.5,"lead_seconds":600,"window_seconds":600}`); rep.status != 200 {
		t.Fatalf("define the queue: %d %s", rep.status, rep.raw)
	}
	toks := map[string]string{} // places 1-4: turns at 2, 4, 6, 8 s
	for _, b := range []string{"a", "b", "c", "d"} {
		toks[b] = joinQueue(t, base, "qout", b).str("token")
	}
	orders := map[int]string{} // shard: order
	owner := map[string]string{}
	for _, b := range []string{"a", "b", "c"} {
		waitFor(t, 10*time.Second, b+" admitted", func() (bool, string) {
			rep := lookQueue(t, base, "qout", b, toks[b])
			return rep.str("status") == "admitted", rep.raw
		})
		rep := queuedPurchase(t, base, "qout", b, toks[b])
		if rep.status != 200 {
			t.Fatalf("%s buys: %d %s", b, rep.status, rep.raw)
		}
		sh, _ := rep.body["shard"].(float64)
		orders[int(sh)] = rep.str("order_id")
		owner[rep.str("order_id")] = b
	}
	waitFor(t, 10*time.Second, "the line held", func() (bool, string) {
		rep := adminDo(t, "GET", base+api.AdminBase+api.Path(api.AdminQueuePath, "qout"), "")
		return rep.body["held"] == true, rep.raw
	})
	var live, dead int = -1, -1
	for sh := range orders {
		if live < 0 {
			live = sh
		} else if dead < 0 {
			dead = sh
		}
	}
	if live < 0 || dead < 0 {
		t.Skipf("the three units were sold on fewer than two shards: %v", orders)
	}
	if rep := lookQueue(t, base, "qout", "d", toks["d"]); rep.str("status") == "admitted" {
		t.Skipf("d was reached before the hold: %s", rep.raw)
	}
	r.Kill(dead)
	defer r.Restart(dead)
	o := orders[live]
	if rep := do(t, "POST", base+api.Path(api.CancelPath, o), "", "X-User-ID", owner[o]); rep.status/100 != 2 {
		t.Fatalf("cancel %s on live shard %d: %d %s", o, live, rep.status, rep.raw)
	}
	ok := false
	var last string
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) && !ok {
		time.Sleep(300 * time.Millisecond)
		rep := lookQueue(t, base, "qout", "d", toks["d"])
		last = rep.raw
		ok = rep.str("status") == "admitted"
	}
	if !ok {
		stock := do(t, "GET", base+api.Path(api.StockPath, "qout"), "")
		q := adminDo(t, "GET", base+api.AdminBase+api.Path(api.AdminQueuePath, "qout"), "")
		t.Errorf("a unit released on live shard %d (shard %d down): 10 s later d, next in line, is %s; the line %s; stock %d %s",
			live, dead, last, q.raw, stock.status, stock.raw)
	}
}
