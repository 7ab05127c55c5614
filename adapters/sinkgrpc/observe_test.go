package sinkgrpc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sink-io/sink/domain"
	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
)

type fakeStream struct {
	method string
	header metadata.MD
}

func (s *fakeStream) Method() string { return s.method }
func (s *fakeStream) SetHeader(md metadata.MD) error {
	s.header = metadata.Join(s.header, md)
	return nil
}
func (s *fakeStream) SendHeader(md metadata.MD) error { return s.SetHeader(md) }
func (s *fakeStream) SetTrailer(metadata.MD) error    { return nil }

type rpcRecord struct {
	method string
	code   codes.Code
	d      time.Duration
}

type fakeRPCObserver struct {
	mu  sync.Mutex
	got []rpcRecord
}

func (o *fakeRPCObserver) RPC(method string, code codes.Code, d time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.got = append(o.got, rpcRecord{method, code, d})
}

func call(t *testing.T, obs RPCObserver, log *slog.Logger, incoming metadata.MD, handler grpc.UnaryHandler, opts ...InterceptorOption) (*fakeStream, error) {
	t.Helper()
	const method = "/sink.v1.Sink/Write"
	stream := &fakeStream{method: method}
	ctx := grpc.NewContextWithServerTransportStream(context.Background(), stream)
	if incoming != nil {
		ctx = metadata.NewIncomingContext(ctx, incoming)
	}
	_, err := UnaryInterceptor(obs, log, opts...)(ctx, "req", &grpc.UnaryServerInfo{FullMethod: method}, handler)
	return stream, err
}

func TestInterceptorPropagatesTheClientRequestID(t *testing.T) {
	obs := &fakeRPCObserver{}
	var seen domain.RequestInfo
	stream, err := call(t, obs, nil, metadata.Pairs(RequestIDHeader, "client-id-1"), func(ctx context.Context, _ any) (any, error) {
		seen = domain.RequestFromContext(ctx)
		return "ok", nil
	}, WithRequestIDResponse(RequestIDAlways))
	if err != nil {
		t.Fatal(err)
	}
	if seen.ID != "client-id-1" || seen.Method != "/sink.v1.Sink/Write" {
		t.Fatalf("the handler saw %+v", seen)
	}
	if got := stream.header.Get(RequestIDHeader); len(got) != 1 || got[0] != "client-id-1" {
		t.Fatalf("response header %v", got)
	}
	if len(obs.got) != 1 || obs.got[0].method != "/sink.v1.Sink/Write" || obs.got[0].code != codes.OK {
		t.Fatalf("observed %+v", obs.got)
	}
}

func TestInterceptorGeneratesMissingOrUnusableRequestIDs(t *testing.T) {
	ids := map[string]bool{}
	for _, in := range []metadata.MD{nil, metadata.Pairs(RequestIDHeader, ""), metadata.Pairs(RequestIDHeader, "has space"),
		metadata.Pairs(RequestIDHeader, strings.Repeat("x", MaxRequestIDLength+1))} {
		var seen string
		stream, err := call(t, nil, nil, in, func(ctx context.Context, _ any) (any, error) {
			seen = domain.RequestFromContext(ctx).ID
			return nil, nil
		}, WithRequestIDResponse(RequestIDAlways))
		if err != nil {
			t.Fatal(err)
		}
		if len(seen) != 32 || stream.header.Get(RequestIDHeader)[0] != seen {
			t.Fatalf("incoming %v: id %q, header %v", in, seen, stream.header)
		}
		ids[seen] = true
	}
	if len(ids) != 4 {
		t.Fatalf("generated ids are not unique: %v", ids)
	}
}

