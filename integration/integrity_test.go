package integration_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"go.uber.org/fx"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/sink-io/sink/adapters/memory"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/internal/testkit/sinktest"
	"github.com/sink-io/sink/ports"
	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
)

// TestInvalidUTF8RevisionFailsOnlyItsOperation is the regression test of
// issue 8 item 1: an expected revision that is not valid UTF-8, against an
// existing record, used to fail the whole call with INTERNAL (the mismatch
// message quoted the raw bytes, which gRPC refuses to marshal) although the
// other operations had been applied.
func TestInvalidUTF8RevisionFailsOnlyItsOperation(t *testing.T) {
	s := sinktest.Start(t, nil)
	existing := addr("shop", "orders", "existing")
	expectApplied(t, "seed", write(t, s.Client, putOp(existing, `{"v":1}`, sinkv1.PutMode_PUT_MODE_UPSERT, nil))[0])
	bad := []byte{0xff}

	fresh := addr("shop", "orders", "fresh")
	resp, err := s.Client.Write(ctx(t), &sinkv1.WriteRequest{Operations: []*sinkv1.WriteOperation{
		putOp(fresh, `{"v":2}`, sinkv1.PutMode_PUT_MODE_UPSERT, nil),
		putOp(existing, `{"v":3}`, sinkv1.PutMode_PUT_MODE_UPSERT, bad),
	}})
	if err != nil {
		t.Fatalf("Write failed as a whole: %v", err)
	}
	expectApplied(t, "valid put", resp.Results[0])
	r := resp.Results[1]
	expectFailure(t, "put with revision 0xff", r.Status, r.Error, precondition, uint32(codes.FailedPrecondition), "/w==")
	if !utf8.ValidString(r.Error.GetMessage()) {
		t.Fatalf("message is not valid UTF-8: %q", r.Error.GetMessage())
	}

	del, err := s.Client.Delete(ctx(t), &sinkv1.DeleteRequest{Operations: []*sinkv1.DeleteOperation{
		{Address: fresh},
		{Address: existing, ExpectedRevision: bad},
	}})
	if err != nil {
		t.Fatalf("Delete failed as a whole: %v", err)
	}
	if del.Results[0].Status != applied || del.Results[0].Error != nil {
		t.Fatalf("valid delete: %+v", del.Results[0])
	}
	d := del.Results[1]
	expectFailure(t, "delete with revision 0xff", d.Status, d.Error, precondition, uint32(codes.FailedPrecondition), "/w==")
	if got := readJSON(t, s.Client, existing); got != `{"v":1}` {
		t.Fatalf("the failed operations changed the record: %s", got)
	}
}

// TestInvalidUTF8StringFieldIsInvalidArgument: names and string keys are
// proto strings; a client that sends invalid UTF-8 in one gets
// INVALID_ARGUMENT naming the problem (grpc-go alone answers INTERNAL).
func TestInvalidUTF8StringFieldIsInvalidArgument(t *testing.T) {
	h := startIntegrity(t)
	for name, a := range map[string]*sinkv1.RecordAddress{
		"namespace":  addr("n\xff", "d", "k"),
		"dataset":    addr("n", "d\xff", "k"),
		"string key": addr("n", "d", "k\xff"),
		"store":      {Store: "\xff", Namespace: "n", Dataset: "d", Key: &sinkv1.RecordKey{Kind: &sinkv1.RecordKey_String_{String_: "k"}}},
	} {
		req := []byte(wire{}.msg(1, wire{}.msg(1, encodeAddress(a))))
		var out []byte
		err := h.s.Conn.Invoke(ctx(t), "/sink.v1.Sink/Read", &req, &out, grpc.ForceCodec(rawCodec{}))
		if st, _ := status.FromError(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "valid UTF-8") {
			t.Errorf("%s with invalid UTF-8: %v, want INVALID_ARGUMENT", name, err)
		}
	}
}

