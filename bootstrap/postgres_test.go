package bootstrap

import (
	"bytes"
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/fx"

	"github.com/sink-io/sink/adapters/postgres"
	"github.com/sink-io/sink/application"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/internal/testkit"
	"github.com/sink-io/sink/internal/testkit/pgtest"
	"github.com/sink-io/sink/ports"
)

func pgConfig(t *testing.T, env map[string]string) Config {
	t.Helper()
	full := testkit.Env("SINK_SHUTDOWN_TIMEOUT", "20s")
	for k, v := range env {
		full[k] = v
	}
	cfg, err := LoadConfig(full)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func assertNoPGPassword(t *testing.T, what, out string) {
	t.Helper()
	for _, f := range append([]string{"%zz", "%4"}, append(pgtest.Fragments, trickyFragments...)...) {
		if strings.Contains(out, f) {
			t.Errorf("%s shows %q, a part of the password:\n%s", what, f, out)
		}
	}
	for _, enc := range []string{url.QueryEscape(pgtest.Password), url.PathEscape(pgtest.Password), url.QueryEscape(trickyPassword)} {
		if strings.Contains(out, enc) {
			t.Errorf("%s shows the encoded password:\n%s", what, out)
		}
	}
}

// Start-up with passwords holding '?', '/', '@', ':' and '%' prints no part
// of them: not at assembly, not in the start-up error, not in the logs,
// not in the storage's health (ping) answers; also with the right password
// against a real server, and a wrong one.
func TestPostgresPasswordsNeverLeak(t *testing.T) {
	srv := pgtest.Shared(t)
	db := srv.NewDatabase(t)
	good, _ := url.Parse(db)
	wrong := *good
	wrong.User = url.UserPassword(pgtest.User, trickyPassword)
	const down = "@127.0.0.1:1/db?sslmode=disable&connect_timeout=1"
	cases := map[string]struct {
		url   string
		start bool // start-up succeeds
	}{
		"right password, real server": {good.String(), true},
		"wrong password, real server": {wrong.String(), false},
		"percent-encoded, down":       {"postgres://sink:" + url.QueryEscape(trickyPassword) + down, false},
		"path-encoded, down":          {"postgres://sink:" + url.PathEscape(trickyPassword) + down, false},
		"encoded user and password":   {"postgres://" + url.QueryEscape("Zp4t@Lc6n") + ":" + url.QueryEscape(trickyPassword) + down, false},
		"raw ?":                       {"postgres://sink:Qj7r?Vw3k" + down, false},
		"raw /":                       {"postgres://sink:Qj7r/Vw3k" + down, false},
		"raw @":                       {"postgres://sink:Qj7r@Vw3k" + down, false},
		"raw :":                       {"postgres://sink:Qj7r:Vw3k" + down, false},
		"raw %":                       {"postgres://sink:Qj7r%zzVw3k" + down, false},
		"raw % escape":                {"postgres://sink:Qj7r%4" + down, false},
		"all raw":                     {"postgres://sink:" + trickyPassword + down, false},
		"bad port, raw %":             {"postgres://sink:Qj7r%zzVw3k@127.0.0.1:notaport/db", false},
		"key=value":                   {"host=127.0.0.1 port=1 user=sink password='" + trickyPassword + "' connect_timeout=1 sslmode=disable", false},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			cfg := pgConfig(t, map[string]string{"SINK_POSTGRES_URL": c.url, "SINK_HTTP_ADDRESS": "off"})
			var logs testkit.LockedBuffer
			log := NewLogger(cfg, &logs)
			var st ports.Storage
			app, err := New(cfg, log, fx.Populate(&st))
			if err != nil {
				assertNoPGPassword(t, "assembly error", err.Error())
				assertNoPGPassword(t, "logs", logs.String())
				if c.start {
					t.Fatalf("assembly: %v", err)
				}
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			err = app.Start(ctx)
			if c.start {
				if err != nil {
					t.Fatalf("start-up: %v", err)
				}
				if perr := st.Ping(ctx); perr != nil {
					t.Fatalf("ping: %v", perr)
				}
				res := st.Write(ctx, []ports.WriteOp{{Kind: ports.WritePut, Address: domain.Address{Namespace: "n", Dataset: "d", Key: domain.StringKey("k")},
					Document: domain.Document{ContentType: domain.ContentTypeJSON, Data: []byte(`{}`)}}})
				if res[0].Err != nil {
					t.Fatalf("write: %v", res[0].Err)
				}
				if err := app.Stop(ctx); err != nil {
					t.Fatal(err)
				}
				// The pool is closed: the storage now fails, without the password.
				perr := st.Ping(ctx)
				if perr == nil {
					t.Fatal("ping after stop succeeded")
				}
				assertNoPGPassword(t, "ping after stop", perr.Error())
				assertNoPGPassword(t, "logs", logs.String())
				if !strings.Contains(logs.String(), "serving from PostgreSQL") {
					t.Fatalf("no start-up log: %s", logs.String())
				}
				return
			}
			if err == nil {
				_ = app.Stop(ctx)
				t.Fatal("start-up succeeded")
			}
			assertNoPGPassword(t, "start-up error", err.Error())
			if !strings.Contains(err.Error(), "cannot connect to PostgreSQL at 127.0.0.1:") {
				t.Errorf("start-up error does not name the host: %s", err)
			}
			// The health monitor's answer for a down database is the store's ping error.
			conn, cerr := postgres.NewConnection(postgres.ConnectionConfig{URL: c.url})
			if cerr != nil {
				t.Fatalf("the URL was taken for the app but not here: %v", cerr)
			}
			defer func() { _ = conn.Stop(ctx) }()
			s, _, serr := newStorages(cfg, log, &mongoConn{}, &pgConn{conn: conn}, nil)
			if serr != nil {
				t.Fatal(serr)
			}
			perr := s.Ping(ctx)
			if perr == nil {
				t.Fatal("ping succeeded")
			}
			assertNoPGPassword(t, "health (ping) error", perr.Error())
			r := s.Read(ctx, []domain.Address{{Namespace: "n", Dataset: "d", Key: domain.StringKey("k")}})
			if want := map[bool]domain.Code{true: domain.CodeUnauthenticated, false: domain.CodeUnavailable}[strings.HasPrefix(name, "wrong")]; r[0].Err == nil || domain.CodeOf(r[0].Err) != want {
				t.Fatalf("read: %+v, want %s", r[0], want)
			}
			assertNoPGPassword(t, "read error", r[0].Err.Error())
			assertNoPGPassword(t, "logs", logs.String())
		})
	}
}

