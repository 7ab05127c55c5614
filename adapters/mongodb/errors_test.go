package mongodb

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/topology"

	"github.com/sink-io/sink/domain"
)

// retryablePoolError stands in for the driver's unexported pool-cleared error.
type retryablePoolError struct{}

func (retryablePoolError) Error() string   { return "connection pool for 127.0.0.1:27017 was cleared" }
func (retryablePoolError) Retryable() bool { return true }

func TestClassify(t *testing.T) {
	cmd := func(code int32, labels ...string) error {
		return mongo.CommandError{Code: code, Message: fmt.Sprintf("secret-value %d", code), Labels: labels}
	}
	writeErr := func(code int) error {
		return mongo.WriteException{WriteErrors: mongo.WriteErrors{{Index: 0, Code: code, Message: fmt.Sprintf("secret-value write error %d", code)}}}
	}
	bulkErr := func(code int) error {
		return mongo.BulkWriteException{WriteErrors: []mongo.BulkWriteError{{WriteError: mongo.WriteError{Index: 3, Code: code, Message: "secret-value bulk"}}}}
	}
	netErr := &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")}
	timeoutNetErr := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}

	type want struct {
		code      domain.Code
		retryable bool
	}
	unavailable := want{domain.CodeUnavailable, true}
	unknown := want{domain.CodeOutcomeUnknown, false}
	invalid := want{domain.CodeInvalidArgument, false}
	exists := want{domain.CodeAlreadyExists, false}
	internal := want{domain.CodeInternal, false}

	cases := []struct {
		name string
		err  error
		want want
	}{
		{"canceled", fmt.Errorf("cannot read: %w", context.Canceled), want{domain.CodeCanceled, false}},
		{"server selection", topology.ServerSelectionError{Wrapped: errors.New("no reachable servers")}, unavailable},
		{"server selection after deadline", topology.ServerSelectionError{Wrapped: context.DeadlineExceeded}, unavailable},
		{"client disconnected", mongo.ErrClientDisconnected, unavailable},
		{"pool wait timeout", topology.WaitQueueTimeoutError{Wrapped: context.DeadlineExceeded}, unavailable},
		{"pool cleared", fmt.Errorf("cannot write: %w", retryablePoolError{}), unavailable},
		{"connection error", topology.ConnectionError{ConnectionID: "c1", Wrapped: io.EOF}, unavailable},
		{"network error label", mongo.CommandError{Message: "connection closed", Labels: []string{"NetworkError"}, Wrapped: io.EOF}, unavailable},
		{"net.Error", fmt.Errorf("cannot write: %w", netErr), unavailable},
		{"RetryableWriteError label", cmd(0, "RetryableWriteError"), unavailable},
		{"RetryableWriteError label on write exception", mongo.WriteException{Labels: []string{"RetryableWriteError"}}, unavailable},
		{"TransientTransactionError label", cmd(251, "TransientTransactionError"), unavailable},
		{"context deadline", fmt.Errorf("cannot write: %w", context.DeadlineExceeded), unknown},
		{"socket timeout", fmt.Errorf("cannot write: %w", timeoutNetErr), unknown},
		{"network timeout label", cmd(0, "NetworkError", "NetworkTimeoutError"), unknown},
		{"MaxTimeMSExpired", cmd(50), unknown},
		{"MaxTimeMSExpired by name", mongo.CommandError{Name: "MaxTimeMSExpired"}, unknown},
		{"write concern timeout", mongo.WriteException{WriteConcernError: &mongo.WriteConcernError{Code: 64, Message: "secret-value: waiting for replication timed out"}}, unknown},
		{"write concern MaxTimeMS", mongo.BulkWriteException{WriteConcernError: &mongo.WriteConcernError{Code: 50}}, unknown},
		{"duplicate key 11000", writeErr(11000), exists},
		{"duplicate key 11001", writeErr(11001), exists},
		{"duplicate key in bulk", bulkErr(11000), exists},
		{"duplicate key command", cmd(11000), exists},
		{"bare write error", mongo.WriteError{Code: 11000}, exists},
		{"unknown code", cmd(8000), internal},
		{"plain error", errors.New("boom"), internal},
		{"driver invalid argument", fmt.Errorf("cannot write: %w", mongo.ErrNilDocument), invalid},
		{"marshal error", mongo.MarshalError{Value: 1, Err: errors.New("no codec")}, invalid},
		{"authentication", cmd(18), want{domain.CodeUnauthenticated, false}},
		{"authorization", cmd(13), want{domain.CodePermissionDenied, false}},
		{"domain error passes through", domain.Errorf(domain.CodeNotFound, "gone"), want{domain.CodeNotFound, false}},
	}
	for code := range transientCodes {
		cases = append(cases,
			struct {
				name string
				err  error
				want want
			}{fmt.Sprintf("transient command code %d", code), cmd(int32(code)), unavailable},
			struct {
				name string
				err  error
				want want
			}{fmt.Sprintf("transient write concern code %d", code), mongo.WriteException{WriteConcernError: &mongo.WriteConcernError{Code: code}}, unavailable},
		)
	}
	for code := range invalidCodes {
		cases = append(cases,
			struct {
				name string
				err  error
				want want
			}{fmt.Sprintf("invalid write code %d", code), writeErr(code), invalid},
			struct {
				name string
				err  error
				want want
			}{fmt.Sprintf("invalid bulk code %d", code), bulkErr(code), invalid},
		)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := classify(c.err)
			if got == nil {
				t.Fatal("classify returned nil")
			}
			if got.Code != c.want.code || got.Retryable != c.want.retryable {
				t.Fatalf("classify(%v) = %s retryable=%v, want %s retryable=%v", c.err, got.Code, got.Retryable, c.want.code, c.want.retryable)
			}
			if c.name == "domain error passes through" {
				return
			}
			if got.Cause == nil {
				t.Fatal("no cause")
			}
			var se mongo.ServerError
			if codes := serverCodesOf(c.err); errors.As(c.err, &se) && len(codes) > 0 {
				// Server text may quote the document: only the codes are shown.
				for _, code := range codes {
					if !strings.Contains(got.Message, fmt.Sprint(code)) {
						t.Fatalf("message %q does not give the code %d", got.Message, code)
					}
				}
				if strings.Contains(got.Message, "secret-value") {
					t.Fatalf("message %q carries the server's text", got.Message)
				}
			} else if !strings.Contains(got.Message, c.err.Error()) {
				t.Fatalf("classified error %q does not carry the cause %q", got.Message, c.err)
			}
			if got.Message == "" {
				t.Fatal("empty message")
			}
		})
	}
	if classify(nil) != nil {
		t.Fatal("classify(nil) must be nil")
	}
}

