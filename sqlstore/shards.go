package sqlstore

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"time"
)

// What is on record of each shard (ShardLog): whether it is drained, its
// last resync (the run it was brought back in line as, and when), and the
// catalog's id the shards are stamped with.

// shardSet runs a query of one integer column and returns its values as
// a set of shard indexes.
func (s *core) shardSet(ctx context.Context, q string, args ...any) (map[int]bool, error) {
	rows, err := s.reads.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[int]bool{}
	for rows.Next() {
		var i int
		if err := rows.Scan(&i); err != nil {
			return nil, err
		}
		out[i] = true
	}
	return out, rows.Err()
}

// SetDrained puts shard on or off the drained list.
func (s *ShardLog) SetDrained(ctx context.Context, shard int, drained bool) error {
	var err error
	if drained {
		_, err = s.db.ExecContext(ctx, `INSERT INTO drained_shards (shard, drained_at) VALUES (?, ?)`, shard, time.Now().UnixMilli())
		if isDuplicate(err) {
			err = nil
		}
	} else {
		_, err = s.db.ExecContext(ctx, `DELETE FROM drained_shards WHERE shard = ?`, shard)
	}
	if err != nil {
		return fmt.Errorf("drain shard %d: %w", shard, err)
	}
	return nil
}

// DrainedShards lists the drained shards.
func (s *ShardLog) DrainedShards(ctx context.Context) (map[int]bool, error) {
	out, err := s.shardSet(ctx, `SELECT shard FROM drained_shards`)
	if err != nil {
		return nil, fmt.Errorf("drained shards: %w", err)
	}
	return out, nil
}

// SyncedRunID is the run id shard had when it was last resynced ("" when
// never).
func (s *ShardLog) SyncedRunID(ctx context.Context, shard int) (string, error) {
	var run string
	err := s.reads.QueryRowContext(ctx, `SELECT run_id FROM shard_runs WHERE shard = ?`, shard).Scan(&run)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("synced run id of shard %d: %w", shard, err)
	}
	return run, nil
}

// SyncedAt is when shard was last put on record as resynced (zero: never,
// or recorded without a time: its first run).
func (s *ShardLog) SyncedAt(ctx context.Context, shard int) (time.Time, error) {
	var ms int64
	err := s.reads.QueryRowContext(ctx, `SELECT synced_at FROM shard_runs WHERE shard = ?`, shard).Scan(&ms)
	if errors.Is(err, sql.ErrNoRows) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("resync time of shard %d: %w", shard, err)
	}
	if ms == 0 {
		return time.Time{}, nil // (recorded without a time)
	}
	return time.UnixMilli(ms), nil
}

// RecordSynced records that shard, running as run, was resynced at at
// (zero: no time).
func (s *ShardLog) RecordSynced(ctx context.Context, shard int, run string, at time.Time) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `DELETE FROM shard_runs WHERE shard = ?`, shard); err != nil {
		return fmt.Errorf("record resync of shard %d: %w", shard, err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO shard_runs (shard, run_id, synced_at) VALUES (?, ?, ?)`,
		shard, run, millisOrZero(at)); err != nil && !isDuplicate(err) {
		return fmt.Errorf("record resync of shard %d: %w", shard, err)
	}
	return tx.Commit()
}

// CatalogID returns the id of this catalog, made up and put on record by
// the first call on a new database (the first of concurrent calls wins).
func (s *ShardLog) CatalogID(ctx context.Context) (string, error) {
	b := make([]byte, 12)
	rand.Read(b)
	_, err := s.db.ExecContext(ctx, `INSERT INTO catalog_meta (name, value) VALUES ('catalog_id', ?)`, hex.EncodeToString(b))
	if err != nil && !isDuplicate(err) {
		return "", fmt.Errorf("catalog id: %w", err)
	}
	var id string
	if err := s.reads.QueryRowContext(ctx, `SELECT value FROM catalog_meta WHERE name = 'catalog_id'`).Scan(&id); err != nil {
		return "", fmt.Errorf("catalog id: %w", err)
	}
	return id, nil
}
