package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/shardstock/shardstock"
)

// SaveSession creates or replaces a session; created reports a new one.
func (s *Sessions) SaveSession(ctx context.Context, ss shardstock.Session) (created bool, err error) {
	def, err := json.Marshal(ss)
	if err != nil {
		return false, err
	}
	now := time.Now().UnixMilli()
	for attempt := 0; attempt < 3; attempt++ {
		res, err := s.db.ExecContext(ctx, `UPDATE sessions SET definition = ?, starts_at = ?, ends_at = ?, updated_at = ? WHERE id = ?`,
			def, ss.StartsAt.UnixMilli(), ss.EndsAt.UnixMilli(), now, ss.ID)
		if err != nil {
			return false, fmt.Errorf("save session %s: %w", ss.ID, err)
		}
		if n, _ := res.RowsAffected(); n > 0 {
			return false, nil
		}
		var exists int
		s.writes.QueryRowContext(ctx, `SELECT COUNT(*) FROM sessions WHERE id = ?`, ss.ID).Scan(&exists)
		if exists > 0 {
			return false, nil // same content: MySQL reports 0 rows changed
		}
		_, err = s.db.ExecContext(ctx, `INSERT INTO sessions (id, definition, starts_at, ends_at, updated_at) VALUES (?, ?, ?, ?, ?)`,
			ss.ID, def, ss.StartsAt.UnixMilli(), ss.EndsAt.UnixMilli(), now)
		if err == nil {
			return true, nil
		}
		if !isDuplicate(err) {
			return false, fmt.Errorf("save session %s: %w", ss.ID, err)
		}
	}
	return false, fmt.Errorf("save session %s: kept racing", ss.ID)
}

// NextSession returns the first session to start after after (nil: none).
func (s *Sessions) NextSession(ctx context.Context, after time.Time) (*shardstock.Session, error) {
	var def string
	err := s.reads.QueryRowContext(ctx, `SELECT definition FROM sessions WHERE starts_at > ? ORDER BY starts_at LIMIT 1`, after.UnixMilli()).Scan(&def)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("next session: %w", err)
	}
	var ss shardstock.Session
	if err := json.Unmarshal([]byte(def), &ss); err != nil {
		return nil, fmt.Errorf("decode session: %w", err)
	}
	return &ss, nil
}

// CurrentSession returns the session whose window contains now, else the
// next to start, else the last to end; nil when there is none.
func (s *Sessions) CurrentSession(ctx context.Context, now time.Time) (*shardstock.Session, error) {
	ms := now.UnixMilli()
	queries := []struct {
		q    string
		args []any
	}{
		{`SELECT definition FROM sessions WHERE starts_at <= ? AND ends_at > ? ORDER BY starts_at DESC LIMIT 1`, []any{ms, ms}},
		{`SELECT definition FROM sessions WHERE starts_at > ? ORDER BY starts_at LIMIT 1`, []any{ms}},
		{`SELECT definition FROM sessions ORDER BY ends_at DESC LIMIT 1`, nil},
	}
	for _, q := range queries {
		var def string
		err := s.reads.QueryRowContext(ctx, q.q, q.args...).Scan(&def)
		if err == nil {
			var ss shardstock.Session
			if err := json.Unmarshal([]byte(def), &ss); err != nil {
				return nil, fmt.Errorf("decode session: %w", err)
			}
			return &ss, nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return nil, fmt.Errorf("current session: %w", err)
		}
	}
	return nil, nil
}

// Sessions lists every session, by start.
func (s *Sessions) Sessions(ctx context.Context) ([]shardstock.Session, error) {
	rows, err := s.reads.QueryContext(ctx, `SELECT definition FROM sessions ORDER BY starts_at, id`)
	if err != nil {
		return nil, fmt.Errorf("list sessions: %w", err)
	}
	defer rows.Close()
	out := []shardstock.Session{}
	for rows.Next() {
		var def string
		if err := rows.Scan(&def); err != nil {
			return nil, err
		}
		var ss shardstock.Session
		if err := json.Unmarshal([]byte(def), &ss); err != nil {
			return nil, fmt.Errorf("decode session: %w", err)
		}
		out = append(out, ss)
	}
	return out, rows.Err()
}

// DeleteSession removes session id; false when there was none.
func (s *Sessions) DeleteSession(ctx context.Context, id string) (bool, error) {
	res, err := s.db.ExecContext(ctx, `DELETE FROM sessions WHERE id = ?`, id)
	if err != nil {
		return false, fmt.Errorf("delete session %s: %w", id, err)
	}
	n, err := res.RowsAffected()
	return n > 0, err
}