// serverCodesOf returns the non-zero server codes of err.
func serverCodesOf(err error) []int {
	var se mongo.ServerError
	if !errors.As(err, &se) {
		return nil
	}
	var out []int
	for _, c := range se.ErrorCodes() {
		if c != 0 {
			out = append(out, c)
		}
	}
	return out
}

// The listed codes must stay in exactly one class.
func TestClassifyCodeTablesAreDisjoint(t *testing.T) {
	seen := map[int]string{}
	for name, table := range map[string]map[int]string{
		"transient": transientCodes, "duplicate": duplicateKeyCodes, "invalid": invalidCodes, "outcome unknown": outcomeUnknownCodes,
	} {
		for code := range table {
			if other, dup := seen[code]; dup {
				t.Errorf("code %d is both %s and %s", code, other, name)
			}
			seen[code] = name
		}
	}
	for _, code := range []int{6, 7, 89, 91, 189, 262, 9001, 10107, 11600, 11602, 13435, 13436} {
		if seen[code] != "transient" {
			t.Errorf("code %d must be transient, is %q", code, seen[code])
		}
	}
	for _, code := range []int{2, 14, 121, 10334, 17419, 16755} {
		if seen[code] != "invalid" {
			t.Errorf("code %d must be invalid, is %q", code, seen[code])
		}
	}
}

