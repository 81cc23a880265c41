package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardstock/shardstock"
	"github.com/shardstock/shardstock/ha"
	"github.com/shardstock/shardstock/inventory"
	"github.com/shardstock/shardstock/shard/shardtest"
)

// The three breaks of issue 24 after a shard's machine crash (its AOF cut
// back to a checkpoint), each as the outside review found it.

// crashFixture is one coordinator on three shards selling stock 6 (2 per
// shard), per-user limit 1.
type crashFixture struct {
	t    *testing.T
	r    *shardtest.Redis
	m    *Main
	base string
	n    int
}

func newCrashFixture(t *testing.T) *crashFixture {
	r := shardtest.Start(t, 3)
	m := startServer(t, r.URLs())
	f := &crashFixture{t: t, r: r, m: m, base: m.URL()}
	if rep := putProduct(t, f.base, "crash", `{"stock":6,"per_user_limit":1}`); rep.status != 201 {
		t.Fatalf("define: %d %s", rep.status, rep.raw)
	}
	return f
}

// buy makes a new buyer homed on shard home (-1: any) buy; it returns the
// order id and the shard that sold it.
func (f *crashFixture) buy(home int) (string, string, int) {
	f.t.Helper()
	for {
		f.n++
		u := fmt.Sprintf("b%d", f.n)
		if home >= 0 && f.m.set.Purchases.Home(u) != home {
			continue
		}
		rep := purchase(f.t, f.base, "crash", u)
		if rep.status != 200 {
			f.t.Fatalf("%s: %d %s", u, rep.status, rep.raw)
		}
		return rep.str("order_id"), u, int(rep.body["shard"].(float64))
	}
}

func (f *crashFixture) awaiting(n int64) {
	f.t.Helper()
	waitFor(f.t, 10*time.Second, "orders written", func() (bool, string) {
		c := statusCounts(f.t, f.m, "crash")
		return c[shardstock.StatusAwaitingPayment] == n, fmt.Sprint(c)
	})
}

func (f *crashFixture) cancel(id, user string) {
	f.t.Helper()
	if rep := orderCall(f.t, f.base, "cancel", id, user, ""); rep.status != 202 {
		f.t.Fatalf("cancel: %d %s", rep.status, rep.raw)
	}
}

func (f *crashFixture) salable(i int, want int64) {
	f.t.Helper()
	waitFor(f.t, 10*time.Second, fmt.Sprintf("shard %d salable %d", i, want), func() (bool, string) {
		st := productStatus(f.t, f.base, "crash").Shards[i]
		return st.Salable != nil && *st.Salable == want, fmt.Sprintf("%+v", st)
	})
}

// resynced waits until shard 0 sells again after the crash.
func (f *crashFixture) resynced() inventory.ProductStatus {
	f.t.Helper()
	var st inventory.ProductStatus
	waitFor(f.t, 15*time.Second, "shard 0 back in line (unfenced, answering)", func() (bool, string) {
		if f.m.set.Fence.Fenced(0) {
			return false, "fenced: " + f.m.inv.resync.Problem(0)
		}
		// Its breaker, opened by the calls that failed while it was
		// away, closes at the first ping after the cooldown; until then a
		// buyer homed there is told 503 (down, not tried), rightly.
		if b := f.m.health.Status()[0].Breaker; b != ha.Closed {
			return false, fmt.Sprintf("unfenced, breaker %v", b)
		}
		st = productStatus(f.t, f.base, "crash")
		return st.Shards[0].Up && st.Shards[0].Alloc != nil, fmt.Sprintf("%+v", st.Shards[0])
	})
	checkShards(f.t, st)
	return st
}

// sellOut buys with new buyers until sold out; it returns how many bought.
func (f *crashFixture) sellOut() int {
	f.t.Helper()
	for k := 0; ; k++ {
		f.n++
		rep := purchase(f.t, f.base, "crash", fmt.Sprintf("rest%d", f.n))
		if rep.status == 410 {
			return k
		}
		if rep.status != 200 || k > 12 {
			f.t.Fatalf("selling the rest: %d %s", rep.status, rep.raw)
		}
	}
}

