// The live sale page: polls the public stock view, counts down to the
// window, and follows a demo buyer's purchase to its end: reserved (or
// queued, then followed through its ticket), paid or cancelled. Buyers see
// no shard: that is the operators' page's.
(function () {
  const root = document.getElementById("sale");
  const id = root.dataset.product;
  // The window, as the page was made; the stock view keeps it current (an
  // operator may move the end while the page is open).
  let starts = Number(root.dataset.starts), ends = Number(root.dataset.ends);
  const num = new Intl.NumberFormat();
  let skew = 0; // server clock minus ours
  let buyer = localStorage.getItem("shardstock-demo-buyer");
  if (!buyer) {
    buyer = "demo-" + Math.random().toString(36).slice(2, 12);
    localStorage.setItem("shardstock-demo-buyer", buyer);
  }
  document.getElementById("buyer").textContent = buyer;
  for (const el of [document.getElementById("stock"), document.getElementById("of")]) {
    el.textContent = num.format(Number(root.dataset.stock));
  }
  const buyButton = document.getElementById("buy"), out = document.getElementById("result");
  const state = { queued: false, queueStatus: "", bought: localStorage.getItem("shardstock-bought-" + id) === "1", busy: false, awaiting: false };

  // fmt is a duration: days and hours past 48 hours.
  function fmt(ms) {
    const s = Math.max(0, Math.floor(ms / 1000));
    const h = Math.floor(s / 3600), m = Math.floor(s / 60) % 60;
    if (h >= 48) return Math.floor(h / 24) + "d " + (h % 24) + "h";
    return (h ? h + "h " : "") + (h || m ? m + "m " : "") + (s % 60) + "s";
  }
  // when is a moment in the buyer's time zone: with the date when it is
  // not today, and the year when it is not this year.
  function when(t) {
    const d = new Date(t), now = new Date(Date.now() + skew);
    const o = { hour: "2-digit", minute: "2-digit", timeZoneName: "short" };
    if (d.toDateString() !== now.toDateString()) { o.month = "short"; o.day = "numeric"; }
    if (d.getFullYear() !== now.getFullYear()) o.year = "numeric";
    return d.toLocaleString(undefined, o);
  }
  function phase(now) {
    if (starts && now < starts) return "before";
    if (ends && now >= ends) return "ended";
    return "open";
  }
  function tick() {
    const now = Date.now() + skew, el = document.getElementById("countdown");
    const ph = phase(now);
    if (ph === "before") el.textContent = "Starts in " + fmt(starts - now) + " · " + when(starts);
    else if (ph === "ended") el.textContent = "The sale has ended";
    else if (ends) el.textContent = "On sale · ends in " + fmt(ends - now) + " · " + when(ends);
    else el.textContent = "On sale now";
    if (root.dataset.phase !== ph) {
      root.dataset.phase = ph;
      refresh();
    }
  }
  // refresh sets the buttons from the state: no purchase after the end,
  // none in a waiting room but on the buyer's turn (once), none while one
  // is on its way.
  function refresh() {
    const ended = root.dataset.phase === "ended";
    // (One order at a time on this page: pay or cancel it before the next.)
    buyButton.disabled = state.busy || ended || state.awaiting || (state.queued && (state.queueStatus !== "admitted" || state.bought));
    document.getElementById("join").hidden = !state.queued || state.queueStatus !== "not_joined" || ended;
  }
  function draw(v) {
    skew = Date.parse(v.now) - Date.now();
    starts = v.starts_at ? Date.parse(v.starts_at) : 0;
    ends = v.ends_at ? Date.parse(v.ends_at) : 0;
    // Units on a shard that does not answer are out of reach for now, not
    // sold: an outage is never shown as sold out.
    const partial = v.shards.some((s) => !s.up);
    document.getElementById("left").textContent = (partial ? "at least " : "") + num.format(v.salable);
    document.getElementById("reach").hidden = !partial;
    document.getElementById("total-bar").style.width = (100 * v.salable / v.stock) + "%"; // CSSOM: the CSP refuses inline style attributes
  }
  async function poll() {
    try {
      const r = await fetch("/api/v1/products/" + id + "/stock", { cache: "no-store" });
      if (r.ok) draw(await r.json());
    } catch (e) { /* keep the last view */ }
  }

  // What a refusal means to a buyer, by its code.
  const refusals = {
    sold_out: "Sold out", limit_reached: "You already hold as many as one buyer may buy",
    not_started: "The sale has not started yet", ended: "The sale has ended", paused: "Sales are paused for now",
    unavailable: "We are busy: try again in a moment", rate_limited: "Too many tries: wait a moment and try again",
    not_admitted: "Wait for your turn in the line", revoked: "Your place in the line was revoked",
  };
  function say(b) { return refusals[b.error] || b.message || b.error || "Something went wrong"; }

  // The waiting room, when the product has one: join (with the proof of
  // work the line asks for), look again when the server says, buy once
  // admitted. The place is kept per product, so a reload keeps it.
  const queue = { token: localStorage.getItem("shardstock-queue-" + id) || "", timer: 0 };
  function showPlace(p) {
    state.queued = true;
    state.queueStatus = p.status;
    const el = document.getElementById("queue-state");
    const ended = root.dataset.phase === "ended";
    let text = {
      not_joined: p.opens_at && Date.parse(p.opens_at) > Date.now() + skew ? "The line opens " + when(p.opens_at) : "Join the line to buy",
      lobby: "You are in the line; places are drawn when the sale starts",
      waiting: "Your place: " + num.format(p.position) + " · now serving " + num.format(p.serving) + " · " +
        (p.ahead ? num.format(p.ahead) + " ahead of you" : "you are next") +
        (p.wait_seconds ? " · about " + fmt(p.wait_seconds * 1000) : "") + (p.unlikely ? " · unlikely to get one" : ""),
      admitted: "It is your turn: buy before " + (p.admitted_until ? when(p.admitted_until) : "it passes"),
      passed: "Your turn passed",
      held: "Your place: " + num.format(p.position) + " · every unit is reserved; some may come back if not paid — stay in line",
      sold_out: "Sold out",
      revoked: "Your place was revoked",
    }[p.status] || p.status;
    if (state.bought) text = "You bought one: your order is below";
    else if (ended) text = "The sale has ended";
    el.textContent = text;
    el.dataset.status = state.bought ? "bought" : ended ? "ended" : p.status;
    refresh();
  }
  function lookLater(seconds) {
    clearTimeout(queue.timer);
    queue.timer = setTimeout(look, Math.max(1, seconds) * 1000);
  }
  async function look() {
    try {
      const headers = { "X-User-ID": buyer };
      if (queue.token) headers["X-Queue-Token"] = queue.token;
      const r = await fetch("/api/v1/products/" + id + "/queue", { headers: headers, cache: "no-store" });
      if (r.status === 404) return; // no waiting room: buy as usual
      const b = await r.json();
      if (!r.ok) {
        // A place the server refuses (403: not this buyer's, expired) is
        // dropped; an outage or a limit (503, 429) keeps it for the next look.
        if (r.status === 403 && queue.token) { queue.token = ""; localStorage.removeItem("shardstock-queue-" + id); return look(); }
        document.getElementById("queue-note").textContent = say(b);
        return lookLater(Number(r.headers.get("Retry-After")) || 5);
      }
      document.getElementById("queue").hidden = false;
      if (b.token) { queue.token = b.token; localStorage.setItem("shardstock-queue-" + id, b.token); }
      showPlace(b);
      if (!state.bought && root.dataset.phase !== "ended") lookLater(Number(r.headers.get("Retry-After")) || 2);
    } catch (e) { lookLater(5); }
  }
  // work finds a nonce whose SHA-256, after the line's input and the
  // challenge the room told, begins with difficulty zero bits (the server
  // checks it with one hash), in a Worker (static/work.js).
  function work(challenge, difficulty) {
    return new Promise(function (resolve, reject) {
      const w = new Worker("/static/work.js");
      w.onmessage = function (e) { w.terminate(); e.data.error ? reject(new Error(e.data.error)) : resolve(e.data.nonce); };
      w.onerror = function (e) { w.terminate(); reject(e); };
      w.postMessage({ input: "shardstock-queue:" + id + ":" + buyer + ":" + challenge + ":", difficulty: difficulty });
    });
  }
  document.getElementById("join").addEventListener("click", async function () {
    const note = document.getElementById("queue-note");
    try {
      // The work hashes a challenge the room tells once it is open (no
      // work before: the join says when it opens); a challenge that
      // changed while the work was done (work_required) is fetched again.
      let r, b;
      for (let tries = 0; tries < 2; tries++) {
        let body = "{}";
        const probe = await fetch("/api/v1/products/" + id + "/queue", { headers: { "X-User-ID": buyer }, cache: "no-store" });
        const face = await probe.json();
        if (face.difficulty > 0 && face.challenge) {
          note.textContent = "Proving you are not a bot…";
          body = JSON.stringify({ work: await work(face.challenge, face.difficulty) });
        }
        r = await fetch("/api/v1/products/" + id + "/queue", { method: "POST", body: body,
          headers: { "X-User-ID": buyer, "Content-Type": "application/json" } });
        b = await r.json();
        if (!(r.status === 403 && b.error === "work_required" && face.challenge)) break;
      }
      if (!r.ok) { note.textContent = say(b); return; }
      note.textContent = "";
      queue.token = b.token;
      localStorage.setItem("shardstock-queue-" + id, b.token);
      showPlace(b);
      lookLater(Number(r.headers.get("Retry-After")) || 2);
    } catch (e) { note.textContent = "Network error, try again"; }
  });

  // The order: reserved, then awaiting payment until paid, cancelled or
  // lapsed. Kept per product, so a reload shows it.
  const order = { id: localStorage.getItem("shardstock-order-" + id) || "", timer: 0 };
  const orderText = {
    pending: "Reserved: your order is being written…",
    paid: "Paid: thank you!",
    cancelled: "Cancelled: the unit went back on sale",
    failed: "Not completed: the reservation lapsed or the payment failed",
    refunded: "Refunded",
  };
  function showOrder(o) {
    const box = document.getElementById("order"), el = document.getElementById("order-state");
    state.awaiting = o.status === "pending" || o.status === "awaiting_payment";
    refresh();
    box.hidden = false;
    el.dataset.status = o.status;
    el.textContent = o.status === "awaiting_payment" ?
      "Reserved: pay by " + (o.pay_by ? when(o.pay_by) : "the payment deadline") : (orderText[o.status] || o.status);
    const open = o.status === "awaiting_payment";
    document.getElementById("pay").hidden = document.getElementById("cancel").hidden = !open && o.status !== "pending";
    document.getElementById("pay").disabled = document.getElementById("cancel").disabled = !open;
    return o.status === "pending" || o.status === "awaiting_payment";
  }
  async function followOrder() {
    clearTimeout(order.timer);
    if (!order.id) return;
    try {
      const r = await fetch("/api/v1/orders/" + order.id, { headers: { "X-User-ID": buyer }, cache: "no-store" });
      if (r.status === 404 || r.status === 401) { forgetOrder(); return; } // (401: a buyer this page cannot speak for)
      if (r.ok && !showOrder(await r.json())) return; // final: nothing more to follow
    } catch (e) { /* look again */ }
    order.timer = setTimeout(followOrder, 1500);
  }
  function forgetOrder() {
    order.id = "";
    localStorage.removeItem("shardstock-order-" + id);
    document.getElementById("order").hidden = true;
    state.awaiting = false;
    refresh();
  }
  function reserved(orderID) {
    out.textContent = "Reserved";
    order.id = orderID;
    localStorage.setItem("shardstock-order-" + id, orderID);
    showOrder({ status: "pending" });
    if (state.queued) {
      state.bought = true; // (kept: a reload must not turn Buy back on for a place that bought)
      localStorage.setItem("shardstock-bought-" + id, "1");
      look();
    }
    followOrder();
  }
  async function settle(action, body) {
    const note = document.getElementById("order-state");
    try {
      const r = await fetch("/api/v1/orders/" + order.id + "/" + action, { method: "POST", body: body,
        headers: { "X-User-ID": buyer, "Content-Type": "application/json" } });
      if (!r.ok) {
        const b = await r.json();
        note.textContent = r.status === 401 ? "Payments are taken by the payment provider here, not on this page" : say(b);
        return;
      }
    } catch (e) { note.textContent = "Network error, try again"; return; }
    followOrder();
  }
  document.getElementById("pay").addEventListener("click", function () { settle("pay", JSON.stringify({ result: "success" })); });
  document.getElementById("cancel").addEventListener("click", function () { settle("cancel", ""); });

  // A queued purchase: followed through its ticket to its outcome.
  const ticket = { id: localStorage.getItem("shardstock-ticket-" + id) || "", timer: 0 };
  async function followTicket() {
    clearTimeout(ticket.timer);
    if (!ticket.id) return;
    try {
      const r = await fetch("/api/v1/tickets/" + ticket.id, { headers: { "X-User-ID": buyer }, cache: "no-store" });
      const b = await r.json();
      if (r.status === 404 || r.status === 401 || (r.ok && b.status !== "queued")) {
        ticket.id = "";
        localStorage.removeItem("shardstock-ticket-" + id);
        if (b.status === "reserved") reserved(b.order_id);
        else out.textContent = r.ok ? say(b) : "Your queued purchase was not found";
        return;
      }
      out.textContent = "Queued: we'll confirm as soon as we can";
    } catch (e) { /* look again */ }
    ticket.timer = setTimeout(followTicket, 1000);
  }

  buyButton.addEventListener("click", async function () {
    out.textContent = "…";
    state.busy = true;
    refresh();
    try {
      const headers = { "X-User-ID": buyer };
      if (queue.token) headers["X-Queue-Token"] = queue.token;
      const r = await fetch("/api/v1/products/" + id + "/purchase", { method: "POST", headers: headers });
      const b = await r.json();
      if (r.status === 200) reserved(b.order_id);
      else if (r.status === 202) {
        out.textContent = "Queued: we'll confirm as soon as we can";
        ticket.id = b.ticket;
        localStorage.setItem("shardstock-ticket-" + id, b.ticket);
        followTicket();
      } else out.textContent = say(b);
    } catch (e) { out.textContent = "Network error, try again"; }
    state.busy = false;
    refresh();
    poll();
  });
  tick(); poll(); look(); followOrder(); followTicket();
  setInterval(tick, 250);
  setInterval(poll, 500);
})();
