package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/shardstock/shardstock/config"
	"github.com/shardstock/shardstock/shard/shardtest"
)

// artifacts is where browser screenshots go: $SHARDSTOCK_ARTIFACTS, or
// artifacts/ at the repository root.
func artifacts(t *testing.T) string {
	dir := os.Getenv("SHARDSTOCK_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join(repoRoot(t), "artifacts")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// browser starts headless Chromium (Debian's /usr/bin/chromium) for the test.
func browser(t *testing.T) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal("chromium is not installed (make test installs Debian's chromium)")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path),
		chromedp.NoSandbox, chromedp.DisableGPU, chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.WindowSize(900, 1000), chromedp.UserDataDir(t.TempDir()))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithErrorf(func(string, ...any) {}))
	ctx, cancelTimeout := context.WithTimeout(ctx, 90*time.Second)
	t.Cleanup(func() { cancelTimeout(); cancel(); cancelAlloc() })
	return ctx
}

// waitJS polls a JavaScript expression in the page until it is true.
func waitJS(t *testing.T, ctx context.Context, what, expr string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](expr)); err == nil && ok {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	body, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
	t.Fatalf("%s: %s never held; the page shows:\n%s", what, expr, body)
}

func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // quality 100: PNG
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(artifacts(t), name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}

