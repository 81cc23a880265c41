-- Which shards a product was initialised on, and with which epoch. A shard
-- listed here that no longer holds the product lost its data: it must not
-- be initialised again (that would sell its units a second time).
CREATE TABLE IF NOT EXISTS product_shards (
  product_id VARCHAR(64) NOT NULL,
  shard INT NOT NULL,
  epoch VARCHAR(32) NOT NULL,
  created_at BIGINT NOT NULL,
  PRIMARY KEY (product_id, shard)
);
