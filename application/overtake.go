package application

import (
	"slices"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

// Overtaking (the worker path): a queued mutation f of a record fails for
// good, and the same ApplyMutations call then writes a later mutation g of
// that record (from the same log partition). If the record's applied mark
// had not reached f's position when g's write replaced the record, the
// mark now passes f: the partition's next reader would skip f as
// superseded, so only this call's worker can dead-letter it, even after it
// lost the partition — f was "overtaken" (ports.ApplyOutcome.Overtaken).
// If the mark already covered f, some other worker handled f (applied it,
// or dead-lettered it for a failure of its own) while this one was slow or
// frozen: f is reported superseded (or skipped, when its ID is in the
// ring), never dead-lettered by this worker.
//
// The decision is made atomically with g's write: once a record has an
// undecided failure in the call (guard.pending), its next put or fold of
// merges reads the record (mark included, no hint), decides the failures
// its mark covers, and writes conditional on the revision it read (or on
// the record's absence); a concurrent change makes it read and decide
// again (the fold's bounded retries). A failed merge followed by an
// applied one in the same fold is decided the same way by the fold's own
// conditional write. A delete overtakes nothing: it removes the record
// with its mark, and the next reader would apply f, not skip it. Nor is a
// mutation that does not validate ever overtaken: every reader finds it
// invalid before it looks at the record's mark, and dead-letters it.

// guardState is what the call knows of a failed queued mutation.
type guardState uint8

const (
	guardNone guardState = iota
	// guardPending: failed; no later write of its record has passed it.
	guardPending
	// guardMaybe: pending, and a write that would have overtaken it ended
	// with an unknown outcome.
	guardMaybe
	// guardOvertaken: a write of this call passed it over a mark that had
	// not reached it.
	guardOvertaken
	// guardHandled: its record's mark covered it when a later write of the
	// call read the record: another worker handled it; its result was set
	// to skipped (or superseded).
	guardHandled
)

// overtakeGuard holds the failed queued mutations of one ApplyMutations
// call (kept across its attempts). It exists only once a mutation failed.
type overtakeGuard struct {
	state   []guardState              // per mutation of the call
	pending map[domain.RecordID][]int // per record: undecided failures, in order
}

func newOvertakeGuard(n int) *overtakeGuard {
	return &overtakeGuard{state: make([]guardState, n), pending: map[domain.RecordID][]int{}}
}

// guardOf returns the guard of j, a queued job, creating it.
func guardOf(j *job) *overtakeGuard {
	if j.guard == nil {
		j.guard = newOvertakeGuard(len(j.work))
	}
	return j.guard
}

// add records the failure of work[i], of record rid, unless it is decided.
func (g *overtakeGuard) add(rid domain.RecordID, i int) {
	if g.state[i] != guardNone {
		return
	}
	g.state[i] = guardPending
	g.pending[rid] = append(g.pending[rid], i)
}

// undecided reports whether record rid has failures not decided yet.
func (g *overtakeGuard) undecided(rid domain.RecordID) bool {
	return g != nil && len(g.pending[rid]) > 0
}

// decide sets the state of work[i], of record rid, and drops it from the
// record's pending failures when it is decided.
func (g *overtakeGuard) decide(rid domain.RecordID, i int, st guardState) {
	g.state[i] = st
	if st != guardOvertaken && st != guardHandled {
		return
	}
	p := g.pending[rid]
	for n, k := range p {
		if k == i {
			p = append(p[:n], p[n+1:]...)
			break
		}
	}
	if len(p) == 0 {
		delete(g.pending, rid)
	} else {
		g.pending[rid] = p
	}
}

// guardedUnit reports whether a write of u must decide undecided failures
// of its record first (see overtakeGuard): u is a put or a fold of a queued
// job whose record has some.
func guardedUnit(u unit) bool {
	for _, it := range u {
		if it.j.guard.undecided(it.rid()) {
			return true
		}
	}
	return false
}

// decideOvertaking decides, from the mark read with the record (known: the
// whole mark), the undecided failures of u's record in u's jobs, and
// returns the failed mutations that the write of u would overtake: those
// not covered by the mark whose position pos (the write's, zero: it moves
// no position, or nothing is written) covers, including failed merges of
// the fold itself (here). reread: the mark is not known (a hint) while a
// decision depends on it; read the record and fold again.
func decideOvertaking(u unit, mark domain.AppliedMark, known bool, pos domain.SourcePosition, here []item) (over []item, reread bool) {
	if !known {
		for _, it := range here {
			if pos.Covers(it.pos()) {
				return nil, true
			}
		}
		// (A guarded unit always reads its record: its mark is known.)
		return nil, false
	}
	for n, m := range u {
		j := m.j
		if !j.guard.undecided(m.rid()) || slices.ContainsFunc(u[:n], func(o item) bool { return o.j == j }) {
			continue
		}
		rid := m.rid()
		g := j.guard
		for _, i := range append([]int(nil), g.pending[rid]...) {
			if st := g.state[i]; st != guardPending && st != guardMaybe {
				continue // (decided: pending holds only the undecided)
			}
			f := item{j, i}
			switch cov, e := mark.Check(f.m().ID, f.pos()); {
			case cov == domain.Duplicate:
				// Applied by another worker (or by this one's earlier
				// write whose outcome was unknown).
				f.skip(e.Revision)
				g.decide(rid, i, guardHandled)
			case cov == domain.Superseded && g.state[i] == guardMaybe:
				// This call's own write of unknown outcome may be what
				// passed it: dead-letter it rather than lose it.
				g.decide(rid, i, guardOvertaken)
			case cov == domain.Superseded:
				f.supersede()
				g.decide(rid, i, guardHandled)
			default:
				g.decide(rid, i, guardPending) // (an unknown write did not land)
				if pos.Covers(f.pos()) {
					over = append(over, f)
				}
			}
		}
	}
	for _, it := range here {
		if pos.Covers(it.pos()) {
			over = append(over, it)
		}
	}
	return over, false
}

// settleOvertaking records what the write of record rid (a fold, or a
// guarded put) that would overtake over did, given its result r. (rid is
// the write's: the failures of earlier attempts of the call have no
// record ID in their job any more.)
func settleOvertaking(over []item, rid domain.RecordID, r ports.WriteResult) {
	st := guardOvertaken
	if r.Err != nil {
		if !mayHaveWritten(domain.CodeOf(r.Err)) {
			return
		}
		st = guardMaybe
	}
	for _, f := range over {
		g := guardOf(f.j)
		if g.state[f.i] == guardNone {
			g.add(rid, f.i)
		}
		g.decide(rid, f.i, st)
	}
}

// mayHaveWritten reports whether a write that failed with code c may have
// taken effect.
func mayHaveWritten(c domain.Code) bool {
	switch c {
	case domain.CodeInvalidArgument, domain.CodeNotFound, domain.CodeAlreadyExists, domain.CodeRevisionMismatch,
		domain.CodeFailedPrecondition, domain.CodePermissionDenied, domain.CodeUnauthenticated, domain.CodeAborted,
		domain.CodeAlreadyApplied, domain.CodeSuperseded, domain.CodeCanceled, domain.CodeDeadlineExceeded:
		return false
	}
	return true
}
