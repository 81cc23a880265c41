-- Fewer B-trees per order row on SQLite (the order writer's cost per row is
-- mostly its index inserts, issue 26). The flags settle_pending and
-- claim_pending are 0 on nearly every row, and the queries read only the
-- rows where they are 1: partial indexes hold just those, so a row written
-- as awaiting payment enters neither. orders_status_reserved served only
-- the timeout sweep's rows without pay_by (written before 0008), which
-- orders_status_payby finds as well (status, pay_by IS NULL). MariaDB has no
-- partial indexes; its indexes stay as they are.
DROP INDEX IF EXISTS orders_settle;
CREATE INDEX IF NOT EXISTS orders_settle_pending ON orders (shard) WHERE settle_pending = 1;
DROP INDEX IF EXISTS orders_claim;
CREATE INDEX IF NOT EXISTS orders_claim_pending ON orders (settle_pending) WHERE claim_pending = 1;
DROP INDEX IF EXISTS orders_status_reserved;
