package postgres

import (
	"context"
	"errors"
	"net"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sink-io/sink/domain"
)

// phase says how far a failed storage call got, for classify.
type phase uint8

const (
	// phaseRead: a read; it has no effect, so a timeout or a lost
	// connection is a transient failure.
	phaseRead phase = iota
	// phaseRolledBack: a write whose transaction certainly did not commit
	// (its COMMIT was never sent, or the server answered with an error).
	phaseRolledBack
	// phaseCommit: a write whose COMMIT may have reached the server; a lost
	// connection or a timeout leaves its outcome unknown.
	phaseCommit
)

// SQLSTATE codes and classes Sink interprets
// (https://www.postgresql.org/docs/current/errcodes-appendix.html).
var sqlStateNames = map[string]string{
	"40001": "serialization_failure",
	"40P01": "deadlock_detected",
	"23505": "unique_violation",
	"57014": "query_canceled",
	"57P01": "admin_shutdown",
	"57P02": "crash_shutdown",
	"57P03": "cannot_connect_now",
	"55P03": "lock_not_available",
	"42501": "insufficient_privilege",
	"42P01": "undefined_table",
	"3F000": "invalid_schema_name",
	"42703": "undefined_column",
	"25P02": "in_failed_sql_transaction",
	"22P02": "invalid_text_representation",
	"22021": "character_not_in_repertoire",
	"22P05": "untranslatable_character",
	"23502": "not_null_violation",
	"54000": "program_limit_exceeded",
	"53100": "disk_full",
	"53200": "out_of_memory",
	"53300": "too_many_connections",
}

// classify turns any error of pgx or the server into Sink's error classes.
// It is the only place that interprets PostgreSQL errors:
//
//   - the call's context ended: CodeCanceled when canceled; a deadline is
//     CodeOutcomeUnknown once a COMMIT may have been sent, else a
//     retryable CodeUnavailable. The error matches the context's error.
//   - 40001 serialization failure, 40P01 deadlock, 55P03 lock not
//     available, class 08 (connection exception), 57P01-57P03 (shutdown,
//     crash, starting up), 57014 (statement_timeout): the transaction was
//     rolled back; CodeUnavailable, retryable.
//   - class 53 (insufficient resources: disk full, out of memory, too many
//     connections): CodeResourceExhausted, retryable.
//   - 23505 unique violation: CodeAlreadyExists (the record exists).
//   - class 22 (data exception), 23 (other integrity violations), 54
//     (program limits: a row too large): CodeInvalidArgument.
//   - class 28 (authorization): CodeUnauthenticated; 42501:
//     CodePermissionDenied.
//   - a connection lost or a network error without a server answer:
//     CodeUnavailable, retryable, when pgx says nothing was sent
//     (pgconn.SafeToRetry) or the transaction cannot have committed;
//     CodeOutcomeUnknown when a COMMIT may have been sent.
//   - anything else: CodeInternal.
//
// A server error's text is replaced by its SQLSTATE and condition name
// (servers quote values of the offending row in their messages); other
// errors keep their text, scrubbed of the connection's password.
func (s *Store) classify(ctx context.Context, err error, ph phase) *domain.Error {
	return classify(ctx, err, ph, s.secrets)
}

