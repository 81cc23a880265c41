// The live sale page: polls the public stock view, draws one bar per shard,
// counts down to the window and buys as a demo buyer.
(function () {
  const root = document.getElementById("sale");
  const id = root.dataset.product;
  const starts = Number(root.dataset.starts), ends = Number(root.dataset.ends);
  let skew = 0; // server clock minus ours
  let buyer = localStorage.getItem("shardstock-demo-buyer");
  if (!buyer) {
    buyer = "demo-" + Math.random().toString(36).slice(2, 12);
    localStorage.setItem("shardstock-demo-buyer", buyer);
  }
  document.getElementById("buyer").textContent = buyer;

  function fmt(ms) {
    const s = Math.max(0, Math.floor(ms / 1000));
    const h = Math.floor(s / 3600), m = Math.floor(s / 60) % 60;
    return (h ? h + "h " : "") + m + "m " + (s % 60) + "s";
  }
  function tick() {
    const now = Date.now() + skew, el = document.getElementById("countdown");
    if (starts && now < starts) el.textContent = "Starts in " + fmt(starts - now);
    else if (ends && now < ends) el.textContent = "On sale · ends in " + fmt(ends - now);
    else if (ends) el.textContent = "The sale has ended";
    else el.textContent = "On sale now";
  }
  function draw(v) {
    skew = Date.parse(v.now) - Date.now();
    document.getElementById("left").textContent = v.salable;
    document.getElementById("total-bar").style.width = (100 * v.salable / v.stock) + "%";
    const box = document.getElementById("shards");
    box.replaceChildren(...v.shards.map(function (s) {
      const row = document.createElement("div");
      row.className = "shard" + (s.up ? "" : " down");
      row.dataset.shard = s.index;
      const pct = s.up && s.alloc ? (100 * s.salable / s.alloc) : 0;
      row.innerHTML = '<span>shard ' + s.index + '</span><div class="bar"><span></span></div><span class="state">' +
        (s.up ? s.salable + " / " + s.alloc : "down") + "</span>";
      row.querySelector(".bar span").style.width = pct + "%"; // CSSOM: the CSP refuses inline style attributes
      return row;
    }));
  }
  async function poll() {
    try {
      const r = await fetch("/api/v1/products/" + id + "/stock", { cache: "no-store" });
      if (r.ok) draw(await r.json());
    } catch (e) { /* keep the last view */ }
  }
  // The waiting room, when the product has one: join (with the proof of
  // work the line asks for), look again when the server says, buy once
  // admitted. The place is kept per product, so a reload keeps it.
  const queue = { token: localStorage.getItem("shardstock-queue-" + id) || "", timer: 0, status: "" };
  const buyButton = document.getElementById("buy");
  function showPlace(p) {
    queue.status = p.status;
    const el = document.getElementById("queue-state"), join = document.getElementById("join");
    const text = {
      not_joined: "Join the line to buy" + (p.opens_at ? " (opens " + new Date(p.opens_at).toLocaleTimeString() + ")" : ""),
      lobby: "You are in the line; places are drawn when the sale starts",
      waiting: "Your place: " + p.position + " · now serving " + p.serving + " · " + p.ahead + " ahead" +
        (p.wait_seconds ? " · about " + fmt(p.wait_seconds * 1000) : "") + (p.unlikely ? " · unlikely to get one" : ""),
      admitted: "It is your turn: buy before " + (p.admitted_until ? new Date(p.admitted_until).toLocaleTimeString() : "it passes"),
      passed: "Your turn passed",
      sold_out: "Sold out",
      revoked: "Your place was revoked",
    }[p.status] || p.status;
    el.textContent = text;
    el.dataset.status = p.status;
    join.hidden = p.status !== "not_joined";
    buyButton.disabled = p.status !== "admitted";
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
        document.getElementById("queue-note").textContent = b.message || b.error;
        return lookLater(Number(r.headers.get("Retry-After")) || 5);
      }
      document.getElementById("queue").hidden = false;
      if (b.token) { queue.token = b.token; localStorage.setItem("shardstock-queue-" + id, b.token); }
      showPlace(b);
      lookLater(Number(r.headers.get("Retry-After")) || 2);
    } catch (e) { lookLater(5); }
  }
  // work finds a nonce whose SHA-256, after the line's input, begins with
  // difficulty zero bits (the server checks it with one hash).
  async function work(difficulty) {
    const enc = new TextEncoder(), input = "shardstock-queue:" + id + ":" + buyer + ":";
    for (let i = 0; ; i++) {
      const h = new Uint8Array(await crypto.subtle.digest("SHA-256", enc.encode(input + i)));
      let bits = 0;
      for (const x of h) {
        if (x === 0) { bits += 8; continue; }
        bits += Math.clz32(x) - 24;
        break;
      }
      if (bits >= difficulty) return String(i);
    }
  }
  document.getElementById("join").addEventListener("click", async function () {
    const note = document.getElementById("queue-note");
    try {
      let body = "{}";
      const probe = await fetch("/api/v1/products/" + id + "/queue", { headers: { "X-User-ID": buyer }, cache: "no-store" });
      const face = await probe.json();
      if (face.difficulty > 0) {
        note.textContent = "Proving you are not a bot…";
        body = JSON.stringify({ work: await work(face.difficulty) });
      }
      const r = await fetch("/api/v1/products/" + id + "/queue", { method: "POST", body: body,
        headers: { "X-User-ID": buyer, "Content-Type": "application/json" } });
      const b = await r.json();
      if (!r.ok) { note.textContent = b.message || b.error; return; }
      note.textContent = "";
      queue.token = b.token;
      localStorage.setItem("shardstock-queue-" + id, b.token);
      showPlace(b);
      lookLater(Number(r.headers.get("Retry-After")) || 2);
    } catch (e) { note.textContent = "Network error, try again"; }
  });
  buyButton.addEventListener("click", async function () {
    const out = document.getElementById("result");
    out.textContent = "…";
    try {
      const headers = { "X-User-ID": buyer };
      if (queue.token) headers["X-Queue-Token"] = queue.token;
      const r = await fetch("/api/v1/products/" + id + "/purchase", { method: "POST", headers: headers });
      const b = await r.json();
      out.textContent = r.ok ? "Reserved: order " + b.order_id + " on shard " + b.shard : (b.message || b.error);
    } catch (e) { out.textContent = "Network error, try again"; }
    poll();
  });
  tick(); poll(); look();
  setInterval(tick, 250);
  setInterval(poll, 500);
})();
