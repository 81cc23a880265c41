package sqlstore

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/shardstock/shardstock"
)

// segment is a clock segment as stored (queue_lines.clock).
type segment struct {
	At   int64   `json:"at"`
	Base int64   `json:"base"`
	Rate float64 `json:"rate"`
}

// QueueLines returns every product's waiting-room line.
func (s *Store) QueueLines(ctx context.Context) (map[string]shardstock.QueueLine, error) {
	rows, err := s.read.QueryContext(ctx, `SELECT product_id, mode, rate, lead_ms, window_ms, difficulty, paused, held, clock, expired, joined, drawn, version FROM queue_lines`)
	if err != nil {
		return nil, fmt.Errorf("queue lines: %w", err)
	}
	defer rows.Close()
	out := map[string]shardstock.QueueLine{}
	for rows.Next() {
		var (
			l                   shardstock.QueueLine
			mode, clock         string
			lead, window        int64
			paused, held, drawn int
		)
		if err := rows.Scan(&l.Product, &mode, &l.Rate, &lead, &window, &l.Difficulty, &paused, &held, &clock, &l.Expired, &l.Joined, &drawn, &l.Version); err != nil {
			return nil, fmt.Errorf("queue lines: %w", err)
		}
		var segs []segment
		if err := json.Unmarshal([]byte(clock), &segs); err != nil {
			return nil, fmt.Errorf("queue line %s: clock: %w", l.Product, err)
		}
		for _, g := range segs {
			l.Clock = append(l.Clock, shardstock.QueueSegment{At: time.UnixMilli(g.At).UTC(), Base: g.Base, Rate: g.Rate})
		}
		l.Mode, l.Lead, l.Window = shardstock.QueueMode(mode), time.Duration(lead)*time.Millisecond, time.Duration(window)*time.Millisecond
		l.Paused, l.Held, l.Drawn = paused == 1, held == 1, drawn == 1
		out[l.Product] = l
	}
	return out, rows.Err()
}

