package domain

// Limits of applied marks.
const (
	// MaxMutationIDBytes bounds a mutation ID and so a client's idempotency
	// key.
	MaxMutationIDBytes = 128
	// DefaultAppliedRing is the default number of mutation IDs a record's
	// applied mark remembers.
	DefaultAppliedRing = 32
	// MaxAppliedRing bounds the ring size a deployment may configure.
	MaxAppliedRing = 1024
	// MaxLogBytes bounds a log identity (SourcePosition.Log), so that the
	// space a storage reserves for a record's mark is bounded.
	MaxLogBytes = 256
)

// AppliedEntry is one mutation in a record's applied ring: its ID and the
// revision the write that applied it produced (the answer a retried
// request gets).
type AppliedEntry struct {
	ID       string
	Revision Revision
}

// AppliedMark is the part of a record's hidden metadata that makes applying
// queued mutations effectively once per record. It is written in the same
// atomic write as the document and its revision.
//
//   - Position is the log position of the last mutation applied from the
//     log (zero when none was). It only moves forward within a log
//     partition, so a stale worker's late write of an older mutation is
//     refused (it fences).
//   - Recent holds the IDs of the most recent mutations applied (from the
//     log or synchronously with an idempotency key), oldest first, at most
//     the configured ring size.
type AppliedMark struct {
	Position SourcePosition
	Recent   []AppliedEntry
}

// IsZero reports whether the mark records nothing.
func (m AppliedMark) IsZero() bool { return m.Position.IsZero() && len(m.Recent) == 0 }

// Coverage says whether a mutation was applied to a record already.
type Coverage uint8

// Coverages.
const (
	// NotCovered: the mutation has not been applied; apply it.
	NotCovered Coverage = iota
	// Duplicate: the mutation's ID is in the ring: it was applied, skip it.
	Duplicate
	// Superseded: the mark's position covers the mutation's position but its
	// ID is not in the ring: it was applied long ago, or it never was and a
	// later mutation of the record already was. Applying it now could
	// reorder the record's mutations; it must not be applied.
	Superseded
)

func (c Coverage) String() string {
	switch c {
	case NotCovered:
		return "not covered"
	case Duplicate:
		return "duplicate"
	case Superseded:
		return "superseded"
	default:
		return "unknown"
	}
}

// Find returns the ring entry of id.
func (m AppliedMark) Find(id string) (AppliedEntry, bool) {
	if id == "" {
		return AppliedEntry{}, false
	}
	for i := len(m.Recent) - 1; i >= 0; i-- {
		if m.Recent[i].ID == id {
			return m.Recent[i], true
		}
	}
	return AppliedEntry{}, false
}

// Check tells whether the mutation id at pos (zero for a synchronous
// operation) is covered by the mark. For a Duplicate it also returns the
// ring entry.
func (m AppliedMark) Check(id string, pos SourcePosition) (Coverage, AppliedEntry) {
	if e, ok := m.Find(id); ok {
		return Duplicate, e
	}
	if m.Position.Covers(pos) {
		return Superseded, AppliedEntry{}
	}
	return NotCovered, AppliedEntry{}
}

// Advance returns the mark after a write with revision rev applied the
// mutations ids, the last of them at pos (zero: synchronous, the position
// is kept): their IDs are appended to the ring, which keeps the keep most
// recent. m is not modified.
func (m AppliedMark) Advance(ids []string, rev Revision, pos SourcePosition, keep int) AppliedMark {
	out := AppliedMark{Position: m.Position}
	if !pos.IsZero() {
		out.Position = pos
	}
	n := len(m.Recent) + len(ids)
	if n > keep {
		n = keep
	}
	if n <= 0 {
		return out
	}
	out.Recent = make([]AppliedEntry, 0, n)
	all := len(m.Recent) + len(ids)
	skip := all - n
	for _, e := range m.Recent {
		if skip > 0 {
			skip--
			continue
		}
		out.Recent = append(out.Recent, e)
	}
	for _, id := range ids {
		if skip > 0 {
			skip--
			continue
		}
		out.Recent = append(out.Recent, AppliedEntry{ID: id, Revision: rev})
	}
	return out
}
