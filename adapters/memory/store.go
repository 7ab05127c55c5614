// Package memory is an in-memory ports.Storage: concurrency-safe,
// content-type agnostic, with deterministic revisions. It is for tests and
// local use; nothing survives a restart.
package memory

import (
	"context"
	"hash/maphash"
	"strconv"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/trace"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

var _ ports.Storage = (*Store)(nil)

const shards = 64

type entry struct {
	doc  domain.Document
	rev  domain.Revision
	mark domain.AppliedMark
}

// shard holds records by ID. Entries are updated in place under the
// write lock, so that rewriting a record neither allocates its ID again
// nor touches the map; lookups take the ID as bytes encoded on the stack
// (see key).
type shard struct {
	mu      sync.RWMutex
	records map[domain.RecordID]*entry
}

// Store keeps records in memory. Revisions come from one store-wide counter
// ("1", "2", ...), so they are deterministic for a given sequence of writes
// and never reused, even after a delete and re-create.
type Store struct {
	seed   maphash.Seed
	shards [shards]shard
	seq    atomic.Uint64
	tracer trace.Tracer // nil: no spans (tracing.go)
	// keysGen changes whenever a record is created or deleted; scans
	// keep each dataset's sorted keys until it changes (scan.go).
	keysGen atomic.Uint64
	sorted  keyCache
}

// New returns an empty store.
func New(opts ...Option) *Store {
	s := &Store{seed: maphash.MakeSeed()}
	for i := range s.shards {
		s.shards[i].records = make(map[domain.RecordID]*entry)
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

// key returns a's record ID as bytes, encoded in buf when it fits; a map
// index with domain.RecordID(key) does not allocate.
func key(buf *[96]byte, a domain.Address) []byte { return domain.AppendAddress(buf[:0], a) }

func (s *Store) shard(key []byte) *shard {
	return &s.shards[maphash.Bytes(s.seed, key)%shards]
}

func clone(d domain.Document) domain.Document {
	return domain.Document{ContentType: d.ContentType, Data: append([]byte(nil), d.Data...)}
}

// keep returns the document a put stores: the bytes handed over as they
// are (ports.WriteOp.HandOver; the store never changes a stored
// document's bytes, and Read hands them out read-only: ports.Storage.Read),
// else a copy.
func keep(op *ports.WriteOp) domain.Document {
	if !op.HandOver {
		return clone(op.Document)
	}
	d := op.Document
	if len(d.Data) == 0 {
		d.Data = nil // (as clone leaves it)
	}
	return d
}

func cloneMark(m domain.AppliedMark) domain.AppliedMark {
	if m.Recent != nil {
		m.Recent = append([]domain.AppliedEntry(nil), m.Recent...)
	}
	return m
}

// shared returns the mark for a reader without copying its ring: the store
// never changes an entry a reader can see (advance only appends past the
// end of every slice it handed out, or moves to a new array), and the
// capacity is cut to the length so that a reader's append copies.
func shared(m domain.AppliedMark) domain.AppliedMark {
	m.Recent = m.Recent[:len(m.Recent):len(m.Recent)]
	return m
}

// advance is domain.AppliedMark.Advance for the store's own marks, with
// amortised allocation: the ring grows into spare capacity (room for keep
// more entries) and moves to a new array only when that is used up.
func advance(m domain.AppliedMark, u *ports.MarkUpdate, rev domain.Revision) domain.AppliedMark {
	if !u.Position.IsZero() {
		m.Position = u.Position
	}
	r := m.Recent
	if cap(r)-len(r) < len(u.IDs) {
		n := min(len(r), u.Keep)
		nr := make([]domain.AppliedEntry, n, u.Keep+max(u.Keep, len(u.IDs)))
		copy(nr, r[len(r)-n:])
		r = nr
	}
	for _, id := range u.IDs {
		r = append(r, domain.AppliedEntry{ID: id, Revision: rev})
	}
	if len(r) > u.Keep {
		r = r[len(r)-max(u.Keep, 0):]
	}
	m.Recent = r
	return m
}

// Read implements ports.Storage.
func (s *Store) Read(ctx context.Context, addrs []domain.Address) []ports.ReadResult {
	out := make([]ports.ReadResult, len(addrs))
	ctx, span := s.startSpan(ctx, "read", len(addrs))
	defer endReadSpan(span, out)
	if err := ctx.Err(); err != nil {
		for i := range out {
			out[i].Err = domain.AsError(err)
		}
		return out
	}
	var buf [96]byte
	for i, a := range addrs {
		k := key(&buf, a)
		sh := s.shard(k)
		sh.mu.RLock()
		var e entry
		p := sh.records[domain.RecordID(k)]
		if p != nil {
			e = *p // (a write replaces the fields, never the bytes they hold)
		}
		sh.mu.RUnlock()
		if p != nil {
			// The stored bytes themselves (the caller only reads them:
			// ports.Storage.Read), capped so that a reader's append
			// copies.
			e.doc.Data = e.doc.Data[:len(e.doc.Data):len(e.doc.Data)]
			out[i] = ports.ReadResult{Found: true, Record: domain.Record{Document: e.doc, Revision: e.rev, Mark: shared(e.mark)}}
		}
	}
	return out
}

// Write implements ports.Storage. Operations are applied one after the
// other, so operations on one record take effect in slice order.
func (s *Store) Write(ctx context.Context, ops []ports.WriteOp) []ports.WriteResult {
	out := make([]ports.WriteResult, len(ops))
	ctx, span := s.startSpan(ctx, "write", len(ops))
	defer endWriteSpan(span, out)
	if err := ctx.Err(); err != nil {
		for i := range out {
			out[i].Err = domain.AsError(err)
		}
		return out
	}
	for i := range ops {
		out[i] = s.apply(&ops[i])
	}
	return out
}

func (s *Store) apply(op *ports.WriteOp) ports.WriteResult {
	var buf [96]byte
	k := key(&buf, op.Address)
	sh := s.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	p := sh.records[domain.RecordID(k)]
	exists := p != nil
	var cur entry
	if exists {
		cur = *p
	}
	if op.Mark != nil && exists {
		if err := ports.CheckMark(op, cur.mark); err != nil {
			return *err
		}
	}
	if err := unmet(op, exists, cur.rev); err != nil {
		return ports.WriteResult{Err: err}
	}
	if op.Kind == ports.WriteDelete {
		if exists {
			delete(sh.records, domain.RecordID(k))
			s.keysGen.Add(1)
		}
		return ports.WriteResult{Existed: exists}
	}
	rev := domain.Revision(strconv.FormatUint(s.seq.Add(1), 10))
	mark := cur.mark // zero when the record did not exist
	if op.Mark != nil {
		mark = advance(mark, op.Mark, rev)
	}
	doc := keep(op)
	if exists {
		*p = entry{doc: doc, rev: rev, mark: mark}
	} else {
		sh.records[domain.RecordID(k)] = &entry{doc: doc, rev: rev, mark: mark}
		s.keysGen.Add(1)
	}
	return ports.WriteResult{Revision: rev, Existed: exists}
}

// unmet returns the error of op's condition when the record (existing or
// not, at revision rev) does not meet it, nil otherwise. (A function of its
// own: the messages' arguments would make every write's frame larger.)
func unmet(op *ports.WriteOp, exists bool, rev domain.Revision) *domain.Error {
	switch op.Condition.Kind {
	case ports.ConditionAbsent:
		if exists {
			return domain.Errorf(domain.CodeAlreadyExists, "record %s already exists", op.Address)
		}
	case ports.ConditionExists:
		if !exists {
			return domain.Errorf(domain.CodeNotFound, "record %s does not exist", op.Address)
		}
	case ports.ConditionRevision:
		if !exists {
			return domain.Errorf(domain.CodeNotFound, "record %s does not exist (expected revision %s)", op.Address, op.Condition.Revision)
		}
		if rev != op.Condition.Revision {
			return domain.Errorf(domain.CodeRevisionMismatch, "record %s has revision %s, not the expected %s", op.Address, rev, op.Condition.Revision)
		}
	}
	return nil
}

// Validate implements ports.Storage: the memory store holds any document.
func (s *Store) Validate(ports.WriteOp) error { return nil }

// ContentTypes implements ports.Storage: the memory store holds any content type.
func (s *Store) ContentTypes() []string { return nil }

// Ping implements ports.Storage.
func (s *Store) Ping(context.Context) error { return nil }

// Snapshot returns a copy of every record by record identity (tests and
// diagnostics: comparing two snapshots shows exactly what a call changed).
func (s *Store) Snapshot() map[domain.RecordID]domain.Record {
	out := make(map[domain.RecordID]domain.Record)
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.RLock()
		for id, e := range sh.records {
			out[id] = domain.Record{Document: clone(e.doc), Revision: e.rev, Mark: cloneMark(e.mark)}
		}
		sh.mu.RUnlock()
	}
	return out
}

// Len returns the number of records (tests and diagnostics).
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		s.shards[i].mu.RLock()
		n += len(s.shards[i].records)
		s.shards[i].mu.RUnlock()
	}
	return n
}
