package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shardstock/shardstock"
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
	cas, err := readCAs(service(t, "SHARDSTOCK_TEST_MYSQL_CA"))
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
		pid, err := os.ReadFile(filepath.Join(dir, "mariadb.pid"))
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
	pool, err := readCAs(ca)
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
	m := startServer(t, r.URLs(), func(c *Config) { c.DB, c.DBCAs = dsn, pool })
	putProduct(t, m.URL(), "tlsdb", `{"stock":5}`)
	purchase(t, m.URL(), "tlsdb", "alice")
	waitFor(t, 20*time.Second, "the order written over TLS", func() (bool, string) {
		c := statusCounts(t, m, "tlsdb")
		return c[shardstock.StatusAwaitingPayment] == 1, fmt.Sprint(c)
	})
}
