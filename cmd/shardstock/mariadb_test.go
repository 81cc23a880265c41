package main

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shardstock/shardstock"
	"github.com/shardstock/shardstock/config"
	"github.com/shardstock/shardstock/shard/shardtest"
	"github.com/shardstock/shardstock/sqlstore"
)

// TestMariaDBGrantsNoMoreThanNeeded (issue 15, item 1), against the MariaDB
// deploy/mariadb.sh started: the application's user can write no file on
// the server (no FILE privilege, and files are confined to DIR/files
// anyway) and reach no other database; the test user reaches only t_* and
// e2e_* databases; the application's user logs in over TLS only; the once
// well-known password no longer logs in; the
// passwords are in 0600 files; and mariadbd does not run as root.
func TestMariaDBGrantsNoMoreThanNeeded(t *testing.T) {
	app := service(t, "SHARDSTOCK_TEST_MYSQL_APP")
	test := service(t, "SHARDSTOCK_TEST_MYSQL")
	dir := service(t, "SHARDSTOCK_MARIADB_DIR")
	ctx := context.Background()
	open := func(dsn string) testDB { return openDB(t, dsn, nil) }
	cas, err := config.ReadCAs(service(t, "SHARDSTOCK_TEST_MYSQL_CA"))
	if err != nil {
		t.Fatal(err)
	}
	a := openDB(t, app, cas)
	if _, err := a.Query(ctx, "SELECT 1"); err != nil {
		t.Fatalf("the application's user cannot log in (over TLS): %v", err)
	}
	// The application's user must use TLS (REQUIRE SSL): in plaintext its
	// password logs in to nothing.
	if !strings.HasSuffix(app, "?tls=true") {
		t.Fatalf("deploy/mariadb.sh dsn %q: want ?tls=true", app)
	}
	if plain, _, err := sqlstore.Connect(strings.TrimSuffix(app, "?tls=true"), nil); err == nil {
		err = plain.PingContext(ctx)
		plain.Close()
		if err == nil {
			t.Error("the application's user logs in without TLS")
		}
	}
	outfile := filepath.Join(os.TempDir(), "shardstock-outfile-probe")
	os.Remove(outfile)
	refused := map[string]string{
		"write a file on the server":   "SELECT 'x' INTO OUTFILE '" + outfile + "'",
		"create another database":      "CREATE DATABASE shardstock_probe",
		"read the server's user table": "SELECT COUNT(*) FROM mysql.user",
		"grant itself more":            "GRANT ALL ON *.* TO 'shardstock'@'127.0.0.1'",
	}
	for what, stmt := range refused {
		if err := a.Exec(ctx, stmt); err == nil {
			t.Errorf("the application's user may %s (%s)", what, stmt)
		}
	}
	if _, err := os.Stat(outfile); err == nil {
		t.Fatalf("INTO OUTFILE wrote %s", outfile)
	}
	tu := open(test)
	if err := tu.Exec(ctx, "SELECT 'x' INTO OUTFILE '"+outfile+"'"); err == nil {
		t.Error("the test user may write a file on the server")
	}
	if err := tu.Exec(ctx, "CREATE DATABASE shardstock_probe"); err == nil {
		tu.Exec(ctx, "DROP DATABASE shardstock_probe")
		t.Error("the test user may create a database outside t_* and e2e_*")
	}
	if err := tu.Exec(ctx, "CREATE DATABASE e2e_grants_probe"); err != nil {
		t.Errorf("the test user cannot create its own databases: %v", err)
	}
	tu.Exec(ctx, "DROP DATABASE e2e_grants_probe")
	host := strings.TrimSuffix(app[strings.Index(app, "@tcp("):], "?tls=true")
	if old, _, err := sqlstore.Connect("mysql://shardstock:shardstock"+host+"?tls=true", cas); err == nil {
		err := old.PingContext(ctx)
		old.Close()
		if err == nil {
			t.Error("shardstock/shardstock still logs in")
		}
	}
	for _, f := range []string{"shardstock.password", "shardstock_test.password"} {
		st, err := os.Stat(filepath.Join(dir, f))
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, mode %v; want 0600", f, err, st.Mode().Perm())
		}
	}
	if os.Geteuid() == 0 {
		pid, err := os.ReadFile(filepath.Join(dir, "db", "mariadb.pid"))
		if err != nil {
			t.Fatal(err)
		}
		status, err := os.ReadFile("/proc/" + strings.TrimSpace(string(pid)) + "/status")
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(status), "\n") {
			if strings.HasPrefix(line, "Uid:") && strings.Fields(line)[1] == "0" {
				t.Fatalf("mariadbd runs as root: %s", line)
			}
		}
	}
}

