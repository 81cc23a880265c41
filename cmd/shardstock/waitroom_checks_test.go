package main

// Regression tests from the review of 2026-12-03: the waiting room on real coordinators and
// real Redis shards.

import (
	"fmt"
	"testing"
	"time"

	"github.com/shardstock/shardstock/api"
	"github.com/shardstock/shardstock/shard/shardtest"
)

// Found by review (promise 4), end to end: a buyer who joins while the line is held
// (sold out) is told "admitted", their window runs out during the hold,
// and when a unit comes back (a stock add) they are "passed" and cannot
// buy it. (waitroom's TestAJoinDuringAHoldIsNotPassedByIt is the
// same on a fake clock.)
func TestAJoinDuringAHoldOnRealCoordinators(t *testing.T) {
	r := shardtest.Start(t, 3)
	a, b := twoCoordinators(t, r)
	starts := time.Now().Add(2 * time.Second).UTC()
	if rep := putProduct(t, a.URL(), "qhold", fmt.Sprintf(`{"stock":1,"per_user_limit":1,"starts_at":%q}`, starts.Format(time.RFC3339Nano))); rep.status/100 != 2 {
		t.Fatalf("define: %d %s", rep.status, rep.raw)
	}
	if rep := adminDo(t, "PUT", a.URL()+api.AdminBase+api.Path(api.AdminQueuePath, "qhold"), `{"mode":"fifo","rate":20,"lead_seconds":600,"window_seconds":4}`); rep.status != 200 {
		t.Fatalf("define the queue: %d %s", rep.status, rep.raw)
	}
	waitFor(t, 5*time.Second, "b knows the queue", func() (bool, string) {
		rep := lookQueue(t, b.URL(), "qhold", "nobody", "")
		return rep.status == 200, rep.raw
	})
	first := joinQueue(t, a.URL(), "qhold", "first")
	waitFor(t, 10*time.Second, "first admitted", func() (bool, string) {
		rep := lookQueue(t, a.URL(), "qhold", "first", first.str("token"))
		return rep.str("status") == "admitted", rep.raw
	})
	if rep := queuedPurchase(t, a.URL(), "qhold", "first", first.str("token")); rep.status != 200 {
		t.Fatalf("first buys: %d %s", rep.status, rep.raw)
	}
	waitFor(t, 10*time.Second, "the line held on both", func() (bool, string) {
		ra := adminDo(t, "GET", a.URL()+api.AdminBase+api.Path(api.AdminQueuePath, "qhold"), "")
		rb := adminDo(t, "GET", b.URL()+api.AdminBase+api.Path(api.AdminQueuePath, "qhold"), "")
		return ra.body["held"] == true && rb.body["held"] == true, ra.raw + " " + rb.raw
	})
	late := joinQueue(t, b.URL(), "qhold", "late")
	t.Logf("late joins during the hold: %s", late.raw)
	if late.str("status") != "admitted" {
		t.Skipf("late's place is not reached by the held number (%s): not reproduced this run", late.str("status"))
	}
	time.Sleep(5 * time.Second) // the window, still held
	during := lookQueue(t, a.URL(), "qhold", "late", late.str("token"))
	if rep := adminDo(t, "POST", a.URL()+api.AdminBase+"/products/qhold/stock", `{"add":1}`, "Idempotency-Key", "review-add-1"); rep.status != 200 {
		t.Fatalf("add a unit: %d %s", rep.status, rep.raw)
	}
	waitFor(t, 10*time.Second, "the line runs again", func() (bool, string) {
		ra := adminDo(t, "GET", a.URL()+api.AdminBase+api.Path(api.AdminQueuePath, "qhold"), "")
		rb := adminDo(t, "GET", b.URL()+api.AdminBase+api.Path(api.AdminQueuePath, "qhold"), "")
		return ra.body["held"] != true && rb.body["held"] != true, ra.raw + " " + rb.raw
	})
	buy := queuedPurchase(t, b.URL(), "qhold", "late", late.str("token"))
	if during.str("status") == "passed" || buy.status != 200 {
		t.Errorf("late joined while nothing was left: told %q after the window, all of it held; after a unit came back buys: %d %s",
			during.str("status"), buy.status, buy.raw)
	}
}

// Bad input to the waiting room's routes answers 400 with a message,
// never 500.
func TestQueueRoutesRefuseBadInputClearly(t *testing.T) {
	r := inMemory(t, 3)
	m := startServer(t, r.URLs())
	putProduct(t, m.URL(), "qbad", `{"stock":5}`)
	adm := m.URL() + api.AdminBase
	for _, c := range []struct {
		method, path, body string
		want               int
	}{
		{"PUT", "/products/qbad/queue", `{"mode":"fifo","rate":"fast","window_seconds":60}`, 400},
		{"PUT", "/products/qbad/queue", `{"mode":"fifo","rate":1e400,"window_seconds":60}`, 400},
		{"PUT", "/products/qbad/queue", `{"mode":"fifo","rate":1,"window_seconds":60,"lead_seconds":-1}`, 400},
		{"PUT", "/products/qbad/queue", `{"mode":"fifo","rate":1,"window_seconds":1e12}`, 400},
		{"PUT", "/products/qbad/queue", `{"mode":"FIFO","rate":1,"window_seconds":60}`, 400},
		{"PUT", "/products/qbad/queue", `{"mode":"fifo","rate":1,"window_seconds":60,"extra":1}`, 400},
		{"PUT", "/products/qbad/queue", `[]`, 400},
		{"PUT", "/products/nosuch/queue", `{"mode":"fifo","rate":1,"window_seconds":60}`, 404},
		{"PUT", "/products/qbad/queue", `{"mode":"fifo","rate":1,"window_seconds":60}`, 200},
		{"POST", "/products/qbad/queue/advance", `{"by":0}`, 400},
		{"POST", "/products/qbad/queue/advance", `{"by":1.5}`, 400},
		{"POST", "/products/qbad/queue/advance", `{"by":99999999999999999999}`, 400},
		{"POST", "/products/qbad/queue/advance", ``, 400},
		{"POST", "/products/qbad/queue/revoke", `{"user":""}`, 400},
		{"POST", "/products/qbad/queue/revoke", `{"user":"a b"}`, 400},
		{"POST", "/products/nosuch/queue/pause", ``, 404},
	} {
		rep := adminDo(t, c.method, adm+c.path, c.body)
		if rep.status != c.want || (rep.status == 400 && rep.str("message") == "") {
			t.Errorf("%s %s %s: %d %s, want %d with a message", c.method, c.path, c.body, rep.status, rep.raw, c.want)
		}
	}
	for _, c := range []struct {
		method, body, token string
		want                int
	}{
		{"POST", `{"work":1}`, "", 400},
		{"POST", `{"work":"` + fmt.Sprintf("%070d", 1) + `"}`, "", 200}, // difficulty 0: any work is fine
		{"GET", ``, "garbage", 403},
		{"GET", ``, "a.b.c", 403},
	} {
		rep := do(t, c.method, m.URL()+api.Path(api.QueuePath, "qbad"), c.body, "X-User-ID", "eve", api.QueueTokenHeader, c.token, "Content-Type", "application/json")
		if rep.status != c.want || rep.status >= 500 {
			t.Errorf("%s queue %s token %q: %d %s, want %d", c.method, c.body, c.token, rep.status, rep.raw, c.want)
		}
	}
	for _, tok := range []string{"", "garbage"} {
		if rep := queuedPurchase(t, m.URL(), "qbad", "eve", tok); rep.status != 403 {
			t.Errorf("purchase with token %q: %d %s, want 403", tok, rep.status, rep.raw)
		}
	}
}
