package postgres

import (
	"bytes"
	"context"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

// The direct path: a call whose operations carry no applied mark, touch
// each record once, and go to Sink's own tables needs no locked read. Its
// operations are grouped by table and kind into one statement each, with
// the conditions in their WHERE and ON CONFLICT clauses and each row's
// outcome in RETURNING:
//
//   - unconditional puts: INSERT … SELECT FROM unnest(…) ON CONFLICT (k)
//     DO UPDATE … RETURNING k, xmax <> 0 (the row existed);
//   - creates: INSERT … ON CONFLICT DO NOTHING RETURNING k;
//   - replaces and revision puts: UPDATE … FROM unnest(…) WHERE t.k = u.k
//     [AND t.rev = u.cond], and for each key whether the row existed at the
//     statement's start (NOT_FOUND or REVISION_MISMATCH when not updated);
//   - deletes likewise with DELETE.
//
// All statements go in one round trip (one implicit transaction); a
// deadlock with a concurrent call (40P01) makes the call start over.
// Anything else takes the locked path (write.go).

// direct reports whether the valid operations can take the direct path.
func (s *Store) direct(ops []ports.WriteOp, valid []int, groups []*group) bool {
	n := 0
	for _, g := range groups {
		if g.t.legacy != nil {
			return false
		}
		n += len(g.keys)
	}
	if n != len(valid) { // a record written twice
		return false
	}
	for _, i := range valid {
		op := &ops[i]
		if op.Mark != nil || (op.Kind == ports.WriteDelete && op.Condition.Kind == ports.ConditionAbsent) {
			return false
		}
	}
	return true
}

// directKind groups the operations of one table into statements.
type directKind uint8

const (
	dUpsert directKind = iota
	dCreate
	dUpdate // replace or revision put
	dDelete // unconditional, exists or revision delete
)

type directRow struct {
	j    int // index into valid
	key  []byte
	rev  domain.Revision
	cond []byte // revision condition; nil: none
}

type directStmt struct {
	kind directKind
	rows []directRow
	docs []domain.Document
}

// writeDirect runs the direct path once; it returns the results of the
// valid operations or the error and how far it got.
func (s *Store) writeDirect(ctx context.Context, ops []ports.WriteOp, valid []int, groups []*group, opGroup []int, opKey []string) ([]ports.WriteResult, phase, error) {
	res := make([]ports.WriteResult, len(valid))
	stmts := make([][4]*directStmt, len(groups))
	for j, i := range valid {
		op := &ops[i]
		var kind directKind
		switch {
		case op.Kind == ports.WriteDelete:
			kind = dDelete
		case op.Condition.Kind == ports.ConditionNone:
			kind = dUpsert
		case op.Condition.Kind == ports.ConditionAbsent:
			kind = dCreate
		default:
			kind = dUpdate
		}
		st := stmts[opGroup[j]][kind]
		if st == nil {
			st = &directStmt{kind: kind}
			stmts[opGroup[j]][kind] = st
		}
		r := directRow{j: j, key: []byte(opKey[j])}
		if op.Condition.Kind == ports.ConditionRevision {
			r.cond = []byte(op.Condition.Revision)
		}
		if op.Kind == ports.WritePut {
			r.rev = s.revs.next()
		}
		st.rows = append(st.rows, r)
	}
	b := &pgx.Batch{}
	var order []*directStmt
	for gi, g := range groups {
		for _, st := range stmts[gi] {
			if st == nil {
				continue
			}
			// Key order: concurrent calls lock rows in the same order.
			slices.SortFunc(st.rows, func(a, b directRow) int { return bytes.Compare(a.key, b.key) })
			queueDirect(b, g.t, st, ops, valid)
			order = append(order, st)
		}
	}
	var err error
	if len(order) == 1 {
		// One statement: a plain query, without a batch's extra work.
		q := b.QueuedQueries[0]
		var rows pgx.Rows
		if rows, err = s.pool.Query(ctx, q.SQL, q.Arguments...); err == nil {
			err = readDirect(rows, order[0], ops, valid, res)
		}
	} else {
		br := s.pool.SendBatch(ctx, b)
		for _, st := range order {
			var rows pgx.Rows
			if rows, err = br.Query(); err != nil {
				break
			}
			if err = readDirect(rows, st, ops, valid, res); err != nil {
				break
			}
		}
		if cerr := br.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		// One implicit transaction: a server error rolled everything back;
		// a lost connection may have come after the commit.
		if sqlState(err) != "" || pgconn.SafeToRetry(err) {
			return nil, phaseRolledBack, err
		}
		return nil, phaseCommit, err
	}
	return res, 0, nil
}

func queueDirect(b *pgx.Batch, t target, st *directStmt, ops []ports.WriteOp, valid []int) {
	n := len(st.rows)
	if n == 1 {
		queueDirectOne(b, t, st, ops, valid)
		return
	}
	keys := make([][]byte, n)
	for x, r := range st.rows {
		keys[x] = r.key
	}
	if st.kind == dDelete {
		conds := make([][]byte, n)
		for x, r := range st.rows {
			conds[x] = r.cond
		}
		b.Queue(`WITH u AS (SELECT * FROM unnest($1::bytea[], $2::bytea[]) AS u(k, cond)),
d AS (DELETE FROM `+t.ident()+` t USING u WHERE t.k = u.k AND (u.cond IS NULL OR t.rev = u.cond) RETURNING t.k)
SELECT u.k, d.k IS NOT NULL, EXISTS (SELECT 1 FROM `+t.ident()+` x WHERE x.k = u.k) FROM u LEFT JOIN d ON d.k = u.k`, keys, conds)
		return
	}
	cts := make([]string, n)
	docs := make([][]byte, n)
	revs := make([][]byte, n)
	conds := make([][]byte, n)
	for x, r := range st.rows {
		d := ops[valid[r.j]].Document
		cts[x], docs[x], revs[x], conds[x] = d.ContentType, orEmpty(d.Data), []byte(r.rev), r.cond
	}
	switch st.kind {
	case dUpsert:
		b.Queue(`INSERT INTO `+t.ident()+` AS t (k, content_type, doc, rev) SELECT * FROM unnest($1::bytea[], $2::text[], $3::bytea[], $4::bytea[])
ON CONFLICT (k) DO UPDATE SET content_type = EXCLUDED.content_type, doc = EXCLUDED.doc, rev = EXCLUDED.rev RETURNING t.k, t.xmax <> 0`, keys, cts, docs, revs)
	case dCreate:
		b.Queue(`INSERT INTO `+t.ident()+` (k, content_type, doc, rev) SELECT * FROM unnest($1::bytea[], $2::text[], $3::bytea[], $4::bytea[])
ON CONFLICT (k) DO NOTHING RETURNING k, false`, keys, cts, docs, revs)
	case dUpdate:
		b.Queue(`WITH u AS (SELECT * FROM unnest($1::bytea[], $2::text[], $3::bytea[], $4::bytea[], $5::bytea[]) AS u(k, ct, doc, rev, cond)),
w AS (UPDATE `+t.ident()+` t SET content_type = u.ct, doc = u.doc, rev = u.rev FROM u WHERE t.k = u.k AND (u.cond IS NULL OR t.rev = u.cond) RETURNING t.k)
SELECT u.k, w.k IS NOT NULL, EXISTS (SELECT 1 FROM `+t.ident()+` x WHERE x.k = u.k) FROM u LEFT JOIN w ON w.k = u.k`, keys, cts, docs, revs, conds)
	}
}

// readDirect reads one statement's rows into the results.
func readDirect(rows pgx.Rows, st *directStmt, ops []ports.WriteOp, valid []int, res []ports.WriteResult) error {
	byKey := make(map[string]*directRow, len(st.rows))
	for x := range st.rows {
		byKey[string(st.rows[x].key)] = &st.rows[x]
	}
	done := make(map[string]bool, len(st.rows))
	var k []byte
	var ok, existed bool
	dest := []any{&k, &ok}
	if st.kind == dUpdate || st.kind == dDelete {
		dest = append(dest, &existed)
	}
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			rows.Close()
			return err
		}
		r := byKey[string(k)]
		if r == nil {
			continue
		}
		op := &ops[valid[r.j]]
		switch st.kind {
		case dUpsert:
			res[r.j] = ports.WriteResult{Revision: r.rev, Existed: ok}
		case dCreate:
			res[r.j] = ports.WriteResult{Revision: r.rev}
		case dUpdate, dDelete:
			switch {
			case ok && st.kind == dUpdate:
				res[r.j] = ports.WriteResult{Revision: r.rev, Existed: true}
			case ok:
				res[r.j] = ports.WriteResult{Existed: true}
			case !existed && op.Condition.Kind == ports.ConditionNone: // delete of an absent record
				res[r.j] = ports.WriteResult{}
			case !existed:
				res[r.j] = ports.WriteResult{Err: unmet(op, false, "")}
			default: // existed, not changed: the revision differed
				res[r.j] = ports.WriteResult{Err: domain.Errorf(domain.CodeRevisionMismatch, "record %s does not have the expected revision %s", op.Address, op.Condition.Revision)}
			}
		}
		done[string(k)] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if st.kind == dCreate {
		for _, r := range st.rows {
			if !done[string(r.key)] {
				op := &ops[valid[r.j]]
				res[r.j] = ports.WriteResult{Err: domain.Errorf(domain.CodeAlreadyExists, "record %s already exists", op.Address)}
			}
		}
	}
	return nil
}

