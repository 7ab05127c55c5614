package bootstrap

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.uber.org/fx"

	"github.com/sink-io/sink/adapters/memory"
	"github.com/sink-io/sink/adapters/mongodb"
	"github.com/sink-io/sink/application"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/internal/testkit"
	"github.com/sink-io/sink/internal/testkit/mongotest"
	"github.com/sink-io/sink/ports"
)

func mongoConfig(t *testing.T, env map[string]string) Config {
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

func TestMongoStartupFailureNamesHostButNotPassword(t *testing.T) {
	const password = "pa55-w0rd-XYZ"
	// Port 1 on loopback refuses connections.
	uri := "mongodb://sink:" + password + "@127.0.0.1:1/?serverSelectionTimeoutMS=300&connectTimeoutMS=300"
	cfg := mongoConfig(t, map[string]string{"SINK_MONGODB_URI": uri})
	var logs bytes.Buffer
	app, err := New(cfg, NewLogger(cfg, &logs))
	if err != nil {
		t.Fatalf("assemble: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	err = app.Start(ctx)
	if err == nil {
		_ = app.Stop(ctx)
		t.Fatal("start-up succeeded without a database")
	}
	if time.Since(start) > 20*time.Second {
		t.Fatalf("start-up took %s to fail", time.Since(start))
	}
	msg := err.Error()
	if !strings.Contains(msg, "cannot connect to MongoDB at 127.0.0.1:1") {
		t.Fatalf("error does not name the host: %s", msg)
	}
	if strings.Contains(msg, password) || strings.Contains(logs.String(), password) {
		t.Fatalf("the password leaked:\n%s\n%s", msg, logs.String())
	}
}

func TestMalformedMongoURIFailsAssemblyWithoutPassword(t *testing.T) {
	// A malformed URI fails at assembly without echoing the password.
	cfg := mongoConfig(t, map[string]string{"SINK_MONGODB_URI": "mongodb://u:hidden-pw@db:notaport/"})
	_, err := New(cfg, slog.New(slog.DiscardHandler))
	if err == nil || strings.Contains(err.Error(), "hidden-pw") || !strings.Contains(err.Error(), "notaport") {
		t.Fatalf("malformed URI: %v", err)
	}
}

// trickyPasswords hold '?', '/', '@', ':' and '%' between fragments that
// must never appear in any output.
var trickyFragments = []string{"Qj7r", "Vw3k", "Hx8m", "Zp4t", "Lc6n", "Yb2s"}

const trickyPassword = "Qj7r?Vw3k/Hx8m@Zp4t:Lc6n%Yb2s"

func trickyURIs() map[string]string {
	const tail = "@127.0.0.1:1/?serverSelectionTimeoutMS=300&connectTimeoutMS=300"
	return map[string]string{
		// As the URI format requires: percent-encoded.
		"percent-encoded":                   "mongodb://sink:" + url.QueryEscape(trickyPassword) + tail,
		"percent-encoded user and password": "mongodb://" + url.QueryEscape("Zp4t@Lc6n") + ":" + url.QueryEscape(trickyPassword) + tail,
		// Raw characters the driver accepts ('?') or refuses.
		"raw ?":         "mongodb://sink:Qj7r?Vw3k" + tail,
		"raw /":         "mongodb://sink:Qj7r/Vw3k" + tail,
		"raw @":         "mongodb://sink:Qj7r@Vw3k" + tail,
		"raw @ and /":   "mongodb://sink:Qj7r@Hx8m/Zp4t" + tail,
		"raw :":         "mongodb://sink:Qj7r:Vw3k" + tail,
		"raw %":         "mongodb://sink:Qj7r%zzVw3k" + tail,
		"raw % escape":  "mongodb://sink:Qj7r%4" + tail,
		"all raw":       "mongodb://sink:" + trickyPassword + tail,
		"srv, encoded":  "mongodb+srv://sink:" + url.QueryEscape(trickyPassword) + "@127.0.0.1/?serverSelectionTimeoutMS=300",
		"bad port, raw": "mongodb://sink:Qj7r%zzVw3k@127.0.0.1:notaport/",
	}
}

func assertNoPassword(t *testing.T, what, out string) {
	t.Helper()
	for _, f := range append([]string{"%zz", "%4"}, trickyFragments...) {
		if strings.Contains(out, f) {
			t.Errorf("%s shows %q, a part of the password:\n%s", what, f, out)
		}
	}
	if !utf8.ValidString(out) {
		t.Errorf("%s is not valid UTF-8: %q", what, out)
	}
}

// Start-up with passwords holding '?', '/', '@', ':' and '%' never prints
// any part of them: not in the start-up error, not in the logs, not in the
// storage's health (ping) answers for a database that is down.
func TestMongoPasswordsNeverLeak(t *testing.T) {
	for name, uri := range trickyURIs() {
		t.Run(name, func(t *testing.T) {
			cfg := mongoConfig(t, map[string]string{"SINK_MONGODB_URI": uri})
			var logs bytes.Buffer
			log := NewLogger(cfg, &logs)
			app, err := New(cfg, log)
			if err != nil {
				assertNoPassword(t, "assembly error", err.Error())
				assertNoPassword(t, "logs", logs.String())
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			err = app.Start(ctx)
			if err == nil {
				_ = app.Stop(ctx)
				t.Fatal("start-up succeeded without a database")
			}
			assertNoPassword(t, "start-up error", err.Error())
			if !strings.Contains(err.Error(), "cannot connect to MongoDB at") {
				t.Errorf("start-up error %q", err)
			}
			// The health monitor's answer for a down database is the store's ping error.
			conn, cerr := mongodb.NewConnection(mongodb.ConnectionConfig{URI: uri})
			if cerr != nil {
				t.Fatalf("the driver took the URI for the app but not here: %v", cerr)
			}
			defer func() { _ = conn.Stop(context.Background()) }()
			st, _, serr := newStorages(cfg, log, &mongoConn{conn: conn}, &pgConn{}, nil)
			if serr != nil {
				t.Fatal(serr)
			}
			perr := st.Ping(ctx)
			if perr == nil {
				t.Fatal("ping succeeded without a database")
			}
			assertNoPassword(t, "health (ping) error", perr.Error())
			assertNoPassword(t, "logs", logs.String())
		})
	}
}

func TestMongoBindingsErrorStopsStartup(t *testing.T) {
	cfg := mongoConfig(t, map[string]string{
		"SINK_MONGODB_URI":      "mongodb://127.0.0.1:1/",
		"SINK_MONGODB_BINDINGS": `[{"namespace":"a","dataset":"b","database":"c","collection":"d"},{"namespace":"a","dataset":"b","database":"e","collection":"f"}]`,
	})
	_, err := New(cfg, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "SINK_MONGODB_BINDINGS entry 1") {
		t.Fatalf("duplicate binding: %v", err)
	}
}

func TestMemoryStorageWithoutURI(t *testing.T) {
	cfg := mongoConfig(t, nil)
	var logs bytes.Buffer
	var s ports.Storage
	_, err := New(cfg, NewLogger(cfg, &logs), fx.Populate(&s))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := s.(*memory.Store); !ok {
		t.Fatalf("storage is %T, want the memory store", s)
	}
	if !strings.Contains(logs.String(), "NOT persisted") {
		t.Fatalf("no memory warning in %s", logs.String())
	}
	var c *mongo.Client
	if _, err := New(cfg, slog.New(slog.DiscardHandler), fx.Populate(&c)); err == nil || !strings.Contains(err.Error(), "SINK_MONGODB_URI is empty") {
		t.Fatalf("asking for the client without a URI: %v", err)
	}
}

// TestMongoStorageEndToEnd starts Sink against a real server: the storage
// is the MongoDB store over the shared client, the merge-patch profile
// merges into BSON documents, and stopping Sink disconnects the client.
func TestMongoStorageEndToEnd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	srv, err := mongotest.Start(ctx, t.Logf)
	if err != nil {
		if os.Getenv(mongotest.EnvSkip) == "1" {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	defer srv.Close()
	db := mongotest.DatabaseName(t)
	env := srv.SinkEnv()
	env["SINK_MONGODB_BINDINGS"] = `[{"namespace":"shop","dataset":"orders","database":"` + db + `","collection":"Orders"}]`
	cfg := mongoConfig(t, env)
	var (
		svc     *application.Service
		storage ports.Storage
		client  *mongo.Client
	)
	app, err := New(cfg, slog.New(slog.DiscardHandler), fx.Populate(&svc, &storage, &client))
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
	if _, ok := storage.(*mongodb.Store); !ok {
		t.Fatalf("storage is %T", storage)
	}
	defer func() { _ = client.Database(db).Drop(context.Background()) }()

	// A legacy document in the bound collection.
	orders := client.Database(db).Collection("Orders")
	if _, err := orders.InsertOne(ctx, bson.D{{Key: "_id", Value: "o1"}, {Key: "qty", Value: int64(1)}, {Key: "note", Value: "old"}}); err != nil {
		t.Fatal(err)
	}
	a := domain.Address{Namespace: "shop", Dataset: "orders", Key: domain.StringKey("o1")}
	res, err := svc.Write(ctx, []domain.Mutation{{Kind: domain.MutationMerge, Address: a, Merge: domain.MergeIntent{
		Profile: "merge-patch",
		Intent:  domain.Document{ContentType: domain.ContentTypeJSON, Data: []byte(`{"qty":{"$numberLong":"5"},"note":null,"tags":["x"]}`)},
	}}}, application.WaitUntilApplied)
	if err != nil || res[0].Status != application.StatusApplied {
		t.Fatalf("merge: %v %+v", err, res)
	}
	raw, err := orders.FindOne(ctx, bson.D{{Key: "_id", Value: "o1"}}).Raw()
	if err != nil {
		t.Fatal(err)
	}
	if raw.Lookup("qty").Type != bson.TypeInt64 || raw.Lookup("qty").Int64() != 5 || raw.Lookup("note").Type != 0 || raw.Lookup("__sink").Type != bson.TypeEmbeddedDocument {
		t.Fatalf("stored %v", raw)
	}
	reads, err := svc.Read(ctx, []domain.Address{a})
	if err != nil || reads[0].Status != application.StatusFound || reads[0].Record.Revision != res[0].Revision {
		t.Fatalf("read: %v %+v", err, reads)
	}
	if err := storage.Ping(ctx); err != nil {
		t.Fatal(err)
	}

	if err := app.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	stopped = true
	if err := client.Ping(ctx, nil); !errors.Is(err, mongo.ErrClientDisconnected) {
		t.Fatalf("client after stop: %v, want disconnected", err)
	}
}
