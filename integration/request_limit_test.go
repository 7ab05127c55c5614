package integration_test

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sink-io/sink/internal/testkit/sinktest"
	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
)

// A request over SINK_MAX_REQUEST_BYTES gets RESOURCE_EXHAUSTED naming the
// setting, whether the application counts its keys and documents or the
// message is too large to decode at all (above the limit plus the 1 MiB
// allowed for the message's own framing), not gRPC's raw "received message
// larger than max"; nothing is written.
func TestRequestLimitNamesTheSetting(t *testing.T) {
	s := sinktest.Start(t, map[string]string{"SINK_MAX_REQUEST_BYTES": "4096", "SINK_MAX_DOCUMENT_BYTES": "4096"})
	for name, size := range map[string]int{
		"keys and documents above the limit": 3000, // three of them: 9000 bytes
		"a message above limit plus 1 MiB":   1<<20 + 100<<10,
		"a message of twice that, nearly":    2<<20 - 64<<10,
	} {
		doc := `"` + strings.Repeat("x", size) + `"`
		ops := []*sinkv1.WriteOperation{putOp(addr("n", "d", "a"), doc, 0, nil)}
		if size < 1<<20 {
			ops = append(ops, putOp(addr("n", "d", "b"), doc, 0, nil), putOp(addr("n", "d", "c"), doc, 0, nil))
		}
		_, err := s.Client.Write(ctx(t), &sinkv1.WriteRequest{Operations: ops})
		st, _ := status.FromError(err)
		if st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "SINK_MAX_REQUEST_BYTES") || strings.Contains(st.Message(), "larger than max") {
			t.Errorf("%s: %v, want RESOURCE_EXHAUSTED naming SINK_MAX_REQUEST_BYTES", name, err)
		}
	}
	for _, k := range []string{"a", "b", "c"} {
		if got := readJSON(t, s.Client, addr("n", "d", k)); got != "" {
			t.Fatalf("%s was written by a rejected request", k)
		}
	}
	// The server keeps serving on the same connection.
	if _, err := s.Client.Write(ctx(t), &sinkv1.WriteRequest{Operations: []*sinkv1.WriteOperation{putOp(addr("n", "d", "a"), `{}`, 0, nil)}}); err != nil {
		t.Fatal(err)
	}
}