func allocOf(st inventory.ProductStatus) (alloc, held int64) {
	for _, sh := range st.Shards {
		if sh.Alloc != nil {
			alloc += *sh.Alloc
			held += *sh.Locked + *sh.Sold
		}
	}
	return alloc, held
}

// TestCrashAfterAReleasedUnitWasSoldAgain (break 1): the shard comes back
// with a released unit still held by the cancelled order while SQL gives it
// to a new buyer. The resync releases first, then restores the new hold;
// before, restore_hold found no unit and the shard stayed fenced for good.
func TestCrashAfterAReleasedUnitWasSoldAgain(t *testing.T) {
	f := newCrashFixture(t)
	first, user, _ := f.buy(0)
	f.buy(0)
	f.awaiting(2)
	f.salable(0, 0)
	f.r.Checkpoint(0)
	f.cancel(first, user)
	f.salable(0, 1)
	if _, _, at := f.buy(0); at != 0 {
		t.Fatalf("the third buyer was sold on shard %d, not 0", at)
	}
	f.awaiting(2)
	f.r.Rewind(0)
	st := f.resynced()
	if sh := st.Shards[0]; *sh.Locked != 2 || *sh.Salable != 0 || *sh.Alloc != 2 {
		t.Fatalf("shard 0 after the resync: %+v (want 2 locked, 0 salable, alloc 2)", sh)
	}
	if n := f.sellOut(); n != 4 {
		t.Fatalf("sold %d more units; 4 were left", n)
	}
}

// crashAfterReleases sells out, saves shard 0's AOF, cancels shard 0's two
// orders (their units salable there again) and runs change, then crashes
// shard 0 back to the checkpoint.
func crashAfterReleases(t *testing.T, change func(f *crashFixture)) *crashFixture {
	f := newCrashFixture(t)
	type sale struct{ id, user string }
	var on0 []sale
	for range 6 {
		id, u, at := f.buy(-1)
		if at == 0 {
			on0 = append(on0, sale{id, u})
		}
	}
	if len(on0) != 2 {
		t.Fatalf("shard 0 sold %d units, want 2", len(on0))
	}
	f.awaiting(6)
	f.r.Checkpoint(0)
	for _, s := range on0 {
		f.cancel(s.id, s.user)
	}
	f.salable(0, 2)
	change(f)
	f.r.Rewind(0)
	return f
}

// TestCrashAfterReleasesAndARebalance (break 2): the rebalance moved
// released units off shard 0; back from the checkpoint the shard has them
// locked. The resync releases first, then takes the moved units off again
// exactly; before, transfer_out took none, recorded the transfer as done,
// and the re-sent releases made Σ alloc 7 of a stock of 6.
func TestCrashAfterReleasesAndARebalance(t *testing.T) {
	f := crashAfterReleases(t, func(f *crashFixture) {
		if rep := do(t, "POST", f.base+"/admin/v1/products/crash/rebalance", "", "Authorization", "Bearer "+testToken); rep.status != 200 {
			t.Fatalf("rebalance: %d %s", rep.status, rep.raw)
		}
	})
	st := f.resynced()
	if alloc, held := allocOf(st); alloc != 6 || held != 4 {
		t.Fatalf("after the resync: Σ alloc %d (want 6), held %d (want 4)", alloc, held)
	}
	if n := f.sellOut(); n != 2 {
		t.Fatalf("sold %d more units; 2 were left", n)
	}
}

