// The front page: each product's units left, live ("Sold out" when none).
(function () {
  const num = new Intl.NumberFormat();
  async function poll() {
    for (const card of document.querySelectorAll(".product[data-product]")) {
      try {
        const r = await fetch("/api/v1/products/" + card.dataset.product + "/stock", { cache: "no-store" });
        if (!r.ok) continue;
        const v = await r.json();
        // Units on a shard that does not answer are out of reach, not
        // sold: "Sold out" only when every shard answered none.
        const partial = v.shards.some((s) => !s.up);
        card.querySelector(".left").textContent = partial ? "at least " + num.format(v.salable) + " of " + num.format(v.stock) + " left" :
          v.salable > 0 ? num.format(v.salable) + " of " + num.format(v.stock) + " left" : "Sold out";
        card.dataset.left = v.salable;
      } catch (e) { /* keep what is shown */ }
    }
  }
  poll();
  setInterval(poll, 5000);
})();
