-- The request each Idempotency-Key of a stock change was first used with
-- (key_hash: the key's SHA-256, hex): a repeat of the same request completes
-- that change; the key with another product or request is refused.
CREATE TABLE IF NOT EXISTS stock_change_keys (
  key_hash VARCHAR(64) NOT NULL PRIMARY KEY,
  product_id VARCHAR(64) NOT NULL,
  request VARCHAR(64) NOT NULL,
  created_at BIGINT NOT NULL
);