// TestCrashAfterReleasesAndAStockRemoval (break 3): as above, but the
// operator removed the two released units: stock 4, and shard 0 must not
// have them back.
func TestCrashAfterReleasesAndAStockRemoval(t *testing.T) {
	f := crashAfterReleases(t, func(f *crashFixture) {
		rep := do(t, "POST", f.base+"/admin/v1/products/crash/stock", `{"remove":2}`,
			"Authorization", "Bearer "+testToken, "Content-Type", "application/json")
		if rep.status != 200 {
			t.Fatalf("remove: %d %s", rep.status, rep.raw)
		}
	})
	st := f.resynced()
	if alloc, held := allocOf(st); st.Stock != 4 || alloc != 4 || held != 4 {
		t.Fatalf("after the resync: stock %d, Σ alloc %d, held %d (want 4, 4, 4)", st.Stock, alloc, held)
	}
	if n := f.sellOut(); n != 0 {
		t.Fatalf("sold %d more units of a sold-out stock", n)
	}
}

// phantomUnit edits shard 0's counters of "crash" by hand (a unit the
// transfer log never gave it: salable, or held when field is "locked") and
// restarts it, so that its resync keeps it fenced.
func (f *crashFixture) phantomUnit(field string) {
	f.t.Helper()
	opt, err := redis.ParseURL(f.r.URLs()[0])
	if err != nil {
		f.t.Fatal(err)
	}
	c := redis.NewClient(opt)
	defer c.Close()
	ctx := context.Background()
	for _, k := range []string{field, "alloc"} {
		if err := c.HIncrBy(ctx, "ss:{p:crash}:stock", k, 1).Err(); err != nil {
			f.t.Fatal(err)
		}
	}
	f.r.Kill(0)
	f.r.Restart(0)
	waitFor(f.t, 15*time.Second, "shard 0 kept fenced by its resync", func() (bool, string) {
		return f.m.set.Fence.Fenced(0) && f.m.inv.resync.Problem(0) != "", f.m.inv.resync.Problem(0)
	})
}

// resyncCall is POST /admin/v1/shards/0/resync with body.
func (f *crashFixture) resyncCall(body string) reply {
	f.t.Helper()
	return do(f.t, "POST", f.base+"/admin/v1/shards/0/resync", body, "Authorization", "Bearer "+testToken, "Content-Type", "application/json")
}

// An operator resolves a kept fence: shard 0 came back holding a unit the
// transfer log never gave it, and stays fenced. The resync call says why
// (409); accepting writes the phantom unit off, the shard sells again, and
// the sale sells exactly its stock.
func TestOperatorAcceptsAShardKeptFenced(t *testing.T) {
	f := newCrashFixture(t)
	f.phantomUnit("salable")
	if rep := f.resyncCall(""); rep.status != 409 || !strings.Contains(rep.raw, "allocation of 3") {
		t.Fatalf("resync of a shard that disagrees: %d %s, want 409 saying its allocation of 3", rep.status, rep.raw)
	}
	if !f.m.set.Fence.Fenced(0) {
		t.Fatal("the shard opened without an operator's accept")
	}
	rep := f.resyncCall(`{"accept":true}`)
	if rep.status != 200 || !strings.Contains(rep.raw, "wrote off 1 salable units of crash") {
		t.Fatalf("accept: %d %s, want 200 writing off 1 unit", rep.status, rep.raw)
	}
	if f.m.set.Fence.Fenced(0) || f.m.inv.resync.Problem(0) != "" {
		t.Fatalf("after the accept: fenced %v, problem %q", f.m.set.Fence.Fenced(0), f.m.inv.resync.Problem(0))
	}
	st := productStatus(t, f.base, "crash")
	checkShards(t, st)
	if sh := st.Shards[0]; *sh.Alloc != 2 || *sh.Salable != 2 {
		t.Fatalf("shard 0 after the accept: %+v, want alloc 2, salable 2", sh)
	}
	if n := f.sellOut(); n != 6 {
		t.Fatalf("sold %d units of a stock of 6", n)
	}
}