// FuzzRPCBytes drives arbitrary bytes through every bytes and string field
// of every RPC (keys of every kind, expected revisions, documents, merge
// intents and profiles, content types, names) against a real Sink with
// memory storage, string fields sent raw (invalid UTF-8 included). For every
// request it asserts:
//   - the call returns a well-formed response, or a whole-request status
//     that is the client's fault (never INTERNAL) and wrote nothing;
//   - exactly one result per operation, indexes in order, every message
//     valid UTF-8, no per-operation INTERNAL error;
//   - no operation that reported failure wrote anything: every record that
//     changed belongs to an APPLIED operation, and an APPLIED put, merge or
//     delete left the record as it reported.
//
// Existing records with real revisions are seeded first, so conditional
// writes with arbitrary revisions reach the mismatch path. The seed corpus
// and a seeded pseudo-random batch run in `make test`; `make fuzz` fuzzes.
func FuzzRPCBytes(f *testing.F) {
	h := startIntegrity(f)
	for _, seed := range [][]byte{
		{},
		bytes.Repeat([]byte{0xff}, 64),
		bytes.Repeat([]byte{0x01}, 64),
		// Write: a put on seeded record 1, then a put on seeded record 0
		// with expected revision 0xff (the original bug).
		{1, 0, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4},
		// Delete: seeded record 1, then seeded record 0 with expected
		// revision 0xff.
		{2, 0, 1, 0, 1, 0, 0, 0, 4},
	} {
		f.Add(seed)
	}
	rng := rand.New(rand.NewChaCha8([32]byte{'s', 'i', 'n', 'k', 8, 1}))
	for range 300 {
		b := make([]byte, rng.IntN(160))
		for i := range b {
			b[i] = byte(rng.UintN(256))
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) { h.check(t, data) })
}

// integrity is a Sink whose memory storage is replaced for every input, so
// each request meets the same seeded records and the store stays small.
type integrity struct {
	s     *sinktest.Server
	store *swapStorage
}

type swapStorage struct{ cur atomic.Pointer[memory.Store] }

func (w *swapStorage) Read(ctx context.Context, addrs []domain.Address) []ports.ReadResult {
	return w.cur.Load().Read(ctx, addrs)
}
func (w *swapStorage) Write(ctx context.Context, ops []ports.WriteOp) []ports.WriteResult {
	return w.cur.Load().Write(ctx, ops)
}
func (w *swapStorage) Validate(op ports.WriteOp) error { return w.cur.Load().Validate(op) }
func (w *swapStorage) ContentTypes() []string          { return w.cur.Load().ContentTypes() }
func (w *swapStorage) Ping(ctx context.Context) error  { return w.cur.Load().Ping(ctx) }

func startIntegrity(t testing.TB) *integrity {
	h := &integrity{store: &swapStorage{}}
	h.store.cur.Store(memory.New())
	// A fuzz target must not log through the *testing.F that sinktest logs
	// to in verbose mode, so the server logs nowhere.
	h.s = sinktest.Start(t, nil,
		fx.Decorate(func(ports.Storage) ports.Storage { return h.store }),
		fx.Decorate(func(*slog.Logger) *slog.Logger { return slog.New(slog.DiscardHandler) }))
	return h
}

const servedStore = "primary" // the default SINK_STORE

// seeded are the records every input starts with (namespace fz, dataset d).
var seeded = []struct {
	key domain.Key
	doc domain.Document
}{
	{domain.StringKey("k0"), domain.Document{ContentType: domain.ContentTypeJSON, Data: []byte(`{"a":1}`)}},
	{domain.StringKey("k1"), domain.Document{ContentType: domain.ContentTypeJSON, Data: []byte(`{"b":[1,2],"c":{"d":null}}`)}},
	{domain.BytesKey([]byte{0xff, 0x00}), domain.Document{ContentType: domain.ContentTypeJSON, Data: []byte(`{}`)}},
	{domain.ObjectIDKey([]byte("\xff\xfe\x00abcdefghi")), domain.Document{ContentType: domain.ContentTypeJSON, Data: []byte(`{"c":"x"}`)}},
	{domain.Int64Key(7), domain.Document{ContentType: "application/octet-stream", Data: []byte{0xff, 0xfe}}},
}

