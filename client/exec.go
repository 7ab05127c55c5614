package client

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"sync"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
)

// Status is what became of one operation.
type Status int

// Operation statuses (see OperationStatus in sink.proto).
const (
	StatusUnspecified Status = iota
	// StatusApplied: the write or delete was applied by storage.
	StatusApplied
	// StatusAccepted: the write or delete was accepted by the durable
	// queue (RETURN_AFTER_ACCEPTED).
	StatusAccepted
	// StatusFound: the read found the record.
	StatusFound
	// StatusNotFound: the record does not exist (a read or a delete; not
	// an error there).
	StatusNotFound
	// StatusPreconditionFailed: CREATE on an existing record or a
	// revision mismatch (Err says which).
	StatusPreconditionFailed
	// StatusFailed: see Err.
	StatusFailed
)

// Revision is a record's opaque revision.
type Revision []byte

// String renders the revision in base64.
func (r Revision) String() string { return base64.StdEncoding.EncodeToString(r) }

// Result is the outcome of one operation of a batch.
type Result struct {
	Status Status
	// Revision is the record's revision: read (FOUND) or written (APPLIED).
	Revision Revision
	// MutationID is the queued mutation's id (ACCEPTED).
	MutationID string
	// Err is the operation's error (nil when it succeeded; a read or
	// delete of a missing record is StatusNotFound without an error).
	Err error

	doc   *sinkv1.Document
	codec Codec
}

// Found reports whether a read found its record.
func (r Result) Found() bool { return r.Status == StatusFound }

// ContentType is the content type of the document read.
func (r Result) ContentType() string { return r.doc.GetContentType() }

// Decode decodes the document of the result (a read's, or a write's with
// WithReturnDocument) into v with the codec of its content type. It
// returns ErrNotFound when there is no document (nothing found, or not
// returned) and the operation's error when it failed.
func (r Result) Decode(v any) error {
	if r.Err != nil {
		return r.Err
	}
	if r.doc == nil {
		return notFound("the document")
	}
	codec, err := codecFor(r.codec, r.doc.GetContentType())
	if err != nil {
		return err
	}
	if err := codec.Unmarshal(r.doc.GetData(), v); err != nil {
		return &OperationError{Code: codes.InvalidArgument, Reason: "INVALID_ARGUMENT", Message: "cannot decode the document: " + err.Error(), cause: err}
	}
	return nil
}

type opKind uint8

const (
	opRead opKind = iota
	opWrite
	opDelete
)

// op is one operation on its way: its request form, routing hash, size
// and (once final) its result.
type op struct {
	kind  opKind
	route uint64
	size  int
	keyed bool // carries an idempotency key
	read  *sinkv1.ReadOperation
	write *sinkv1.WriteOperation
	del   *sinkv1.DeleteOperation
	codec Codec

	res      Result
	done     bool
	attempts int
	lastErr  *OperationError
	delay    time.Duration // the server's RetryInfo, if any
}

func (o *op) finish(r Result) { o.res, o.done = r, true }

func (o *op) fail(e *OperationError) {
	if e == nil {
		e = &OperationError{Code: codes.Internal, Reason: "INTERNAL", Message: "the operation failed"}
	}
	e.Attempts = o.attempts
	o.finish(Result{Status: StatusFailed, Err: e})
}

// newIdempotencyKey returns a random key (printable ASCII, 24 bytes).
func newIdempotencyKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "c" + base64.RawURLEncoding.EncodeToString(b[:])[:22] + "k"
}

// run sends ops (all of one kind) until each is final: it groups pending
// operations by server, splits each group by the limits, sends the groups
// concurrently (a group's requests one after the other, so that one
// record's operations stay in order) and retries what may be retried.
func (c *Client) run(ctx context.Context, ops []*op, completion sinkv1.CompletionMode) {
	pending := ops
	for attempt := 1; ; attempt++ {
		c.dispatch(ctx, pending, completion)
		if len(pending) > 1 {
			keepOrder(pending)
		}
		var retry []*op
		var delay time.Duration
		for _, o := range pending {
			if !o.done {
				retry = append(retry, o)
				delay = max(delay, o.delay)
			}
		}
		if len(retry) == 0 {
			return
		}
		if attempt >= c.cfg.maxAttempts || ctx.Err() != nil {
			for _, o := range retry {
				o.fail(o.lastErr)
			}
			return
		}
		if err := sleep(ctx, max(delay, c.backoff(attempt))); err != nil {
			for _, o := range retry {
				o.fail(o.lastErr)
			}
			return
		}
		pending = retry
	}
}

// keepOrder makes final, with its last error, every operation that would
// be retried although a later operation of the same record (of the same
// batch) is already final: resending it would apply it after that one and
// break the order of the record's operations. (Records are told apart by
// their routing hash; a collision only costs a retry.)
func keepOrder(pending []*op) {
	var last map[uint64]int
	for i, o := range pending {
		if o.done {
			if last == nil {
				last = make(map[uint64]int)
			}
			last[o.route] = i
		}
	}
	for i, o := range pending {
		if j, ok := last[o.route]; ok && !o.done && j > i {
			o.fail(o.lastErr)
		}
	}
}