// TestSalePageInBrowser drives headless Chromium: the front page lists the
// session's product with its units left; on the sale page a click on "Buy
// one" reserves a unit, the stock shown drops, and the buyer pays on the
// page and sees the order paid; the page names no shard. With the buyer's
// home shard killed, a purchase is shown queued and, once the shard is
// back, followed through its ticket to its order (issue 42, findings 3-4:
// a 202 was shown as "Reserved: order undefined on shard undefined"). A
// killed shard shows as down on the operators' page.
func TestSalePageInBrowser(t *testing.T) {
	r := shardtest.Start(t, 3)
	m := startServer(t, r.URLs(), func(c *config.Config) { c.SpoolDir = t.TempDir() })
	base := m.URL()
	start := time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)
	end := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	putProduct(t, base, "lamp", fmt.Sprintf(`{"stock":9,"title":"Desk lamp","price_cents":4900,"currency":"EUR","starts_at":%q,"ends_at":%q}`, start, end))
	rep := do(t, "PUT", base+"/admin/v1/sessions/evening", fmt.Sprintf(`{"title":"Evening sale","starts_at":%q,"ends_at":%q,"products":["lamp"]}`, start, end),
		"Authorization", "Bearer "+testToken, "Content-Type", "application/json")
	if rep.status != 201 {
		t.Fatalf("session: %d %s", rep.status, rep.raw)
	}
	ctx := browser(t)

	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/")); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, "the front page lists the session's product", `document.body.innerText.includes("Evening sale") && !!document.querySelector('a[href="/products/lamp"]')`)
	waitJS(t, ctx, "with its units left, live", `document.querySelector('.product[data-product="lamp"] .left').textContent === "9 of 9 left"`)

	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/products/lamp")); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, "full stock shown", `document.getElementById("left").textContent === "9"`)
	waitJS(t, ctx, "countdown running, with the end's time", `/^On sale · ends in 59m \d+s · /.test(document.getElementById("countdown").textContent)`)
	waitJS(t, ctx, "no shard named to buyers", `!/shard/i.test(document.body.innerText)`)
	waitJS(t, ctx, "the price with its currency", `document.body.innerText.includes("49.00 EUR · 9 units")`)
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.ID("buy"))); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, "the purchase is confirmed", `document.getElementById("result").textContent.startsWith("Reserved")`)
	waitJS(t, ctx, "the stock shown drops", `document.getElementById("left").textContent === "8"`)
	waitJS(t, ctx, "the order awaits payment, with its deadline", `document.getElementById("order-state").dataset.status === "awaiting_payment" &&
		document.getElementById("order-state").textContent.startsWith("Reserved: pay by ") && !document.getElementById("pay").disabled`)
	screenshot(t, ctx, "sale-page.png")
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.ID("pay"))); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, "the order is paid", `document.getElementById("order-state").dataset.status === "paid" &&
		document.getElementById("order-state").textContent === "Paid: thank you!" && document.getElementById("pay").hidden`)
	waitJS(t, ctx, "no shard named to buyers after the purchase", `!/shard/i.test(document.body.innerText)`)

	// A buyer whose home shard is down is queued, and the page says so.
	p, err := m.inv.catalog.Product(context.Background(), "lamp")
	if err != nil {
		t.Fatal(err)
	}
	homedOn1 := ""
	for k := 0; homedOn1 == ""; k++ {
		if i, err := m.set.Purchases.HomeOf(p, fmt.Sprintf("page-buyer-%d", k)); err == nil && i == 1 {
			homedOn1 = fmt.Sprintf("page-buyer-%d", k)
		}
	}
	r.Kill(1)
	waitFor(t, 10*time.Second, "shard 1 seen down", func() (bool, string) {
		rep := adminDo(t, "GET", base+"/admin/v1/shards", "")
		return strings.Contains(rep.raw, `"index":1,`) && strings.Contains(rep.raw, `"up":false`), rep.raw
	})
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](fmt.Sprintf(`localStorage.clear(); localStorage.setItem("shardstock-demo-buyer", %q); true`, homedOn1))); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/products/lamp")); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, "the page runs as the buyer homed on shard 1", `document.getElementById("buyer").textContent === "`+homedOn1+`"`)
	// (The units on the down shard are out of reach, not sold.)
	waitJS(t, ctx, "the units left say some are out of reach", `document.getElementById("left").textContent.startsWith("at least ") && !document.getElementById("reach").hidden`)
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.ID("buy"))); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, "the purchase is shown queued", `document.getElementById("result").textContent === "Queued: we'll confirm as soon as we can" &&
		document.getElementById("order").hidden`)
	screenshot(t, ctx, "sale-page-queued.png")

	err = chromedp.Do(ctx, chromedp.Navigate(base+"/admin/"),
		chromedp.SendKeys(chromedp.ID("token"), testToken), chromedp.Click(chromedp.CSS(`#login button`)))
	if err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, "operators see the shards", `document.querySelectorAll('#shards tr[data-shard]').length === 3`)
	waitJS(t, ctx, "operators see shard 1 down", `document.querySelector('#shards tr[data-shard="1"] .dn') !== null`)
	waitJS(t, ctx, "operators see the product bars", `document.body.innerText.includes("lamp") && document.querySelectorAll("#products .shard").length === 3`)
	// Each sale's state, price and window; totals that leave a down shard
	// out say so; the spool's depth (issue 42, finding 7).
	waitJS(t, ctx, "operators see the sale's state, price and window", `(() => {
		const c = document.querySelector('#products [data-product="lamp"]');
		return c.dataset.state === "on sale" && c.innerText.includes("Desk lamp") && c.innerText.includes("49.00 EUR · ") && c.innerText.includes(" – ");
	})()`)
	waitJS(t, ctx, "operators are told the totals leave shard 1 out", `document.querySelector('#products [data-product="lamp"] .totals-partial').textContent.includes("shard 1")`)
	waitJS(t, ctx, "operators see the queued purchase in the spool", `document.getElementById("spool").dataset.depth === "1" &&
		document.getElementById("spool").textContent.startsWith("1 purchase waiting for a shard · the oldest since ")`)
	html, _ := chromedp.Run(ctx, chromedp.OuterHTML(chromedp.CSS("html")))
	if strings.Contains(html, testToken) {
		t.Fatal("the admin token is written into the page")
	}
	screenshot(t, ctx, "operators-page.png")

	// The sale report (issue 16, item 9): shard 1 back, a race that sells the
	// lamp out and some orders paid and cancelled, then the charts.
	r.Restart(1)
	waitFor(t, 30*time.Second, "shard 1 back in rotation", func() (bool, string) {
		rep := adminDo(t, "GET", base+"/admin/v1/shards", "")
		return !strings.Contains(rep.raw, `"up":false`), rep.raw
	})
	// Back on the sale page, the queued purchase is followed to its order.
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/products/lamp")); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, "the queued purchase becomes an order awaiting payment", `document.getElementById("result").textContent === "Reserved" &&
		document.getElementById("order-state").dataset.status === "awaiting_payment"`)
	if rep := do(t, "GET", base+"/products/nosuch", ""); rep.status != 404 || !strings.Contains(rep.raw, "<h1>No such product</h1>") {
		t.Errorf("the page of no such product: %d %.200s", rep.status, rep.raw)
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/admin/")); err != nil { // (the token is kept in the tab)
		t.Fatal(err)
	}
	orders := map[string]string{}
	for i := 0; ; i++ { // until sold out, spread over a few seconds (503s while shard 1 is resynced)
		user := fmt.Sprintf("report%d", i)
		rep := purchase(t, base, "lamp", user)
		if rep.status == 200 {
			orders[rep.str("order_id")] = user
		}
		if rep.status == 410 {
			break
		}
		if i == 200 {
			t.Fatalf("never sold out: %d %s", rep.status, rep.raw)
		}
		time.Sleep(150 * time.Millisecond)
	}
	k := 0
	for id, user := range orders {
		waitFor(t, 10*time.Second, "order "+id+" written", func() (bool, string) {
			o := do(t, "GET", base+"/api/v1/orders/"+id, "", "X-User-ID", user)
			return o.status == 200 && o.str("status") == "awaiting_payment", o.raw
		})
		action, body := "pay", `{"result":"success"}`
		if k%3 == 2 {
			action, body = "cancel", ""
		}
		if rep := orderCall(t, base, action, id, user, body); rep.status >= 300 {
			t.Fatalf("%s %s: %d %s", action, id, rep.status, rep.raw)
		}
		k++
	}
	waitFor(t, 10*time.Second, "the report has the race", func() (bool, string) {
		rep := adminDo(t, "GET", base+"/admin/v1/products/lamp/report", "")
		return strings.Contains(rep.raw, `"sold_out":[`) && strings.Contains(rep.raw, `"sold_out_at":{"`), rep.raw
	})
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`button[data-report="lamp"]`))); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, "four charts drawn", `document.querySelectorAll("#charts img.chart").length === 4 &&
		[...document.querySelectorAll("#charts img.chart")].every((i) => i.complete && i.naturalWidth > 0)`)
	screenshot(t, ctx, "sale-report.png")

}

