-- Every string is compared exactly, as Redis and SQLite compare it (see
-- 0007): "lamp" and "Lamp" are two products, "tx-A" and "tx-a" two payment
-- transactions. The database, every table and every string column become
-- utf8mb4_bin (0007 and 0013 changed some id columns only; the rest kept
-- the server's collation, case-insensitive and often latin1), so a table
-- or column created later without COLLATE is binary too (the test
-- TestMariaDBComparesEveryStringExactly checks every one). A latin1 TEXT
-- column becomes MEDIUMTEXT, which holds all it held. MySQL/MariaDB only.
ALTER DATABASE CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
ALTER TABLE schema_migrations CONVERT TO CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
ALTER TABLE products CONVERT TO CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
ALTER TABLE orders CONVERT TO CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
ALTER TABLE sessions CONVERT TO CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
ALTER TABLE product_shards CONVERT TO CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
ALTER TABLE transfers CONVERT TO CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
ALTER TABLE drained_shards CONVERT TO CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
ALTER TABLE shard_runs CONVERT TO CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
ALTER TABLE payment_transactions CONVERT TO CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
ALTER TABLE catalog_meta CONVERT TO CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
ALTER TABLE product_controls CONVERT TO CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
ALTER TABLE product_archive CONVERT TO CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
ALTER TABLE sale_seconds CONVERT TO CHARACTER SET utf8mb4 COLLATE utf8mb4_bin
