package sqlstore

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
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
func (s *Queues) QueueLines(ctx context.Context) (map[string]shardstock.QueueLine, error) {
	rows, err := s.reads.QueryContext(ctx, `SELECT product_id, mode, rate, lead_ms, window_ms, difficulty, paused, held, clock, expired, window_version, joined, lobby, drawn, drawn_at, version FROM queue_lines`)
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
			drawnAt             int64
		)
		if err := rows.Scan(&l.Product, &mode, &l.Rate, &lead, &window, &l.Difficulty, &paused, &held, &clock, &l.Expired, &l.WindowVersion, &l.Joined, &l.Lobby, &drawn, &drawnAt, &l.Version); err != nil {
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
		if drawnAt > 0 {
			l.DrawnAt = time.UnixMilli(drawnAt).UTC()
		}
		out[l.Product] = l
	}
	return out, rows.Err()
}

// SaveQueueLine writes l's definition and clock as version l.Version+1 when
// the stored line is at l.Version (0: there is none); false when another
// writer was first. Joined, lobby and drawn are not written.
func (s *Queues) SaveQueueLine(ctx context.Context, l shardstock.QueueLine) (bool, error) {
	return s.saveQueueLine(ctx, l, false)
}

// SaveQueueLineBeforeJoins is SaveQueueLine that also needs the stored
// joined and lobby to be l's: nobody joined since l was read (a join takes
// the line's row first, so it and this write take turns).
func (s *Queues) SaveQueueLineBeforeJoins(ctx context.Context, l shardstock.QueueLine) (bool, error) {
	return s.saveQueueLine(ctx, l, true)
}

func (s *Queues) saveQueueLine(ctx context.Context, l shardstock.QueueLine, sameJoined bool) (bool, error) {
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
		_, err := s.exec(ctx, `INSERT INTO queue_lines (product_id, mode, rate, lead_ms, window_ms, difficulty, paused, held, clock, expired, window_version, joined, drawn, version)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, 0, 1)`, l.Product, string(l.Mode), l.Rate, l.Lead.Milliseconds(), l.Window.Milliseconds(),
			l.Difficulty, paused, held, string(clock), l.Expired, l.WindowVersion)
		if isDuplicate(err) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("save queue line: %w", err)
		}
		return true, nil
	}
	res, err := s.exec(ctx, `UPDATE queue_lines SET mode = ?, rate = ?, lead_ms = ?, window_ms = ?, difficulty = ?, paused = ?, held = ?, clock = ?, expired = ?, window_version = ?, version = version + 1
		WHERE product_id = ? AND version = ? AND (? = 0 OR (joined = ? AND lobby = ?))`, string(l.Mode), l.Rate, l.Lead.Milliseconds(), l.Window.Milliseconds(), l.Difficulty, paused, held,
		string(clock), l.Expired, l.WindowVersion, l.Product, l.Version, sameJoined, l.Joined, l.Lobby)
	if err != nil {
		return false, fmt.Errorf("save queue line: %w", err)
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// JoinQueue gives buyer the next place in product's line, or the place
// they have; position 0 while a draw line is not drawn (the lobby). A new
// place is joined at at.
func (s *Queues) JoinQueue(ctx context.Context, product, buyer string, at time.Time) (shardstock.QueuePlace, error) {
	for attempt := 1; ; attempt++ {
		q, err := s.joinQueue(ctx, product, buyer, at)
		if err == nil || !(isLockConflict(err) || isDuplicate(err)) || attempt == 5 {
			if err != nil {
				return shardstock.QueuePlace{}, fmt.Errorf("join queue: %w", err)
			}
			return q, nil
		}
	}
}

func (s *Queues) joinQueue(ctx context.Context, product, buyer string, now time.Time) (shardstock.QueuePlace, error) {
	var q shardstock.QueuePlace
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return q, err
	}
	defer tx.Rollback()
	var mode string
	var joined int64
	var drawn int
	// The line's row first, locked: joins of one line, its draw and its
	// rebase take turns (SQLite's transactions are IMMEDIATE: they take
	// turns anyway).
	if err := tx.QueryRowContext(ctx, `SELECT mode, joined, drawn, version FROM queue_lines WHERE product_id = ?`+s.forUpdate(), product).Scan(&mode, &joined, &drawn, &q.LineVersion); err != nil {
		return q, err
	}
	var at int64
	switch err := tx.QueryRowContext(ctx, `SELECT position, joined_at FROM queue_places WHERE product_id = ? AND buyer = ?`, product, buyer).Scan(&q.Position, &at); {
	case err == nil:
		q.JoinedAt = time.UnixMilli(at).UTC()
		return q, tx.Commit()
	case !errors.Is(err, sql.ErrNoRows):
		return q, err
	}
	count := `UPDATE queue_lines SET lobby = lobby + 1 WHERE product_id = ?`
	if mode == string(shardstock.QueueFIFO) || drawn == 1 {
		q.Position = joined + 1
		count = `UPDATE queue_lines SET joined = joined + 1 WHERE product_id = ?`
	}
	if _, err := tx.ExecContext(ctx, count, product); err != nil {
		return q, err
	}
	q.JoinedAt = now.UTC().Truncate(time.Millisecond)
	if _, err := tx.ExecContext(ctx, `INSERT INTO queue_places (product_id, buyer, position, joined_at) VALUES (?, ?, ?, ?)`,
		product, buyer, q.Position, q.JoinedAt.UnixMilli()); err != nil {
		return q, err
	}
	return q, tx.Commit()
}