// TestMariaDBOverTLS (issue 15, item 9): the deploy script's MariaDB speaks
// TLS with a CA it made; a DSN with ?tls=true verified against that CA
// connects over TLS (the session has a cipher), the coordinator writes its
// orders that way, and without the CA the server is not trusted.
func TestMariaDBOverTLS(t *testing.T) {
	ca := service(t, "SHARDSTOCK_TEST_MYSQL_CA")
	dsn := freshMySQL(t) + "?tls=true"
	pool, err := config.ReadCAs(ca)
	if err != nil {
		t.Fatal(err)
	}
	s := openDB(t, dsn, pool)
	rows, err := s.Query(context.Background(), "SELECT VARIABLE_VALUE FROM information_schema.SESSION_STATUS WHERE VARIABLE_NAME = 'Ssl_cipher'")
	if err != nil || len(rows) != 1 || rows[0][0] == "" {
		t.Fatalf("the session's TLS cipher: %v %v", rows, err)
	}
	t.Logf("connected over TLS: %s", rows[0][0])
	untrusting, _, err := sqlstore.Connect(dsn, nil)
	if err == nil {
		err = untrusting.PingContext(context.Background())
		untrusting.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("without the CA: %v, want a certificate error", err)
	}
	r := shardtest.Start(t, 3)
	m := startServer(t, r.URLs(), func(c *config.Config) { c.DB, c.DBCAs = dsn, pool })
	putProduct(t, m.URL(), "tlsdb", `{"stock":5}`)
	purchase(t, m.URL(), "tlsdb", "alice")
	waitFor(t, 20*time.Second, "the order written over TLS", func() (bool, string) {
		c := statusCounts(t, m, "tlsdb")
		return c[shardstock.StatusAwaitingPayment] == 1, fmt.Sprint(c)
	})
}

// TestMariaDBLeavesOthersDirectoriesAlone (issue 25, item 3): deploy/mariadb.sh
// started as root changes the mode of no directory it did not make (it used
// to open every parent of its data dir to others, turning a clone's /root
// from 700 into 701), and the database answers all the same: under DIR/db
// when the database's user can reach DIR, and otherwise in a directory made
// for it outside the operator's tree, which DIR/db links to. The passwords
// stay root's, 0600, in DIR.
func TestMariaDBLeavesOthersDirectoriesAlone(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("deploy/mariadb.sh changes users and owners only as root")
	}
	if _, err := exec.LookPath("mariadbd"); err != nil {
		if os.Getenv("SHARDSTOCK_TEST_REQUIRE_ALL") == "1" {
			t.Fatal("mariadbd is not installed (deploy/mariadb.sh install)")
		}
		t.Skip("mariadbd is not installed (deploy/mariadb.sh install)")
	}
	for _, c := range []struct {
		name   string
		home   os.FileMode // the mode of the operator's directory the clone is in
		linked bool        // whether DIR/db is a link out of the operator's tree
	}{
		{"a home closed to others, like /root", 0o700, true},
		{"a home open to others", 0o755, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			// Not t.TempDir(): its parent is 0700.
			home, err := os.MkdirTemp("", "shardstock-home-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(home) })
			clone := filepath.Join(home, "clone")
			if err := os.Chmod(home, c.home); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(clone, 0o755); err != nil {
				t.Fatal(err)
			}
			before := directoryModes(t, clone)
			dir, port := filepath.Join(clone, "run", "mariadb"), strings.Split(freeAddr(t), ":")[1]
			script := func(args ...string) string { return mariadbScript(t, dir, port, args...) }
			t.Cleanup(func() { script("remove") })
			out := script("start")
			if after := directoryModes(t, clone); !maps.Equal(before, after) {
				t.Errorf("directories the script did not make changed:\nbefore %v\nafter  %v", before, after)
			}
			own, err := filepath.EvalSymlinks(filepath.Join(dir, "db"))
			if err != nil {
				t.Fatal(err)
			}
			if linked := !strings.HasPrefix(own, home+"/"); linked != c.linked || !strings.Contains(out, own) {
				t.Errorf("the database's own directory is %s (linked out of %s: %v, want %v); start said %q", own, home, linked, c.linked, out)
			}
			if m := modeAndOwner(t, own); m != "drwx------ shardstock-db" {
				t.Errorf("the database's own directory %s: %s; want drwx------ shardstock-db", own, m)
			}
			for f, want := range map[string]string{"": "drwx--x--x root", "shardstock.password": "-rw------- root", "shardstock_test.password": "-rw------- root"} {
				if m := modeAndOwner(t, filepath.Join(dir, f)); m != want {
					t.Errorf("DIR/%s: %s, want %s", f, m, want)
				}
			}
			cas, err := config.ReadCAs(strings.TrimSpace(script("ca")))
			if err != nil {
				t.Fatal(err)
			}
			db := openDB(t, strings.TrimSpace(script("dsn")), cas)
			if rows, err := db.Query(context.Background(), "SELECT CURRENT_USER()"); err != nil || len(rows) != 1 {
				t.Fatalf("the application's user cannot log in: %v %v", rows, err)
			}
			if status := script("status"); !strings.Contains(status, "mariadb up") {
				t.Fatalf("status: %q", status)
			}
		})
	}
}