func seededAddress(i int) domain.Address {
	return domain.Address{Store: servedStore, Namespace: "fz", Dataset: "d", Key: seeded[i].key}
}

func (h *integrity) check(t *testing.T, data []byte) {
	mem := memory.New()
	ops := make([]ports.WriteOp, len(seeded))
	for i, s := range seeded {
		ops[i] = ports.WriteOp{Kind: ports.WritePut, Address: seededAddress(i), Document: s.doc}
	}
	revs := make([]domain.Revision, len(seeded))
	for i, r := range mem.Write(t.Context(), ops) {
		if r.Err != nil {
			t.Fatalf("seed %d: %v", i, r.Err)
		}
		revs[i] = r.Revision
	}
	h.store.cur.Store(mem)

	g := &gen{data: data, revs: revs}
	req := g.request()
	before := mem.Snapshot()
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []byte
	err := h.s.Conn.Invoke(c, "/sink.v1.Sink/"+req.rpc, &req.body, &out, grpc.ForceCodec(rawCodec{}))
	after := mem.Snapshot()
	changed := changedRecords(before, after)
	if err != nil {
		st := status.Convert(err)
		if st.Code() != codes.InvalidArgument && st.Code() != codes.FailedPrecondition {
			t.Fatalf("%s: whole-request error %v (%s), want a result per operation or a client-side INVALID_ARGUMENT/FAILED_PRECONDITION\nrequest: %s", req.rpc, st.Code(), st.Message(), req)
		}
		if !utf8.ValidString(st.Message()) {
			t.Fatalf("%s: status message is not valid UTF-8: %q", req.rpc, st.Message())
		}
		if len(changed) != 0 {
			t.Fatalf("%s failed as a whole (%v) but changed %d records\nrequest: %s", req.rpc, err, len(changed), req)
		}
		return
	}
	results := decodeResults(t, req, out)
	if len(results) != len(req.ops) {
		t.Fatalf("%s: %d results for %d operations\nrequest: %s", req.rpc, len(results), len(req.ops), req)
	}
	writers := map[domain.RecordID]bool{}
	last := map[domain.RecordID]int{} // last APPLIED operation on each record
	for i, r := range results {
		op := req.ops[i]
		if r.index != uint32(i) {
			t.Fatalf("result %d has index %d", i, r.index)
		}
		if r.err != nil {
			if !utf8.ValidString(r.err.GetMessage()) || !utf8.ValidString(r.err.GetReason()) || r.err.GetMessage() == "" {
				t.Fatalf("operation %d (%s): error %+v is not a valid message", i, op.kind, r.err)
			}
			if c := codes.Code(r.err.GetCode()); c == codes.Internal || c == codes.Unknown {
				t.Fatalf("operation %d (%s): %s error %q\nrequest: %s", i, op.kind, c, r.err.GetMessage(), req)
			}
		}
		switch r.status {
		case applied, found:
			if r.err != nil || !op.hasKey {
				t.Fatalf("operation %d (%s) is %v with error %v on address %+v", i, op.kind, r.status, r.err, op.addr)
			}
		case precondition, failedStatus:
			if r.err == nil {
				t.Fatalf("operation %d (%s) is %v without an error", i, op.kind, r.status)
			}
		case notFound:
		default:
			t.Fatalf("operation %d (%s): unexpected status %v\nrequest: %s", i, op.kind, r.status, req)
		}
		if r.status == applied && op.kind != "read" {
			writers[op.addr.ID()] = true
			last[op.addr.ID()] = i
		}
		if op.kind == "read" && op.hasKey {
			rec, ok := before[op.addr.ID()]
			switch {
			case r.status == found && (!ok || !bytes.Equal(r.revision, []byte(rec.Revision)) || !bytes.Equal(r.document.GetData(), rec.Document.Data) || r.document.GetContentType() != rec.Document.ContentType):
				t.Fatalf("read %d returned %q rev %x, the store holds %+v (found %v)", i, r.document.GetData(), r.revision, rec, ok)
			case r.status == notFound && ok:
				t.Fatalf("read %d: NOT_FOUND, but the store holds the record", i)
			}
		}
	}
	for id := range changed {
		if !writers[id] {
			a, _ := domain.DecodeAddress([]byte(id))
			t.Fatalf("%s: record %s changed, but no operation on it reported APPLIED\nrequest: %s\nresults: %s", req.rpc, a, req, describe(results))
		}
	}
	for id, i := range last {
		op, r := req.ops[i], results[i]
		rec, ok := after[id]
		switch op.kind {
		case "delete":
			if ok {
				t.Fatalf("delete %d reported APPLIED but the record is still there", i)
			}
		case "put", "merge":
			if !ok || !bytes.Equal(r.revision, []byte(rec.Revision)) {
				t.Fatalf("%s %d reported APPLIED with revision %x, the store holds %+v (present %v)", op.kind, i, r.revision, rec, ok)
			}
			if op.kind == "put" && (!bytes.Equal(rec.Document.Data, op.doc.Data) || rec.Document.ContentType != op.doc.ContentType) {
				t.Fatalf("put %d reported APPLIED, the store holds %q %q, not the document sent", i, rec.Document.ContentType, rec.Document.Data)
			}
		}
	}
}

