// The operators' page: every shard's health, every product's units per
// shard and its waiting room (joined, now serving, waiting, per second), and a product's sale report as charts (drawn by the server with
// go-chart: GET /admin/v1/products/{id}/report/{chart}). The data comes from
// the admin API with the token typed in here (kept in this tab's
// sessionStorage only).
(function () {
  let token = sessionStorage.getItem("shardstock-admin-token") || "";
  const lastQueues = {}; // a waiting room's last figures, for the rates per second
  const el = (id) => document.getElementById(id);
  async function get(path) {
    const r = await fetch(path, { headers: { Authorization: "Bearer " + token }, cache: "no-store" });
    if (r.status === 401) throw new Error("wrong token");
    if (!r.ok) throw new Error(path + ": " + r.status);
    return r.json();
  }
  function text(s) { const d = document.createElement("div"); d.textContent = s; return d.innerHTML; }
  function bar(v, of, cls) {
    const pct = of ? 100 * v / of : 0;
    return '<div class="bar"><span class="' + cls + '" data-pct="' + pct + '"></span></div>';
  }
  async function refresh() {
    try {
      const [shards, products, queues] = await Promise.all([get("/admin/v1/shards"), get("/admin/v1/products"), get("/admin/v1/queues")]);
      const now = Date.now(), lines = {};
      queues.forEach((q) => {
        const was = lastQueues[q.product];
        const dt = was ? (now - was.at) / 1000 : 0;
        q.joinedPerSec = dt > 0 ? Math.max(0, (q.joined - was.joined) / dt) : 0;
        q.admittedPerSec = dt > 0 ? Math.max(0, (q.serving - was.serving) / dt) : 0;
        lines[q.product] = q;
        lastQueues[q.product] = { at: now, joined: q.joined, serving: q.serving };
      });
      const queueLine = (id) => {
        const q = lines[id];
        if (!q) return "";
        return '<div class="muted queue" data-queue="' + text(id) + '">waiting room (' + text(q.mode) + (q.paused ? ", paused" : "") +
          "): joined " + q.joined + " · now serving " + q.serving + " · waiting " + q.waiting +
          " · " + q.joinedPerSec.toFixed(1) + " joined/s · " + q.admittedPerSec.toFixed(1) + " admitted/s</div>";
      };
      el("error").textContent = "";
      el("view").hidden = false;
      el("login").hidden = true;
      el("shards").innerHTML = "<tr><th>shard</th><th>address</th><th>state</th><th>last error</th></tr>" +
        shards.map((s) => '<tr data-shard="' + s.index + '"><td>' + s.index + "</td><td>" + text(s.addr) + '</td><td class="' +
          (s.up ? 'up">up' : 'dn">down') + "</td><td>" + text(s.last_error || "") + "</td></tr>").join("");
      el("products").innerHTML = products.map((p) => '<div class="card"><strong>' + text(p.id) + "</strong> " +
        '<span class="muted">stock ' + p.stock + " · salable " + p.totals.salable + " · locked " + p.totals.locked +
        " · sold " + p.totals.sold + '</span> <button type="button" data-report="' + text(p.id) + '">Report</button>' + queueLine(p.id) + p.shards.map((s) => '<div class="shard' + (s.up ? "" : " down") + '">' +
          "<span>shard " + s.index + "</span>" + bar(s.up ? s.salable : 0, s.alloc, "") + '<span class="state">' +
          (!s.up ? "down" : s.salable === undefined ? "no data" : s.salable + " / " + s.locked + " / " + s.sold) + "</span></div>").join("") + "</div>").join("") +
        '<p class="muted">Per shard: salable / locked / sold.</p>';
      // Widths through the CSSOM: the page's Content-Security-Policy refuses inline style attributes.
      el("products").querySelectorAll("[data-pct]").forEach((b) => { b.style.width = b.dataset.pct + "%"; });
    } catch (e) {
      el("error").textContent = e.message;
      if (e.message === "wrong token") { el("login").hidden = false; el("view").hidden = true; }
    }
  }
  // The sale report: four SVG charts, fetched with the token and shown
  // through blob URLs (an <img> cannot send the Authorization header).
  let reportOf = "";
  const charts = ["purchases.svg", "stock.svg", "latency.svg", "orders.svg"];
  async function showReport() {
    if (!reportOf) return;
    el("report").hidden = false;
    el("report-product").textContent = reportOf;
    const imgs = await Promise.all(charts.map(async (c) => {
      const r = await fetch("/admin/v1/products/" + encodeURIComponent(reportOf) + "/report/" + c,
        { headers: { Authorization: "Bearer " + token }, cache: "no-store" });
      if (!r.ok) throw new Error("report: " + r.status);
      return URL.createObjectURL(await r.blob());
    }));
    el("charts").querySelectorAll("img").forEach((i) => URL.revokeObjectURL(i.src));
    el("charts").innerHTML = "";
    imgs.forEach((src, k) => {
      const i = document.createElement("img");
      i.src = src;
      i.alt = charts[k];
      i.className = "chart";
      el("charts").appendChild(i);
    });
  }
  el("products").addEventListener("click", function (ev) {
    const b = ev.target.closest("[data-report]");
    if (!b) return;
    reportOf = b.dataset.report;
    showReport().catch((e) => { el("error").textContent = e.message; });
  });
  setInterval(function () { if (token && reportOf) showReport().catch(() => {}); }, 5000);
  el("login").addEventListener("submit", function (ev) {
    ev.preventDefault();
    token = el("token").value;
    sessionStorage.setItem("shardstock-admin-token", token);
    refresh();
  });
  if (token) refresh();
  setInterval(function () { if (token) refresh(); }, 1000);
})();