// mariadbScript runs deploy/mariadb.sh with DIR and PORT and returns what
// it printed.
func mariadbScript(t *testing.T, dir, port string, args ...string) string {
	t.Helper()
	cmd := exec.Command("bash", append([]string{filepath.Join(repoRoot(t), "deploy", "mariadb.sh")}, args...)...)
	cmd.Env = append(os.Environ(), "SHARDSTOCK_MARIADB_DIR="+dir, "SHARDSTOCK_MARIADB_PORT="+port)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("mariadb.sh %v: %v\n%s", args, err, out)
	}
	if args[0] != "dsn" { // (a password)
		t.Logf("mariadb.sh %v: %s", args, strings.TrimSpace(string(out)))
	}
	return strings.TrimSpace(string(out))
}

// directoryModes maps dir and every directory on the way to it to its mode
// and owner.
func directoryModes(t *testing.T, dir string) map[string]string {
	modes := map[string]string{}
	for p := dir; ; p = filepath.Dir(p) {
		modes[p] = modeAndOwner(t, p)
		if p == "/" {
			return modes
		}
	}
}

// modeAndOwner describes a file as ls does: "drwx------ root".
func modeAndOwner(t *testing.T, path string) string {
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	uid := fmt.Sprint(st.Sys().(*syscall.Stat_t).Uid)
	if u, err := user.LookupId(uid); err == nil {
		uid = u.Username
	}
	return fmt.Sprintf("%v %s", st.Mode(), uid)
}

// TestPaymentWaitsOutALockConflict: a payment whose UPDATE MariaDB rolls
// back for a lock conflict (here a lock wait timeout of 1 s behind another
// transaction holding the order's row for 1.5 s; in the chaos run, a
// deadlock with an order batch) is tried again and lands, instead of
// answering the buyer 503.
func TestPaymentWaitsOutALockConflict(t *testing.T) {
	dsn := freshMySQL(t)
	store, err := sqlstore.Open(dsn + "?innodb_lock_wait_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	ctx := context.Background()
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	ev := shardstock.ReservationEvent{ID: "01M8TVK5JNTY48244KRZ4MVVN0", UserID: "alice", ProductID: "lamp", Shard: 1, AtMS: now.UnixMilli()}
	if _, err := store.Orders.Insert(ctx, ev, 1, shardstock.StatusAwaitingPayment, now, now.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	other := openDB(t, dsn, nil)
	tx, err := other.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, `SELECT id FROM orders WHERE id = ? FOR UPDATE`, ev.ID); err != nil {
		t.Fatal(err)
	}
	released := make(chan error, 1)
	go func() { time.Sleep(1500 * time.Millisecond); released <- tx.Commit() }()
	changed, err := store.Orders.Transition(ctx, ev.ID, ev.UserID, shardstock.StatusPaid, time.Now())
	if err != nil || !changed {
		t.Fatalf("pay behind a lock held past the lock wait timeout: changed %v, %v", changed, err)
	}
	if err := <-released; err != nil {
		t.Fatal(err)
	}
	if o, err := store.Orders.Order(ctx, ev.ID); err != nil || o.Status != shardstock.StatusPaid {
		t.Fatalf("order after the payment: %+v %v", o, err)
	}
}