// QueuePlace returns buyer's place in product's line.
// LineVersion is the line's version as read with it.
func (s *Queues) QueuePlace(ctx context.Context, product, buyer string) (shardstock.QueuePlace, bool, error) {
	var q shardstock.QueuePlace
	var at int64
	err := s.reads.QueryRowContext(ctx, `SELECT p.position, p.joined_at, l.version FROM queue_places p JOIN queue_lines l ON l.product_id = p.product_id
		WHERE p.product_id = ? AND p.buyer = ?`, product, buyer).Scan(&q.Position, &at, &q.LineVersion)
	if errors.Is(err, sql.ErrNoRows) {
		return q, false, nil
	}
	if err != nil {
		return q, false, fmt.Errorf("queue place: %w", err)
	}
	q.JoinedAt = time.UnixMilli(at).UTC()
	return q, true, nil
}

// DrawQueue places the lobby of product's draw line, once: places 1 to n
// in the order shuffle leaves the buyers (sorted before it), the line
// marked drawn at now() as the places are written, and its version moved on; n, or -1 when it was drawn
// already. The places are written drawChunk at a time (a
// lobby of 50,000 took MariaDB 8.8 s one row at a time).
func (s *Queues) DrawQueue(ctx context.Context, product string, now func() time.Time, shuffle func([]string)) (int64, error) {
	n, err := s.drawQueue(ctx, product, now, shuffle)
	if err != nil {
		return 0, fmt.Errorf("draw queue: %w", err)
	}
	return n, nil
}

const drawChunk = 500

func (s *Queues) drawQueue(ctx context.Context, product string, now func() time.Time, shuffle func([]string)) (int64, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	var drawn int
	if err := tx.QueryRowContext(ctx, `SELECT drawn FROM queue_lines WHERE product_id = ?`+s.forUpdate(), product).Scan(&drawn); err != nil {
		return 0, err
	}
	if drawn == 1 {
		return -1, nil
	}
	rows, err := tx.QueryContext(ctx, `SELECT buyer FROM queue_places WHERE product_id = ? AND position = 0 ORDER BY buyer`, product)
	if err != nil {
		return 0, err
	}
	var lobby []string
	for rows.Next() {
		var b string
		if err := rows.Scan(&b); err != nil {
			rows.Close()
			return 0, err
		}
		lobby = append(lobby, b)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	shuffle(lobby)
	for from := 0; from < len(lobby); from += drawChunk {
		chunk := lobby[from:min(from+drawChunk, len(lobby))]
		var q strings.Builder
		args := make([]any, 0, 3*len(chunk)+1)
		q.WriteString(`UPDATE queue_places SET position = CASE buyer`)
		for i, b := range chunk {
			q.WriteString(` WHEN ? THEN ?`)
			args = append(args, b, from+i+1)
		}
		q.WriteString(` END WHERE product_id = ? AND buyer IN (?` + strings.Repeat(`, ?`, len(chunk)-1) + `)`)
		args = append(args, product)
		for _, b := range chunk {
			args = append(args, b)
		}
		if _, err := tx.ExecContext(ctx, q.String(), args...); err != nil {
			return 0, err
		}
	}
	if _, err := tx.ExecContext(ctx, `UPDATE queue_lines SET drawn = 1, drawn_at = ?, joined = ?, lobby = 0, version = version + 1 WHERE product_id = ?`,
		now().UnixMilli(), len(lobby), product); err != nil {
		return 0, err
	}
	return int64(len(lobby)), tx.Commit()
}

// RevokeQueue records that buyer's place in product's line admits nobody.
func (s *Queues) RevokeQueue(ctx context.Context, product, buyer string) error {
	_, err := s.exec(ctx, `INSERT INTO queue_revoked (product_id, buyer, revoked_at) VALUES (?, ?, ?)`, product, buyer, time.Now().UnixMilli())
	if err != nil && !isDuplicate(err) {
		return fmt.Errorf("revoke: %w", err)
	}
	return nil
}

// QueueRevoked returns the revoked buyers per product.
func (s *Queues) QueueRevoked(ctx context.Context) (map[string]map[string]bool, error) {
	rows, err := s.reads.QueryContext(ctx, `SELECT product_id, buyer FROM queue_revoked`)
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
func (s *Queues) QueueSecret(ctx context.Context) ([]byte, error) {
	b := make([]byte, 32)
	rand.Read(b)
	_, err := s.db.ExecContext(ctx, `INSERT INTO catalog_meta (name, value) VALUES ('queue_secret', ?)`, hex.EncodeToString(b))
	if err != nil && !isDuplicate(err) {
		return nil, fmt.Errorf("queue secret: %w", err)
	}
	var v string
	if err := s.writes.QueryRowContext(ctx, `SELECT value FROM catalog_meta WHERE name = 'queue_secret'`).Scan(&v); err != nil {
		return nil, fmt.Errorf("queue secret: %w", err)
	}
	return hex.DecodeString(v)
}
