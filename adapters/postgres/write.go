package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

// state is a record during one Write call: as read (locked) at the start,
// then as the call's operations leave it.
type state struct {
	orig   bool // existed when read
	exists bool
	dirty  bool
	doc    domain.Document
	rev    domain.Revision
	mark   domain.AppliedMark
}

// Write implements ports.Storage. See the package comment for how.
func (s *Store) Write(ctx context.Context, ops []ports.WriteOp) []ports.WriteResult {
	out := make([]ports.WriteResult, len(ops))
	ctx, span := s.startSpan(ctx, "write", len(ops))
	defer endWriteSpan(span, out)
	if err := ctx.Err(); err != nil {
		for i := range out {
			out[i].Err = s.classify(ctx, err, phaseRolledBack)
		}
		return out
	}
	var valid []int
	var ts []target
	var ks []any
	r := resolver{s: s}
	for i := range ops {
		t, k, err := s.validate(ops[i], &r)
		if err != nil {
			out[i].Err = err
			continue
		}
		valid, ts, ks = append(valid, i), append(ts, t), append(ks, k)
	}
	if len(valid) == 0 {
		return out
	}
	groups := groupBy(len(valid), func(j int) (target, any, *domain.Error) { return ts[j], ks[j], nil }, func(int, *domain.Error) {})
	if span != nil {
		spanTargets(span, "write", groups)
	}
	// Where each valid operation's record is: its group and key.
	opGroup := make([]int, len(valid))
	opKey := make([]string, len(valid))
	for gi, g := range groups {
		for x, j := range g.idx {
			opGroup[j] = gi
			opKey[j] = g.idOf[x]
		}
	}
	fail := func(e *domain.Error) {
		for _, i := range valid {
			out[i] = ports.WriteResult{Err: e}
		}
	}
	if err := s.ensure(ctx, groups); err != nil {
		fail(s.classify(ctx, err, phaseRolledBack))
		return out
	}
	direct := s.direct(ops, valid, groups)
	var lastErr error
	for attempt := 0; attempt < s.maxAttempts; attempt++ {
		var res []ports.WriteResult
		var ph phase
		var err error
		if direct {
			res, ph, err = s.writeDirect(ctx, ops, valid, groups, opGroup, opKey, ks)
		} else {
			res, ph, err = s.writeOnce(ctx, ops, valid, groups, opGroup, opKey)
		}
		if err == nil {
			for j, i := range valid {
				out[i] = res[j]
			}
			return out
		}
		lastErr = err
		switch c := sqlState(err); {
		case ph != phaseCommit && (c == "40001" || c == "40P01" || c == "23505"):
			// A deadlock, a serialization failure, or a create that met a
			// row created meanwhile: nothing was written; start over.
			if ctx.Err() == nil {
				backoff(ctx, attempt)
				continue
			}
		case ph != phaseCommit && connectionLost(err) && attempt < 2 && ctx.Err() == nil:
			// A pooled connection the server closed (a restart,
			// pg_terminate_backend): nothing was committed; another one.
			continue
		case ph != phaseCommit && missingTable(err) && attempt == 0:
			// Dropped under us: create it again.
			s.forget(groups)
			if err := s.ensure(ctx, groups); err != nil {
				fail(s.classify(ctx, err, phaseRolledBack))
				return out
			}
			continue
		}
		fail(s.classify(ctx, err, ph))
		return out
	}
	e := s.classify(ctx, lastErr, phaseRolledBack)
	e.Code, e.Retryable = domain.CodeUnavailable, true
	e.Message = "PostgreSQL write kept conflicting with concurrent writes and was rolled back each time: " + e.Message
	fail(e)
	return out
}

