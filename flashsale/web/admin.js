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
  const num = new Intl.NumberFormat();
  const n = (v) => num.format(v);
  // when is a moment in this browser's time zone, with the date when not
  // today and the year when not this year.
  function when(t) {
    const d = new Date(t), now = new Date();
    const o = { hour: "2-digit", minute: "2-digit", timeZoneName: "short" };
    if (d.toDateString() !== now.toDateString()) { o.month = "short"; o.day = "numeric"; }
    if (d.getFullYear() !== now.getFullYear()) o.year = "numeric";
    return d.toLocaleString(undefined, o);
  }
  // state is how a sale stands: archived, paused, ended, not started, or on sale.
  function state(p) {
    const now = Date.now();
    if (p.archived) return "archived";
    if (p.paused) return "paused";
    if (p.ends_at && Date.parse(p.ends_at) <= now) return "ended";
    if (p.starts_at && Date.parse(p.starts_at) > now) return "not started";
    return "on sale";
  }
  const lastSeen = {}; // product -> shard -> its last counts while it answered
  function bar(v, of, cls) {
    const pct = of ? 100 * v / of : 0;
    return '<div class="bar"><span class="' + cls + '" data-pct="' + pct + '"></span></div>';
  }
  async function refresh() {
    try {
      const [shards, products, queues, spool] = await Promise.all([get("/admin/v1/shards"), get("/admin/v1/products"), get("/admin/v1/queues"), get("/admin/v1/spool")]);
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
          "): joined " + n(q.joined) + " · admitted up to place " + n(q.serving) + " · waiting " + n(q.waiting) +
          " · " + q.joinedPerSec.toFixed(1) + " joined/s · " + q.admittedPerSec.toFixed(1) + " admitted/s</div>";
      };
      el("error").textContent = "";
      el("view").hidden = false;
      el("login").hidden = true;
      el("shards").innerHTML = "<tr><th>shard</th><th>address</th><th>state</th><th>last error</th></tr>" +
        shards.map((s) => '<tr data-shard="' + s.index + '"><td>' + s.index + "</td><td>" + text(s.addr) + '</td><td class="' +
          (s.up ? 'up">up' : 'dn">down') + "</td><td>" + text(s.last_error || "") + "</td></tr>").join("");
      el("spool").textContent = !spool.enabled ? "off (a purchase no shard can take is refused with 503)" :
        spool.depth === 0 ? "empty" : n(spool.depth) + (spool.depth === 1 ? " purchase" : " purchases") + " waiting for a shard · the oldest since " + when(spool.oldest_at);
      el("spool").dataset.depth = spool.depth;
      el("products").innerHTML = products.map((p) => {
        const seen = lastSeen[p.id] = lastSeen[p.id] || {};
        const st = state(p), down = p.shards.filter((s) => !s.up).map((s) => s.index);
        const head = '<div class="card" data-product="' + text(p.id) + '" data-state="' + st + '"><strong>' + text(p.title || p.id) + "</strong> " +
          (p.title ? '<span class="muted">' + text(p.id) + "</span> " : "") + '<span class="pill">' + st + "</span>" +
          '<div class="muted">' + (p.price_cents ? (p.price_cents / 100).toFixed(2) + (p.currency ? " " + text(p.currency) : "") + " · " : "") +
          (p.starts_at || p.ends_at ? (p.starts_at ? when(p.starts_at) : "open") + " – " + (p.ends_at ? when(p.ends_at) : "no end") + " · " : "") +
          "limit " + p.per_user_limit + " per buyer</div>" +
          '<div class="muted">stock ' + n(p.stock) + " · salable " + n(p.totals.salable) + " · locked " + n(p.totals.locked) +
          " · sold " + n(p.totals.sold) + (p.archived ? " (final)" : "") + "</div>" +
          (down.length && !p.archived ? '<div class="dn totals-partial">without shard ' + down.join(", ") + " (down): these totals leave its units out</div>" : "") +
          ' <button type="button" data-report="' + text(p.id) + '">Report</button>' + queueLine(p.id);
        if (p.archived) return head + "</div>"; // its keys are gone from the shards: nothing to draw
        return head + p.shards.map((s) => {
          let label;
          if (s.up && s.salable !== undefined) {
            seen[s.index] = s;
            label = n(s.salable) + " / " + n(s.locked) + " / " + n(s.sold);
          } else if (s.up) {
            label = "no data";
          } else {
            const was = seen[s.index];
            label = was ? "down · last seen " + n(was.salable) + " / " + n(was.locked) + " / " + n(was.sold) : "down";
          }
          const was = s.up ? s : seen[s.index];
          return '<div class="shard' + (s.up ? "" : " down") + '" data-shard="' + s.index + '">' +
            "<span>shard " + s.index + "</span>" + bar(was && was.salable !== undefined ? was.salable : 0, was ? was.alloc : 0, "") +
            '<span class="state">' + label + "</span></div>";
        }).join("") + "</div>";
      }).join("") + '<p class="muted">Per shard: salable / locked / sold.</p>';
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
