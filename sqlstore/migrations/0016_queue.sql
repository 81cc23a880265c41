-- The waiting rooms (package waitroom). queue_lines: a product's line as
-- the operator defined it (mode fifo or draw, rate in places a second,
-- lead and window in ms, difficulty in zero bits) and its clock (JSON
-- segments {at ms, base, rate}, MEDIUMTEXT: MariaDB's TEXT ends at 64 KiB;
-- expired: every place up to it had its turn long ago; window_version: the
-- sale window's version the clock's start follows); held: 1 while no unit is left and the number waits for one;
-- version grows with every change of these, and joined (places handed out),
-- lobby (buyers waiting for a draw) and drawn (a draw's lobby placed; at
-- drawn_at, ms) are kept apart from it (a draw also counts as a change).
CREATE TABLE IF NOT EXISTS queue_lines (
  product_id VARCHAR(64) NOT NULL PRIMARY KEY,
  mode VARCHAR(8) NOT NULL,
  rate DOUBLE NOT NULL,
  lead_ms BIGINT NOT NULL,
  window_ms BIGINT NOT NULL,
  difficulty INT NOT NULL,
  paused INT NOT NULL,
  held INT NOT NULL DEFAULT 0,
  clock MEDIUMTEXT NOT NULL,
  expired BIGINT NOT NULL,
  window_version BIGINT NOT NULL DEFAULT 0,
  joined BIGINT NOT NULL DEFAULT 0,
  lobby BIGINT NOT NULL DEFAULT 0,
  drawn INT NOT NULL DEFAULT 0,
  drawn_at BIGINT NOT NULL DEFAULT 0,
  version BIGINT NOT NULL
);
-- A buyer's place in a line (position 0: in a draw's lobby, placed at the
-- start). One per buyer and product.
CREATE TABLE IF NOT EXISTS queue_places (
  product_id VARCHAR(64) NOT NULL,
  buyer VARCHAR(64) NOT NULL,
  position BIGINT NOT NULL,
  joined_at BIGINT NOT NULL,
  PRIMARY KEY (product_id, buyer)
);
CREATE INDEX IF NOT EXISTS queue_places_position ON queue_places (product_id, position);
-- Buyers whose place admits them no more.
CREATE TABLE IF NOT EXISTS queue_revoked (
  product_id VARCHAR(64) NOT NULL,
  buyer VARCHAR(64) NOT NULL,
  revoked_at BIGINT NOT NULL,
  PRIMARY KEY (product_id, buyer)
)