// queueDirectOne is queueDirect for one row, with scalar parameters
// (cheaper than unnest for the server and the driver).
func queueDirectOne(b *pgx.Batch, t target, st *directStmt, ops []ports.WriteOp, valid []int) {
	r := st.rows[0]
	if st.kind == dDelete {
		b.Queue(`WITH d AS (DELETE FROM `+t.ident()+` WHERE k = $1 AND ($2::bytea IS NULL OR rev = $2) RETURNING 1)
SELECT $1::bytea, EXISTS (SELECT 1 FROM d), EXISTS (SELECT 1 FROM `+t.ident()+` WHERE k = $1)`, r.key, r.cond)
		return
	}
	d := ops[valid[r.j]].Document
	switch st.kind {
	case dUpsert:
		b.Queue(`INSERT INTO `+t.ident()+` AS t (k, content_type, doc, rev) VALUES ($1, $2, $3, $4)
ON CONFLICT (k) DO UPDATE SET content_type = EXCLUDED.content_type, doc = EXCLUDED.doc, rev = EXCLUDED.rev RETURNING t.k, t.xmax <> 0`,
			r.key, d.ContentType, orEmpty(d.Data), []byte(r.rev))
	case dCreate:
		b.Queue(`INSERT INTO `+t.ident()+` (k, content_type, doc, rev) VALUES ($1, $2, $3, $4) ON CONFLICT (k) DO NOTHING RETURNING k, false`,
			r.key, d.ContentType, orEmpty(d.Data), []byte(r.rev))
	case dUpdate:
		b.Queue(`WITH w AS (UPDATE `+t.ident()+` SET content_type = $2, doc = $3, rev = $4 WHERE k = $1 AND ($5::bytea IS NULL OR rev = $5) RETURNING 1)
SELECT $1::bytea, EXISTS (SELECT 1 FROM w), EXISTS (SELECT 1 FROM `+t.ident()+` WHERE k = $1)`,
			r.key, d.ContentType, orEmpty(d.Data), []byte(r.rev), r.cond)
	}
}
