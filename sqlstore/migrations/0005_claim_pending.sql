-- claim_pending is 1 while the buyer's per-user limit claim of a cancelled
-- or failed order has not been given back at the buyer's home shard yet.
-- The order row is the durable queue of those give-backs: the order
-- service's sweep retries them until the home answers, so neither a down
-- shard nor a coordinator that dies loses one, and a settlement never
-- waits for a shard other than the unit's.
ALTER TABLE orders ADD COLUMN claim_pending INT NOT NULL DEFAULT 0;
CREATE INDEX IF NOT EXISTS orders_claim ON orders (claim_pending);
