package cli

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sink-io/sink/domain"
	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
)

// output is the JSON the CLI prints for one operation.
type output struct {
	Status      string          `json:"status"`
	Revision    string          `json:"revision,omitempty"`
	MutationID  string          `json:"mutation_id,omitempty"`
	ContentType string          `json:"content_type,omitempty"`
	Document    json.RawMessage `json:"document,omitempty"`
	DataBase64  string          `json:"data_base64,omitempty"`
	Error       *outputError    `json:"error,omitempty"`
}

type outputError struct {
	Code      string `json:"code"`
	Reason    string `json:"reason"`
	Message   string `json:"message"`
	Retryable bool   `json:"retryable"`
}

func (c *command) call(ctx context.Context, client sinkv1.SinkClient, r *request) int {
	completion := sinkv1.CompletionMode_COMPLETION_MODE_WAIT_UNTIL_APPLIED
	if c.async {
		completion = sinkv1.CompletionMode_COMPLETION_MODE_RETURN_AFTER_ACCEPTED
	}
	switch c.name {
	case "scan":
		return c.scan(ctx, client, r)
	case "count":
		return c.count(ctx, client, r)
	case "read":
		resp, err := client.Read(ctx, &sinkv1.ReadRequest{Operations: []*sinkv1.ReadOperation{{Address: r.address}}})
		if err != nil {
			return c.callError(err)
		}
		res := resp.GetResults()[0]
		out := output{Status: statusName(res.GetStatus()), Error: toOutputError(res.GetError())}
		if res.GetStatus() == sinkv1.OperationStatus_OPERATION_STATUS_FOUND {
			out.Revision = base64.StdEncoding.EncodeToString(res.GetRevision())
			c.setDocument(&out, res.GetDocument())
		}
		return c.print(out, res.GetStatus(), res.GetError())
	case "put", "merge":
		write := func(doc *sinkv1.Document) (*sinkv1.WriteResult, error) {
			op := &sinkv1.WriteOperation{}
			if c.name == "put" {
				op.Kind = &sinkv1.WriteOperation_Put{Put: &sinkv1.PutOperation{Address: r.address, Document: doc, Mode: r.mode, ExpectedRevision: r.revision, IdempotencyKey: c.idempotencyKey, ReturnDocument: c.returnDocument}}
			} else {
				op.Kind = &sinkv1.WriteOperation_Merge{Merge: &sinkv1.MergeOperation{Address: r.address, Profile: c.profile, Intent: doc, IdempotencyKey: c.idempotencyKey, ReturnDocument: c.returnDocument}}
			}
			resp, err := client.Write(ctx, &sinkv1.WriteRequest{Operations: []*sinkv1.WriteOperation{op}, Completion: completion})
			if err != nil {
				return nil, err
			}
			return resp.GetResults()[0], nil
		}
		res, err := write(r.doc)
		if err == nil && needsBSON(res.GetError()) && r.jsonBody != nil && r.doc.GetContentType() == domain.ContentTypeJSON {
			// The store accepts only BSON: send the same JSON as BSON.
			doc, cerr := jsonToBSON(r.jsonBody)
			if cerr == nil {
				res, err = write(doc)
			}
		}
		if err != nil {
			return c.callError(err)
		}
		out := writeOutput(res.GetStatus(), res.GetRevision(), res.GetMutationId(), res.GetError())
		if d := res.GetDocument(); d != nil {
			c.setDocument(&out, d)
		}
		return c.print(out, res.GetStatus(), res.GetError())
	default: // delete
		resp, err := client.Delete(ctx, &sinkv1.DeleteRequest{
			Operations: []*sinkv1.DeleteOperation{{Address: r.address, ExpectedRevision: r.revision, IdempotencyKey: c.idempotencyKey}}, Completion: completion})
		if err != nil {
			return c.callError(err)
		}
		res := resp.GetResults()[0]
		return c.print(writeOutput(res.GetStatus(), nil, res.GetMutationId(), res.GetError()), res.GetStatus(), res.GetError())
	}
}

// needsBSON recognizes the storage's answer that it holds only BSON.
func needsBSON(e *sinkv1.OperationError) bool {
	return e != nil && codes.Code(e.GetCode()) == codes.InvalidArgument && strings.Contains(e.GetMessage(), "accepts only "+domain.ContentTypeBSON)
}

func writeOutput(st sinkv1.OperationStatus, rev []byte, mutationID string, e *sinkv1.OperationError) output {
	out := output{Status: statusName(st), MutationID: mutationID, Error: toOutputError(e)}
	if len(rev) > 0 {
		out.Revision = base64.StdEncoding.EncodeToString(rev)
	}
	return out
}

// setDocument renders the document: JSON as is, BSON as Extended JSON that
// reads back as the same types (see bsonToJSON; --canonical: canonical
// Extended JSON), anything else as base64.
func (c *command) setDocument(out *output, d *sinkv1.Document) {
	out.ContentType = d.GetContentType()
	switch {
	case d.GetContentType() == domain.ContentTypeBSON:
		if j, err := bsonToJSON(d.GetData(), c.canonical); err == nil {
			out.Document = j
			return
		}
	case d.GetContentType() == domain.ContentTypeJSON && json.Valid(d.GetData()):
		out.Document = d.GetData()
		return
	}
	out.DataBase64 = base64.StdEncoding.EncodeToString(d.GetData())
}