// backoff waits a little before a restart, longer each time.
func backoff(ctx context.Context, attempt int) {
	if attempt == 0 {
		return
	}
	t := time.NewTimer(time.Duration(min(attempt, 10)) * time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// writeOnce runs the call's transaction once. It returns the results of
// the valid operations, or the error and how far the transaction got.
func (s *Store) writeOnce(ctx context.Context, ops []ports.WriteOp, valid []int, groups []*group, opGroup []int, opKey []string) ([]ports.WriteResult, phase, error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, phaseRolledBack, err
	}
	defer release(conn)

	// Round trip 1: lock the records' rows.
	found := make([]map[string]*row, len(groups))
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	for gi, g := range groups {
		found[gi] = map[string]*row{}
		b.Queue(selectSQL(g.t, true), keyArray(g.t, g.keys))
	}
	br := conn.SendBatch(ctx, b)
	_, err = br.Exec()
	for gi := 0; err == nil && gi < len(groups); gi++ {
		var rows pgx.Rows
		if rows, err = br.Query(); err == nil {
			err = scanRows(groups[gi].t, rows, found[gi])
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, phaseRolledBack, err
	}

	// Decide every operation in slice order.
	states := make([]map[string]*state, len(groups))
	for gi := range groups {
		states[gi] = map[string]*state{}
	}
	get := func(j int) *state {
		gi, id := opGroup[j], opKey[j]
		st := states[gi][id]
		if st == nil {
			st = &state{}
			if r := found[gi][id]; r != nil {
				*st = state{orig: true, exists: true, doc: r.doc, rev: r.rev, mark: r.mark}
			}
			states[gi][id] = st
		}
		return st
	}
	res := make([]ports.WriteResult, len(valid))
	for j, i := range valid {
		op := &ops[i]
		st := get(j)
		if op.Mark != nil && st.exists {
			if r := ports.CheckMark(op, st.mark); r != nil {
				res[j] = *r
				continue
			}
		}
		if err := unmet(op, st.exists, st.rev); err != nil {
			res[j] = ports.WriteResult{Err: err}
			continue
		}
		if op.Kind == ports.WriteDelete {
			res[j] = ports.WriteResult{Existed: st.exists}
			if st.exists {
				st.exists, st.dirty, st.mark, st.rev = false, true, domain.AppliedMark{}, ""
			}
			continue
		}
		rev := s.revs.next()
		mark := st.mark
		if !st.exists {
			mark = domain.AppliedMark{}
		}
		if op.Mark != nil {
			mark = mark.Advance(op.Mark.IDs, rev, op.Mark.Position, min(op.Mark.Keep, s.markRing))
		}
		res[j] = ports.WriteResult{Revision: rev, Existed: st.exists}
		st.exists, st.dirty, st.doc, st.rev, st.mark = true, true, op.Document, rev, mark
	}

	// Round trip 2: the final state of every changed record, and COMMIT.
	b = &pgx.Batch{}
	for gi, g := range groups {
		for ki, id := range g.ids {
			st := states[gi][id]
			if st == nil || !st.dirty {
				continue
			}
			queueFinal(b, g.t, g.keys[ki], st)
		}
	}
	n := b.Len()
	b.Queue("COMMIT")
	br = conn.SendBatch(ctx, b)
	for q := 0; err == nil && q < n; q++ {
		_, err = br.Exec()
	}
	ph := phaseRolledBack
	if err == nil {
		ph = phaseCommit
		_, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, ph, err
	}
	return res, 0, nil
}

// queueFinal queues the statement that leaves the record's row as st says.
func queueFinal(b *pgx.Batch, t target, key any, st *state) {
	bd := t.legacy
	switch {
	case !st.orig && !st.exists:
		return
	case st.orig && !st.exists:
		if bd == nil {
			b.Queue("DELETE FROM "+t.ident()+" WHERE k = $1", key)
		} else {
			b.Queue("DELETE FROM "+t.ident()+" WHERE "+pgx.Identifier{bd.KeyColumn}.Sanitize()+" = $1::"+bd.KeyType, key)
		}
		return
	}
	if bd == nil {
		mark := encodeMark(st.mark)
		if st.orig {
			b.Queue("UPDATE "+t.ident()+" SET content_type = $2, doc = $3, rev = $4, mark = $5 WHERE k = $1",
				key, st.doc.ContentType, orEmpty(st.doc.Data), []byte(st.rev), mark)
		} else {
			b.Queue("INSERT INTO "+t.ident()+" (k, content_type, doc, rev, mark) VALUES ($1, $2, $3, $4, $5)",
				key, st.doc.ContentType, orEmpty(st.doc.Data), []byte(st.rev), mark)
		}
		return
	}
	kc, dc, mc := pgx.Identifier{bd.KeyColumn}.Sanitize(), pgx.Identifier{bd.DocumentColumn}.Sanitize(), pgx.Identifier{bd.MetaColumn}.Sanitize()
	var val, hash string
	var doc any = string(st.doc.Data)
	switch bd.DocumentType {
	case DocTypeJSONB:
		val, hash = "$2::text::jsonb", "sha256(convert_to(($2::text::jsonb)::text, 'UTF8'))"
	case DocTypeJSON:
		val, hash = "$2::text::json", "sha256(convert_to($2::text, 'UTF8'))"
	case DocTypeText:
		val, hash = "$2::text", "sha256(convert_to($2::text, 'UTF8'))"
	default:
		val, hash = "$2::bytea", "sha256($2::bytea)"
		doc = orEmpty(st.doc.Data)
	}
	// meta = 0x01, len + revision, len + hash (computed by the server from
	// the document as it stores it), the mark.
	head := append([]byte{1}, appendBytes(nil, string(st.rev))...)
	head = append(head, docHashBytes)
	metaExpr := "$3::bytea || substring(" + hash + " from 1 for " + itoa(docHashBytes) + ") || $4::bytea"
	mark := appendMark(nil, st.mark)
	if st.orig {
		b.Queue("UPDATE "+t.ident()+" SET "+dc+" = "+val+", "+mc+" = "+metaExpr+" WHERE "+kc+" = $1::"+bd.KeyType, key, doc, head, mark)
	} else {
		b.Queue("INSERT INTO "+t.ident()+" ("+kc+", "+dc+", "+mc+") VALUES ($1::"+bd.KeyType+", "+val+", "+metaExpr+")", key, doc, head, mark)
	}
}

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}

// release returns the connection to the pool, rolling back a transaction
// that is still open (a failed call); a connection that cannot roll back is
// closed.
func release(conn *pgxpool.Conn) {
	if conn.Conn().PgConn().TxStatus() != 'I' && !conn.Conn().IsClosed() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if _, err := conn.Exec(ctx, "ROLLBACK"); err != nil {
			_ = conn.Conn().Close(ctx)
		}
		cancel()
	}
	conn.Release()
}

// unmet returns the error of op's condition when the record (existing or
// not, at revision rev) does not meet it, nil otherwise.
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