func changedRecords(before, after map[domain.RecordID]domain.Record) map[domain.RecordID]bool {
	out := map[domain.RecordID]bool{}
	for id, b := range before {
		a, ok := after[id]
		if !ok || a.Revision != b.Revision || a.Document.ContentType != b.Document.ContentType || !bytes.Equal(a.Document.Data, b.Document.Data) {
			out[id] = true
		}
	}
	for id := range after {
		if _, ok := before[id]; !ok {
			out[id] = true
		}
	}
	return out
}

// result is the part of a Read, Write or Delete result the checks use.
type result struct {
	index    uint32
	status   sinkv1.OperationStatus
	err      *sinkv1.OperationError
	revision []byte
	document *sinkv1.Document
}

// decodeResults parses the response; proto.Unmarshal also checks that
// every string in it is valid UTF-8.
func decodeResults(t *testing.T, req genRequest, out []byte) []result {
	var rs []result
	switch req.rpc {
	case "Read":
		var resp sinkv1.ReadResponse
		if err := proto.Unmarshal(out, &resp); err != nil {
			t.Fatalf("malformed Read response: %v", err)
		}
		for _, r := range resp.GetResults() {
			rs = append(rs, result{r.GetIndex(), r.GetStatus(), r.GetError(), r.GetRevision(), r.GetDocument()})
		}
	case "Write":
		var resp sinkv1.WriteResponse
		if err := proto.Unmarshal(out, &resp); err != nil {
			t.Fatalf("malformed Write response: %v", err)
		}
		for _, r := range resp.GetResults() {
			rs = append(rs, result{r.GetIndex(), r.GetStatus(), r.GetError(), r.GetRevision(), nil})
		}
	case "Delete":
		var resp sinkv1.DeleteResponse
		if err := proto.Unmarshal(out, &resp); err != nil {
			t.Fatalf("malformed Delete response: %v", err)
		}
		for _, r := range resp.GetResults() {
			rs = append(rs, result{r.GetIndex(), r.GetStatus(), r.GetError(), nil, nil})
		}
	}
	return rs
}

func describe(rs []result) string {
	var b strings.Builder
	for _, r := range rs {
		fmt.Fprintf(&b, "[%d %v %q] ", r.index, r.status, r.err.GetMessage())
	}
	return b.String()
}

// genRequest is one generated request: its wire encoding and, per
// operation, what the checks need to know.
type genRequest struct {
	rpc  string
	body []byte
	ops  []genOp
}

