package application_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sink-io/sink/adapters/memory"
	"github.com/sink-io/sink/application"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

// recorder wraps a storage and records every batch call.
type recorder struct {
	ports.Storage
	mu     sync.Mutex
	writes [][]ports.WriteOp
	reads  [][]domain.Address
	// failWrite, when set, may replace the result of an operation.
	failWrite func(call int, op ports.WriteOp) error
}

func (r *recorder) Write(ctx context.Context, ops []ports.WriteOp) []ports.WriteResult {
	r.mu.Lock()
	call := len(r.writes)
	r.writes = append(r.writes, append([]ports.WriteOp(nil), ops...))
	r.mu.Unlock()
	out := make([]ports.WriteResult, len(ops))
	var pass []ports.WriteOp
	var idx []int
	for i, op := range ops {
		if r.failWrite != nil {
			if err := r.failWrite(call, op); err != nil {
				out[i].Err = err
				continue
			}
		}
		pass = append(pass, op)
		idx = append(idx, i)
	}
	for j, res := range r.Storage.Write(ctx, pass) {
		out[idx[j]] = res
	}
	return out
}

func (r *recorder) Read(ctx context.Context, addrs []domain.Address) []ports.ReadResult {
	r.mu.Lock()
	r.reads = append(r.reads, append([]domain.Address(nil), addrs...))
	r.mu.Unlock()
	return r.Storage.Read(ctx, addrs)
}

type addProfile struct{}

func (addProfile) Name() string           { return "add" }
func (addProfile) ContentTypes() []string { return []string{domain.ContentTypeJSON} }
func (addProfile) Merge(_ context.Context, input ports.MergeInput) (domain.Document, error) {
	cur, intent := input.Current, input.Intent
	var c, in struct{ N int }
	if cur != nil {
		if err := json.Unmarshal(cur.Data, &c); err != nil {
			return domain.Document{}, err
		}
	}
	if err := json.Unmarshal(intent.Data, &in); err != nil {
		return domain.Document{}, domain.Errorf(domain.CodeInvalidArgument, "bad intent: %v", err)
	}
	return doc(c.N + in.N), nil
}

func doc(n int) domain.Document {
	return domain.Document{ContentType: domain.ContentTypeJSON, Data: []byte(fmt.Sprintf(`{"N":%d}`, n))}
}

func addr(k string) domain.Address {
	return domain.Address{Namespace: "n", Dataset: "d", Key: domain.StringKey(k)}
}

func put(k string, n int) domain.Mutation {
	return domain.Mutation{Kind: domain.MutationPut, Address: addr(k), Document: doc(n)}
}

func merge(k string, n int) domain.Mutation {
	return domain.Mutation{Kind: domain.MutationMerge, Address: addr(k), Merge: domain.MergeIntent{Profile: "add", Intent: doc(n)}}
}

func newService(t *testing.T, st ports.Storage, mutate ...func(*application.Config)) *application.Service {
	t.Helper()
	cfg := application.DefaultConfig()
	cfg.Apply.BaseBackoff, cfg.Apply.MaxBackoff = time.Millisecond, 5*time.Millisecond
	for _, m := range mutate {
		m(&cfg)
	}
	s, err := application.NewService(cfg, st, []ports.MergeProfile{addProfile{}})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func value(t *testing.T, s *application.Service, k string) int {
	t.Helper()
	r, err := s.Read(context.Background(), []domain.Address{addr(k)})
	if err != nil || r[0].Status != application.StatusFound {
		t.Fatalf("read %s: %v %+v", k, err, r)
	}
	var c struct{ N int }
	if err := json.Unmarshal(r[0].Record.Document.Data, &c); err != nil {
		t.Fatal(err)
	}
	return c.N
}

func TestWavesBatchIndependentRecordsIntoOneStorageCall(t *testing.T) {
	rec := &recorder{Storage: memory.New()}
	// Without natural batching: with it, whether the four records fall in
	// one shard (then the fold of "a" starts from the put's hint and reads
	// nothing) depends on the process's random shard seed.
	s := newService(t, rec, func(c *application.Config) { c.Batch.Enabled = false })
	muts := []domain.Mutation{put("a", 1), put("b", 2), put("c", 3), merge("a", 10), put("d", 4), merge("a", 100), merge("b", 5)}
	res, err := s.Write(context.Background(), muts, application.WaitUntilApplied)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r.Status != application.StatusApplied {
			t.Fatalf("op %d: %v %v", i, r.Status, r.Err)
		}
	}
	// Waves: {a,b,c,d} {a(merge, merge folded),b(merge)} -> two storage
	// writes: the two consecutive merges of a fold into one write.
	if len(rec.writes) != 2 || len(rec.writes[0]) != 4 || len(rec.writes[1]) != 2 {
		t.Fatalf("storage write calls: %d with sizes %v", len(rec.writes), sizes(rec.writes))
	}
	// One batch read per wave that holds merges.
	if len(rec.reads) != 1 || len(rec.reads[0]) != 2 {
		t.Fatalf("storage read calls: %v", rec.reads)
	}
	if value(t, s, "a") != 111 || value(t, s, "b") != 7 {
		t.Fatal("wrong merge results")
	}
}

func sizes(w [][]ports.WriteOp) []int {
	var out []int
	for _, b := range w {
		out = append(out, len(b))
	}
	return out
}

func TestMergeRetriesOnConflict(t *testing.T) {
	mem := memory.New()
	conflicts := 0
	rec := &recorder{Storage: mem}
	// A concurrent writer changes the record between read and write twice.
	rec.failWrite = func(call int, op ports.WriteOp) error {
		if op.Condition.Kind == ports.ConditionRevision && conflicts < 2 {
			conflicts++
			mem.Write(context.Background(), []ports.WriteOp{{Kind: ports.WritePut, Address: op.Address, Document: doc(1000)}})
			return domain.Errorf(domain.CodeRevisionMismatch, "changed")
		}
		return nil
	}
	s := newService(t, rec)
	if _, err := s.Write(context.Background(), []domain.Mutation{put("k", 1)}, application.WaitUntilApplied); err != nil {
		t.Fatal(err)
	}
	res, _ := s.Write(context.Background(), []domain.Mutation{merge("k", 5)}, application.WaitUntilApplied)
	if res[0].Status != application.StatusApplied {
		t.Fatalf("merge: %v %v", res[0].Status, res[0].Err)
	}
	if conflicts != 2 || value(t, s, "k") != 1005 {
		t.Fatalf("conflicts %d, value %d; want the merge applied on the latest document", conflicts, value(t, s, "k"))
	}
}

func TestMergeGivesUpAfterBoundedAttempts(t *testing.T) {
	rec := &recorder{Storage: memory.New(), failWrite: func(_ int, op ports.WriteOp) error {
		return domain.Errorf(domain.CodeRevisionMismatch, "always changed")
	}}
	s := newService(t, rec, func(c *application.Config) { c.Merge.MaxAttempts = 4 })
	res, _ := s.Write(context.Background(), []domain.Mutation{merge("k", 1)}, application.WaitUntilApplied)
	if res[0].Err == nil || res[0].Err.Code != domain.CodeAborted || !res[0].Err.Retryable || !strings.Contains(res[0].Err.Message, "4 attempts") {
		t.Fatalf("result: %+v", res[0].Err)
	}
	if len(rec.writes) != 4 {
		t.Fatalf("%d write attempts, want 4", len(rec.writes))
	}
}

func TestOutcomeUnknownIsRetryableOnlyForIdempotentOperations(t *testing.T) {
	rec := &recorder{Storage: memory.New(), failWrite: func(_ int, op ports.WriteOp) error {
		return &domain.Error{Code: domain.CodeOutcomeUnknown, Message: "timeout", Retryable: true}
	}}
	s := newService(t, rec)
	create := put("b", 1)
	create.Mode = domain.PutCreate
	res, _ := s.Write(context.Background(), []domain.Mutation{put("a", 1), create}, application.WaitUntilApplied)
	if !res[0].Err.Retryable || res[1].Err.Retryable {
		t.Fatalf("upsert retryable=%v (want true), create retryable=%v (want false)", res[0].Err.Retryable, res[1].Err.Retryable)
	}
}

func TestUnknownStoreAndNormalization(t *testing.T) {
	s := newService(t, memory.New())
	m := put("k", 1)
	m.Address.Store = "elsewhere"
	res, _ := s.Write(context.Background(), []domain.Mutation{m, put("k", 2)}, application.WaitUntilApplied)
	if res[0].Err == nil || !strings.Contains(res[0].Err.Message, `serves "primary"`) {
		t.Fatalf("unknown store: %+v", res[0].Err)
	}
	if res[1].Status != application.StatusApplied {
		t.Fatalf("empty store must mean the served one: %+v", res[1])
	}
	r, _ := s.Read(context.Background(), []domain.Address{{Store: "primary", Namespace: "n", Dataset: "d", Key: domain.StringKey("k")}})
	if r[0].Status != application.StatusFound {
		t.Fatal("the explicit store name reads the same record")
	}
}

func TestInvalidUTF8Key(t *testing.T) {
	s := newService(t, memory.New())
	res, _ := s.Write(context.Background(), []domain.Mutation{put("\xff", 1)}, application.WaitUntilApplied)
	if res[0].Err == nil || res[0].Err.Code != domain.CodeInvalidArgument || !strings.Contains(res[0].Err.Message, "UTF-8") {
		t.Fatalf("%+v", res[0].Err)
	}
}

type fakeQueue struct {
	mu   sync.Mutex
	got  []domain.Mutation
	fail func(m domain.Mutation) bool
}

func (q *fakeQueue) Submit(_ context.Context, muts []domain.Mutation) []error {
	q.mu.Lock()
	defer q.mu.Unlock()
	errs := make([]error, len(muts))
	for i, m := range muts {
		if q.fail != nil && q.fail(m) {
			errs[i] = domain.Errorf(domain.CodeUnavailable, "broker down")
			continue
		}
		q.got = append(q.got, m)
	}
	return errs
}

func TestAsyncSubmitValidatesFirstAndReportsPerOperation(t *testing.T) {
	q := &fakeQueue{fail: func(m domain.Mutation) bool { return m.Address.Key.StringValue() == "down" }}
	st := memory.New()
	cfg := application.DefaultConfig()
	s, err := application.NewService(cfg, st, []ports.MergeProfile{addProfile{}}, application.WithQueue(q))
	if err != nil {
		t.Fatal(err)
	}
	bad := merge("bad", 1)
	bad.Merge.Profile = "missing"
	res, err := s.Write(context.Background(), []domain.Mutation{put("a", 1), bad, merge("b", 2), put("down", 3)}, application.ReturnAfterAccepted)
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Status != application.StatusAccepted || res[0].MutationID == "" || res[2].Status != application.StatusAccepted {
		t.Fatalf("accepted results: %+v %+v", res[0], res[2])
	}
	if res[1].Err == nil || res[1].Err.Code != domain.CodeInvalidArgument {
		t.Fatalf("invalid op must be rejected before queueing: %+v", res[1])
	}
	if res[3].Status != application.StatusFailed || !res[3].Err.Retryable {
		t.Fatalf("failed publish: %+v", res[3])
	}
	if len(q.got) != 2 || q.got[1].Kind != domain.MutationMerge || q.got[1].Merge.Profile != "add" || q.got[0].Address.Store != "primary" {
		t.Fatalf("queued: %+v", q.got)
	}
	if q.got[0].ID == q.got[1].ID || q.got[0].SubmittedAt.IsZero() {
		t.Fatal("queued mutations need unique ids and a submission time")
	}
	if st.Len() != 0 {
		t.Fatal("async write touched storage")
	}
}

func TestApplyMutationsRetriesTransientFailuresInOrder(t *testing.T) {
	failures := 2
	var mu sync.Mutex
	rec := &recorder{Storage: memory.New()}
	rec.failWrite = func(_ int, op ports.WriteOp) error {
		mu.Lock()
		defer mu.Unlock()
		if op.Address.Key.StringValue() == "flaky" && failures > 0 {
			failures--
			return domain.Errorf(domain.CodeUnavailable, "db blip")
		}
		return nil
	}
	s := newService(t, rec)
	invalid := merge("x", 1)
	invalid.Merge.Profile = "gone"
	muts := []domain.Mutation{put("flaky", 1), merge("flaky", 10), put("other", 5), invalid, merge("flaky", 100)}
	for i := range muts {
		muts[i].ID = fmt.Sprintf("m%d", i)
	}
	out := s.ApplyMutations(context.Background(), muts)
	for _, i := range []int{0, 1, 2, 4} {
		if out[i].Err != nil {
			t.Fatalf("mutation %d: %v", i, out[i].Err)
		}
	}
	if out[0].Attempts != 3 || out[2].Attempts != 1 {
		t.Fatalf("attempts: %+v", out)
	}
	if domain.CodeOf(out[3].Err) != domain.CodeInvalidArgument || !strings.Contains(out[3].Err.Error(), "mutation m3 (merge)") {
		t.Fatalf("unknown profile must fail permanently, naming the mutation: %v", out[3].Err)
	}
	// The merges ran after the put, in order: 1 + 10 + 100.
	if value(t, s, "flaky") != 111 || value(t, s, "other") != 5 {
		t.Fatalf("flaky = %d", value(t, s, "flaky"))
	}
}

func TestApplyMutationsExhaustsRetriesAndStopsOnCancel(t *testing.T) {
	rec := &recorder{Storage: memory.New(), failWrite: func(int, ports.WriteOp) error {
		return domain.Errorf(domain.CodeUnavailable, "db down")
	}}
	s := newService(t, rec, func(c *application.Config) { c.Apply.MaxAttempts = 3 })
	out := s.ApplyMutations(context.Background(), []domain.Mutation{put("a", 1), put("a", 2)})
	for i, o := range out {
		if o.Err == nil || o.Attempts != 3 || !strings.Contains(o.Err.Error(), "retries exhausted after 3 attempts") {
			t.Fatalf("mutation %d: %+v", i, o)
		}
	}
	// The second put never ran before the first: it was blocked behind it.
	for _, w := range rec.writes {
		if len(w) != 1 || string(w[0].Document.Data) != `{"N":1}` {
			t.Fatalf("the blocked mutation reached storage: %v", rec.writes)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	out = s.ApplyMutations(ctx, []domain.Mutation{put("b", 1)})
	if domain.CodeOf(out[0].Err) != domain.CodeCanceled {
		t.Fatalf("canceled apply: %v", out[0].Err)
	}
}

func TestNewServiceRejectsBadProfilesAndConfig(t *testing.T) {
	if _, err := application.NewService(application.DefaultConfig(), memory.New(), []ports.MergeProfile{addProfile{}, addProfile{}}); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Fatalf("duplicate profile: %v", err)
	}
	cfg := application.DefaultConfig()
	cfg.Limits.MaxOperations = 0
	cfg.Merge.MaxAttempts = 0
	err := cfg.Validate()
	if err == nil || !strings.Contains(err.Error(), "max operations") || !strings.Contains(err.Error(), "max attempts") {
		t.Fatalf("config errors must all be reported: %v", err)
	}
	if _, err := application.NewService(cfg, memory.New(), nil); err == nil {
		t.Fatal("invalid config accepted")
	}
}

func TestMutationIDsAreUUIDs(t *testing.T) {
	seen := map[string]bool{}
	for i := 0; i < 1000; i++ {
		id := application.NewMutationID()
		if len(id) != 36 || id[14] != '4' || seen[id] {
			t.Fatalf("bad or repeated id %q", id)
		}
		seen[id] = true
	}

}

// Puts and merges' results reach storage handed over
// (ports.WriteOp.HandOver): the service never changes a document's bytes
// once it has them, and its callers hand them over (Service.Write), so a
// storage may keep them instead of copying them. Deletes carry no document.
func TestWritesHandDocumentsOverToStorage(t *testing.T) {
	rec := &recorder{Storage: memory.New()}
	s := newService(t, rec, func(c *application.Config) { c.Batch.Enabled = false })
	for _, muts := range [][]domain.Mutation{{put("a", 1), put("b", 2)}, {merge("a", 10), merge("c", 3)}} {
		res, err := s.Write(context.Background(), muts, application.WaitUntilApplied)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range res {
			if r.Status != application.StatusApplied {
				t.Fatalf("op %d: %v %v", i, r.Status, r.Err)
			}
		}
	}
	puts := 0
	for _, call := range rec.writes {
		for _, op := range call {
			if op.Kind == ports.WritePut {
				puts++
				if !op.HandOver {
					t.Fatalf("put of %s not handed over", op.Address)
				}
			}
		}
	}
	if puts != 4 {
		t.Fatalf("%d puts reached storage, want 4 (two puts, two merges)", puts)
	}
	if value(t, s, "a") != 11 || value(t, s, "c") != 3 {
		t.Fatal("merges on handed-over documents went wrong")
	}
}
