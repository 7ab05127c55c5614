package mongodb

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/topology"

	"github.com/sink-io/sink/domain"
)

// Server error codes (https://www.mongodb.com/docs/manual/reference/error-codes/).
var (
	// transientCodes: the operation did not take effect (or is safe to
	// repeat); retrying with backoff can help.
	transientCodes = map[int]string{
		6:     "HostUnreachable",
		7:     "HostNotFound",
		89:    "NetworkTimeout",
		91:    "ShutdownInProgress",
		189:   "PrimarySteppedDown",
		262:   "ExceededTimeLimit",
		9001:  "SocketException",
		10107: "NotWritablePrimary",
		11600: "InterruptedAtShutdown",
		11602: "InterruptedDueToReplStateChange",
		13435: "NotPrimaryNoSecondaryOk",
		13436: "NotPrimaryOrSecondary",
	}
	// duplicateKeyCodes: a unique index (for Sink: _id) already holds the key.
	duplicateKeyCodes = map[int]string{11000: "DuplicateKey", 11001: "DuplicateKey"}
	// invalidCodes: the document or name cannot be stored; retrying the same
	// input cannot help.
	invalidCodes = map[int]string{
		2:     "BadValue",
		9:     "FailedToParse",
		14:    "TypeMismatch",
		52:    "DollarPrefixedFieldName",
		55:    "InvalidDBRef",
		56:    "EmptyFieldName",
		57:    "DottedFieldName",
		66:    "ImmutableField",
		73:    "InvalidNamespace",
		121:   "DocumentValidationFailure",
		10334: "BSONObjectTooLarge",
		13297: "DatabaseDifferCase",
		16755: "CannotExtractIndexKeys",
		17280: "KeyTooLong",
		17419: "DocumentTooLargeAfterUpdate",
	}
	// outcomeUnknownCodes: the server gave up waiting; the write may or may
	// not have taken effect.
	outcomeUnknownCodes = map[int]string{50: "MaxTimeMSExpired", 64: "WriteConcernFailed"}
)

// classify turns any error of the driver or the server into Sink's error
// classes. It is the only place that interprets MongoDB errors:
//
//   - context.Canceled: CodeCanceled.
//   - server selection failures, a disconnected client, pool wait timeouts,
//     a pool cleared after a failure: CodeUnavailable, retryable (nothing
//     was sent).
//   - timeouts (context deadline, MaxTimeMSExpired 50, write concern
//     timeouts): CodeOutcomeUnknown, not retryable here (the application
//     retries idempotent operations only).
//   - network and connection errors, the RetryableWriteError and TransientTransactionError
//     labels, and the transient codes: CodeUnavailable, retryable.
//   - duplicate key (11000, 11001): CodeAlreadyExists.
//   - invalid documents and names: CodeInvalidArgument, never retried.
//   - authentication and authorization: CodeUnauthenticated / CodePermissionDenied.
//   - anything else: CodeInternal, not retried.
//
// classifyRead is classify for a read: a read has no effect, so a timeout
// is not an unknown outcome but a transient failure (CodeUnavailable,
// retryable), and a merge whose read timed out may be retried.
func classifyRead(err error) *domain.Error {
	e := classify(err)
	if e != nil && e.Code == domain.CodeOutcomeUnknown {
		return &domain.Error{Code: domain.CodeUnavailable, Retryable: true,
			Message: "MongoDB read timed out: " + errorText(err), Cause: err}
	}
	return e
}

func classify(err error) *domain.Error {
	if err == nil {
		return nil
	}
	var de *domain.Error
	if errors.As(err, &de) {
		return de
	}
	mk := func(code domain.Code, retryable bool, what string) *domain.Error {
		return &domain.Error{Code: code, Retryable: retryable, Message: what + ": " + errorText(err), Cause: err}
	}
	if errors.Is(err, context.Canceled) {
		return mk(domain.CodeCanceled, false, "MongoDB operation canceled")
	}
	var sse topology.ServerSelectionError
	var wqe topology.WaitQueueTimeoutError
	var rpe driver.RetryablePoolError
	if errors.As(err, &sse) || errors.Is(err, mongo.ErrClientDisconnected) || errors.As(err, &wqe) ||
		(errors.As(err, &rpe) && rpe.Retryable()) {
		return mk(domain.CodeUnavailable, true, "MongoDB is unavailable")
	}
	codes, labeled := serverCodes(err)
	for _, c := range codes {
		if _, ok := outcomeUnknownCodes[c]; ok {
			return mk(domain.CodeOutcomeUnknown, false, "MongoDB operation timed out; it may or may not have taken effect")
		}
	}
	if errors.Is(err, context.DeadlineExceeded) || mongo.IsTimeout(err) {
		return mk(domain.CodeOutcomeUnknown, false, "MongoDB operation timed out; it may or may not have taken effect")
	}
	if labeled != nil && (labeled.HasErrorLabel("RetryableWriteError") || labeled.HasErrorLabel("TransientTransactionError")) {
		return mk(domain.CodeUnavailable, true, "MongoDB is temporarily unavailable")
	}
	if mongo.IsNetworkError(err) {
		return mk(domain.CodeUnavailable, true, "MongoDB is unavailable (network error)")
	}
	var ne net.Error
	var ce topology.ConnectionError
	if errors.As(err, &ne) || errors.As(err, &ce) {
		return mk(domain.CodeUnavailable, true, "MongoDB is unavailable (network error)")
	}
	for _, c := range codes {
		if _, ok := transientCodes[c]; ok {
			return mk(domain.CodeUnavailable, true, "MongoDB is temporarily unavailable")
		}
	}
	for _, c := range codes {
		if _, ok := duplicateKeyCodes[c]; ok {
			return mk(domain.CodeAlreadyExists, false, "record already exists")
		}
	}
	for _, c := range codes {
		if _, ok := invalidCodes[c]; ok {
			return mk(domain.CodeInvalidArgument, false, "MongoDB rejected the document or name")
		}
	}
	for _, c := range codes {
		switch c {
		case 18: // AuthenticationFailed
			return mk(domain.CodeUnauthenticated, false, "MongoDB authentication failed")
		case 13: // Unauthorized
			return mk(domain.CodePermissionDenied, false, "MongoDB denied the operation")
		}
	}
	var iae mongo.InvalidArgumentError
	var me mongo.MarshalError
	if errors.As(err, &iae) || errors.As(err, &me) {
		return mk(domain.CodeInvalidArgument, false, "MongoDB driver rejected the operation")
	}
	return mk(domain.CodeInternal, false, "unexpected MongoDB error")
}