type genOp struct {
	kind   string // read, put, merge or delete
	addr   domain.Address
	hasKey bool
	doc    domain.Document // put
}

func (r genRequest) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %x\n", r.rpc, r.body)
	for i, op := range r.ops {
		fmt.Fprintf(&b, "  op %d %s %q/%q/%q key %v:%q\n", i, op.kind, op.addr.Store, op.addr.Namespace, op.addr.Dataset, op.addr.Key.Kind, op.addr.Key.String())
	}
	return b.String()
}

// gen turns fuzz bytes into a request. Every choice reads one byte (0 once
// the input is used up, and choice 0 is always an ordinary value), so any
// input is a valid program and short inputs give small, sane requests.
type gen struct {
	data  []byte
	revs  []domain.Revision
	rawOK bool // string fields may hold arbitrary (invalid UTF-8) bytes
}

func (g *gen) next() byte {
	if len(g.data) == 0 {
		return 0
	}
	b := g.data[0]
	g.data = g.data[1:]
	return b
}

func (g *gen) n(k int) int { return int(g.next()) % k }

func (g *gen) raw(limit int) []byte {
	n := min(g.n(limit+1), len(g.data))
	b := append([]byte(nil), g.data[:n]...)
	g.data = g.data[n:]
	return b
}

// str returns a string field: mostly a value from pool, sometimes
// arbitrary valid UTF-8, and (when the request allows it) raw bytes.
func (g *gen) str(pool ...string) string {
	switch c := g.n(16); {
	case c < 14:
		return pool[c%len(pool)]
	case c == 14 || !g.rawOK:
		return strings.ToValidUTF8(string(g.raw(24)), "")
	default:
		return string(g.raw(24)) + "\xff"
	}
}

func (g *gen) request() genRequest {
	var r genRequest
	rpc := g.n(3)
	g.rawOK = g.n(4) == 3
	n := [16]int{1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6, 2, 3, 4, 0}[g.n(16)]
	body := wire{}
	for range n {
		var op genOp
		var enc wire
		switch rpc {
		case 0:
			op.kind = "read"
			enc = wire{}.msg(1, g.address(&op))
		case 1:
			if g.n(2) == 0 {
				op.kind = "put"
				p := wire{}.msg(1, g.address(&op))
				p = p.msg(2, g.document(&op.doc))
				switch mode := g.n(16); {
				case mode >= 1 && mode <= 3:
					p = p.varint(3, uint64(mode-1))
				case mode == 15:
					p = p.varint(3, uint64(3+g.n(4))) // unknown
				}
				p = p.bytes(4, g.revision())
				enc = wire{}.msg(1, p)
			} else {
				op.kind = "merge"
				m := wire{}.msg(1, g.address(&op))
				m = m.str(2, g.str("merge-patch", "merge-patch", "merge-patch", "nope", ""))
				var intent domain.Document
				m = m.msg(3, g.document(&intent))
				enc = wire{}.msg(2, m)
			}
		default:
			op.kind = "delete"
			enc = wire{}.msg(1, g.address(&op)).bytes(2, g.revision())
		}
		body = body.msg(1, enc)
		r.ops = append(r.ops, op)
	}
	if rpc != 0 {
		switch g.n(16) {
		case 14:
			body = body.varint(2, 2) // RETURN_AFTER_ACCEPTED: no queue here
		case 15:
			body = body.varint(2, 7) // unknown completion mode
		}
	}
	r.rpc = []string{"Read", "Write", "Delete"}[rpc]
	r.body = []byte(body)
	return r
}

