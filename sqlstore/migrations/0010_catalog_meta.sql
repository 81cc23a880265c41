-- Facts about this catalog as a whole. catalog_id names it: written at the
-- first start, and stamped on every shard (ss:catalog), so a coordinator
-- whose database is another catalog (another SQLite file, say) refuses to
-- start on these shards instead of reading another catalog's reservations.
CREATE TABLE IF NOT EXISTS catalog_meta (
  name VARCHAR(64) NOT NULL PRIMARY KEY,
  value VARCHAR(255) NOT NULL
);