// errorText renders err for messages. The text of a server error is
// replaced by its codes and code names: servers put values of the offending
// document into their messages (duplicate keys, validation failures,
// immutable fields, field names), and those are client data that must not
// reach clients' messages or logs. Driver errors (network, selection,
// pool) keep their text; it names hosts and connections only.
func errorText(err error) string {
	msg := err.Error()
	var se mongo.ServerError
	if !errors.As(err, &se) {
		return msg
	}
	codes := se.ErrorCodes()
	sent := false
	for _, c := range codes {
		sent = sent || c != 0
	}
	if !sent {
		// The driver's own error (a network error), not the server's text.
		return msg
	}
	var sb strings.Builder
	sb.WriteString("server error")
	for i, c := range codes {
		if i == 0 {
			sb.WriteString(" code ")
		} else {
			sb.WriteString(", ")
		}
		sb.WriteString(strconv.Itoa(c))
		if name := codeName(c); name != "" {
			sb.WriteString(" (" + name + ")")
		}
	}
	if inner := se.Error(); inner != "" && strings.Contains(msg, inner) {
		return strings.Replace(msg, inner, sb.String(), 1)
	}
	return sb.String()
}

// codeName returns the name of a server error code Sink knows.
func codeName(c int) string {
	for _, table := range []map[int]string{transientCodes, duplicateKeyCodes, invalidCodes, outcomeUnknownCodes} {
		if n, ok := table[c]; ok {
			return n
		}
	}
	switch c {
	case 13:
		return "Unauthorized"
	case 18:
		return "AuthenticationFailed"
	}
	return ""
}

// classifyWrite classifies the error of a write command (insert, update,
// delete, or a bulk of them). It is classify, except where the command may
// have reached the server and taken effect although it failed: then the
// class is OUTCOME_UNKNOWN, not retried by the adapter (the application
// makes it retryable for idempotent operations only):
//
//   - a network error on the connection the command was sent on: the
//     server may have applied it before the connection broke (errors while
//     connecting, before anything was sent, stay retryable UNAVAILABLE);
//   - an error labelled RetryableWriteError without NoWritesPerformed: the
//     driver retried the write once (retryable writes) and the error may be
//     the retry's, saying nothing about the first attempt;
//   - a write concern error: the write was applied on the primary, but its
//     replication was not confirmed.
func classifyWrite(err error) *domain.Error {
	e := classify(err)
	if e == nil || e.Code == domain.CodeOutcomeUnknown || e.Code == domain.CodeCanceled {
		return e
	}
	var why string
	switch {
	case hasLabel(err, driver.NoWritesPerformed):
	case sentOnConnection(err):
		why = "the connection failed after the write was sent"
	case hasLabel(err, "RetryableWriteError"):
		why = "the write was retried and failed again"
	case hasWriteConcernError(err):
		why = "the write concern was not satisfied"
	}
	if why == "" {
		return e
	}
	return &domain.Error{Code: domain.CodeOutcomeUnknown,
		Message: "MongoDB write may or may not have taken effect (" + why + "): " + errorText(err), Cause: err}
}

func hasLabel(err error, label string) bool {
	var le mongo.LabeledError
	return errors.As(err, &le) && le.HasErrorLabel(label)
}

// sentOnConnection reports a network error on an established connection:
// the driver's errors while connecting carry no connection id.
func sentOnConnection(err error) bool {
	var ce topology.ConnectionError
	return mongo.IsNetworkError(err) && errors.As(err, &ce) && ce.ConnectionID != ""
}

func hasWriteConcernError(err error) bool {
	var we mongo.WriteException
	var bwe mongo.BulkWriteException
	return (errors.As(err, &we) && we.WriteConcernError != nil) || (errors.As(err, &bwe) && bwe.WriteConcernError != nil)
}

// serverCodes returns the server error codes carried by err and its labels.
func serverCodes(err error) ([]int, mongo.LabeledError) {
	var codes []int
	var se mongo.ServerError
	if errors.As(err, &se) {
		codes = se.ErrorCodes()
	}
	var le mongo.LabeledError
	if !errors.As(err, &le) {
		le = nil
	}
	return codes, le
}