// Accepting is refused when it would oversell: the unit shard 0 holds past
// the log is locked for an order, not salable, so nothing can be written
// off; the shard stays fenced.
func TestOperatorCannotAcceptAShardThatWouldOversell(t *testing.T) {
	f := newCrashFixture(t)
	if n := f.sellOut(); n != 6 {
		t.Fatalf("sold %d units of a stock of 6", n)
	}
	f.awaiting(6)
	f.phantomUnit("locked")
	if rep := f.resyncCall(`{"accept":true}`); rep.status != 409 || !strings.Contains(rep.raw, "would oversell") {
		t.Fatalf("accept of a shard whose excess is held: %d %s, want 409 (it would oversell)", rep.status, rep.raw)
	}
	if !f.m.set.Fence.Fenced(0) || f.m.inv.resync.Problem(0) == "" {
		t.Fatal("the shard opened after a refused accept")
	}
}

// TestResyncOfNoShardIsNotFound: the operator's resync and accept calls on
// an index that names no shard answer 404 (Schemathesis found a 500: the
// fence was asked about a shard that does not exist).
func TestResyncOfNoShardIsNotFound(t *testing.T) {
	r := inMemory(t, 3)
	m := startServer(t, r.URLs())
	for _, body := range []string{"", `{"accept":true}`} {
		for _, i := range []string{"3", "168", "-1"} {
			if rep := adminDo(t, "POST", m.URL()+"/admin/v1/shards/"+i+"/resync", body); rep.status != 404 {
				t.Errorf("resync of shard %s (body %q): %d %s, want 404", i, body, rep.status, rep.raw)
			}
		}
	}
}

// TestCrashPastAClaimGiveBack (issue 40, break 3): per-user limit 2. A
// buyer's order is cancelled and its claim given back at the buyer's home;
// the buyer buys again (1 of 2 held); then the home's machine crashes back
// to before the give-back. The resync must take the given-back claim out
// again: merging only added claims, so the buyer was told 409
// limit_reached for good while holding one unit of two, with units salable.
func TestCrashPastAClaimGiveBack(t *testing.T) {
	r := shardtest.Start(t, 3)
	m := startServer(t, r.URLs())
	base := m.URL()
	if rep := putProduct(t, base, "twice", `{"stock":30,"per_user_limit":2}`); rep.status != 201 {
		t.Fatalf("define: %d %s", rep.status, rep.raw)
	}
	const user = "pat"
	home := m.set.Purchases.Home(user)
	buyOne := func() string {
		t.Helper()
		rep := purchase(t, base, "twice", user)
		if rep.status != 200 {
			t.Fatalf("%s buys: %d %s", user, rep.status, rep.raw)
		}
		return rep.str("order_id")
	}
	awaiting := func(n int64) {
		t.Helper()
		waitFor(t, 10*time.Second, "orders written", func() (bool, string) {
			c := statusCounts(t, m, "twice")
			return c[shardstock.StatusAwaitingPayment] == n, fmt.Sprint(c)
		})
	}
	first := buyOne()
	awaiting(1)
	r.Checkpoint(home) // the home holds the first claim
	if rep := orderCall(t, base, "cancel", first, user, ""); rep.status != 202 {
		t.Fatalf("cancel: %d %s", rep.status, rep.raw)
	}
	waitFor(t, 10*time.Second, "the first claim given back", func() (bool, string) {
		os, err := m.store.Orders.ClaimsPending(context.Background(), "", 10)
		c := statusCounts(t, m, "twice")
		return err == nil && len(os) == 0 && c[shardstock.StatusCancelled] == 1, fmt.Sprint(os, err, c)
	})
	buyOne() // 1 of 2 held
	awaiting(1)
	r.Rewind(home)
	waitFor(t, 20*time.Second, "the buyer's home back in line and selling", func() (bool, string) {
		if err := m.set.Ping(context.Background(), home); err != nil || m.set.Fence.Fenced(home) {
			return false, "fenced: " + m.inv.resync.Problem(home)
		}
		if b := m.health.Status()[home].Breaker; b != ha.Closed {
			return false, fmt.Sprintf("breaker %v", b)
		}
		return true, ""
	})
	if rep := purchase(t, base, "twice", user); rep.status != 200 {
		t.Fatalf("the buyer holding 1 of 2 after the home's crash: %d %s, want 200 (the given-back claim came back with the crash)", rep.status, rep.raw)
	}
	if rep := purchase(t, base, "twice", user); rep.status != 409 {
		t.Fatalf("a third unit: %d %s, want 409", rep.status, rep.raw)
	}
}

