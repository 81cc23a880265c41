-- Each payment provider transaction id pays one order: a signed callback
-- whose transaction id is on record for another order is a replay (401);
-- for the same order it is a repeat (idempotent).
CREATE TABLE IF NOT EXISTS payment_transactions (
  transaction_id VARCHAR(128) NOT NULL PRIMARY KEY,
  order_id VARCHAR(40) NOT NULL,
  created_at BIGINT NOT NULL
);