// By default (RequestIDOnFailure) the request id goes back only with a
// response that reports a failure: an error status, or a result with an
// error; RequestIDAlways sends it with every response.
func TestRequestIDHeaderGoesBackWithFailures(t *testing.T) {
	failed := &sinkv1.OperationError{Code: uint32(codes.InvalidArgument), Reason: "INVALID_ARGUMENT", Message: "bad"}
	for _, c := range []struct {
		name   string
		resp   any
		err    error
		failed bool
	}{
		{"health check", &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil, false},
		{"writes applied", &sinkv1.WriteResponse{Results: []*sinkv1.WriteResult{{Status: sinkv1.OperationStatus_OPERATION_STATUS_APPLIED}, {Status: sinkv1.OperationStatus_OPERATION_STATUS_APPLIED}}}, nil, false},
		{"a record not found", &sinkv1.ReadResponse{Results: []*sinkv1.ReadResult{{Status: sinkv1.OperationStatus_OPERATION_STATUS_NOT_FOUND}}}, nil, false},
		{"no results", &sinkv1.DeleteResponse{}, nil, false},
		{"the last write failed", &sinkv1.WriteResponse{Results: []*sinkv1.WriteResult{{Status: sinkv1.OperationStatus_OPERATION_STATUS_APPLIED}, {Status: sinkv1.OperationStatus_OPERATION_STATUS_FAILED, Error: failed}}}, nil, true},
		{"a read failed", &sinkv1.ReadResponse{Results: []*sinkv1.ReadResult{{Status: sinkv1.OperationStatus_OPERATION_STATUS_FAILED, Error: failed}}}, nil, true},
		{"a delete failed", &sinkv1.DeleteResponse{Results: []*sinkv1.DeleteResult{{Status: sinkv1.OperationStatus_OPERATION_STATUS_FAILED, Error: failed}}}, nil, true},
		{"an error status", nil, status.Error(codes.Unavailable, "storage is down"), true},
	} {
		for _, always := range []bool{false, true} {
			var opts []InterceptorOption
			if always {
				opts = append(opts, WithRequestIDResponse(RequestIDAlways))
			}
			id := "rid-" + strings.ReplaceAll(c.name, " ", "-")
			stream, err := call(t, nil, slog.New(slog.DiscardHandler), metadata.Pairs(RequestIDHeader, id), func(context.Context, any) (any, error) {
				return c.resp, c.err
			}, opts...)
			if !errors.Is(err, c.err) {
				t.Fatalf("%s: err = %v", c.name, err)
			}
			got := stream.header.Get(RequestIDHeader)
			if want := always || c.failed; want != (len(got) == 1) || (want && got[0] != id) {
				t.Errorf("%s, always %v: x-request-id header %q", c.name, always, got)
			}
		}
	}
}

func TestInterceptorLogsAndCountsWholeRequestFailures(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	obs := &fakeRPCObserver{}
	stream, err := call(t, obs, log, metadata.Pairs(RequestIDHeader, "rid-7"), func(context.Context, any) (any, error) {
		return nil, status.Error(codes.InvalidArgument, "request has no operations")
	})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("err = %v", err)
	}
	if stream.header.Get(RequestIDHeader)[0] != "rid-7" {
		t.Fatal("no request id header on a failed request")
	}
	if len(obs.got) != 1 || obs.got[0].code != codes.InvalidArgument {
		t.Fatalf("observed %+v", obs.got)
	}
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatalf("log %q: %v", buf.String(), err)
	}
	if line["request_id"] != "rid-7" || line["code"] != "InvalidArgument" || line["rpc"] != "/sink.v1.Sink/Write" ||
		line["message"] != "request has no operations" || line["level"] != "INFO" {
		t.Fatalf("log line %v", line)
	}

	buf.Reset()
	if _, err := call(t, obs, log, nil, func(context.Context, any) (any, error) { return "ok", nil }); err != nil {
		t.Fatal(err)
	}
	if buf.Len() != 0 {
		t.Fatalf("a successful request must not be logged: %s", buf.String())
	}
}