// TestCrashPastAGiveBackOnAHomeThatLostItsData: as above, on a home that
// lost its data first (wiped): the product's stock is gone from it, and the
// register was rebuilt there by its buyer's purchase. The home's machine
// then crashes back to before the give-back of that buyer's cancelled
// order. The resync skipped products a shard does not hold, so the given-
// back claim stayed: a buyer of limit 1 holding nothing was told 409 for
// good (the model test's fast mode).
func TestCrashPastAGiveBackOnAHomeThatLostItsData(t *testing.T) {
	r := shardtest.Start(t, 3)
	m := startServer(t, r.URLs())
	base := m.URL()
	if rep := putProduct(t, base, "once", `{"stock":30,"per_user_limit":1}`); rep.status != 201 {
		t.Fatalf("define: %d %s", rep.status, rep.raw)
	}
	const user = "pat"
	home := m.set.Purchases.Home(user)
	inLine := func(what string) {
		t.Helper()
		waitFor(t, 20*time.Second, what, func() (bool, string) {
			if err := m.set.Ping(context.Background(), home); err != nil || m.set.Fence.Fenced(home) {
				return false, "fenced: " + m.inv.resync.Problem(home)
			}
			if b := m.health.Status()[home].Breaker; b != ha.Closed {
				return false, fmt.Sprintf("breaker %v", b)
			}
			return true, ""
		})
	}
	r.Wipe(home)
	inLine("the wiped home back in line")
	rep := purchase(t, base, "once", user)
	if rep.status != 200 {
		t.Fatalf("%s buys with a wiped home: %d %s", user, rep.status, rep.raw)
	}
	order := rep.str("order_id")
	waitFor(t, 10*time.Second, "the order written", func() (bool, string) {
		c := statusCounts(t, m, "once")
		return c[shardstock.StatusAwaitingPayment] == 1, fmt.Sprint(c)
	})
	r.Checkpoint(home) // the rebuilt register holds the claim
	if rep := orderCall(t, base, "cancel", order, user, ""); rep.status != 202 {
		t.Fatalf("cancel: %d %s", rep.status, rep.raw)
	}
	waitFor(t, 10*time.Second, "the claim given back", func() (bool, string) {
		os, err := m.store.Orders.ClaimsPending(context.Background(), "", 10)
		c := statusCounts(t, m, "once")
		return err == nil && len(os) == 0 && c[shardstock.StatusCancelled] == 1, fmt.Sprint(os, err, c)
	})
	r.Rewind(home)
	inLine("the home back in line after its crash")
	if rep := purchase(t, base, "once", user); rep.status != 200 {
		t.Fatalf("the buyer holding nothing after the home's crash: %d %s, want 200 (the given-back claim came back with the crash)", rep.status, rep.raw)
	}
}