// dispatch sends pending operations to their servers: one group per
// server, the groups concurrently.
func (c *Client) dispatch(ctx context.Context, pending []*op, completion sinkv1.CompletionMode) {
	now := time.Now().UnixNano()
	if len(pending) == 1 || c.cfg.wholeBatches || c.single() {
		if s := c.pick(pending[0].route, now); s != nil {
			c.sendGroup(ctx, s, pending, completion)
			return
		}
	}
	groups := make(map[*server][]*op)
	var order []*server
	for _, o := range pending {
		s := c.pick(o.route, now)
		if s == nil {
			o.fail(&OperationError{Code: codes.Canceled, Reason: "CANCELED", Message: "the client is closed"})
			continue
		}
		if _, ok := groups[s]; !ok {
			order = append(order, s)
		}
		groups[s] = append(groups[s], o)
	}
	if len(order) == 1 {
		c.sendGroup(ctx, order[0], groups[order[0]], completion)
		return
	}
	var wg sync.WaitGroup
	for _, s := range order {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.sendGroup(ctx, s, groups[s], completion)
		}()
	}
	wg.Wait()
}

// backoff is a full-jitter exponential backoff before attempt+1.
func (c *Client) backoff(attempt int) time.Duration {
	d := c.cfg.baseBackoff << min(attempt-1, 20)
	if d <= 0 || d > c.cfg.maxBackoff {
		d = c.cfg.maxBackoff
	}
	return time.Duration(mrand.Int64N(int64(d) + 1))
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// sendGroup sends one server's operations in requests within the limits.
func (c *Client) sendGroup(ctx context.Context, s *server, ops []*op, completion sinkv1.CompletionMode) {
	for start := 0; start < len(ops); {
		end, bytes := start, 0
		for end < len(ops) && end-start < c.cfg.maxOps && (end == start || bytes+ops[end].size <= c.cfg.maxBytes) {
			bytes += ops[end].size
			end++
		}
		c.send(ctx, s, ops[start:end], completion)
		start = end
	}
}

// send sends one request and files each operation's result or marks it
// for another attempt.
func (c *Client) send(ctx context.Context, s *server, ops []*op, completion sinkv1.CompletionMode) {
	tr := &callTrace{}
	cctx := ctx
	if c.cfg.noTrace {
		tr.sent.Store(true) // as far as the client can tell
	} else {
		cctx = context.WithValue(ctx, traceKey{}, tr)
	}
	if c.md != nil {
		cctx = metadata.NewOutgoingContext(cctx, c.md)
	}
	if c.cfg.attemptLimit > 0 {
		var cancel context.CancelFunc
		cctx, cancel = context.WithTimeout(cctx, c.cfg.attemptLimit)
		defer cancel()
	}
	for _, o := range ops {
		o.attempts++
		o.delay = 0
	}
	var err error
	switch ops[0].kind {
	case opRead:
		req := &sinkv1.ReadRequest{Operations: make([]*sinkv1.ReadOperation, len(ops))}
		for i, o := range ops {
			req.Operations[i] = o.read
		}
		var resp *sinkv1.ReadResponse
		if resp, err = s.stub.Read(cctx, req); err == nil {
			err = fileResults(ops, resp.GetResults(), func(o *op, r *sinkv1.ReadResult) {
				c.fileOne(o, r.GetStatus(), r.GetError(), Result{Revision: r.GetRevision(), doc: r.GetDocument(), codec: o.codec})
			})
		}
	case opWrite:
		req := &sinkv1.WriteRequest{Operations: make([]*sinkv1.WriteOperation, len(ops)), Completion: completion}
		for i, o := range ops {
			req.Operations[i] = o.write
		}
		var resp *sinkv1.WriteResponse
		if resp, err = s.stub.Write(cctx, req); err == nil {
			err = fileResults(ops, resp.GetResults(), func(o *op, r *sinkv1.WriteResult) {
				c.fileOne(o, r.GetStatus(), r.GetError(), Result{Revision: r.GetRevision(), MutationID: r.GetMutationId(), doc: r.GetDocument(), codec: o.codec})
			})
		}
	case opDelete:
		req := &sinkv1.DeleteRequest{Operations: make([]*sinkv1.DeleteOperation, len(ops)), Completion: completion}
		for i, o := range ops {
			req.Operations[i] = o.del
		}
		var resp *sinkv1.DeleteResponse
		if resp, err = s.stub.Delete(cctx, req); err == nil {
			err = fileResults(ops, resp.GetResults(), func(o *op, r *sinkv1.DeleteResult) {
				c.fileOne(o, r.GetStatus(), r.GetError(), Result{MutationID: r.GetMutationId()})
			})
		}
	}
	if err != nil {
		c.fileCallError(ctx, s, ops, err, tr)
	}
}

type indexed interface{ GetIndex() uint32 }

// fileResults files each result by its index; a response that does not
// answer every operation exactly once is a server bug, and its unanswered
// operations' outcome is unknown.
func fileResults[R indexed](ops []*op, results []R, file func(*op, R)) error {
	seen := make([]bool, len(ops))
	for _, r := range results {
		i := int(r.GetIndex())
		if i >= len(ops) || seen[i] {
			continue
		}
		seen[i] = true
		file(ops[i], r)
	}
	for i, ok := range seen {
		if !ok && !ops[i].done {
			o := ops[i]
			e := &OperationError{Code: codes.Internal, Reason: "INTERNAL", Message: fmt.Sprintf("the server's response has no result for operation %d", i)}
			if o.kind != opRead {
				e = unknownOutcome(o, e.Message, nil)
			}
			o.fail(e)
		}
	}
	return nil
}

// fileOne files one operation's result.
func (c *Client) fileOne(o *op, st sinkv1.OperationStatus, pe *sinkv1.OperationError, r Result) {
	r.Status = Status(st)
	if pe == nil {
		if st == sinkv1.OperationStatus_OPERATION_STATUS_FAILED || st == sinkv1.OperationStatus_OPERATION_STATUS_PRECONDITION_FAILED {
			pe = &sinkv1.OperationError{Code: uint32(codes.Internal), Reason: "INTERNAL", Message: "the operation failed without an error"}
		} else {
			o.finish(r)
			return
		}
	}
	e := opError(pe)
	e.Attempts = o.attempts
	o.lastErr = e
	var again bool
	switch {
	case o.kind == opRead:
		again = e.retryable
	case o.keyed:
		// The key makes a resend harmless whatever became of the first.
		again = e.retryable || e.Reason == "OUTCOME_UNKNOWN"
	default:
		again = e.retryable && notAppliedReason(e.Reason)
	}
	if !again {
		r.Err = e
		o.finish(r)
	}
}

// fileCallError files a whole-request failure for every operation of the
// request: what was certainly not applied may be resent; what may have
// been applied is resent only when it is a read or carries a key.
func (c *Client) fileCallError(ctx context.Context, s *server, ops []*op, err error, tr *callTrace) {
	e := statusError(err)
	answered, sent := tr.answered.Load(), tr.sent.Load()
	// A status the server sent is a whole-request verdict taken before
	// anything was applied, except for the codes of a request that ran
	// (a call cut off at its deadline, a cancellation, a crash). The
	// server's refusal of a deadline too short to start with carries the
	// reason DEADLINE_EXCEEDED: nothing was done.
	ran := e.Code == codes.DeadlineExceeded && e.Reason != "DEADLINE_EXCEEDED" ||
		e.Code == codes.Canceled || e.Code == codes.Internal || e.Code == codes.Unknown || e.Code == codes.DataLoss
	notApplied := !sent || answered && !ran
	if ctx.Err() != nil {
		// The caller gave up: no more attempts.
		for _, o := range ops {
			if answered && e.Reason == "DEADLINE_EXCEEDED" {
				// The server refused the request for its deadline
				// before doing anything: exact, not an unknown outcome.
				ce := *e
				ce.Attempts, ce.cause = o.attempts, ctx.Err()
				o.fail(&ce)
				continue
			}
			if o.kind != opRead && sent && !answered {
				o.fail(unknownOutcome(o, "the caller's context ended after the request was sent: "+ctx.Err().Error(), ctx.Err()))
			} else {
				o.fail(statusError(ctx.Err()))
			}
		}
		return
	}
	if !answered && e.Code == codes.Unavailable {
		// The transport failed: let routing skip the server for a while.
		s.downUntil.Store(time.Now().Add(c.cfg.cooldown).UnixNano())
	}
	var delay time.Duration
	if answered {
		for _, d := range status.Convert(err).Details() {
			if ri, ok := d.(*errdetails.RetryInfo); ok {
				delay = ri.GetRetryDelay().AsDuration()
			}
		}
	}
	transient := e.Code == codes.Unavailable || e.Code == codes.ResourceExhausted || e.Code == codes.Aborted ||
		!answered && (e.Code == codes.DeadlineExceeded || e.Code == codes.Canceled)
	for _, o := range ops {
		o.delay = delay
		switch {
		case notApplied || o.kind == opRead:
			ce := *e
			ce.Attempts = o.attempts
			ce.retryable = transient
			o.lastErr = &ce
			if !transient {
				o.fail(&ce)
			}
		case o.keyed:
			o.lastErr = unknownOutcome(o, e.Message, err)
			o.lastErr.Attempts = o.attempts
		default:
			o.fail(unknownOutcome(o, e.Message+"; not resent: the write has no idempotency key", err))
		}
	}
}

func unknownOutcome(o *op, msg string, cause error) *OperationError {
	return &OperationError{Code: codes.DeadlineExceeded, Reason: "OUTCOME_UNKNOWN", Message: msg, Attempts: o.attempts, retryable: o.keyed, cause: cause}
}

// errOf returns the single operation's error, with ErrNotFound for a read
// or REPLACE of a missing record.
func errOf(r Result) error {
	if r.Err != nil {
		var oe *OperationError
		if errors.As(r.Err, &oe) {
			return oe
		}
		return r.Err
	}
	return nil
}
