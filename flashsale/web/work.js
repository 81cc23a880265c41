// The waiting room's proof of work, in a Worker so that the page stays
// responsive: find a nonce whose SHA-256, after the line's input (with the
// challenge the room told once it opened), begins with difficulty zero
// bits. The digests are asked for in batches, many at once, so the
// browser's native SHA-256 runs without a round trip per hash (one awaited
// digest at a time was ~40 times slower).
// Message in: {input, difficulty}; out: {nonce} or {error}.
"use strict";
const BATCH = 4096;

function zeros(h) {
  let bits = 0;
  for (const x of h) {
    if (x === 0) { bits += 8; continue; }
    return bits + Math.clz32(x) - 24;
  }
  return bits;
}

self.onmessage = async function (e) {
  const enc = new TextEncoder(), input = e.data.input, difficulty = e.data.difficulty;
  try {
    for (let base = 0; ; base += BATCH) {
      const sums = await Promise.all(Array.from({ length: BATCH },
        (_, k) => crypto.subtle.digest("SHA-256", enc.encode(input + (base + k)))));
      for (let k = 0; k < BATCH; k++) {
        if (zeros(new Uint8Array(sums[k])) >= difficulty) {
          self.postMessage({ nonce: String(base + k) });
          return;
        }
      }
    }
  } catch (err) {
    self.postMessage({ error: String(err) });
  }
};