// Whole-request messages are logged bounded and valid UTF-8; the client
// gets them whole.
func TestInterceptorBoundsLoggedMessages(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	long := "bad \xff " + strings.Repeat("é", 2000)
	_, err := call(t, nil, log, nil, func(context.Context, any) (any, error) {
		return nil, status.Error(codes.InvalidArgument, long)
	})
	if status.Convert(err).Message() != long {
		t.Fatal("the client must get the whole message")
	}
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatalf("%v: %s", err, buf.String())
	}
	msg, _ := line["message"].(string)
	if len(msg) > MaxLoggedMessageLength+len("…") || !strings.HasPrefix(msg, "bad \uFFFD é") || !strings.HasSuffix(msg, "é…") {
		t.Fatalf("logged message of %d bytes: %q", len(msg), msg)
	}
}

// Over a real gRPC server, concurrent requests each get their own request
// id back, whether the client gave one or not (each request's header
// metadata shares its value slice with the request's context; see
// sendRequestIDHeader).
func TestConcurrentRequestsGetTheirOwnRequestIDs(t *testing.T) {
	ts := startServer(t, nil, nil, 10, grpc.ChainUnaryInterceptor(UnaryInterceptor(nil, slog.New(slog.DiscardHandler))))
	client := sinkv1.NewSinkClient(dial(t, ts.addr))
	const callers, calls = 8, 50
	var mu sync.Mutex
	generated := map[string]bool{}
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for c := range callers {
		wg.Go(func() {
			for i := range calls {
				ctx, sent := context.Background(), ""
				if i%2 == 0 {
					sent = fmt.Sprintf("caller-%d-call-%d", c, i)
					ctx = metadata.AppendToOutgoingContext(ctx, RequestIDHeader, sent)
				}
				var header metadata.MD
				// The stub does not implement Read: the header comes with the error.
				if _, err := client.Read(ctx, &sinkv1.ReadRequest{}, grpc.Header(&header)); status.Code(err) != codes.Unimplemented {
					errs <- fmt.Errorf("Read: %v", err)
					return
				}
				got := header.Get(RequestIDHeader)
				switch {
				case len(got) != 1:
					errs <- fmt.Errorf("call %d of caller %d: request id header %q", i, c, got)
					return
				case sent != "" && got[0] != sent:
					errs <- fmt.Errorf("call %d of caller %d: request id %q, sent %q", i, c, got[0], sent)
					return
				case sent == "":
					mu.Lock()
					seen := generated[got[0]]
					generated[got[0]] = true
					mu.Unlock()
					if seen || len(got[0]) != 32 {
						errs <- fmt.Errorf("call %d of caller %d: generated request id %q (seen before: %v)", i, c, got[0], seen)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if len(generated) != callers*calls/2 {
		t.Fatalf("%d generated request ids, want %d", len(generated), callers*calls/2)
	}
}

// Over a real gRPC server the x-request-id header arrives once with an
// error status and, with RequestIDAlways, with a response, for Sink's
// methods and the health check, and beside headers that an inner
// interceptor or the handler set (the interceptor sends the header after
// the handler returned; see sendRequestIDHeader).
func TestRequestIDHeaderArrivesWithResponsesAndErrors(t *testing.T) {
	for _, always := range []bool{false, true} {
		t.Run(fmt.Sprintf("always=%v", always), func(t *testing.T) { testRequestIDHeaderArrives(t, always) })
	}
}

func testRequestIDHeaderArrives(t *testing.T, always bool) {
	setsHeader := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if info.FullMethod == healthpb.Health_Check_FullMethodName {
			if err := grpc.SetHeader(ctx, metadata.Pairs("x-inner", "set")); err != nil {
				return nil, err
			}
		}
		return handler(ctx, req)
	}
	var opts []InterceptorOption
	if always {
		opts = append(opts, WithRequestIDResponse(RequestIDAlways))
	}
	ts := startServer(t, nil, nil, 10, grpc.ChainUnaryInterceptor(UnaryInterceptor(nil, slog.New(slog.DiscardHandler), opts...), setsHeader))
	conn := dial(t, ts.addr)
	check := func(what string, header metadata.MD, want string) {
		t.Helper()
		got := header.Get(RequestIDHeader)
		if len(got) != 1 || (want != "" && got[0] != want) || (want == "" && len(got[0]) != 32) {
			t.Fatalf("%s: x-request-id header %q, want %q (32 hex digits when empty)", what, got, want)
		}
	}
	for _, sent := range []string{"", "client-id-9"} {
		ctx := context.Background()
		if sent != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, RequestIDHeader, sent)
		}
		var header metadata.MD
		resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&header))
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health check: %v %v", resp, err)
		}
		if always {
			check("health check", header, sent)
		} else if got := header.Get(RequestIDHeader); len(got) != 0 {
			t.Fatalf("health check: x-request-id header %q on a success", got)
		}
		if got := header.Get("x-inner"); len(got) != 1 || got[0] != "set" {
			t.Fatalf("the inner interceptor's header: %q", got)
		}
		header = nil
		if _, err := sinkv1.NewSinkClient(conn).Read(ctx, &sinkv1.ReadRequest{}, grpc.Header(&header)); status.Code(err) != codes.Unimplemented {
			t.Fatalf("Read: %v", err)
		}
		check("an error status", header, sent)
		if len(header.Get("x-inner")) != 0 {
			t.Fatalf("Read got the health check's header: %v", header)
		}
	}
}

