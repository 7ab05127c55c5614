package integration_test

import (
	"fmt"
	"io"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/internal/testkit/mongotest"
	"github.com/sink-io/sink/internal/testkit/sinktest"
	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
)

// scanPages runs one Scan and returns its pages.
func scanPages(t *testing.T, c sinkv1.SinkClient, req *sinkv1.ScanRequest) ([]*sinkv1.ScanPage, error) {
	t.Helper()
	st, err := c.Scan(ctx(t), req)
	if err != nil {
		return nil, err
	}
	var pages []*sinkv1.ScanPage
	for {
		p, err := st.Recv()
		if err == io.EOF {
			return pages, nil
		}
		if err != nil {
			return pages, err
		}
		pages = append(pages, p)
	}
}

func keysOf(pages []*sinkv1.ScanPage) []string {
	var out []string
	for _, p := range pages {
		for _, r := range p.Records {
			out = append(out, r.Key.GetString_())
		}
	}
	return out
}

func TestScanAndCountThroughGRPC(t *testing.T) {
	s := sinktest.Start(t, nil)
	var ops []*sinkv1.WriteOperation
	var all []string
	for i := range 25 {
		k := fmt.Sprintf("o-%02d", i)
		all = append(all, k)
		status := "open"
		if i%3 == 0 {
			status = "paid"
		}
		ops = append(ops, putOp(addr("shop", "orders", k), fmt.Sprintf(`{"total":%d,"status":%q,"note":"é"}`, i, status), sinkv1.PutMode_PUT_MODE_UPSERT, nil))
	}
	ops = append(ops, putOp(addr("shop", "other", "o-00"), `{"total":1}`, sinkv1.PutMode_PUT_MODE_UPSERT, nil))
	for _, r := range write(t, s.Client, ops...) {
		expectApplied(t, "put", r)
	}
	ds := &sinkv1.DatasetRef{Namespace: "shop", Dataset: "orders"}

	pages, err := scanPages(t, s.Client, &sinkv1.ScanRequest{Dataset: ds, PageSize: 7})
	if err != nil {
		t.Fatal(err)
	}
	if got := keysOf(pages); strings.Join(got, ",") != strings.Join(all, ",") || len(pages) != 4 {
		t.Fatalf("%d pages, keys %v", len(pages), got)
	}
	if last := pages[len(pages)-1]; len(last.Cursor) != 0 || last.Returned != 4 || last.Scanned != 4 {
		t.Fatalf("last page: cursor %x, returned %d, scanned %d", last.Cursor, last.Returned, last.Scanned)
	}

	// A filter as text, a projection, a limit: the stream stops after 3
	// records and its cursor resumes the same request.
	req := &sinkv1.ScanRequest{Dataset: ds, Where: `doc.status == "paid" && doc.total >= 3`, PageSize: 2, Limit: 3,
		Projection: &sinkv1.Projection{Fields: []string{"total"}}}
	pages, err = scanPages(t, s.Client, req)
	if err != nil {
		t.Fatal(err)
	}
	if got := keysOf(pages); strings.Join(got, ",") != "o-03,o-06,o-09" {
		t.Fatalf("filtered keys %v", got)
	}
	if doc := string(pages[0].Records[0].Document.Data); doc != `{"total":3}` {
		t.Fatalf("projected document %s", doc)
	}
	cursor := pages[len(pages)-1].Cursor
	if len(cursor) == 0 || pages[0].Scanned <= pages[0].Returned {
		t.Fatalf("cursor %x, first page scanned %d returned %d", cursor, pages[0].Scanned, pages[0].Returned)
	}
	req.Cursor, req.Limit, req.KeysOnly = cursor, 0, true
	pages, err = scanPages(t, s.Client, req)
	if err != nil {
		t.Fatal(err)
	}
	if got := keysOf(pages); strings.Join(got, ",") != "o-12,o-15,o-18,o-21,o-24" || pages[0].Records[0].Document != nil {
		t.Fatalf("resumed keys %v (documents %v)", got, pages[0].Records[0].Document)
	}

	// The cursor is bound to its request: another filter, order or
	// dataset is refused.
	for name, other := range map[string]*sinkv1.ScanRequest{
		"filter":  {Dataset: ds, Where: `doc.status == "open"`, PageSize: 2, Projection: req.Projection, Cursor: cursor},
		"order":   {Dataset: ds, Where: req.Where, PageSize: 2, Projection: req.Projection, Descending: true, Cursor: cursor},
		"dataset": {Dataset: &sinkv1.DatasetRef{Namespace: "shop", Dataset: "other"}, Where: req.Where, Projection: req.Projection, Cursor: cursor},
		"garbage": {Dataset: ds, Cursor: []byte("not a cursor")},
	} {
		_, err := scanPages(t, s.Client, other)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "cursor") {
			t.Errorf("%s: %v, want INVALID_ARGUMENT about the cursor", name, err)
		}
	}

	// Bad filters name the node or the position.
	_, err = scanPages(t, s.Client, &sinkv1.ScanRequest{Dataset: ds, Where: `doc.total > 1 && size(doc.x) > 1`})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "1:") {
		t.Fatalf("bad where: %v", err)
	}
	bad := &sinkv1.Filter{Node: &sinkv1.Filter_And{And: &sinkv1.FilterList{Filters: []*sinkv1.Filter{
		{Node: &sinkv1.Filter_Eq{Eq: &sinkv1.FieldComparison{Path: []string{"a"}, Value: &sinkv1.ScalarValue{Kind: &sinkv1.ScalarValue_IntValue{IntValue: 1}}}}},
		{Node: &sinkv1.Filter_Lt{Lt: &sinkv1.FieldComparison{Path: []string{"a"}, Value: &sinkv1.ScalarValue{Kind: &sinkv1.ScalarValue_NullValue{NullValue: true}}}}},
	}}}}
	_, err = scanPages(t, s.Client, &sinkv1.ScanRequest{Dataset: ds, Filter: bad})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "filter.and[1].lt") {
		t.Fatalf("bad tree: %v", err)
	}
	_, err = scanPages(t, s.Client, &sinkv1.ScanRequest{Dataset: ds, PageSize: 1001})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("page size 1001: %v", err)
	}

	c, err := s.Client.Count(ctx(t), &sinkv1.CountRequest{Dataset: ds})
	if err != nil || c.Count != 25 || !c.Exact {
		t.Fatalf("count: %v, %v", c, err)
	}
	c, err = s.Client.Count(ctx(t), &sinkv1.CountRequest{Dataset: ds, Where: `doc.status == "paid"`,
		Range: &sinkv1.KeyRange{Start: &sinkv1.KeyBound{Key: &sinkv1.RecordKey{Kind: &sinkv1.RecordKey_String_{String_: "o-03"}}, Exclusive: true}}})
	if err != nil || c.Count != 7 || !c.Exact {
		t.Fatalf("count paid after o-03: %v, %v", c, err)
	}
}

