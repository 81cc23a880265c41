-- Rebalance and drain: each transfer of salable units between two shards is
-- recorded before its first step, so a crash in the middle leaves a record
-- that Resume finishes (units are never created: they leave the source
-- before they reach the destination). state: started, out (units taken off
-- the source, moved says how many), done.
CREATE TABLE IF NOT EXISTS transfers (
  id VARCHAR(40) NOT NULL PRIMARY KEY,
  product_id VARCHAR(64) NOT NULL,
  from_shard INT NOT NULL,
  to_shard INT NOT NULL,
  wanted BIGINT NOT NULL,
  moved BIGINT NULL,
  state VARCHAR(10) NOT NULL,
  created_at BIGINT NOT NULL,
  updated_at BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS transfers_state ON transfers (state);
-- Shards taken out of rotation for maintenance: rebalance moves units off
-- them and never onto them.
CREATE TABLE IF NOT EXISTS drained_shards (
  shard INT NOT NULL PRIMARY KEY,
  drained_at BIGINT NOT NULL
);
