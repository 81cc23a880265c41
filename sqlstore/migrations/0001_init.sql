-- Products: the catalog (written before the shards are initialised).
CREATE TABLE IF NOT EXISTS products (
  id VARCHAR(64) NOT NULL PRIMARY KEY,
  definition TEXT NOT NULL,
  created_at BIGINT NOT NULL
);
-- Orders: one row per reservation id. seq numbers a buyer's live orders of a
-- product (1..per_user_limit) and is NULL once the order is cancelled or
-- failed, so the unique key (product_id, user_id, seq) is the last guard of
-- the per-user limit. settle_pending is 1 while the holder shard still has to
-- be told the order's final status.
CREATE TABLE IF NOT EXISTS orders (
  id VARCHAR(40) NOT NULL PRIMARY KEY,
  product_id VARCHAR(64) NOT NULL,
  user_id VARCHAR(64) NOT NULL,
  shard INT NOT NULL,
  seq INT NULL,
  status VARCHAR(20) NOT NULL,
  reserved_at BIGINT NOT NULL,
  created_at BIGINT NOT NULL,
  updated_at BIGINT NOT NULL,
  settle_pending INT NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX IF NOT EXISTS orders_user_seq ON orders (product_id, user_id, seq);
CREATE INDEX IF NOT EXISTS orders_settle ON orders (settle_pending);
CREATE INDEX IF NOT EXISTS orders_status_reserved ON orders (status, reserved_at);
CREATE INDEX IF NOT EXISTS orders_product_shard ON orders (product_id, shard, status);
