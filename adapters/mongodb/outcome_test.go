package mongodb_test

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"

	"github.com/sink-io/sink/adapters/mongodb"
	"github.com/sink-io/sink/application"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/internal/testkit/mongotest"
	"github.com/sink-io/sink/ports"
)

// cutDialer injects one fault, deterministically: the next command named
// cmd on collection coll is sent to the server, the server's answer is read
// in full (so the command did take effect), and then the connection breaks
// instead of delivering the answer. The driver sees a network error on a
// command it sent, as when a connection dies at the worst moment.
type cutDialer struct {
	net.Dialer
	mu        sync.Mutex
	cmd, coll string
	fired     atomic.Int32
}

func (d *cutDialer) arm(cmd, coll string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.cmd, d.coll = cmd, coll
}

// take reports whether the wire message b is the armed command, disarming.
func (d *cutDialer) take(b []byte) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cmd == "" || len(b) < 21+5 || binary.LittleEndian.Uint32(b[12:]) != 2013 || b[20] != 0 {
		return false
	}
	body := bsoncore.Document(b[21:])
	els, err := body.Elements()
	if err != nil || len(els) == 0 || els[0].Key() != d.cmd {
		return false
	}
	if name, ok := els[0].Value().StringValueOK(); !ok || name != d.coll {
		return false
	}
	d.cmd = ""
	d.fired.Add(1)
	return true
}

func (d *cutDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := d.Dialer.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &cutConn{Conn: c, d: d}, nil
}

type cutConn struct {
	net.Conn
	d   *cutDialer
	cut atomic.Bool
}

func (c *cutConn) Write(b []byte) (int, error) {
	if c.d.take(b) {
		c.cut.Store(true)
	}
	return c.Conn.Write(b)
}

func (c *cutConn) Read(b []byte) (int, error) {
	if !c.cut.Load() {
		return c.Conn.Read(b)
	}
	// Wait for the server's whole answer, drop it, break the connection.
	var hdr [4]byte
	if _, err := io.ReadFull(c.Conn, hdr[:]); err == nil {
		_, _ = io.CopyN(io.Discard, c.Conn, int64(binary.LittleEndian.Uint32(hdr[:]))-4)
	}
	_ = c.Conn.Close()
	return 0, io.ErrUnexpectedEOF
}

// faultyClient returns a client whose connections go through d. Retryable
// writes are off, so that the driver does not repeat the cut command on a
// replica set (FerretDB, a standalone server, never retries).
func faultyClient(t *testing.T, srv *mongotest.Server, d *cutDialer) *mongo.Client {
	t.Helper()
	uri := srv.URI()
	if strings.Contains(uri, "?") {
		uri += "&retryWrites=false"
	} else {
		uri += "?retryWrites=false"
	}
	c, err := mongo.Connect(options.Client().ApplyURI(uri).SetDialer(d))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Disconnect(context.Background()) })
	return c
}

