-- A sale's life: what an operator changes about a product after defining
-- it, kept apart from the definition (which stays as first written: the
-- shards compare it, and a repeated PUT is idempotent against it).
-- paused: the kill switch. starts_ms / ends_ms: the window as moved by a
-- PATCH when window_set is 1 (0: no bound). archived: 1 while the shard keys
-- are being deleted, 2 once they are gone (product_archive has the final
-- totals). version grows with every change, so coordinators reload only
-- what changed.
CREATE TABLE IF NOT EXISTS product_controls (
  product_id VARCHAR(64) NOT NULL PRIMARY KEY,
  paused INT NOT NULL DEFAULT 0,
  window_set INT NOT NULL DEFAULT 0,
  starts_ms BIGINT NOT NULL DEFAULT 0,
  ends_ms BIGINT NOT NULL DEFAULT 0,
  archived INT NOT NULL DEFAULT 0,
  version BIGINT NOT NULL,
  updated_at BIGINT NOT NULL
);
-- The final counters of an archived product, per shard.
CREATE TABLE IF NOT EXISTS product_archive (
  product_id VARCHAR(64) NOT NULL,
  shard INT NOT NULL,
  alloc BIGINT NOT NULL,
  salable BIGINT NOT NULL,
  locked BIGINT NOT NULL,
  sold BIGINT NOT NULL,
  PRIMARY KEY (product_id, shard)
);
