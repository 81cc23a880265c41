// Package sqlstore is the SQL adapter: every table of the app on SQLite
// (embedded) or MariaDB/MySQL, and the schema migrations. A Store is the
// connections; each role the tables play is a type of its own, in a file of
// its own (Catalog, Controls, Orders, Transfers, ShardLog, Queues, Reports,
// Sessions), and each port of the services to SQL is filled by one of them
// (ports_test.go lists which). It imports only the domain (package
// shardstock).
package sqlstore

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Store is the SQL database of the app, on SQLite (embedded) or
// MySQL/MariaDB: the connections and the schema (Open, Migrate, Close), and
// one type per role the tables play, each in a file of its own and each
// filling the ports of that role. Safe for concurrent use.
type Store struct {
	*core
	Catalog   *Catalog   // the product definitions, and the shards each is initialised on (catalog.go)
	Controls  *Controls  // what operators change: pause, window, archive (controls.go)
	Orders    *Orders    // the order table, payments' transaction ids (orders.go)
	Transfers *Transfers // the stock log: transfers, stock changes, idempotency keys (transfers.go)
	ShardLog  *ShardLog  // what is on record of each shard: drains, resyncs, the catalog's id (shards.go)
	Queues    *Queues    // the waiting rooms' lines and places (queue.go)
	Reports   *Reports   // the sale report's per-second counts (report.go)
	Sessions  *Sessions  // the sale sessions (sessions.go)
}

// The roles: each holds the connections, and nothing else.
type (
	Catalog   struct{ *core }
	Controls  struct{ *core }
	Orders    struct{ *core }
	Transfers struct{ *core }
	ShardLog  struct{ *core }
	Queues    struct{ *core }
	Reports   struct{ *core }
	Sessions  struct{ *core }
)

// core is the connections every role uses.
type core struct {
	db *sql.DB
	// read serves the plain reads (no transaction, nothing written first in
	// the same call). On SQLite it is a pool of read-only connections of
	// its own: WAL lets them read the last commit while the one writer
	// connection (db) is busy, so a buyer's order lookup or the product
	// controls every coordinator polls (the kill switch) never queue
	// behind order writes, nor behind another process's write lock. On
	// MySQL it is db.
	read    *sql.DB
	dialect string // "sqlite" or "mysql"
	batch   *batchStmts
	// reads and writes run plain statements on read and db, prepared
	// once (stmtcache.go)
	reads, writes *stmtDB
}

// Open connects to "sqlite:PATH" or "mysql://user:pass@tcp(host:port)/db".
// It does not migrate; call Migrate.
func Open(dsn string) (*Store, error) { return OpenTLS(dsn, nil) }

// OpenTLS is Open with the CA that verifies a MySQL server reached with
// ?tls=true (nil: the system's roots).
func OpenTLS(dsn string, roots *x509.CertPool) (*Store, error) {
	db, dialect, err := Connect(dsn, roots)
	if err != nil {
		return nil, err
	}
	c := &core{db: db, read: db, dialect: dialect, batch: newBatchStmts()}
	if dialect == "sqlite" {
		if c.read, err = openSQLiteReader(strings.TrimPrefix(dsn, "sqlite:")); err != nil {
			db.Close()
			return nil, err
		}
	}
	c.writes, c.reads = newStmtDB(c.db), newStmtDB(c.read)
	if c.read == c.db {
		c.reads = c.writes
	}
	return &Store{core: c, Catalog: &Catalog{c}, Controls: &Controls{c}, Orders: &Orders{c}, Transfers: &Transfers{c},
		ShardLog: &ShardLog{c}, Queues: &Queues{c}, Reports: &Reports{c}, Sessions: &Sessions{c}}, nil
}

// Connect opens the database of dsn (as Open does) and returns it with its
// dialect, "sqlite" or "mysql": what Open wraps, and what tools and tests
// that read the tables themselves use.
func Connect(dsn string, roots *x509.CertPool) (db *sql.DB, dialect string, err error) {
	switch {
	case strings.HasPrefix(dsn, "sqlite:"):
		db, err = openSQLite(strings.TrimPrefix(dsn, "sqlite:"))
		return db, "sqlite", err
	case strings.HasPrefix(dsn, "mysql://"):
		db, err = openMySQL(strings.TrimPrefix(dsn, "mysql://"), roots)
		return db, "mysql", err
	}
	return nil, "", fmt.Errorf("%q: want sqlite:PATH or mysql://user:pass@tcp(host:port)/db", redactDSN(dsn))
}