// Streaming RPCs get a request id too: in the x-request-id response
// header (with the first message, and with an error status), in the log
// line of a failed stream, and in the RPC metrics (a health Watch, which
// lasts as long as its client wants, is left out of them).
func TestStreamsGetARequestID(t *testing.T) {
	var logs bytes.Buffer
	obs := &fakeRPCObserver{}
	ts := startServer(t, nil, nil, 10, grpc.ChainStreamInterceptor(StreamInterceptor(obs, slog.New(slog.NewJSONHandler(&logs, nil)))))
	conn := dial(t, ts.addr)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	wctx, wcancel := context.WithCancel(ctx)
	watch, err := healthpb.NewHealthClient(conn).Watch(metadata.AppendToOutgoingContext(wctx, RequestIDHeader, "watch-id-1"), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := watch.Recv(); err != nil {
		t.Fatal(err)
	}
	if h, err := watch.Header(); err != nil || len(h.Get(RequestIDHeader)) != 1 || h.Get(RequestIDHeader)[0] != "watch-id-1" {
		t.Fatalf("Watch header %v, %v: want x-request-id watch-id-1", h, err)
	}
	wcancel()
	// The stream closer, outside the interceptor, counts the watch until
	// the interceptor has returned.
	for ts.streams.HealthWatchers() != 0 {
		if ctx.Err() != nil {
			t.Fatal("the health watch did not end")
		}
		time.Sleep(time.Millisecond)
	}

	scan, err := sinkv1.NewSinkClient(conn).Scan(ctx, &sinkv1.ScanRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := scan.Recv(); status.Code(err) != codes.Unimplemented {
		t.Fatalf("Scan: %v, want Unimplemented", err)
	}
	h, _ := scan.Header()
	if id := h.Get(RequestIDHeader); len(id) != 1 || len(id[0]) != 32 {
		t.Fatalf("Scan's error status came with x-request-id %q, want a generated id", id)
	}
	if !strings.Contains(logs.String(), `"request_id":"`+h.Get(RequestIDHeader)[0]+`"`) || !strings.Contains(logs.String(), "/sink.v1.Sink/Scan") {
		t.Fatalf("the failed Scan's log line has no request id: %s", logs.String())
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if len(obs.got) != 1 || obs.got[0].method != "/sink.v1.Sink/Scan" || obs.got[0].code != codes.Unimplemented {
		t.Fatalf("observed %+v, want the Scan only (Unimplemented)", obs.got)
	}
}
