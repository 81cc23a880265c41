-- The sale report (package report): what happened in each second of a
-- product's sale, written by every coordinator. kind 'outcome': purchases
-- answered with label (reserved, queued, sold_out, ...), n added up over
-- coordinators; kind 'latency': purchases whose answer took up to the
-- label's bucket (ms), added up; kind 'salable': shard label's salable units
-- at that second (last writer wins; written only when it changed).
CREATE TABLE IF NOT EXISTS sale_seconds (
  product_id VARCHAR(64) NOT NULL,
  second BIGINT NOT NULL,
  kind VARCHAR(16) NOT NULL,
  label VARCHAR(32) NOT NULL,
  n BIGINT NOT NULL,
  PRIMARY KEY (product_id, second, kind, label)
);