// TestSalePageAtTheEdgeInBrowser (issue 25, item 2): the sale page served
// by the nginx edge from the published files works in a real browser: its
// script and style come with their types (with nosniff, a script or style
// sent as text/plain is refused), so the countdown runs, the live stock
// shows and the style applies; and the edge sends the coordinator's
// Content-Security-Policy, so a script injected into the page does not run.
func TestSalePageAtTheEdgeInBrowser(t *testing.T) {
	start := time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)
	end := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	_, edge := pagesAtTheEdge(t, fmt.Sprintf(`{"stock":9,"title":"Desk lamp","starts_at":%q,"ends_at":%q}`, start, end))
	for path, want := range map[string]string{"/static/sale.js": "javascript", "/static/style.css": "text/css", "/products/lamp": "text/html"} {
		resp, err := testHTTP.Get(edge + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if ct := resp.Header.Get("Content-Type"); !strings.Contains(ct, want) {
			t.Errorf("%s through the edge: Content-Type %q, want %s", path, ct, want)
		}
		for h, v := range map[string]string{"Content-Security-Policy": "script-src 'self'", "Referrer-Policy": "same-origin", "X-Content-Type-Options": "nosniff"} {
			if !strings.Contains(resp.Header.Get(h), v) {
				t.Errorf("%s through the edge: %s %q, want %q", path, h, resp.Header.Get(h), v)
			}
		}
	}
	ctx := browser(t)
	if err := chromedp.Do(ctx, chromedp.Navigate(edge+"/products/lamp")); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, "the countdown runs", `document.getElementById("countdown").textContent.startsWith("On sale")`)
	waitJS(t, ctx, "the live stock shows", `document.getElementById("left").textContent === "9"`)
	waitJS(t, ctx, "the style applies", `getComputedStyle(document.body).backgroundColor === "rgb(248, 250, 252)"`)
	waitJS(t, ctx, "an injected inline script does not run", `(() => {
		const s = document.createElement("script");
		s.textContent = "window.injected = true";
		document.body.appendChild(s);
		return window.injected === undefined;
	})()`)
	screenshot(t, ctx, "sale-page-at-the-edge.png")
}

