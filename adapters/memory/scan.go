package memory

import (
	"context"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

var _ ports.Scanner = (*Store)(nil)

// datasetPrefix is the address encoding of d's records up to their key.
func datasetPrefix(d domain.DatasetRef) string {
	b := domain.AppendAddress(nil, domain.Address{Store: d.Store, Namespace: d.Namespace, Dataset: d.Dataset})
	return string(b[:len(b)-1]) // without the (invalid) key kind byte
}

// each calls fn for every record of dataset d whose key is in r (and
// after q's After, when set), under the shard's read lock.
func (s *Store) each(ctx context.Context, d domain.DatasetRef, accept func(domain.Key) bool, fn func(domain.Key, *entry)) error {
	prefix := datasetPrefix(d)
	for i := range s.shards {
		if err := ctx.Err(); err != nil {
			return domain.AsError(err)
		}
		sh := &s.shards[i]
		sh.mu.RLock()
		for id, e := range sh.records {
			if !strings.HasPrefix(string(id), prefix) {
				continue
			}
			k, ok := keyOf(string(id)[len(prefix):])
			if !ok || !accept(k) {
				continue
			}
			fn(k, e)
		}
		sh.mu.RUnlock()
	}
	return nil
}

// keyOf decodes the key part of a record ID (domain.AppendAddress: the
// kind byte, then a uvarint length and the bytes of a string or bytes key,
// 8 big-endian bytes of an int64, or 12 bytes of an ObjectID) without
// decoding the rest again.
func keyOf(s string) (domain.Key, bool) {
	if len(s) < 1 {
		return domain.Key{}, false
	}
	kind, s := domain.KeyKind(s[0]), s[1:]
	switch kind {
	case domain.KeyInt64:
		if len(s) != 8 {
			return domain.Key{}, false
		}
		var u uint64
		for i := range 8 {
			u = u<<8 | uint64(s[i])
		}
		return domain.Int64Key(int64(u)), true
	case domain.KeyObjectID:
		if len(s) != domain.ObjectIDLength {
			return domain.Key{}, false
		}
		return domain.ObjectIDKey([]byte(s)), true
	case domain.KeyString, domain.KeyBytes:
		n, w := uvarint(s)
		if w <= 0 || uint64(len(s)-w) != n {
			return domain.Key{}, false
		}
		if kind == domain.KeyString {
			return domain.StringKey(s[w:]), true
		}
		return domain.BytesKey([]byte(s[w:])), true
	}
	return domain.Key{}, false
}

func uvarint(s string) (uint64, int) {
	var x uint64
	for i := 0; i < len(s) && i < 10; i++ {
		c := s[i]
		x |= uint64(c&0x7f) << (7 * i)
		if c < 0x80 {
			return x, i + 1
		}
	}
	return 0, -1
}

// keyCache holds the sorted keys of recently scanned datasets, each valid
// while Store.keysGen has the value it was built at (records rewritten in
// place keep it: only creations and deletions change a key set).
type keyCache struct {
	mu   sync.Mutex
	sets map[string]sortedKeys // by datasetPrefix
}

type sortedKeys struct {
	gen  uint64
	keys []domain.Key
}

// maxCachedDatasets bounds the cache (it is emptied when full).
const maxCachedDatasets = 64

// sortedKeys returns the keys of dataset d in key order. Every record
// created before the call (and not deleted) is among them.
func (s *Store) sortedKeys(ctx context.Context, d domain.DatasetRef) ([]domain.Key, error) {
	prefix := datasetPrefix(d)
	gen := s.keysGen.Load()
	s.sorted.mu.Lock()
	c, ok := s.sorted.sets[prefix]
	s.sorted.mu.Unlock()
	if ok && c.gen == gen {
		return c.keys, nil
	}
	var keys []domain.Key
	if err := s.each(ctx, d, func(domain.Key) bool { return true }, func(k domain.Key, _ *entry) { keys = append(keys, k) }); err != nil {
		return nil, err
	}
	slices.SortFunc(keys, domain.CompareKeys)
	s.sorted.mu.Lock()
	if s.sorted.sets == nil || len(s.sorted.sets) >= maxCachedDatasets {
		s.sorted.sets = map[string]sortedKeys{}
	}
	s.sorted.sets[prefix] = sortedKeys{gen: gen, keys: keys}
	s.sorted.mu.Unlock()
	return keys, nil
}

// Scan implements ports.Scanner. It evaluates no filter: the application
// evaluates the filter (the reference semantics) on every record. Each
// call walks the dataset's sorted keys (rebuilt when records were created
// or deleted since) from the resume point and reads the records live.
func (s *Store) Scan(ctx context.Context, q ports.ScanQuery) (ports.ScanResult, error) {
	if q.Limit < 1 {
		return ports.ScanResult{}, domain.Errorf(domain.CodeInvalidArgument, "scan limit must be at least 1")
	}
	keys, err := s.sortedKeys(ctx, q.Dataset)
	if err != nil {
		return ports.ScanResult{}, err
	}
	// i walks keys in scan order from the first key after q.After.
	i, step := 0, 1
	if q.Descending {
		i, step = len(keys)-1, -1
	}
	if q.After != nil {
		if q.Descending {
			i = sort.Search(len(keys), func(j int) bool { return domain.CompareKeys(keys[j], *q.After) >= 0 }) - 1
		} else {
			i = sort.Search(len(keys), func(j int) bool { return domain.CompareKeys(keys[j], *q.After) > 0 })
		}
	}
	var out []ports.ScanItem
	var buf [96]byte
	a := domain.Address{Store: q.Dataset.Store, Namespace: q.Dataset.Namespace, Dataset: q.Dataset.Dataset}
	for ; i >= 0 && i < len(keys); i += step {
		if len(out)%256 == 0 {
			if err := ctx.Err(); err != nil {
				return ports.ScanResult{}, domain.AsError(err)
			}
		}
		k := keys[i]
		if !q.Range.Contains(k) {
			continue
		}
		a.Key = k
		id := key(&buf, a)
		sh := s.shard(id)
		sh.mu.RLock()
		var e entry
		p := sh.records[domain.RecordID(id)]
		if p != nil {
			e = *p
		}
		sh.mu.RUnlock()
		if p == nil {
			continue // deleted since the keys were sorted
		}
		out = append(out, ports.ScanItem{Key: k, Record: domain.Record{Document: clone(e.doc), Revision: e.rev}})
		if len(out) == q.Limit {
			return ports.ScanResult{Items: out}, nil
		}
	}
	return ports.ScanResult{Items: out, Done: true}, nil
}

// Count implements ports.Scanner; the count is always exact.
func (s *Store) Count(ctx context.Context, q ports.CountQuery) (ports.CountResult, error) {
	var n int64
	err := s.each(ctx, q.Dataset, q.Range.Contains, func(domain.Key, *entry) { n++ })
	return ports.CountResult{Count: n, Exact: true}, err
}
