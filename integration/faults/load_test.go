package faults

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/internal/testkit/countprofile"
	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
)

const namespace = "faults"

// load drives per-record sequenced merges of the count profile: record k
// gets the intents s000001, s000002, ... one request after the other, so
// every record's mutations have a known order. A request answered with a
// retryable error is not sent again (its sequence number is skipped), so
// that every duplicate seen in storage comes from Sink, not from the client.
type load struct {
	dataset   string
	records   int
	perRecord int
	interval  time.Duration
	sync      bool // WAIT_UNTIL_APPLIED instead of RETURN_AFTER_ACCEPTED

	mu        sync.Mutex
	acked     map[string][]int  // record key → sequence numbers acknowledged (accepted or applied)
	ids       map[string]seqRef // mutation id of an accepted mutation → its record and sequence number
	failed    map[string][]int  // record key → sequence numbers answered with a retryable error
	retryable int
	wrong     []string // client-visible wrong answers
	unknown   int      // OUTCOME_UNKNOWN answers (may or may not be applied)
}

func newLoad(dataset string, records, perRecord int, interval time.Duration, sync bool) *load {
	return &load{dataset: dataset, records: records, perRecord: perRecord, interval: interval, sync: sync,
		acked: map[string][]int{}, failed: map[string][]int{}, ids: map[string]seqRef{}}
}

// seqRef is one mutation of a load: record key and sequence number.
type seqRef struct {
	key string
	seq int
}

func (l *load) key(r int) string { return fmt.Sprintf("r%03d", r) }

func (l *load) address(key string) *sinkv1.RecordAddress {
	return &sinkv1.RecordAddress{Namespace: namespace, Dataset: l.dataset, Key: &sinkv1.RecordKey{Kind: &sinkv1.RecordKey_String_{String_: key}}}
}

func seqID(s int) string { return fmt.Sprintf("s%06d", s) }

// run sends every record's mutations and returns when all were answered.
func (l *load) run(ctx context.Context, client sinkv1.SinkClient) {
	var wg sync.WaitGroup
	for r := range l.records {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := l.key(r)
			next := time.Now()
			for s := 1; s <= l.perRecord && ctx.Err() == nil; s++ {
				l.send(ctx, client, key, s)
				next = next.Add(l.interval)
				if d := time.Until(next); d > 0 {
					select {
					case <-ctx.Done():
					case <-time.After(d): // pacing of the load, not synchronisation
					}
				} else {
					next = time.Now()
				}
			}
		}()
	}
	wg.Wait()
}

func (l *load) send(ctx context.Context, client sinkv1.SinkClient, key string, s int) {
	intent, err := countprofile.Encode(domain.ContentTypeJSON, countprofile.Intent{Add: 1, ID: seqID(s)})
	if err != nil {
		l.note(key, s, "wrong", "cannot encode the intent: "+err.Error())
		return
	}
	completion, want := sinkv1.CompletionMode_COMPLETION_MODE_RETURN_AFTER_ACCEPTED, sinkv1.OperationStatus_OPERATION_STATUS_ACCEPTED
	if l.sync {
		completion, want = sinkv1.CompletionMode_COMPLETION_MODE_WAIT_UNTIL_APPLIED, sinkv1.OperationStatus_OPERATION_STATUS_APPLIED
	}
	rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	resp, err := client.Write(rctx, &sinkv1.WriteRequest{Completion: completion, Operations: []*sinkv1.WriteOperation{{
		Kind: &sinkv1.WriteOperation_Merge{Merge: &sinkv1.MergeOperation{
			Address: l.address(key), Profile: countprofile.Name,
			Intent: &sinkv1.Document{ContentType: intent.ContentType, Data: intent.Data}}}}}})
	switch {
	case err != nil:
		if ctx.Err() != nil {
			return // the trial ended; not an answer of Sink
		}
		if retryableCode(status.Code(err)) {
			l.note(key, s, "retryable", "")
			// Do not hammer a server that is going away.
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
			return
		}
		l.note(key, s, "wrong", fmt.Sprintf("Write: %v", status.Code(err)))
	case len(resp.GetResults()) != 1:
		l.note(key, s, "wrong", fmt.Sprintf("%d results for one operation", len(resp.GetResults())))
	default:
		res := resp.GetResults()[0]
		switch {
		case res.GetStatus() == want && (l.sync || res.GetMutationId() != ""):
			l.note(key, s, "acked", res.GetMutationId())
		case res.GetStatus() == sinkv1.OperationStatus_OPERATION_STATUS_FAILED && res.GetError().GetRetryable():
			l.note(key, s, "retryable", "")
		case res.GetStatus() == sinkv1.OperationStatus_OPERATION_STATUS_FAILED && res.GetError().GetReason() == "OUTCOME_UNKNOWN":
			// The honest answer for a merge without an idempotency key
			// whose write storage took but did not confirm (a database
			// pause under synchronous load): it may or may not be applied.
			l.note(key, s, "unknown", "")
		default:
			l.note(key, s, "wrong", fmt.Sprintf("status %v, error code %d reason %s retryable %v",
				res.GetStatus(), res.GetError().GetCode(), res.GetError().GetReason(), res.GetError().GetRetryable()))
		}
	}
}

func retryableCode(c codes.Code) bool {
	switch c {
	case codes.Unavailable, codes.DeadlineExceeded, codes.ResourceExhausted, codes.Aborted:
		return true
	}
	return false
}