// address encodes a RecordAddress and records its normalised form in op.
func (g *gen) address(op *genOp) wire {
	c := g.n(16)
	if c < 7 { // a seeded record
		op.addr, op.hasKey = seededAddress(g.n(len(seeded))), true
		return encodeDomainAddress(op.addr, "")
	}
	a := domain.Address{Store: g.str("", "", "", servedStore, "other"), Namespace: g.str("fz", "fz", "fz", "fz", "", "a b"), Dataset: g.str("d", "d2")}
	store := a.Store
	if a.Store == "" {
		a.Store = servedStore
	}
	op.hasKey = true
	switch c {
	case 7, 8, 9:
		a.Key = domain.StringKey(g.str("k0", "k9", "k1", ""))
	case 10:
		a.Key = domain.Int64Key(int64(g.next()) - 128)
	case 11, 12:
		a.Key = domain.BytesKey(g.raw(20))
	case 13, 14:
		if g.n(4) == 0 {
			a.Key = domain.ObjectIDKey(g.raw(20))
		} else {
			b := g.raw(domain.ObjectIDLength)
			a.Key = domain.ObjectIDKey(append(b, make([]byte, domain.ObjectIDLength-len(b))...))
		}
	default:
		op.hasKey = false
	}
	op.addr = a
	return encodeDomainAddress(a, store)
}

func (g *gen) document(d *domain.Document) wire {
	d.ContentType = g.str(domain.ContentTypeJSON, domain.ContentTypeJSON, domain.ContentTypeJSON, domain.ContentTypeBSON, "application/octet-stream", "Application/JSON; charset=utf-8", "")
	switch g.n(4) {
	case 0:
		d.Data = []byte(`{"x":1}`)
	case 1:
		d.Data = []byte(`{"a":null,"n":{"m":2}}`)
	default:
		d.Data = g.raw(32)
	}
	return wire{}.str(1, d.ContentType).bytes(2, d.Data)
}

func (g *gen) revision() []byte {
	switch g.n(5) {
	case 2:
		return []byte(g.revs[g.n(len(g.revs))])
	case 3:
		return g.raw(16)
	case 4:
		return []byte{0xff}
	default:
		return nil
	}
}

// wire builds protobuf encodings by hand, so that string fields can carry
// bytes the generated code refuses to marshal.
type wire []byte

func (w wire) bytes(num protowire.Number, v []byte) wire {
	if len(v) == 0 {
		return w
	}
	return protowire.AppendBytes(protowire.AppendTag(w, num, protowire.BytesType), v)
}
func (w wire) str(num protowire.Number, v string) wire { return w.bytes(num, []byte(v)) }
func (w wire) msg(num protowire.Number, v wire) wire {
	return protowire.AppendBytes(protowire.AppendTag(w, num, protowire.BytesType), v)
}
func (w wire) varint(num protowire.Number, v uint64) wire {
	return protowire.AppendVarint(protowire.AppendTag(w, num, protowire.VarintType), v)
}

// encodeDomainAddress encodes a RecordAddress with the given store field
// (a.Store is the normalised store; a missing key stays missing).
func encodeDomainAddress(a domain.Address, store string) wire {
	w := wire{}.str(1, store).str(2, a.Namespace).str(3, a.Dataset)
	var k wire
	switch a.Key.Kind {
	case domain.KeyString:
		k = wire{}.msg(1, []byte(a.Key.StringValue())) // present even when empty
	case domain.KeyInt64:
		k = k.varint(2, uint64(a.Key.Int64()))
	case domain.KeyBytes:
		k = wire{}.msg(3, a.Key.Bytes())
	case domain.KeyObjectID:
		k = wire{}.msg(4, a.Key.Bytes())
	default:
		return w
	}
	return w.msg(4, k)
}

func encodeAddress(a *sinkv1.RecordAddress) wire {
	d := domain.Address{Namespace: a.GetNamespace(), Dataset: a.GetDataset(), Key: domain.StringKey(a.GetKey().GetString_())}
	return encodeDomainAddress(d, a.GetStore())
}

// rawCodec sends and receives already-encoded messages.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *v.(*[]byte), nil }
func (rawCodec) Unmarshal(b []byte, v any) error {
	*v.(*[]byte) = append([]byte(nil), b...)
	return nil
}
func (rawCodec) Name() string { return "proto" }