// TestALateOrderTakesItsClaimBack: a reservation on a buyer's home (shard
// 0, limit 1) whose hold and claim went with the home's last writes, but
// whose outbox entry a writer had read already: its order is written after
// the resync. Its hold was put back without its claim, so the buyer could
// buy again and held 2 units of 1 (the model test's fast mode). The claim
// now comes back with the hold; and a reservation whose buyer spent the
// limit again before its order came is written failed.
func TestALateOrderTakesItsClaimBack(t *testing.T) {
	f := newCrashFixture(t) // stock 6: 2 per shard, limit 1
	ctx := context.Background()
	homedOn0 := func(prefix string) string {
		for n := 0; ; n++ {
			if u := fmt.Sprintf("%s%d", prefix, n); f.m.set.Purchases.Home(u) == 0 {
				return u
			}
		}
	}
	lena, lars := homedOn0("lena"), homedOn0("lars")
	reservedAt := f.m.clock.Now().Add(-time.Second) // in the second the crash takes
	f.r.Checkpoint(0)
	f.r.Rewind(0)
	waitFor(t, 20*time.Second, "shard 0 back in line", func() (bool, string) {
		if err := f.m.set.Ping(ctx, 0); err != nil || f.m.set.Fence.Fenced(0) {
			return false, fmt.Sprint("fenced ", err)
		}
		return true, ""
	})
	late := shardstock.ReservationEvent{ID: "01JLATE000000000000000000A", UserID: lena, ProductID: "crash", Shard: 0, AtMS: reservedAt.UnixMilli()}
	if err := f.m.orders.Ingest(ctx, late); err != nil {
		t.Fatal(err)
	}
	if o, err := f.m.store.Orders.Order(ctx, late.ID); err != nil || o == nil || o.Status != shardstock.StatusAwaitingPayment {
		t.Fatalf("the late order: %+v, %v; want awaiting payment", o, err)
	}
	if sh := productStatus(t, f.base, "crash").Shards[0]; *sh.Locked != 1 {
		t.Fatalf("shard 0 after the late order: %d locked, want its hold put back", *sh.Locked)
	}
	if rep := purchase(t, f.base, "crash", lena); rep.status != 409 {
		t.Fatalf("%s, holding the late order's unit (limit 1), buys again: %d %s; want 409 limit_reached", lena, rep.status, rep.raw)
	}

	// lars spent the limit after the crash, before his late reservation's
	// order came: that one cannot be his any more. lia's unit was sold
	// again (lars's purchase took shard 0's last). Both orders are written
	// failed, never live: written awaiting payment and failed after, they
	// stood as live orders with no unit (one payable), 4 for a stock of 3.
	if rep := purchase(t, f.base, "crash", lars); rep.status != 200 || rep.body["shard"].(float64) != 0 {
		t.Fatalf("%s buys on his home: %d %s", lars, rep.status, rep.raw)
	}
	lia := homedOn0("lia")
	waitFor(t, 10*time.Second, "lars's order written", func() (bool, string) {
		c := statusCounts(t, f.m, "crash")
		return c[shardstock.StatusAwaitingPayment] == 2, fmt.Sprint(c)
	})
	ingested := func(status shardstock.OrderStatus) int {
		n, _ := strconv.Atoi(metricValue(t, f.base, fmt.Sprintf(`shardstock_orders_ingested_total{status=%q}`, status)))
		return n
	}
	awaitingBefore, failedBefore := ingested(shardstock.StatusAwaitingPayment), ingested(shardstock.StatusFailed)
	for _, ev := range []shardstock.ReservationEvent{
		{ID: "01JLATE000000000000000000B", UserID: lars, ProductID: "crash", Shard: 0, AtMS: reservedAt.UnixMilli()},
		{ID: "01JLATE000000000000000000C", UserID: lia, ProductID: "crash", Shard: 0, AtMS: reservedAt.UnixMilli()},
	} {
		if err := f.m.orders.Ingest(ctx, ev); err != nil {
			t.Fatal(err)
		}
		if o, err := f.m.store.Orders.Order(ctx, ev.ID); err != nil || o == nil || o.Status != shardstock.StatusFailed {
			t.Fatalf("the late order of %s: %+v, %v; want failed", ev.UserID, o, err)
		}
	}
	if a, fl := ingested(shardstock.StatusAwaitingPayment)-awaitingBefore, ingested(shardstock.StatusFailed)-failedBefore; a != 0 || fl != 2 {
		t.Fatalf("the two late orders were written %d awaiting payment and %d failed; want both written failed", a, fl)
	}
	if sh := productStatus(t, f.base, "crash").Shards[0]; *sh.Locked != 2 || *sh.Salable != 0 {
		t.Fatalf("shard 0: %d locked, %d salable; want lena's and lars's holds only", *sh.Locked, *sh.Salable)
	}
	// A reservation made after the resync is written at once.
	if st, err := f.m.inv.resync.Admit(ctx, shardstock.ReservationEvent{ID: "01JLATE000000000000000000D", UserID: lars, ProductID: "crash", Shard: 0, AtMS: f.m.clock.Now().Add(time.Minute).UnixMilli()}); st != shardstock.StatusAwaitingPayment || err != nil {
		t.Fatalf("a reservation made after the resync: %q, %v", st, err)
	}
}

