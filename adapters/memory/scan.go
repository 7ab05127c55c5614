package memory

import (
	"container/heap"
	"context"
	"strings"

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

// Scan implements ports.Scanner. It evaluates no filter: the application
// evaluates the filter (the reference semantics) on every record.
func (s *Store) Scan(ctx context.Context, q ports.ScanQuery) (ports.ScanResult, error) {
	if q.Limit < 1 {
		return ports.ScanResult{}, domain.Errorf(domain.CodeInvalidArgument, "scan limit must be at least 1")
	}
	// best keeps the Limit first keys in scan order, as a heap whose top is
	// the last of them.
	best := &itemHeap{desc: q.Descending}
	accept := func(k domain.Key) bool {
		return q.Range.Contains(k) && (q.After == nil || domain.After(k, *q.After, q.Descending))
	}
	err := s.each(ctx, q.Dataset, accept, func(k domain.Key, e *entry) {
		if best.Len() == q.Limit {
			if !best.before(k, best.items[0].Key) {
				return
			}
			heap.Pop(best)
		}
		heap.Push(best, ports.ScanItem{Key: k, Record: domain.Record{Document: e.doc, Revision: e.rev}})
	})
	if err != nil {
		return ports.ScanResult{}, err
	}
	out := make([]ports.ScanItem, best.Len())
	for i := len(out) - 1; i >= 0; i-- {
		it := heap.Pop(best).(ports.ScanItem)
		it.Record.Document = clone(it.Record.Document)
		out[i] = it
	}
	return ports.ScanResult{Items: out, Done: len(out) < q.Limit}, nil
}

// Count implements ports.Scanner; the count is always exact.
func (s *Store) Count(ctx context.Context, q ports.CountQuery) (ports.CountResult, error) {
	var n int64
	err := s.each(ctx, q.Dataset, q.Range.Contains, func(domain.Key, *entry) { n++ })
	return ports.CountResult{Count: n, Exact: true}, err
}

// itemHeap is a max-heap in scan order (its top comes last).
type itemHeap struct {
	items []ports.ScanItem
	desc  bool
}

func (h *itemHeap) before(a, b domain.Key) bool {
	c := domain.CompareKeys(a, b)
	if h.desc {
		return c > 0
	}
	return c < 0
}
func (h *itemHeap) Len() int           { return len(h.items) }
func (h *itemHeap) Less(i, j int) bool { return h.before(h.items[j].Key, h.items[i].Key) }
func (h *itemHeap) Swap(i, j int)      { h.items[i], h.items[j] = h.items[j], h.items[i] }
func (h *itemHeap) Push(x any)         { h.items = append(h.items, x.(ports.ScanItem)) }
func (h *itemHeap) Pop() any {
	n := len(h.items) - 1
	it := h.items[n]
	h.items = h.items[:n]
	return it
}