func classify(ctx context.Context, err error, ph phase, secrets []string) *domain.Error {
	if err == nil {
		return nil
	}
	var de *domain.Error
	if errors.As(err, &de) {
		return de
	}
	text := func() string { return errorText(err, secrets) }
	mk := func(code domain.Code, retryable bool, what string) *domain.Error {
		return &domain.Error{Code: code, Retryable: retryable, Message: "PostgreSQL: " + what + ": " + text(), Cause: err}
	}
	if ce := ctx.Err(); ce != nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		if ce == nil {
			if errors.Is(err, context.Canceled) {
				ce = context.Canceled
			} else {
				ce = context.DeadlineExceeded
			}
		}
		cause := errors.Join(ce, err)
		switch {
		case errors.Is(ce, context.Canceled):
			return &domain.Error{Code: domain.CodeCanceled, Message: "PostgreSQL operation canceled: " + text(), Cause: cause}
		case ph == phaseCommit:
			return &domain.Error{Code: domain.CodeOutcomeUnknown, Message: "PostgreSQL write timed out; it may or may not have taken effect: " + text(), Cause: cause}
		default:
			return &domain.Error{Code: domain.CodeUnavailable, Retryable: true, Message: "PostgreSQL timed out before anything was written: " + text(), Cause: cause}
		}
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		// The server answered: the statement failed, and its transaction
		// did not commit.
		class := pe.Code
		if len(class) > 2 {
			class = class[:2]
		}
		switch {
		case pe.Code == "40001" || pe.Code == "40P01" || pe.Code == "55P03":
			return mk(domain.CodeUnavailable, true, "transaction conflict, rolled back")
		case pe.Code == "57014":
			return mk(domain.CodeUnavailable, true, "statement timed out and was rolled back")
		case class == "08" || class == "57":
			return mk(domain.CodeUnavailable, true, "the server is unavailable")
		case class == "53":
			return mk(domain.CodeResourceExhausted, true, "the server is out of resources")
		case pe.Code == "23505":
			return mk(domain.CodeAlreadyExists, false, "record already exists")
		case class == "22" || class == "23" || class == "54":
			return mk(domain.CodeInvalidArgument, false, "the server rejected the document or key")
		case class == "28":
			return mk(domain.CodeUnauthenticated, false, "authentication failed")
		case pe.Code == "42501":
			return mk(domain.CodePermissionDenied, false, "permission denied")
		}
		return mk(domain.CodeInternal, false, "unexpected server error")
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) || strings.Contains(err.Error(), "closed pool") || pgconn.SafeToRetry(err) {
		return mk(domain.CodeUnavailable, true, "cannot reach the server")
	}
	var ne net.Error
	if errors.As(err, &ne) || pgconn.Timeout(err) || isConnLoss(err) {
		if ph == phaseCommit {
			return mk(domain.CodeOutcomeUnknown, false, "the connection failed after the write was sent; it may or may not have taken effect")
		}
		return mk(domain.CodeUnavailable, true, "the connection failed")
	}
	return mk(domain.CodeInternal, false, "unexpected error")
}

// isConnLoss reports pgx's errors for a connection that closed under a
// statement (they wrap io.EOF or say the connection is closed or busy).
func isConnLoss(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "EOF") || strings.Contains(msg, "conn closed") || strings.Contains(msg, "connection reset") ||
		strings.Contains(msg, "broken pipe") || strings.Contains(msg, "unexpected EOF")
}

// errorText renders err for messages: a server error as its SQLSTATE and
// condition name, anything else as its text without the secrets.
func errorText(err error, secrets []string) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		t := "SQLSTATE " + pe.Code
		if n := sqlStateNames[pe.Code]; n != "" {
			t += " (" + n + ")"
		}
		return t
	}
	return scrub(err.Error(), secrets)
}

// connectTarget is the user and database pgx's connect errors name.
var connectTarget = regexp.MustCompile("failed to connect to `[^`]*`")

// scrub removes every secret from msg, and the user name pgx's connect
// errors show, and makes it valid UTF-8.
func scrub(msg string, secrets []string) string {
	msg = connectTarget.ReplaceAllString(msg, "failed to connect")
	for _, s := range secrets {
		if s != "" {
			msg = strings.ReplaceAll(msg, s, "xxxxx")
		}
	}
	return strings.ToValidUTF8(msg, "\uFFFD")
}

// connectionLost reports an error of a connection the server closed or
// that broke (not of a statement): class 08, 57P01-57P03, a connection
// error before anything was sent, or a closed socket.
func connectionLost(err error) bool {
	if c := sqlState(err); c != "" {
		return strings.HasPrefix(c, "08") || c == "57P01" || c == "57P02" || c == "57P03"
	}
	var ne net.Error
	return pgconn.SafeToRetry(err) || errors.As(err, &ne) || isConnLoss(err)
}

// sqlState returns the SQLSTATE of a server error ("" for others).
func sqlState(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}
