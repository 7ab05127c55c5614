package application

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

// WithStores makes the service serve more logical stores besides
// Config.Store (whose storage NewService gets): each name maps to the
// storage adapter that holds it. Every operation is routed by its
// address's store (empty: Config.Store); a storage call never spans two
// stores, natural batching and folding are per store (each store has its
// own combiner shards, so a slow store does not hold up another's
// batches), and an operation naming a store that is not served fails on
// its own, naming the stores served.
func WithStores(stores map[string]ports.Storage) Option {
	return func(s *Service) { s.extraStores = stores }
}

// storeSet is the storage of a service that serves several stores: a
// ports.Storage that splits every call by store and calls each store's
// adapter (concurrently when a call spans stores).
type storeSet struct {
	names  []string // served stores, sorted
	byName map[string]ports.Storage
	index  map[string]int // store → position in names (its shard group)
}

func newStoreSet(def string, storage ports.Storage, extra map[string]ports.Storage) (*storeSet, error) {
	ss := &storeSet{byName: map[string]ports.Storage{def: storage}, index: map[string]int{}}
	for name, st := range extra {
		if name == "" || st == nil {
			return nil, fmt.Errorf("cannot serve store %q: a store needs a name and a storage", name)
		}
		if _, dup := ss.byName[name]; dup {
			return nil, fmt.Errorf("cannot serve store %q twice", name)
		}
		ss.byName[name] = st
	}
	for name := range ss.byName {
		ss.names = append(ss.names, name)
	}
	slices.Sort(ss.names)
	for i, n := range ss.names {
		ss.index[n] = i
	}
	return ss, nil
}

// quoted lists the served stores for an error message.
func (ss *storeSet) quoted() string {
	q := make([]string, len(ss.names))
	for i, n := range ss.names {
		q[i] = strconv.Quote(n)
	}
	return strings.Join(q, ", ")
}

// split groups the positions 0..n-1 by the store of each (in order).
func (ss *storeSet) split(n int, store func(int) string) (order []string, groups map[string][]int) {
	groups = map[string][]int{}
	for i := range n {
		st := store(i)
		if _, ok := groups[st]; !ok {
			order = append(order, st)
		}
		groups[st] = append(groups[st], i)
	}
	return order, groups
}

// each runs call for every store of order, concurrently when there are
// several.
func each(order []string, call func(store string)) {
	if len(order) == 1 {
		call(order[0])
		return
	}
	var wg sync.WaitGroup
	for _, st := range order {
		wg.Add(1)
		go func() {
			defer wg.Done()
			call(st)
		}()
	}
	wg.Wait()
}

func (ss *storeSet) unknown(store string) error {
	return domain.Errorf(domain.CodeInvalidArgument, "store %q is not served by this Sink; it serves %s", store, ss.quoted())
}

func (ss *storeSet) Read(ctx context.Context, addrs []domain.Address) []ports.ReadResult {
	return routed(ss, addrs, func(a domain.Address) string { return a.Store },
		func(st ports.Storage, sub []domain.Address) []ports.ReadResult { return st.Read(ctx, sub) },
		func(err error) ports.ReadResult { return ports.ReadResult{Err: err} })
}

func (ss *storeSet) Write(ctx context.Context, ops []ports.WriteOp) []ports.WriteResult {
	return routed(ss, ops, func(op ports.WriteOp) string { return op.Address.Store },
		func(st ports.Storage, sub []ports.WriteOp) []ports.WriteResult { return st.Write(ctx, sub) },
		func(err error) ports.WriteResult { return ports.WriteResult{Err: err} })
}

// routed makes one storage call per store of the items (store names each
// item's), concurrently when they span stores, and returns the results in
// the items' order; an item of a store not served gets failed's result.
func routed[T, R any](ss *storeSet, items []T, store func(T) string, call func(ports.Storage, []T) []R, failed func(error) R) []R {
	out := make([]R, len(items))
	order, groups := ss.split(len(items), func(i int) string { return store(items[i]) })
	each(order, func(name string) {
		pos := groups[name]
		st := ss.byName[name]
		if st == nil {
			for _, i := range pos {
				out[i] = failed(ss.unknown(name))
			}
			return
		}
		if len(order) == 1 {
			copy(out, call(st, items))
			return
		}
		sub := make([]T, len(pos))
		for k, i := range pos {
			sub[k] = items[i]
		}
		for k, r := range call(st, sub) {
			out[pos[k]] = r
		}
	})
	return out
}

func (ss *storeSet) Validate(op ports.WriteOp) error {
	st := ss.byName[op.Address.Store]
	if st == nil {
		return ss.unknown(op.Address.Store)
	}
	return st.Validate(op)
}

// ContentTypes is what every served store can hold (the service asks the
// store of each record: contentTypes).
func (ss *storeSet) ContentTypes() []string { return nil }

// contentTypes lists what store can hold.
func (ss *storeSet) contentTypes(store string) []string {
	if st := ss.byName[store]; st != nil {
		return st.ContentTypes()
	}
	return nil
}

func (ss *storeSet) Ping(ctx context.Context) error {
	var errs []string
	for _, n := range ss.names {
		if err := ss.byName[n].Ping(ctx); err != nil {
			errs = append(errs, fmt.Sprintf("store %q: %v", n, err))
		}
	}
	if len(errs) > 0 {
		return domain.Errorf(domain.CodeUnavailable, "%s", strings.Join(errs, "; "))
	}
	return nil
}

// ReadsBackWrites holds when it holds for every store (the hints of every
// store follow one rule).
func (ss *storeSet) ReadsBackWrites() bool {
	for _, st := range ss.byName {
		if r, ok := st.(ports.ReadBackReporter); ok && !r.ReadsBackWrites() {
			return false
		}
	}
	return true
}

// Stores returns the names of the served stores, sorted.
func (s *Service) Stores() []string {
	if s.stores == nil {
		return []string{s.cfg.Store}
	}
	return slices.Clone(s.stores.names)
}

// storageContentTypes lists the content types the store of a can hold.
func (s *Service) storageContentTypes(a domain.Address) []string {
	if s.stores != nil {
		return s.stores.contentTypes(a.Store)
	}
	return s.storage.ContentTypes()
}

// shardGroup is the first shard of the store's group (shards are per store).
func (s *Service) shardGroup(store string) int {
	if s.stores == nil {
		return 0
	}
	return s.stores.index[store] * s.cfg.Batch.Shards
}