func openSQLite(path string) (*sql.DB, error) {
	if path == "" {
		return nil, errors.New("sqlite: empty path")
	}
	if err := private(path); err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	// WAL with synchronous=FULL: a committed order survives a machine crash.
	// Transactions begin IMMEDIATE: a batch reads, then writes, and a
	// deferred transaction of a second process sharing the file could only
	// fail SQLITE_BUSY at its first write, without waiting (busy_timeout
	// applies to taking the write lock, which IMMEDIATE does up front).
	// temp_store=MEMORY keeps the statement journal of a multi-row INSERT
	// (what undoes that one statement if it fails inside the batch's
	// transaction) in memory: in a file it cost the order writer a pwrite
	// per page, about a fifth of its CPU per order. It is not a crash
	// journal (the WAL is), so durability is unchanged.
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=temp_store(MEMORY)&_txlock=immediate")
	if err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	db.SetMaxOpenConns(1) // one writer; avoids SQLITE_BUSY between our own connections
	return db, nil
}

// openSQLiteReader opens the read-only pool of a SQLite file (Store.read).
func openSQLiteReader(path string) (*sql.DB, error) {
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_pragma=query_only(1)")
	if err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	db.SetMaxOpenConns(4)
	return db, nil
}

func openMySQL(dsn string, roots *x509.CertPool) (*sql.DB, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("mysql: %w", err)
	}
	if roots != nil && cfg.TLSConfig != "" && cfg.TLSConfig != "false" {
		// tls=true in the DSN, verified against the given CA rather than
		// the system's roots.
		host, _, _ := net.SplitHostPort(cfg.Addr)
		cfg.TLS = &tls.Config{RootCAs: roots, ServerName: host, MinVersion: tls.VersionTLS12,
			ClientSessionCache: tls.NewLRUClientSessionCache(64)}
	}
	cfg.Timeout, cfg.ReadTimeout, cfg.WriteTimeout = 2*time.Second, 10*time.Second, 10*time.Second
	conn, err := mysql.NewConnector(cfg) // (a DSN string would lose cfg.TLS)
	if err != nil {
		return nil, fmt.Errorf("mysql: %w", err)
	}
	db := sql.OpenDB(conn)
	// As many idle connections kept as may be open: database/sql keeps 2 by
	// default, and a busy order writer (a push consumer's concurrent
	// batches) then closed and reopened connections, each a TLS handshake
	// and a login on the server, and its statements prepared again: 566
	// connections in a 35 s full-stack run (make profile-fullstack,
	// 2026-12-07). An idle one is closed after a minute.
	const conns = 32
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	db.SetConnMaxIdleTime(time.Minute)
	return db, nil
}

func redactDSN(dsn string) string {
	if at := strings.LastIndex(dsn, "@"); at > 0 {
		if c := strings.Index(dsn, "://"); c >= 0 {
			return dsn[:c+3] + "***" + dsn[at:]
		}
	}
	return dsn
}

// Dialect is "sqlite" or "mysql".
func (s *Store) Dialect() string { return s.dialect }

// Close closes the database.
func (s *Store) Close() error {
	err := errors.Join(s.batch.close(), s.reads.close(), s.writes.close())
	if s.read != s.db {
		err = errors.Join(err, s.read.Close())
	}
	return errors.Join(err, s.db.Close())
}

// Ping checks the database answers.
func (s *Store) Ping(ctx context.Context) error { return s.db.PingContext(ctx) }