// TestQueuedSaleInBrowser: on the sale page of a product sold through a
// waiting room, a buyer in real Chromium joins the line before the sale
// (solving the line's proof of work in the page), waits with the buy
// button off, is admitted when their turn comes, and buys.
func TestQueuedSaleInBrowser(t *testing.T) {
	r := shardtest.Start(t, 3)
	m := startServer(t, r.URLs())
	base := m.URL()
	starts := time.Now().Add(4 * time.Second).UTC()
	putProduct(t, base, "qlamp", fmt.Sprintf(`{"stock":5,"title":"Queued lamp","starts_at":%q}`, starts.Format(time.RFC3339Nano)))
	if rep := adminDo(t, "PUT", base+"/admin/v1/products/qlamp/queue", `{"mode":"fifo","rate":1,"lead_seconds":600,"window_seconds":60,"difficulty":8}`); rep.status != 200 {
		t.Fatalf("define the queue: %d %s", rep.status, rep.raw)
	}
	ctx := browser(t)
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/products/qlamp")); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, "the waiting room shows, with the join button", `!document.getElementById("queue").hidden && !document.getElementById("join").hidden`)
	waitJS(t, ctx, "the buy button is off before joining", `document.getElementById("buy").disabled`)
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.ID("join"))); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, "the buyer has place 1 and waits, next in line", `document.getElementById("queue-state").dataset.status === "waiting" &&
		document.getElementById("queue-state").textContent.includes("Your place: 1") && document.getElementById("queue-state").textContent.includes("you are next")`)
	screenshot(t, ctx, "queued-sale-waiting.png")
	waitJS(t, ctx, "the buyer is admitted after the start", `document.getElementById("queue-state").dataset.status === "admitted" && !document.getElementById("buy").disabled`)
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.ID("buy"))); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, "the purchase is confirmed", `document.getElementById("result").textContent.startsWith("Reserved")`)
	// (It said "It is your turn: buy before …" with Buy still on.)
	waitJS(t, ctx, "the line says the buyer bought, and Buy is off", `document.getElementById("queue-state").dataset.status === "bought" &&
		document.getElementById("buy").disabled`)
	screenshot(t, ctx, "queued-sale-bought.png")
	if rep := adminDo(t, "GET", base+"/admin/v1/products/qlamp/queue", ""); rep.body["joined"] != float64(1) {
		t.Fatalf("the line after the page joined: %s", rep.raw)
	}
	// The operators' page shows the waiting room with the product.
	err := chromedp.Do(ctx, chromedp.Navigate(base+"/admin/"),
		chromedp.SendKeys(chromedp.ID("token"), testToken), chromedp.Click(chromedp.CSS(`#login button`)))
	if err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, "the operators' page shows the waiting room", `(() => {
		const q = document.querySelector('[data-queue="qlamp"]');
		return !!q && q.textContent.includes("joined 1") && q.textContent.includes("fifo") && q.textContent.includes("admitted/s");
	})()`)
	screenshot(t, ctx, "queued-sale-operators.png")
}
