-- Sale sessions: a window and the products sold in it (GET / shows the current one).
CREATE TABLE IF NOT EXISTS sessions (
  id VARCHAR(64) NOT NULL PRIMARY KEY,
  definition TEXT NOT NULL,
  starts_at BIGINT NOT NULL,
  ends_at BIGINT NOT NULL,
  updated_at BIGINT NOT NULL
);