// PostgreSQL and MongoDB in one process serve two stores, so they need
// two names.
func TestPostgresAndMongoNeedStoresOfTheirOwn(t *testing.T) {
	_, err := LoadConfig(testkit.Env("SINK_POSTGRES_URL", "postgres://127.0.0.1:1/x", "SINK_MONGODB_URI", "mongodb://127.0.0.1:1/"))
	if err == nil || !strings.Contains(err.Error(), `SINK_STORE="primary": that store is served by mongodb already`) {
		t.Fatalf("both URLs on one store: %v", err)
	}
	if _, err := LoadConfig(testkit.Env("SINK_POSTGRES_URL", "postgres://127.0.0.1:1/x", "SINK_MONGODB_URI", "mongodb://127.0.0.1:1/",
		"SINK_POSTGRES_STORE", "pg")); err != nil {
		t.Fatalf("both URLs with a store each: %v", err)
	}
}

// TestPostgresStorageEndToEnd starts Sink against PostgreSQL: the storage
// is the PostgreSQL store, a merge reaches a legacy row of a bound table
// (inserted by plain SQL) and keeps the table's shape, and stopping Sink
// closes the pool.
func TestPostgresStorageEndToEnd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db := pgtest.Shared(t).NewDatabase(t)
	admin, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, `CREATE TABLE orders (id bigint PRIMARY KEY, body jsonb NOT NULL, placed timestamptz DEFAULT now());
INSERT INTO orders (id, body) VALUES (1, '{"qty": 1, "note": "old"}')`); err != nil {
		t.Fatal(err)
	}
	cfg := pgConfig(t, map[string]string{
		"SINK_POSTGRES_URL":       db,
		"SINK_POSTGRES_STORE":     "pg",
		"SINK_POSTGRES_POOL_SIZE": "4",
		"SINK_POSTGRES_BINDINGS":  `[{"namespace":"shop","dataset":"orders","schema":"public","table":"orders","key_column":"id","key_type":"bigint","document_column":"body","document_type":"jsonb"}]`,
	})
	var (
		svc     *application.Service
		storage ports.Storage
	)
	var logs bytes.Buffer
	app, err := New(cfg, NewLogger(cfg, &logs), fx.Populate(&svc, &storage))
	if err != nil {
		t.Fatal(err)
	}
	if err := app.Start(ctx); err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = app.Stop(ctx)
		}
	}()
	ps, ok := storage.(*postgres.Store)
	if !ok {
		t.Fatalf("storage is %T", storage)
	}
	if ps.ReadsBackWrites() {
		t.Fatal("a store with a jsonb binding claims to read back exactly what it wrote")
	}
	a := domain.Address{Store: "pg", Namespace: "shop", Dataset: "orders", Key: domain.Int64Key(1)}
	res, err := svc.Write(ctx, []domain.Mutation{{Kind: domain.MutationMerge, Address: a, Merge: domain.MergeIntent{
		Profile: "merge-patch",
		Intent:  domain.Document{ContentType: domain.ContentTypeJSON, Data: []byte(`{"qty":5,"note":null,"tags":["x"]}`)},
	}}}, application.WaitUntilApplied)
	if err != nil || res[0].Status != application.StatusApplied {
		t.Fatalf("merge: %v %+v", err, res)
	}
	var body string
	var placed *time.Time
	if err := admin.QueryRow(ctx, "SELECT body::text, placed FROM orders WHERE id = 1").Scan(&body, &placed); err != nil {
		t.Fatal(err)
	}
	if body != `{"qty": 5, "tags": ["x"]}` || placed == nil {
		t.Fatalf("row after the merge: body %s placed %v", body, placed)
	}
	reads, err := svc.Read(ctx, []domain.Address{a})
	if err != nil || reads[0].Status != application.StatusFound || reads[0].Record.Revision != res[0].Revision {
		t.Fatalf("read: %v %+v", err, reads)
	}
	if err := app.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	stopped = true
	if err := storage.Ping(ctx); err == nil {
		t.Fatal("ping after stop succeeded: the pool is still open")
	}
}
