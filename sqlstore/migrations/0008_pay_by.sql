-- pay_by: when an order awaiting payment is cancelled, fixed when its row is
-- written (the order becomes payable then), so a reservation that reached
-- the order table late still gets the whole payment window. NULL for rows
-- written before this column, which keep the old rule (reserved_at + the
-- payment timeout).
ALTER TABLE orders ADD COLUMN pay_by BIGINT NULL;
CREATE INDEX IF NOT EXISTS orders_status_payby ON orders (status, pay_by);