// SaveQueueLine writes l's definition and clock as version l.Version+1 when
// the stored line is at l.Version (0: there is none); false when another
// writer was first. Joined and drawn are not written.
func (s *Store) SaveQueueLine(ctx context.Context, l shardstock.QueueLine) (bool, error) {
	segs := make([]segment, len(l.Clock))
	for i, g := range l.Clock {
		segs[i] = segment{g.At.UnixMilli(), g.Base, g.Rate}
	}
	clock, _ := json.Marshal(segs)
	paused, held := 0, 0
	if l.Paused {
		paused = 1
	}
	if l.Held {
		held = 1
	}
	if l.Version == 0 {
		_, err := s.exec(ctx, `INSERT INTO queue_lines (product_id, mode, rate, lead_ms, window_ms, difficulty, paused, held, clock, expired, joined, drawn, version)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, 0, 1)`, l.Product, string(l.Mode), l.Rate, l.Lead.Milliseconds(), l.Window.Milliseconds(),
			l.Difficulty, paused, held, string(clock), l.Expired)
		if isDuplicate(err) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("save queue line: %w", err)
		}
		return true, nil
	}
	res, err := s.exec(ctx, `UPDATE queue_lines SET mode = ?, rate = ?, lead_ms = ?, window_ms = ?, difficulty = ?, paused = ?, held = ?, clock = ?, expired = ?, version = version + 1
		WHERE product_id = ? AND version = ?`, string(l.Mode), l.Rate, l.Lead.Milliseconds(), l.Window.Milliseconds(), l.Difficulty, paused, held,
		string(clock), l.Expired, l.Product, l.Version)
	if err != nil {
		return false, fmt.Errorf("save queue line: %w", err)
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// JoinQueue gives buyer the next place in product's line, or the place
// they have; 0 while a draw line is not drawn (the lobby).
func (s *Store) JoinQueue(ctx context.Context, product, buyer string) (int64, error) {
	for attempt := 1; ; attempt++ {
		pos, err := s.joinQueue(ctx, product, buyer)
		if err == nil || !(isLockConflict(err) || isDuplicate(err)) || attempt == 5 {
			if err != nil {
				return 0, fmt.Errorf("join queue: %w", err)
			}
			return pos, nil
		}
	}
}

func (s *Store) joinQueue(ctx context.Context, product, buyer string) (int64, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	var mode string
	var joined int64
	var drawn int
	// The line's row first, locked: joins of one line, and its draw, take
	// turns (SQLite's transactions are IMMEDIATE: they take turns anyway).
	if err := tx.QueryRowContext(ctx, `SELECT mode, joined, drawn FROM queue_lines WHERE product_id = ?`+s.forUpdate(), product).Scan(&mode, &joined, &drawn); err != nil {
		return 0, err
	}
	var pos int64
	switch err := tx.QueryRowContext(ctx, `SELECT position FROM queue_places WHERE product_id = ? AND buyer = ?`, product, buyer).Scan(&pos); {
	case err == nil:
		return pos, tx.Commit()
	case !errors.Is(err, sql.ErrNoRows):
		return 0, err
	}
	if mode == string(shardstock.QueueFIFO) || drawn == 1 {
		pos = joined + 1
		if _, err := tx.ExecContext(ctx, `UPDATE queue_lines SET joined = ? WHERE product_id = ?`, pos, product); err != nil {
			return 0, err
		}
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO queue_places (product_id, buyer, position, joined_at) VALUES (?, ?, ?, ?)`,
		product, buyer, pos, time.Now().UnixMilli()); err != nil {
		return 0, err
	}
	return pos, tx.Commit()
}

// forUpdate locks the rows a MariaDB/MySQL SELECT reads.
func (s *Store) forUpdate() string {
	if s.dialect == "mysql" {
		return " FOR UPDATE"
	}
	return ""
}

// QueuePlace returns buyer's place in product's line.
func (s *Store) QueuePlace(ctx context.Context, product, buyer string) (int64, bool, error) {
	var pos int64
	err := s.read.QueryRowContext(ctx, `SELECT position FROM queue_places WHERE product_id = ? AND buyer = ?`, product, buyer).Scan(&pos)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("queue place: %w", err)
	}
	return pos, true, nil
}

// DrawQueue places the lobby of product's draw line, once: places 1 to n
// in the order shuffle leaves the buyers (sorted before it).
func (s *Store) DrawQueue(ctx context.Context, product string, shuffle func([]string)) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("draw queue: %w", err)
	}
	defer tx.Rollback()
	var drawn int
	if err := tx.QueryRowContext(ctx, `SELECT drawn FROM queue_lines WHERE product_id = ?`+s.forUpdate(), product).Scan(&drawn); err != nil {
		return fmt.Errorf("draw queue: %w", err)
	}
	if drawn == 1 {
		return nil
	}
	rows, err := tx.QueryContext(ctx, `SELECT buyer FROM queue_places WHERE product_id = ? AND position = 0 ORDER BY buyer`, product)
	if err != nil {
		return fmt.Errorf("draw queue: %w", err)
	}
	var lobby []string
	for rows.Next() {
		var b string
		if err := rows.Scan(&b); err != nil {
			rows.Close()
			return fmt.Errorf("draw queue: %w", err)
		}
		lobby = append(lobby, b)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("draw queue: %w", err)
	}
	shuffle(lobby)
	for i, b := range lobby {
		if _, err := tx.ExecContext(ctx, `UPDATE queue_places SET position = ? WHERE product_id = ? AND buyer = ?`, i+1, product, b); err != nil {
			return fmt.Errorf("draw queue: %w", err)
		}
	}
	if _, err := tx.ExecContext(ctx, `UPDATE queue_lines SET drawn = 1, joined = ? WHERE product_id = ?`, len(lobby), product); err != nil {
		return fmt.Errorf("draw queue: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("draw queue: %w", err)
	}
	return nil
}

// RevokeQueue records that buyer's place in product's line admits nobody.
func (s *Store) RevokeQueue(ctx context.Context, product, buyer string) error {
	_, err := s.exec(ctx, `INSERT INTO queue_revoked (product_id, buyer, revoked_at) VALUES (?, ?, ?)`, product, buyer, time.Now().UnixMilli())
	if err != nil && !isDuplicate(err) {
		return fmt.Errorf("revoke: %w", err)
	}
	return nil
}

// QueueRevoked returns the revoked buyers per product.
func (s *Store) QueueRevoked(ctx context.Context) (map[string]map[string]bool, error) {
	rows, err := s.read.QueryContext(ctx, `SELECT product_id, buyer FROM queue_revoked`)
	if err != nil {
		return nil, fmt.Errorf("revoked: %w", err)
	}
	defer rows.Close()
	out := map[string]map[string]bool{}
	for rows.Next() {
		var p, b string
		if err := rows.Scan(&p, &b); err != nil {
			return nil, fmt.Errorf("revoked: %w", err)
		}
		if out[p] == nil {
			out[p] = map[string]bool{}
		}
		out[p][b] = true
	}
	return out, rows.Err()
}

// QueueSecret returns the secret the coordinators of this catalog sign
// waiting-room places with, made up by the first call (catalog_meta).
func (s *Store) QueueSecret(ctx context.Context) ([]byte, error) {
	b := make([]byte, 32)
	rand.Read(b)
	_, err := s.db.ExecContext(ctx, `INSERT INTO catalog_meta (name, value) VALUES ('queue_secret', ?)`, hex.EncodeToString(b))
	if err != nil && !isDuplicate(err) {
		return nil, fmt.Errorf("queue secret: %w", err)
	}
	var v string
	if err := s.db.QueryRowContext(ctx, `SELECT value FROM catalog_meta WHERE name = 'queue_secret'`).Scan(&v); err != nil {
		return nil, fmt.Errorf("queue secret: %w", err)
	}
	return hex.DecodeString(v)
}