// TestScanResumesOnAnotherServer: a cursor keeps nothing on the server:
// a Sink started afresh on the same database resumes it.
func TestScanResumesOnAnotherServer(t *testing.T) {
	mongo := mongotest.Shared(t)
	ns := strings.ReplaceAll(mongotest.DatabaseName(t), ".", "_")
	first := sinktest.Start(t, mongo.SinkEnv())
	var ops []*sinkv1.WriteOperation
	for i := range 10 {
		d, err := bson.Marshal(bson.D{{Key: "i", Value: int32(i)}})
		if err != nil {
			t.Fatal(err)
		}
		ops = append(ops, &sinkv1.WriteOperation{Kind: &sinkv1.WriteOperation_Put{Put: &sinkv1.PutOperation{
			Address:  &sinkv1.RecordAddress{Namespace: ns, Dataset: "d", Key: &sinkv1.RecordKey{Kind: &sinkv1.RecordKey_Int64{Int64: int64(i)}}},
			Document: &sinkv1.Document{ContentType: domain.ContentTypeBSON, Data: d}}}})
	}
	for _, r := range write(t, first.Client, ops...) {
		expectApplied(t, "put", r)
	}
	req := &sinkv1.ScanRequest{Dataset: &sinkv1.DatasetRef{Namespace: ns, Dataset: "d"}, Where: "doc.i >= 2", PageSize: 3, Limit: 3}
	pages, err := scanPages(t, first.Client, req)
	if err != nil || len(pages) != 1 || pages[0].Records[0].Key.GetInt64() != 2 {
		t.Fatalf("first page %v, %v", pages, err)
	}
	first.Stop(t)
	second := sinktest.Start(t, mongo.SinkEnv())
	req.Cursor, req.Limit = pages[0].Cursor, 0
	pages, err = scanPages(t, second.Client, req)
	if err != nil {
		t.Fatal(err)
	}
	var got []int64
	for _, p := range pages {
		for _, r := range p.Records {
			got = append(got, r.Key.GetInt64())
		}
	}
	if fmt.Sprint(got) != "[5 6 7 8 9]" {
		t.Fatalf("resumed on another server: %v", got)
	}
}

// A Scan or Count request that does not decode (invalid UTF-8 in a
// string field) is INVALID_ARGUMENT, like the other RPCs' requests.
func TestScanUndecodableRequestIsInvalidArgument(t *testing.T) {
	s := sinktest.Start(t, nil)
	var ds []byte
	ds = protowire.AppendTag(ds, 2, protowire.BytesType)
	ds = protowire.AppendString(ds, "n\xff")
	ds = protowire.AppendTag(ds, 3, protowire.BytesType)
	ds = protowire.AppendString(ds, "d")
	var req []byte
	req = protowire.AppendTag(req, 1, protowire.BytesType)
	req = protowire.AppendBytes(req, ds)

	st, err := s.Conn.NewStream(ctx(t), &grpc.StreamDesc{ServerStreams: true}, "/sink.v1.Sink/Scan", grpc.ForceCodec(rawCodec{}))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.SendMsg(&req); err != nil {
		t.Fatal(err)
	}
	_ = st.CloseSend()
	var out []byte
	err = st.RecvMsg(&out)
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "valid UTF-8") {
		t.Fatalf("scan: %v, want INVALID_ARGUMENT", err)
	}
	err = s.Conn.Invoke(ctx(t), "/sink.v1.Sink/Count", &req, &out, grpc.ForceCodec(rawCodec{}))
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "valid UTF-8") {
		t.Fatalf("count: %v, want INVALID_ARGUMENT", err)
	}
}
