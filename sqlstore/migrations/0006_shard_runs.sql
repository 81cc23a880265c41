-- The run id each shard had when it was last brought back in line with the
-- order table (shard.Set's restart fence, inventory.Resync): a shard found
-- running under another run id restarted since and is resynced before it
-- sells again.
CREATE TABLE IF NOT EXISTS shard_runs (
  shard INT NOT NULL PRIMARY KEY,
  run_id VARCHAR(64) NOT NULL,
  synced_at BIGINT NOT NULL
);
