-- Product ids are compared exactly (see 0007): binary on MySQL/MariaDB.
ALTER TABLE sale_seconds MODIFY product_id VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL
