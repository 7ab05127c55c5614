package application_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sink-io/sink/adapters/memory"
	"github.com/sink-io/sink/application"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

// in puts m in store.
func in(store string, m domain.Mutation) domain.Mutation {
	m.Address.Store = store
	return m
}

func twoStores(t *testing.T, mutate ...func(*application.Config)) (*application.Service, *memory.Store, *memory.Store) {
	t.Helper()
	primary, archive := memory.New(), memory.New()
	cfg := application.DefaultConfig()
	cfg.Apply.BaseBackoff, cfg.Apply.MaxBackoff = 0, 0
	for _, m := range mutate {
		m(&cfg)
	}
	s, err := application.NewService(cfg, primary, []ports.MergeProfile{addProfile{}},
		application.WithStores(map[string]ports.Storage{"archive": archive}))
	if err != nil {
		t.Fatal(err)
	}
	return s, primary, archive
}

// stored reads record k of store st directly from its adapter.
func stored(t *testing.T, st ports.Storage, store, k string) (int, bool) {
	t.Helper()
	a := addr(k)
	a.Store = store
	r := st.Read(context.Background(), []domain.Address{a})[0]
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	if !r.Found {
		return 0, false
	}
	return counter(t, r.Record.Document), true
}

// A request that spans stores: each operation goes to its store's adapter
// (an empty store means the default), one record's operations keep their
// order, and an unknown store fails on its own, naming the stores served.
func TestRequestSpanningStores(t *testing.T) {
	s, primary, archive := twoStores(t)
	ctx := context.Background()
	res, err := s.Write(ctx, []domain.Mutation{
		put("a", 1),                    // default store
		in("archive", put("a", 10)),    // same key, other store: another record
		in("archive", merge("a", 5)),   // after the put of its record
		in("primary", merge("a", 2)),   // the default store named
		in("nowhere", put("a", 100)),   // not served
		in("archive", merge("b", 7)),   // a record of the archive only
		merge("a", 3),                  // after the merge of its record
		in("archive", put("c", 1)),     //
		in("primary", put("c", 2)),     //
		in("archive", merge("c", 1)),   //
		in("primary", merge("c", 40)),  //
		in("archive", merge("a", 100)), //
	}, application.WaitUntilApplied)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if i == 4 {
			if r.Err == nil || r.Err.Code != domain.CodeInvalidArgument || !strings.Contains(r.Err.Message, `"archive", "primary"`) ||
				!strings.HasPrefix(r.Err.Message, "operations[4] (put): address.store:") {
				t.Fatalf("operation 4 on an unknown store: %+v", r.Err)
			}
			continue
		}
		if r.Err != nil {
			t.Fatalf("operation %d: %v", i, r.Err)
		}
	}
	for _, c := range []struct {
		st    ports.Storage
		store string
		key   string
		want  int
	}{
		{primary, "primary", "a", 6}, {archive, "archive", "a", 115}, {archive, "archive", "b", 7},
		{archive, "archive", "c", 2}, {primary, "primary", "c", 42},
	} {
		if got, ok := stored(t, c.st, c.store, c.key); !ok || got != c.want {
			t.Errorf("store %s record %s: %d (found %v), want %d", c.store, c.key, got, ok, c.want)
		}
	}
	if _, ok := stored(t, primary, "primary", "b"); ok {
		t.Error("the archive's record b is in the primary store too")
	}
	// Reads route the same way.
	addrs := []domain.Address{addr("a"), addr("a"), addr("a")}
	addrs[1].Store, addrs[2].Store = "archive", "nowhere"
	got, err := s.Read(ctx, addrs)
	if err != nil {
		t.Fatal(err)
	}
	if got[0].Status != application.StatusFound || counter(t, got[0].Record.Document) != 6 ||
		got[1].Status != application.StatusFound || counter(t, got[1].Record.Document) != 115 ||
		got[2].Err == nil || got[2].Err.Code != domain.CodeInvalidArgument {
		t.Fatalf("reads across stores: %+v", got)
	}
	if st := s.Stores(); len(st) != 2 || st[0] != "archive" || st[1] != "primary" {
		t.Fatalf("Stores() = %v", st)
	}
}

// Queued mutations carry their store: the worker applies each to its
// store's adapter, and resolves them there.
func TestQueuedMutationsGoToTheirStore(t *testing.T) {
	s, primary, archive := twoStores(t)
	ctx := context.Background()
	out := s.ApplyMutations(ctx, []domain.Mutation{
		queued(in("archive", merge("q", 4)), "m1", 1), queued(merge("q", 1), "m2", 2), queued(in("archive", merge("q", 4)), "m3", 3),
	})
	for i, o := range out {
		if o.Err != nil {
			t.Fatalf("mutation %d: %v", i, o.Err)
		}
	}
	if a, _ := stored(t, archive, "archive", "q"); a != 8 {
		t.Fatalf("archive q = %d, want 8", a)
	}
	if p, _ := stored(t, primary, "primary", "q"); p != 1 {
		t.Fatalf("primary q = %d, want 1", p)
	}
	res := s.ResolveMutations(ctx, []domain.Mutation{queued(in("archive", merge("q", 4)), "m3", 3), queued(merge("q", 1), "m3", 3)})
	if res[0] != ports.ResolutionApplied || res[1] != ports.ResolutionNotApplied {
		t.Fatalf("resolutions %v, want applied in the archive, not applied in the primary store", res)
	}
}

// blockingStore holds every write until release is closed.
type blockingStore struct {
	ports.Storage
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

func (b *blockingStore) Write(ctx context.Context, ops []ports.WriteOp) []ports.WriteResult {
	b.once.Do(func() { close(b.entered) })
	<-b.release
	return b.Storage.Write(ctx, ops)
}

// A store whose storage hangs does not hold up another store's writes: each
// store has its own batches (with one shard per store here, a shared shard
// would queue the other store's writes behind the hung batch).
func TestSlowStoreDoesNotHoldUpAnother(t *testing.T) {
	slow := &blockingStore{Storage: memory.New(), entered: make(chan struct{}), release: make(chan struct{})}
	cfg := application.DefaultConfig()
	cfg.Batch.Shards = 1
	s, err := application.NewService(cfg, memory.New(), []ports.MergeProfile{addProfile{}},
		application.WithStores(map[string]ports.Storage{"slow": slow}))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := s.Write(context.Background(), []domain.Mutation{in("slow", put("s", 1))}, application.WaitUntilApplied)
		done <- err
	}()
	<-slow.entered
	for i := range 20 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		res, err := s.Write(ctx, []domain.Mutation{merge("fast", 1)}, application.WaitUntilApplied)
		cancel()
		if err != nil || res[0].Err != nil {
			t.Fatalf("write %d to the default store while the slow store hangs: %v %+v", i, err, res)
		}
	}
	close(slow.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := value(t, s, "fast"); n != 20 {
		t.Fatalf("fast = %d, want 20", n)
	}
}

func TestStoresMustBeDistinctAndNamed(t *testing.T) {
	cfg := application.DefaultConfig()
	for _, extra := range []map[string]ports.Storage{{"primary": memory.New()}, {"": memory.New()}, {"x": nil}} {
		if _, err := application.NewService(cfg, memory.New(), nil, application.WithStores(extra)); err == nil {
			t.Errorf("stores %v accepted", extra)
		}
	}
}

// counter is the N of a document of the add profile.
func counter(t *testing.T, d domain.Document) int {
	t.Helper()
	var v struct{ N int }
	if err := json.Unmarshal(d.Data, &v); err != nil {
		t.Fatal(err)
	}
	return v.N
}
