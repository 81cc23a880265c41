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
  document.getElementById("buy").addEventListener("click", async function () {
    const out = document.getElementById("result");
    out.textContent = "…";
    try {
      const r = await fetch("/api/v1/products/" + id + "/purchase", { method: "POST", headers: { "X-User-ID": buyer } });
      const b = await r.json();
      out.textContent = r.ok ? "Reserved: order " + b.order_id + " on shard " + b.shard : (b.message || b.error);
    } catch (e) { out.textContent = "Network error, try again"; }
    poll();
  });
  tick(); poll();
  setInterval(tick, 250);
  setInterval(poll, 500);
})();
