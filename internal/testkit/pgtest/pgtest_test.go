package pgtest

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func TestMain(m *testing.M) { Main(m) }

func TestDatabasesAreSeparateAndUseTheTrickyPassword(t *testing.T) {
	srv := Shared(t)
	a, b := srv.NewDatabase(t), srv.NewDatabase(t)
	if a == b {
		t.Fatalf("two tests' databases share a URL: %s", a)
	}
	u, err := url.Parse(a)
	if err != nil {
		t.Fatal(err)
	}
	if pw, _ := u.User.Password(); pw != Password && srv.cmd != nil {
		t.Fatalf("the started server's URL carries password %q, want the one with ?/@:%%", pw)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ca, err := pgx.Connect(ctx, a)
	if err != nil {
		t.Fatalf("connect with the escaped password: %v", err)
	}
	defer ca.Close(ctx)
	if _, err := ca.Exec(ctx, "CREATE TABLE only_in_a (x int)"); err != nil {
		t.Fatal(err)
	}
	cb, err := pgx.Connect(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	defer cb.Close(ctx)
	var n int
	if err := cb.QueryRow(ctx, "SELECT count(*) FROM pg_tables WHERE tablename = 'only_in_a'").Scan(&n); err != nil || n != 0 {
		t.Fatalf("table of database a visible in b: n=%d err=%v", n, err)
	}
	var user string
	if err := ca.QueryRow(ctx, "SELECT current_user").Scan(&user); err != nil {
		t.Fatal(err)
	}
	if srv.cmd != nil && user != User {
		t.Fatalf("connected as %q, want %q", user, User)
	}
}

func TestWrongPasswordIsRefused(t *testing.T) {
	srv := Shared(t)
	if srv.cmd == nil {
		t.Skip("server named by " + EnvURL)
	}
	u, _ := url.Parse(srv.AdminURL())
	u.User = url.UserPassword(User, strings.TrimSuffix(Password, "s"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if c, err := pgx.Connect(ctx, u.String()); err == nil {
		c.Close(ctx)
		t.Fatal("a wrong password was accepted: authentication is not checked, so the password handling is not exercised")
	}
}

func TestDatabaseName(t *testing.T) {
	seen := map[string]bool{}
	for i := 0; i < 100; i++ {
		n := DatabaseName(t)
		if len(n) > 63 || seen[n] || strings.Trim(n, "abcdefghijklmnopqrstuvwxyz0123456789_") != "" {
			t.Fatalf("bad or repeated name %q", n)
		}
		seen[n] = true
	}
}

// SINK_TEST_POSTGRES_URL names a server to use instead of starting one:
// here the shared server's own URL.
func TestExistingServerFromEnvironment(t *testing.T) {
	srv := Shared(t)
	t.Setenv(EnvURL, srv.AdminURL())
	ext, skip, err := start(context.Background())
	if err != nil || skip || ext.cmd != nil {
		t.Fatalf("start with %s set: skip=%v err=%v started=%v", EnvURL, skip, err, ext != nil && ext.cmd != nil)
	}
	db := ext.NewDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatalf("database of the named server: %v", err)
	}
	defer c.Close(ctx)
	ext.Close() // leaves a named server alone
	if err := c.Ping(ctx); err != nil {
		t.Fatalf("Close stopped a server it did not start: %v", err)
	}
}

// Pause freezes the backends of open connections too, not only the
// postmaster (PostgreSQL's children leave its process group with
// setsid()): a statement on a connection opened before the pause gets no
// answer until Resume.
func TestPauseFreezesOpenConnections(t *testing.T) {
	srv := Private(t)
	if srv.cmd == nil {
		t.Skip("an existing server: pgtest does not pause it")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, srv.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var one int
	if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
		t.Fatal(err)
	}
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	kids := children(srv.cmd.Process.Pid)
	if len(kids) == 0 {
		t.Fatal("the postmaster has no children: the test looks at the wrong process")
	}
	for _, k := range append(kids, srv.cmd.Process.Pid) {
		if _, st, ok := procStat(k); ok && st != 'T' && st != 't' {
			t.Errorf("process %d is in state %c after Pause, want stopped", k, st)
		}
	}
	qctx, qcancel := context.WithTimeout(ctx, 500*time.Millisecond)
	err = conn.QueryRow(qctx, "SELECT 2").Scan(&one)
	qcancel()
	if err == nil {
		t.Errorf("a statement on an open connection was answered while the server was paused")
	}
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	c2, err := pgx.Connect(ctx, srv.NewDatabase(t))
	if err != nil {
		t.Fatalf("after Resume: %v", err)
	}
	defer c2.Close(context.Background())
	if err := c2.QueryRow(ctx, "SELECT 3").Scan(&one); err != nil || one != 3 {
		t.Fatalf("after Resume: %d, %v", one, err)
	}
}