func statusName(s sinkv1.OperationStatus) string {
	return strings.TrimPrefix(s.String(), "OPERATION_STATUS_")
}

func toOutputError(e *sinkv1.OperationError) *outputError {
	if e == nil {
		return nil
	}
	return &outputError{Code: codeName(codes.Code(e.GetCode())), Reason: e.GetReason(), Message: e.GetMessage(), Retryable: e.GetRetryable()}
}

// codeName is the canonical name of a gRPC status code, as the API
// documents it and grpcurl prints it: "INVALID_ARGUMENT", "UNAVAILABLE".
// The CLI names codes this way everywhere (stderr and JSON output).
func codeName(c codes.Code) string {
	if int(c) < len(canonicalCodes) {
		return canonicalCodes[c]
	}
	return fmt.Sprintf("CODE_%d", uint32(c))
}

var canonicalCodes = [...]string{
	codes.OK: "OK", codes.Canceled: "CANCELLED", codes.Unknown: "UNKNOWN", codes.InvalidArgument: "INVALID_ARGUMENT",
	codes.DeadlineExceeded: "DEADLINE_EXCEEDED", codes.NotFound: "NOT_FOUND", codes.AlreadyExists: "ALREADY_EXISTS",
	codes.PermissionDenied: "PERMISSION_DENIED", codes.ResourceExhausted: "RESOURCE_EXHAUSTED",
	codes.FailedPrecondition: "FAILED_PRECONDITION", codes.Aborted: "ABORTED", codes.OutOfRange: "OUT_OF_RANGE",
	codes.Unimplemented: "UNIMPLEMENTED", codes.Internal: "INTERNAL", codes.Unavailable: "UNAVAILABLE",
	codes.DataLoss: "DATA_LOSS", codes.Unauthenticated: "UNAUTHENTICATED",
}

// errorLine is how the CLI reports an operation's error on standard
// error: the code's canonical name, Sink's finer reason when it says more
// ("FAILED_PRECONDITION (REVISION_MISMATCH)"), and the message.
func errorLine(code codes.Code, reason, message string) string {
	name := codeName(code)
	if reason != "" && reason != name {
		name += " (" + reason + ")"
	}
	return name + ": " + message
}

// print writes the result as indented JSON and returns its exit code.
func (c *command) print(out output, st sinkv1.OperationStatus, e *sinkv1.OperationError) int {
	// Indented, and without HTML escaping: a document's "<" stays "<".
	// Number literals of the document are printed exactly as rendered.
	var pretty bytes.Buffer
	enc := json.NewEncoder(&pretty)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		return c.fail(ExitFailed, "cannot render the result: %v", err)
	}
	if _, err := c.io.Stdout.Write(pretty.Bytes()); err != nil {
		return c.fail(ExitFailed, "cannot write the result: %v", err)
	}
	code := c.exitCode(st, e)
	if e != nil {
		fmt.Fprintf(c.io.Stderr, "sink %s: %s\n", c.name, errorLine(codes.Code(e.GetCode()), e.GetReason(), e.GetMessage()))
	}
	return code
}

func (c *command) exitCode(st sinkv1.OperationStatus, e *sinkv1.OperationError) int {
	switch st {
	case sinkv1.OperationStatus_OPERATION_STATUS_FOUND, sinkv1.OperationStatus_OPERATION_STATUS_APPLIED, sinkv1.OperationStatus_OPERATION_STATUS_ACCEPTED:
		return ExitOK
	case sinkv1.OperationStatus_OPERATION_STATUS_NOT_FOUND:
		if c.name == "delete" && e == nil {
			return ExitOK
		}
		return ExitNotFound
	case sinkv1.OperationStatus_OPERATION_STATUS_PRECONDITION_FAILED:
		return ExitPrecondition
	}
	if e != nil {
		return codeExit(codes.Code(e.GetCode()))
	}
	return ExitFailed
}

func codeExit(code codes.Code) int {
	switch code {
	case codes.Unauthenticated, codes.PermissionDenied:
		return ExitAuth
	case codes.Unavailable, codes.DeadlineExceeded, codes.ResourceExhausted:
		return ExitUnavailable
	case codes.NotFound:
		return ExitNotFound
	case codes.FailedPrecondition, codes.AlreadyExists:
		return ExitFailed
	default:
		return ExitFailed
	}
}

// callError reports a whole-call failure (transport or status error).
func (c *command) callError(err error) int {
	st, _ := status.FromError(err)
	msg := st.Message()
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && !strings.Contains(msg, "retry") {
			msg += fmt.Sprintf(" (retry after %s)", ri.GetRetryDelay().AsDuration())
		}
	}
	return c.fail(codeExit(st.Code()), "%s", errorLine(st.Code(), "", msg))
}
