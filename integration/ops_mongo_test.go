package integration_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sink-io/sink/internal/testkit/mongotest"
	"github.com/sink-io/sink/internal/testkit/sinktest"
	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
)

// opsMongo starts a MongoDB-wire server of the test's own (outage tests
// must not stop the shared one).
func opsMongo(t *testing.T) *mongotest.Server {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a MongoDB-wire server; skipped with -short")
	}
	return mongotest.Private(t)
}

// Health follows a real MongoDB: NOT_SERVING and /readyz 503 while the
// server is down (liveness stays up), SERVING again once it is back.
func TestOpsHealthFollowsMongoDB(t *testing.T) {
	srv := opsMongo(t)
	if srv.Kind() != mongotest.KindFerretDB {
		t.Skipf("the %s server cannot be stopped and restarted by the test", srv.Kind())
	}
	env := srv.SinkEnv()
	env["SINK_HEALTH_INTERVAL"] = "100ms"
	env["SINK_HEALTH_TIMEOUT"] = "500ms"
	s := sinktest.Start(t, env)
	ns := mongotest.DatabaseName(t)
	expectApplied(t, "put before the outage", write(t, s.Client, opsBSONPut(t, addr(ns, "d", "k"), bson.D{{Key: "n", Value: 1}}))[0])
	if got, want := opsHealthState(s), opsWantState(serving, http.StatusOK); got != want {
		t.Fatalf("after start: %s, want %s", got, want)
	}

	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	awaitHealth(t, s, 20*time.Second, opsWantState(notServing, http.StatusServiceUnavailable))
	t.Logf("NOT_SERVING %v after MongoDB stopped", time.Since(start).Round(time.Millisecond))
	_, body, _ := opsGet("http://" + s.HTTPAddr + "/readyz")
	if !strings.Contains(body, "not ready: storage: ") {
		t.Fatalf("/readyz does not say why: %q", body)
	}

	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	awaitHealth(t, s, 30*time.Second, opsWantState(serving, http.StatusOK))
	t.Logf("SERVING %v after MongoDB restarted", time.Since(start).Round(time.Millisecond))
	r := read(t, s.Client, addr(ns, "d", "k"))[0]
	var got struct {
		N int `bson:"n"`
	}
	if r.Status != found || bson.Unmarshal(r.Document.GetData(), &got) != nil || got.N != 1 {
		t.Fatalf("record after the outage: %v", r)
	}
	expectApplied(t, "put after the outage", write(t, s.Client, opsBSONPut(t, addr(ns, "d", "k2"), bson.D{{Key: "n", Value: 2}}))[0])
}

// opsBSONPut is an upsert of a BSON document (the MongoDB store accepts
// only application/bson).
func opsBSONPut(t testing.TB, a *sinkv1.RecordAddress, doc bson.D) *sinkv1.WriteOperation {
	t.Helper()
	b, err := bson.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return &sinkv1.WriteOperation{Kind: &sinkv1.WriteOperation_Put{Put: &sinkv1.PutOperation{
		Address: a, Document: &sinkv1.Document{ContentType: "application/bson", Data: b}}}}
}

// SIGTERM in the middle of a stream of writes: the process turns not ready,
// drains the in-flight RPCs and exits 0 within SINK_SHUTDOWN_TIMEOUT, and
// every write that was answered APPLIED is in MongoDB.
func TestOpsShutdownUnderLoad(t *testing.T) {
	srv := opsMongo(t)
	const shutdownTimeout = 10 * time.Second
	env := []string{"SINK_SHUTDOWN_TIMEOUT=" + shutdownTimeout.String()}
	for k, v := range srv.SinkEnv() {
		env = append(env, k+"="+v)
	}
	p := startSinkProcess(t, env...)
	cmd, exited, logs := p.cmd, p.exited, p.logs

	conn, err := grpc.NewClient(p.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := sinkv1.NewSinkClient(conn)
	ns := mongotest.DatabaseName(t)

	const writers, batch = 4, 5
	var mu sync.Mutex
	var appliedKeys, otherResults []string
	stopWriters := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 10000; i++ { // bounded, but ends at the first failure
				select {
				case <-stopWriters:
					return
				default:
				}
				var ops []*sinkv1.WriteOperation
				var keys []string
				for j := 0; j < batch; j++ {
					k := fmt.Sprintf("w%d-%d-%d", w, i, j)
					keys = append(keys, k)
					ops = append(ops, opsBSONPut(t, addr(ns, "events", k), bson.D{{Key: "w", Value: w}, {Key: "i", Value: i}, {Key: "j", Value: j}}))
				}
				c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				resp, err := client.Write(c, &sinkv1.WriteRequest{Operations: ops})
				cancel()
				if err != nil {
					return // the server went away
				}
				mu.Lock()
				for j, r := range resp.GetResults() {
					switch r.GetStatus() {
					case applied:
						appliedKeys = append(appliedKeys, keys[j])
					case failedStatus:
						otherResults = append(otherResults, fmt.Sprintf("%s: %v", keys[j], r.GetError()))
					}
				}
				mu.Unlock()
			}
		}()
	}
	eventually(t, 30*time.Second, "writes to be applied", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		if len(otherResults) > 0 {
			t.Fatalf("writes failed before the shutdown: %v", otherResults[:1])
		}
		return len(appliedKeys) >= 200, fmt.Sprint(len(appliedKeys), " applied")
	})

	sigterm := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var exitErr error
	select {
	case exitErr = <-exited:
	case <-time.After(shutdownTimeout + 5*time.Second):
		t.Fatalf("sink did not exit within %v of SIGTERM", shutdownTimeout+5*time.Second)
	}
	took := time.Since(sigterm)
	close(stopWriters)
	wg.Wait()
	if exitErr != nil {
		t.Fatalf("sink exited with %v after SIGTERM (want 0)", exitErr)
	}
	if took > shutdownTimeout {
		t.Fatalf("shutdown took %v, more than SINK_SHUTDOWN_TIMEOUT %v", took, shutdownTimeout)
	}
	out := logs.String()
	for _, want := range []string{`"msg":"shutting down"`, `"msg":"not ready: shutting down"`, `"msg":"stopped"`} {
		if !strings.Contains(out, want) {
			t.Errorf("the log lacks %s", want)
		}
	}
	if i, j := strings.Index(out, `"msg":"not ready: shutting down"`), strings.Index(out, `"msg":"stopped"`); i > j {
		t.Error("readiness turned off after the process stopped")
	}

	mu.Lock()
	keys := append([]string(nil), appliedKeys...)
	mu.Unlock()
	mc, err := mongo.Connect(options.Client().ApplyURI(srv.URI()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = mc.Disconnect(context.Background()) }()
	cur, err := mc.Database(ns).Collection("events").Find(ctx(t), bson.D{}, options.Find().SetProjection(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		t.Fatal(err)
	}
	var docs []struct {
		ID string `bson:"_id"`
	}
	if err := cur.All(ctx(t), &docs); err != nil {
		t.Fatal(err)
	}
	stored := make(map[string]bool, len(docs))
	for _, d := range docs {
		stored[d.ID] = true
	}
	var missing []string
	for _, k := range keys {
		if !stored[k] {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		t.Fatalf("%d of %d writes answered APPLIED are not in MongoDB, e.g. %v", len(missing), len(keys), missing[:min(5, len(missing))])
	}
	t.Logf("%d writes APPLIED before/while draining, all in MongoDB (%d documents); exit 0 %v after SIGTERM",
		len(keys), len(docs), took.Round(time.Millisecond))
	if errors.Is(exitErr, os.ErrProcessDone) {
		t.Fatal("unreachable")
	}
}