// TestALateCheckAfterACancelLeavesTheClaimGiven (real Redis): an order
// written after its shard's resync, whose check (HoldLate) is kept while
// the shard is fenced, and cancelled meanwhile, its claim given back. The
// check took the claim back when it ran: a buyer of limit 1 holding
// nothing was refused 409 for good (found reading the code). It now
// leaves a cancelled order's claim given back.
func TestALateCheckAfterACancelLeavesTheClaimGiven(t *testing.T) {
	f := newCrashFixture(t) // stock 6: 2 per shard, limit 1
	ctx := context.Background()
	var lena string
	for n := 0; lena == ""; n++ {
		if u := fmt.Sprintf("lena%d", n); f.m.set.Purchases.Home(u) == 0 {
			lena = u
		}
	}
	reservedAt := f.m.clock.Now().Add(-time.Second) // in the second the crash takes
	f.r.Checkpoint(0)
	crashed := f.m.clock.Now()
	f.r.Rewind(0)
	waitFor(t, 20*time.Second, "shard 0 back in line", func() (bool, string) {
		if at, err := f.m.store.ShardLog.SyncedAt(ctx, 0); err != nil || !at.After(crashed) {
			return false, fmt.Sprint("not resynced since the crash: ", at, err) // (a resync after repairs the register)
		}
		if err := f.m.set.Ping(ctx, 0); err != nil || f.m.set.Fence.Fenced(0) {
			return false, fmt.Sprint("fenced ", err)
		}
		if b := f.m.health.Status()[0].Breaker; b != ha.Closed {
			return false, fmt.Sprintf("breaker %v", b) // (the check would be kept again)
		}
		return true, ""
	})
	// Written awaiting payment by a writer that judged it against the
	// resync time before this one.
	ev := shardstock.ReservationEvent{ID: "01JLATE00000000000000000CA", UserID: lena, ProductID: "crash", Shard: 0, AtMS: reservedAt.UnixMilli()}
	now := time.Now()
	if _, err := f.m.store.Orders.Insert(ctx, ev, 1, shardstock.StatusAwaitingPayment, now, now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	var fenced atomic.Bool
	fenced.Store(true)
	set, store := f.m.set, f.m.store
	r := inventory.NewResync(inventory.ResyncConfig{Addrs: set.Addrs(), Products: f.m.inv.catalog, Catalog: store.Catalog, Transfers: store.Transfers, Orders: store.Orders, Shards: set.Stock, Holds: set.Holds, Claims: set.Purchases,
		ShardLog: store.ShardLog, Fenced: func(int) bool { return fenced.Load() }})
	r.HoldLate(ctx, shardstock.Order{ID: ev.ID, UserID: lena, ProductID: "crash", Shard: 0, Status: shardstock.StatusAwaitingPayment}, reservedAt, time.Now())
	f.cancel(ev.ID, lena)
	waitFor(t, 10*time.Second, "the settlement published and the claim given back", func() (bool, string) {
		unsettled, err1 := store.Orders.Unsettled(ctx, 10, nil) // (a claim goes back once its settlement is out)
		pending, err2 := store.Orders.ClaimsPending(ctx, "", 10)
		c := statusCounts(t, f.m, "crash")
		return err1 == nil && err2 == nil && len(unsettled) == 0 && len(pending) == 0 && c[shardstock.StatusCancelled] == 1,
			fmt.Sprint(unsettled, pending, err1, err2, c)
	})
	fenced.Store(false)
	r.RecheckLate(ctx)
	if rep := purchase(t, f.base, "crash", lena); rep.status != 200 {
		t.Fatalf("%s, whose only order was cancelled, buys after its late check ran: %d %s; want 200", lena, rep.status, rep.raw)
	}
	var locked int64
	for _, sh := range productStatus(t, f.base, "crash").Shards {
		locked += *sh.Locked
	}
	if locked != 1 {
		t.Fatalf("%d units locked; want lena's new hold only (the cancelled order's put back and released)", locked)
	}
}

// TestAnOrderWrittenAfterItsShardsResyncGetsItsHold (issue 40, break 6):
// reservations made on shard 0 just before its machine crashed, whose
// orders reach SQL only after the resync read the live orders (relayed to
// RocketMQ before the crash, or read from the outbox while the database
// was away). Their holds went with the crash, so their units were salable
// again while their buyers held orders, and a confirm that found no hold
// changed nothing: sold stayed below paid for good, the unit on sale (the
// TestChaos flake, "sold 170 = paid orders 174"). The order service now
// has the hold put back when such an order is written; and a confirm
// that still finds no hold takes a salable unit as sold.
func TestAnOrderWrittenAfterItsShardsResyncGetsItsHold(t *testing.T) {
	f := newCrashFixture(t) // stock 6: 2 per shard
	ctx := context.Background()
	reservedAt := f.m.clock.Now().Add(-time.Second) // in the second the crash takes
	f.r.Checkpoint(0)
	f.r.Rewind(0)
	waitFor(t, 20*time.Second, "shard 0 back in line", func() (bool, string) {
		if err := f.m.set.Ping(ctx, 0); err != nil || f.m.set.Fence.Fenced(0) {
			return false, fmt.Sprint("fenced ", err)
		}
		return true, ""
	})
	late := []shardstock.ReservationEvent{
		{ID: "01JLATE000000000000000000A", UserID: "lena", ProductID: "crash", Shard: 0, AtMS: reservedAt.UnixMilli()},
		{ID: "01JLATE000000000000000000B", UserID: "lars", ProductID: "crash", Shard: 0, AtMS: reservedAt.UnixMilli()},
	}
	if n, err := f.m.orders.IngestBatch(ctx, late); n != 2 || err != nil {
		t.Fatalf("the late orders: %d written, %v", n, err)
	}
	if sh := productStatus(t, f.base, "crash").Shards[0]; *sh.Locked != 2 || *sh.Salable != 0 {
		t.Fatalf("shard 0 after two late orders: %d locked, %d salable; want both holds put back (2 locked, 0 salable)", *sh.Locked, *sh.Salable)
	}
	// A hold missing from a shard whose last resync is more than a minute
	// before the reservation (no crash explains it, so the order service
	// does not look; here the reservation is timed two minutes ahead): the
	// confirm takes the unit as sold rather than changing nothing.
	lost := shardstock.ReservationEvent{ID: "01JLATE000000000000000000C", UserID: "lia", ProductID: "crash", Shard: 1, AtMS: f.m.clock.Now().Add(2 * time.Minute).UnixMilli()}
	if err := f.m.orders.Ingest(ctx, lost); err != nil {
		t.Fatal(err)
	}
	for _, p := range []struct{ id, user, result string }{
		{late[0].ID, "lena", "success"}, {late[1].ID, "lars", "fail"}, {lost.ID, "lia", "success"},
	} {
		if rep := orderCall(t, f.base, "pay", p.id, p.user, `{"result":"`+p.result+`"}`); rep.status != 202 {
			t.Fatalf("pay %s: %d %s", p.id, rep.status, rep.raw)
		}
	}
	waitFor(t, 15*time.Second, "settled: sold = paid on every shard", func() (bool, string) {
		st := productStatus(t, f.base, "crash")
		s0, s1 := st.Shards[0], st.Shards[1]
		return *s0.Sold == 1 && *s0.Locked == 0 && *s0.Salable == 1 && *s1.Sold == 1 && *s1.Salable == 1,
			fmt.Sprintf("shard 0 salable %d locked %d sold %d, shard 1 salable %d locked %d sold %d",
				*s0.Salable, *s0.Locked, *s0.Sold, *s1.Salable, *s1.Locked, *s1.Sold)
	})
	checkShards(t, productStatus(t, f.base, "crash"))
}