// Writes that may have reached the server are OUTCOME_UNKNOWN; writes that
// certainly did not keep their class.
func TestClassifyWrite(t *testing.T) {
	sent := mongo.CommandError{Labels: []string{"NetworkError"}, Wrapped: topology.ConnectionError{ConnectionID: "c7", Wrapped: io.EOF}}
	dial := mongo.CommandError{Labels: []string{"NetworkError", "SystemOverloadedError"}, Wrapped: topology.ConnectionError{Wrapped: errors.New("connection refused")}}
	cases := []struct {
		name      string
		err       error
		code      domain.Code
		retryable bool
	}{
		{"network error after sending", sent, domain.CodeOutcomeUnknown, false},
		{"network error while connecting", dial, domain.CodeUnavailable, true},
		{"server selection", topology.ServerSelectionError{Wrapped: errors.New("no servers")}, domain.CodeUnavailable, true},
		{"retried write failed again", mongo.CommandError{Code: 10107, Labels: []string{"RetryableWriteError"}}, domain.CodeOutcomeUnknown, false},
		{"retried write, nothing written", mongo.CommandError{Code: 10107, Labels: []string{"RetryableWriteError", "NoWritesPerformed"}}, domain.CodeUnavailable, true},
		{"not primary, not retried", mongo.CommandError{Code: 10107}, domain.CodeUnavailable, true},
		{"write concern error", mongo.WriteException{WriteConcernError: &mongo.WriteConcernError{Code: 100}}, domain.CodeOutcomeUnknown, false},
		{"write concern timeout", mongo.WriteException{WriteConcernError: &mongo.WriteConcernError{Code: 64}}, domain.CodeOutcomeUnknown, false},
		{"duplicate key", mongo.WriteException{WriteErrors: mongo.WriteErrors{{Code: 11000}}}, domain.CodeAlreadyExists, false},
		{"canceled", context.Canceled, domain.CodeCanceled, false},
	}
	for _, c := range cases {
		got := classifyWrite(fmt.Errorf("cannot write: %w", c.err))
		if got.Code != c.code || got.Retryable != c.retryable {
			t.Errorf("%s: %s retryable=%v (%q), want %s retryable=%v", c.name, got.Code, got.Retryable, got.Message, c.code, c.retryable)
		}
	}
	// Reads of the same errors stay retryable UNAVAILABLE.
	if got := classify(sent); got.Code != domain.CodeUnavailable || !got.Retryable {
		t.Errorf("read with a network error: %s", got.Code)
	}
}

// A read has no effect: its timeouts are transient failures, not unknown
// outcomes (a merge whose read timed out during a database stall was
// dead-lettered as if its write might have happened). Other classes are
// those of classify.
func TestClassifyRead(t *testing.T) {
	for name, err := range map[string]error{
		"deadline":        fmt.Errorf("cannot read from x: %w", context.DeadlineExceeded),
		"maxTimeMS":       mongo.CommandError{Code: 50, Message: "operation exceeded time limit"},
		"handshake timed": fmt.Errorf("connection() error occurred during connection handshake: %w", context.DeadlineExceeded),
	} {
		if w := classify(err); w.Code != domain.CodeOutcomeUnknown {
			t.Fatalf("%s: classify gives %v; the case does not test a timeout", name, w.Code)
		}
		e := classifyRead(err)
		if e.Code != domain.CodeUnavailable || !e.Retryable || !strings.Contains(e.Message, "read timed out") {
			t.Errorf("%s: classifyRead = %v retryable=%v %q, want UNAVAILABLE, retryable", name, e.Code, e.Retryable, e.Message)
		}
	}
	for _, err := range []error{context.Canceled, mongo.CommandError{Code: 11000}, errors.New("boom")} {
		if got, want := classifyRead(err), classify(err); got.Code != want.Code || got.Retryable != want.Retryable {
			t.Errorf("%v: classifyRead %v/%v, classify %v/%v", err, got.Code, got.Retryable, want.Code, want.Retryable)
		}
	}
}
