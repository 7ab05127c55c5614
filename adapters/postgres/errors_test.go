package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sink-io/sink/domain"
)

// safeErr stands in for pgconn's errors that say nothing was sent.
type safeErr struct{ safe bool }

func (e safeErr) Error() string     { return "write failed: broken pipe" }
func (e safeErr) SafeToRetry() bool { return e.safe }

func TestClassify(t *testing.T) {
	pg := func(code string) error {
		return fmt.Errorf("cannot write: %w", &pgconn.PgError{Severity: "ERROR", Code: code, Message: "secret-value " + code, Detail: "Key (k)=(secret-value) exists"})
	}
	netErr := &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")}
	timeoutNetErr := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	type want struct {
		code      domain.Code
		retryable bool
	}
	unavailable := want{domain.CodeUnavailable, true}
	unknown := want{domain.CodeOutcomeUnknown, false}
	exhausted := want{domain.CodeResourceExhausted, true}
	invalid := want{domain.CodeInvalidArgument, false}
	internal := want{domain.CodeInternal, false}
	all := []phase{phaseRead, phaseRolledBack, phaseCommit}
	cases := []struct {
		name   string
		err    error
		phases []phase
		want   want
	}{
		{"serialization failure", pg("40001"), all, unavailable},
		{"deadlock", pg("40P01"), all, unavailable},
		{"lock not available", pg("55P03"), all, unavailable},
		{"admin shutdown answered", pg("57P01"), all, unavailable},
		{"crash shutdown", pg("57P02"), all, unavailable},
		{"starting up", pg("57P03"), all, unavailable},
		{"connection exception class", pg("08006"), all, unavailable},
		{"statement timeout", pg("57014"), all, unavailable},
		{"disk full", pg("53100"), all, exhausted},
		{"out of memory", pg("53200"), all, exhausted},
		{"too many connections", pg("53300"), all, exhausted},
		{"unique violation", pg("23505"), all, want{domain.CodeAlreadyExists, false}},
		{"not null violation", pg("23502"), all, invalid},
		{"invalid json", pg("22P02"), all, invalid},
		{"row too big", pg("54000"), all, invalid},
		{"bad password", pg("28P01"), all, want{domain.CodeUnauthenticated, false}},
		{"privilege", pg("42501"), all, want{domain.CodePermissionDenied, false}},
		{"undefined table", pg("42P01"), all, internal},
		{"not sent", safeErr{safe: true}, all, unavailable},
		{"closed pool", errors.New("closed pool"), all, unavailable},
		{"sent, then lost: read", safeErr{safe: false}, []phase{phaseRead, phaseRolledBack}, unavailable},
		{"sent, then lost: commit", safeErr{safe: false}, []phase{phaseCommit}, unknown},
		{"net error before commit", netErr, []phase{phaseRead, phaseRolledBack}, unavailable},
		{"net error at commit", netErr, []phase{phaseCommit}, unknown},
		{"socket timeout at commit", timeoutNetErr, []phase{phaseCommit}, unknown},
		{"EOF at commit", fmt.Errorf("receive message: %w", io.ErrUnexpectedEOF), []phase{phaseCommit}, unknown},
		{"plain", errors.New("boom"), all, internal},
	}
	for _, c := range cases {
		for _, ph := range c.phases {
			t.Run(fmt.Sprintf("%s/phase%d", c.name, ph), func(t *testing.T) {
				e := classify(context.Background(), c.err, ph, []string{"hunter2"})
				if e.Code != c.want.code || e.Retryable != c.want.retryable {
					t.Fatalf("%v: got %s retryable=%v, want %s retryable=%v", c.err, e.Code, e.Retryable, c.want.code, c.want.retryable)
				}
				if strings.Contains(e.Message, "secret-value") {
					t.Fatalf("message shows the server's text (client data): %s", e.Message)
				}
				if !errors.Is(e, c.err) && !errors.Is(e.Cause, c.err) {
					t.Fatalf("cause lost: %v", e)
				}
			})
		}
	}
}

func TestClassifyContext(t *testing.T) {
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithTimeout(context.Background(), -1)
	defer cancel2()
	qc := &pgconn.PgError{Code: "57014", Message: "canceling statement due to user request"}
	for _, c := range []struct {
		name string
		ctx  context.Context
		ph   phase
		code domain.Code
	}{
		{"canceled read", canceled, phaseRead, domain.CodeCanceled},
		{"canceled commit", canceled, phaseCommit, domain.CodeCanceled},
		{"deadline read", expired, phaseRead, domain.CodeUnavailable},
		{"deadline before commit", expired, phaseRolledBack, domain.CodeUnavailable},
		{"deadline at commit", expired, phaseCommit, domain.CodeOutcomeUnknown},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, err := range []error{qc, c.ctx.Err(), &net.OpError{Op: "read", Err: os.ErrDeadlineExceeded}} {
				e := classify(c.ctx, err, c.ph, nil)
				if e.Code != c.code {
					t.Fatalf("%v: code %s, want %s", err, e.Code, c.code)
				}
				if !errors.Is(e, c.ctx.Err()) {
					t.Fatalf("%v: does not match the context's error %v", e, c.ctx.Err())
				}
			}
		})
	}
}

func TestErrorTextHidesSecrets(t *testing.T) {
	const pw = "Pq7r?Wv3k/Jx8m@Tp4t:Mc6n%Ub2s"
	err := fmt.Errorf("cannot parse postgres://u:%s@h/db: invalid", pw)
	e := classify(context.Background(), err, phaseRead, []string{pw})
	if strings.Contains(e.Message, "Wv3k") {
		t.Fatalf("message shows the password: %s", e.Message)
	}
	if got := scrub("a\xffb", nil); got != "a\uFFFDb" {
		t.Fatalf("scrub keeps invalid UTF-8: %q", got)
	}
}