func (l *load) note(key string, s int, kind, detail string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch kind {
	case "acked":
		l.acked[key] = append(l.acked[key], s)
		if detail != "" {
			l.ids[detail] = seqRef{key, s}
		}
	case "retryable":
		l.retryable++
		l.failed[key] = append(l.failed[key], s)
	case "unknown":
		l.unknown++
		l.failed[key] = append(l.failed[key], s)
	default:
		l.wrong = append(l.wrong, key+" "+seqID(s)+": "+detail)
	}
}

// applied reads every record of the load through the server and returns the
// sequence numbers each record's merges appended, in application order.
func (l *load) applied(ctx context.Context, client sinkv1.SinkClient) (map[string][]int, error) {
	ops := make([]*sinkv1.ReadOperation, l.records)
	for r := range ops {
		ops[r] = &sinkv1.ReadOperation{Address: l.address(l.key(r))}
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := client.Read(rctx, &sinkv1.ReadRequest{Operations: ops})
	if err != nil {
		return nil, fmt.Errorf("cannot read the records: %w", err)
	}
	out := map[string][]int{}
	for r, res := range resp.GetResults() {
		key := l.key(r)
		switch res.GetStatus() {
		case sinkv1.OperationStatus_OPERATION_STATUS_NOT_FOUND:
			continue
		case sinkv1.OperationStatus_OPERATION_STATUS_FOUND:
		default:
			return nil, fmt.Errorf("cannot read record %s: status %v code %d", key, res.GetStatus(), res.GetError().GetCode())
		}
		var doc countprofile.Counter
		d := domain.Document{ContentType: res.GetDocument().GetContentType(), Data: res.GetDocument().GetData()}
		if err := countprofile.Decode(d, &doc); err != nil {
			return nil, fmt.Errorf("cannot decode record %s: %w", key, err)
		}
		if doc.N != len(doc.IDs) {
			return nil, fmt.Errorf("record %s: n=%d but %d ids: a merge was torn", key, doc.N, len(doc.IDs))
		}
		seqs := make([]int, len(doc.IDs))
		for i, id := range doc.IDs {
			n, err := strconv.Atoi(strings.TrimPrefix(id, "s"))
			if err != nil || !strings.HasPrefix(id, "s") {
				return nil, fmt.Errorf("record %s holds an intent id this load never sent", key)
			}
			seqs[i] = n
		}
		out[key] = seqs
	}
	return out, nil
}

// counts is what happened to the mutations of one trial.
type counts struct {
	Accepted   int // acknowledged to the client (accepted, or applied for synchronous writes)
	Applied    int // distinct sequence numbers found in storage
	Lost       int // acknowledged, never applied
	Twice      int // extra applications (a mutation applied n times counts n-1)
	OutOfOrder int // mutations first applied after a later mutation of the same record
	Unasked    int // applications of sequence numbers that were never sent
	Ambiguous  int // answered with a retryable error or an unknown outcome, applied all the same
	// DeadLettered of the Lost: the worker dead-lettered them (its log
	// says so) instead of applying them.
	DeadLettered int
	// DeadApplied: mutations a worker dead-lettered although they were
	// applied (a dead letter must only ever be a mutation that was not).
	DeadApplied int
}

// analyze compares what the clients were told with what storage holds.
func analyze(acked, failed, applied map[string][]int, sent map[string]int) counts {
	var c counts
	keys := map[string]bool{}
	for k := range acked {
		keys[k] = true
	}
	for k := range applied {
		keys[k] = true
	}
	for k := range keys {
		seen := map[int]int{}
		maxFirst := 0
		for _, s := range applied[k] {
			seen[s]++
			if seen[s] > 1 {
				c.Twice++
				continue
			}
			if s < maxFirst {
				c.OutOfOrder++
			}
			if s > maxFirst {
				maxFirst = s
			}
			if s < 1 || s > sent[k] {
				c.Unasked++
			}
		}
		c.Applied += len(seen)
		for _, s := range acked[k] {
			c.Accepted++
			if seen[s] == 0 {
				c.Lost++
			}
		}
		for _, s := range failed[k] {
			if seen[s] > 0 {
				c.Ambiguous++
			}
		}
	}
	return c
}

// lostSeqs lists the acknowledged mutations that storage does not hold.
func lostSeqs(acked, applied map[string][]int) map[seqRef]bool {
	lost := map[seqRef]bool{}
	for k, seqs := range acked {
		have := map[int]bool{}
		for _, s := range applied[k] {
			have[s] = true
		}
		for _, s := range seqs {
			if !have[s] {
				lost[seqRef{k, s}] = true
			}
		}
	}
	return lost
}

// mutationIDs returns the mutation ids of the accepted mutations.
func (l *load) mutationIDs() map[string]seqRef {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]seqRef, len(l.ids))
	for id, r := range l.ids {
		out[id] = r
	}
	return out
}

// snapshot returns copies of what the clients were told.
func (l *load) snapshot() (acked, failed map[string][]int, sent map[string]int, retryable int, wrong []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	acked, failed, sent = map[string][]int{}, map[string][]int{}, map[string]int{}
	for k, v := range l.acked {
		acked[k] = append([]int(nil), v...)
	}
	for k, v := range l.failed {
		failed[k] = append([]int(nil), v...)
	}
	for r := range l.records {
		k := l.key(r)
		all := append(append([]int(nil), l.acked[k]...), l.failed[k]...)
		sort.Ints(all)
		if len(all) > 0 {
			sent[k] = all[len(all)-1]
		}
		// Requests cut short by the end of the trial may still be applied.
		if sent[k] < l.perRecord {
			sent[k] = l.perRecord
		}
	}
	return acked, failed, sent, l.retryable, append([]string(nil), l.wrong...)
}