// Migrate applies the embedded migrations (migrations/NNNN_name.sql) not yet
// recorded in schema_migrations, in order. Each statement is idempotent, so
// two processes migrating at once end in the same schema.
func (s *Store) Migrate(ctx context.Context) error {
	var db migrator = s.db
	if s.dialect == "sqlite" {
		// The writer keeps its temporary storage in memory (openSQLite), and
		// with it the sorts of CREATE INDEX: an index a migration makes on a
		// large orders table would sort every row in memory. The migrations
		// run on one connection held for them, with temporary files.
		conn, err := s.db.Conn(ctx)
		if err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
		defer conn.Close()
		if _, err := conn.ExecContext(ctx, `PRAGMA temp_store = FILE`); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
		defer conn.ExecContext(context.WithoutCancel(ctx), `PRAGMA temp_store = MEMORY`)
		db = conn
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version INT NOT NULL PRIMARY KEY, name VARCHAR(200) NOT NULL, applied_at BIGINT NOT NULL)`); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	files, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return err
	}
	sort.Strings(files)
	for _, f := range files {
		if err := s.apply(ctx, db, f); err != nil {
			return err
		}
	}
	return nil
}

// migrator is what the migrations run on: the pool, or one connection of it.
type migrator interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func (s *core) apply(ctx context.Context, db migrator, file string) error {
	name := filepath.Base(file)
	version, err := strconv.Atoi(strings.SplitN(name, "_", 2)[0])
	if err != nil {
		return fmt.Errorf("migration %s: name must start with a number", name)
	}
	var n int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM schema_migrations WHERE version = ?`, version).Scan(&n); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if n > 0 {
		return nil
	}
	src, _ := migrations.ReadFile(file)
	if d := migrationDialect(name); d != "" && d != s.dialect {
		src = nil // another database's migration: recorded, nothing to run
	}
	for _, stmt := range splitSQL(string(src)) {
		if _, err := db.ExecContext(ctx, stmt); err != nil && !isDuplicateColumn(err) {
			return fmt.Errorf("migration %s: %w", name, err)
		}
	}
	_, err = db.ExecContext(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`,
		version, name, time.Now().UnixMilli())
	if err != nil && !isDuplicate(err) {
		return fmt.Errorf("migration %s: record: %w", name, err)
	}
	return nil
}

// migrationDialect is the database a migration is for ("0007_x.mysql.sql":
// mysql), "" when it is for every one.
func migrationDialect(name string) string {
	parts := strings.Split(strings.TrimSuffix(name, ".sql"), ".")
	if len(parts) == 2 {
		return parts[1]
	}
	return ""
}

// splitSQL splits a migration into statements, dropping -- comments.
func splitSQL(src string) []string {
	var b strings.Builder
	for _, line := range strings.Split(src, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "--") {
			b.WriteString(line + "\n")
		}
	}
	var out []string
	for _, st := range strings.Split(b.String(), ";") {
		if st = strings.TrimSpace(st); st != "" {
			out = append(out, st)
		}
	}
	return out
}

// isDuplicateColumn reports an ADD COLUMN of a column that exists: another
// process applied the same migration at the same time (migrations are not
// transactional in MariaDB).
func isDuplicateColumn(err error) bool {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number == 1060
	}
	return strings.Contains(err.Error(), "duplicate column name")
}

// isLockConflict reports a transaction MariaDB/MySQL rolled back or gave up
// on because of a concurrent one (deadlock, lock wait timeout): trying it
// again is the documented remedy.
func isLockConflict(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && (me.Number == 1213 || me.Number == 1205)
}

// exec runs one write statement, again while MariaDB/MySQL rolls it back
// for a lock conflict with a concurrent transaction (a deadlock with an
// order batch, a lock wait timeout): the statement is atomic, so a
// rolled-back try changed nothing, and the conflict is the database's, not
// the caller's (a payment must not answer 503 for it). Up to five tries,
// and none begun after execRetryFor: a lock wait can last the server's
// innodb_lock_wait_timeout (50 s by default), and a buyer's request must
// end well within the HTTP server's write timeout.
func (s *core) exec(ctx context.Context, q string, args ...any) (sql.Result, error) {
	start := time.Now()
	for attempt := 1; ; attempt++ {
		res, err := s.writes.ExecContext(ctx, q, args...)
		if err == nil || !isLockConflict(err) || attempt == 5 || ctx.Err() != nil || time.Since(start) > execRetryFor {
			return res, err
		}
	}
}

// execRetryFor bounds the time in which exec begins another try.
const execRetryFor = 5 * time.Second

// isDuplicate reports a unique-key violation.
func isDuplicate(err error) bool {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number == 1062
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		return se.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE || se.Code() == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY
	}
	return false
}

// private makes the SQLite file at path its owner's alone (it names buyers
// and their orders), creating it and its directory if need be, whatever the
// process's umask. SQLite gives the -wal and -shm files the database file's
// mode; files an older version left open to others are closed here too.
func private(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	f.Close()
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		if fi, err := os.Stat(p); err == nil && fi.Mode().Perm()&0o077 != 0 {
			if err := os.Chmod(p, fi.Mode().Perm()&0o700); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *core) upsert(replace bool) string {
	switch {
	case s.dialect == "mysql" && replace:
		return ` ON DUPLICATE KEY UPDATE n = VALUES(n)`
	case s.dialect == "mysql":
		return ` ON DUPLICATE KEY UPDATE n = n + VALUES(n)`
	case replace:
		return ` ON CONFLICT (product_id, second, kind, label) DO UPDATE SET n = excluded.n`
	}
	return ` ON CONFLICT (product_id, second, kind, label) DO UPDATE SET n = n + excluded.n`
}

// forUpdate locks the rows a MariaDB/MySQL SELECT reads.
func (s *core) forUpdate() string {
	if s.dialect == "mysql" {
		return " FOR UPDATE"
	}
	return ""
}