// TestBulkOutcomes: when one command of a mixed bulk fails with a network
// error after it was sent, its operations are OUTCOME_UNKNOWN (the server
// may have applied them; here it did), and the operations of the other
// command get their own, known outcome. Through the application service,
// OUTCOME_UNKNOWN is retryable for idempotent operations only.
func TestBulkOutcomes(t *testing.T) {
	srv := mongotest.Shared(t)
	d := &cutDialer{}
	c := faultyClient(t, srv, d)
	db := freshDatabase(t, c)
	ctx := ctxT(t)
	opts := mongodb.Options{}
	if srv.IsFerretDB() {
		opts.BulkChunk, opts.BulkConcurrency = mongodb.FerretDBBulkChunk, mongodb.FerretDBBulkConcurrency
	}
	s, err := mongodb.New(c, opts)
	if err != nil {
		t.Fatal(err)
	}
	at := func(k string) domain.Address {
		return domain.Address{Store: "primary", Namespace: db, Dataset: "things", Key: domain.StringKey(k)}
	}
	put := func(k string, cond ports.ConditionKind) ports.WriteOp {
		return ports.WriteOp{Kind: ports.WritePut, Address: at(k), Document: bsonDoc(t, bson.D{{Key: "v", Value: k}}), Condition: ports.Condition{Kind: cond}}
	}
	if r := s.Write(ctx, []ports.WriteOp{put("taken", ports.ConditionAbsent), put("u2", ports.ConditionNone)}); r[0].Err != nil || r[1].Err != nil {
		t.Fatalf("setup: %+v", r)
	}

	// The update command (the upserts) is cut; the insert command (the creates) is not.
	d.arm("update", "things")
	res := s.Write(ctx, []ports.WriteOp{
		put("c1", ports.ConditionAbsent), put("u1", ports.ConditionNone), put("c2", ports.ConditionAbsent),
		put("u2", ports.ConditionNone), put("taken", ports.ConditionAbsent), put("u3", ports.ConditionNone),
	})
	if d.fired.Load() != 1 {
		t.Fatalf("the fault fired %d times, want 1", d.fired.Load())
	}
	for _, i := range []int{0, 2} {
		if r := res[i]; r.Err != nil || r.Existed || r.Revision == "" {
			t.Errorf("create %d, whose command succeeded: %+v", i, r)
		}
	}
	if e := domain.AsError(res[4].Err); e == nil || e.Code != domain.CodeAlreadyExists {
		t.Errorf("create of an existing record: %v, want ALREADY_EXISTS", res[4].Err)
	}
	for _, i := range []int{1, 3, 5} {
		e := domain.AsError(res[i].Err)
		if e == nil || e.Code != domain.CodeOutcomeUnknown || e.Retryable {
			t.Errorf("upsert %d of the cut command: %v (%s), want OUTCOME_UNKNOWN, not retryable here", i, res[i].Err, domain.CodeOf(res[i].Err))
		}
	}
	// The server did apply the cut command: "unknown" was the honest answer.
	for _, k := range []string{"c1", "c2", "u1", "u2", "u3"} {
		r := s.Read(ctx, []domain.Address{at(k)})[0]
		if r.Err != nil || !r.Found || bson.Raw(r.Record.Document.Data).Lookup("v").StringValue() != k {
			t.Errorf("read %s after the fault: %+v", k, r)
		}
	}

	// Through the application service: the insert command is cut now. The
	// creates' OUTCOME_UNKNOWN is not retryable (repeating one could fail
	// with ALREADY_EXISTS, or create twice); the upsert's command succeeded.
	svc := newService(t, s, nil)
	d.arm("insert", "things")
	out, err := svc.Write(ctx, []domain.Mutation{
		{Kind: domain.MutationPut, Mode: domain.PutCreate, Address: at("c3"), Document: bsonDoc(t, bson.D{})},
		{Kind: domain.MutationPut, Mode: domain.PutUpsert, Address: at("u4"), Document: bsonDoc(t, bson.D{})},
	}, application.WaitUntilApplied)
	if err != nil {
		t.Fatal(err)
	}
	if d.fired.Load() != 2 {
		t.Fatalf("the fault fired %d times, want 2", d.fired.Load())
	}
	if e := out[0].Err; e == nil || e.Code != domain.CodeOutcomeUnknown || e.Retryable {
		t.Errorf("create of the cut command: %+v, want OUTCOME_UNKNOWN, not retryable", out[0])
	}
	if out[1].Status != application.StatusApplied {
		t.Errorf("upsert of the other command: %+v, want applied", out[1])
	}
	// An idempotent operation of a cut command is retryable for the client.
	d.arm("update", "things")
	out, err = svc.Write(ctx, []domain.Mutation{
		{Kind: domain.MutationPut, Mode: domain.PutUpsert, Address: at("u5"), Document: bsonDoc(t, bson.D{})},
	}, application.WaitUntilApplied)
	if err != nil {
		t.Fatal(err)
	}
	if e := out[0].Err; e == nil || e.Code != domain.CodeOutcomeUnknown || !e.Retryable {
		t.Errorf("upsert of the cut command: %+v, want OUTCOME_UNKNOWN, retryable", out[0])
	}
}

// TestReadsSendLocalReadConcern: with readConcernLevel=majority and
// readPreference=secondaryPreferred in the URI, the reads of the Store
// (plain reads, and the reads of merges through the application service)
// go out with read concern "local" and without a secondary read preference.
// (On a replica set the driver would also route them to the primary;
// TestReadsUsePrimaryAndLocalWhateverTheURI checks the option itself.)
func TestReadsSendLocalReadConcern(t *testing.T) {
	srv := mongotest.Shared(t)
	var mu sync.Mutex
	var finds []bson.Raw
	mon := &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		if e.CommandName == "find" {
			mu.Lock()
			finds = append(finds, append(bson.Raw(nil), e.Command...))
			mu.Unlock()
		}
	}}
	uri := srv.URI()
	sep := "?"
	if strings.Contains(uri, "?") {
		sep = "&"
	}
	c, err := mongo.Connect(options.Client().ApplyURI(uri + sep + "readPreference=secondaryPreferred&readConcernLevel=majority").SetMonitor(mon))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Disconnect(context.Background()) })
	db := freshDatabase(t, c)
	ctx := ctxT(t)
	s, err := mongodb.New(c, mongodb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	a := domain.Address{Store: "primary", Namespace: db, Dataset: "things", Key: domain.StringKey("k")}
	svc := newService(t, s, nil)
	for i := 0; i < 2; i++ {
		res, err := svc.Write(ctx, []domain.Mutation{{Kind: domain.MutationMerge, Address: a,
			Merge: domain.MergeIntent{Profile: "count", Intent: bsonDoc(t, bson.D{{Key: "by", Value: int64(1)}})}}}, application.WaitUntilApplied)
		if err != nil || res[0].Status != application.StatusApplied {
			t.Fatalf("merge: %v %+v", err, res)
		}
	}
	if r := s.Read(ctx, []domain.Address{a})[0]; r.Err != nil || bson.Raw(r.Record.Document.Data).Lookup("counter").Int64() != 2 {
		t.Fatalf("read: %+v", r)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(finds) < 3 {
		t.Fatalf("%d find commands, want at least 3", len(finds))
	}
	for _, f := range finds {
		if lvl, err := f.LookupErr("readConcern", "level"); err != nil || lvl.StringValue() != "local" {
			t.Errorf("find with read concern %v, want local: %v", lvl, f)
		}
		if mode, err := f.LookupErr("$readPreference", "mode"); err == nil && !strings.HasPrefix(mode.StringValue(), "primary") {
			t.Errorf("find with read preference %v: %v", mode, f)
		}
	}
}
