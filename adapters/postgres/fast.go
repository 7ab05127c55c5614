package postgres

import (
	"bytes"
	"context"
	"errors"
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
//     [AND t.rev = u.cond] RETURNING k; deletes likewise with DELETE. A
//     replace or conditional delete that changed nothing is NOT_FOUND; a
//     revision-conditioned one that changed nothing takes one more query
//     per table after the commit, SELECT k … WHERE k = ANY($1), to tell
//     NOT_FOUND from REVISION_MISMATCH (the failure path only).
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
}

// writeDirect runs the direct path once; it returns the results of the
// valid operations or the error and how far it got.
//
// opArg holds each valid operation's key argument (the encoded key: the
// direct path writes only Sink's tables).
func (s *Store) writeDirect(ctx context.Context, ops []ports.WriteOp, valid []int, groups []*group, opGroup []int, opKey []string, opArg []any) ([]ports.WriteResult, phase, error) {
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
		r := directRow{j: j, key: opArg[j].([]byte)}
		if op.Condition.Kind == ports.ConditionRevision {
			r.cond = []byte(op.Condition.Revision)
		}
		if op.Kind == ports.WritePut {
			r.rev = s.revs.next()
		}
		st.rows = append(st.rows, r)
	}
	var order []*directStmt
	var tables []*tableSQL
	for gi, g := range groups {
		for _, st := range stmts[gi] {
			if st == nil {
				continue
			}
			// Key order: concurrent calls lock rows in the same order.
			slices.SortFunc(st.rows, func(a, b directRow) int { return bytes.Compare(a.key, b.key) })
			order, tables = append(order, st), append(tables, g.sql)
		}
	}
	// A call of one row takes the one-row statement (its one answer:
	// whether the row existed); every statement of any other call answers
	// each changed row's key and whether it existed (readDirect), even a
	// statement of one row beside others.
	one := len(order) == 1 && len(order[0].rows) == 1
	sqls, args := make([]string, len(order)), make([][]any, len(order))
	for x, st := range order {
		sqls[x], args[x] = directSQL(tables[x], st, ops, valid, one)
	}
	var err error
	var pending []int
	switch {
	case one:
		// One row: a plain query whose one answer is whether the row
		// existed, or no row when nothing changed.
		st, r := order[0], &order[0].rows[0]
		var existed bool
		err = s.pool.QueryRow(ctx, sqls[0], args[0]...).Scan(&existed)
		switch {
		case err == nil:
			res[r.j] = ports.WriteResult{Revision: r.rev, Existed: existed}
		case errors.Is(err, pgx.ErrNoRows):
			err = nil
			pending = unchanged(st, r, ops, valid, res, pending)
		}
	case len(order) == 1:
		// One statement: a plain query, without a batch's extra work.
		var rows pgx.Rows
		if rows, err = s.pool.Query(ctx, sqls[0], args[0]...); err == nil {
			pending, err = readDirect(rows, order[0], ops, valid, res, pending)
		}
	default:
		b := &pgx.Batch{}
		for x := range order {
			b.Queue(sqls[x], args[x]...)
		}
		br := s.pool.SendBatch(ctx, b)
		for _, st := range order {
			var rows pgx.Rows
			if rows, err = br.Query(); err != nil {
				break
			}
			if pending, err = readDirect(rows, st, ops, valid, res, pending); err != nil {
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
	if len(pending) > 0 {
		// Committed: only the answers of the failed conditions are missing.
		if err := s.settlePending(ctx, ops, valid, groups, opGroup, opKey, pending, res); err != nil {
			return nil, phaseCommit, err
		}
	}
	return res, 0, nil
}

// directSQL returns the statement of st and its arguments: with one (the
// call's only statement, of one row) the one-row statement, which returns
// whether the row existed (see directOneSQL); otherwise one that returns
// each changed row's key and whether it existed.
func directSQL(t *tableSQL, st *directStmt, ops []ports.WriteOp, valid []int, one bool) (string, []any) {
	n := len(st.rows)
	if one {
		return directOneSQL(t, st, ops, valid)
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
		return `DELETE FROM ` + t.ident + ` t USING unnest($1::bytea[], $2::bytea[]) AS u(k, cond)
WHERE t.k = u.k AND (u.cond IS NULL OR t.rev = u.cond) RETURNING t.k, true`, []any{keys, conds}
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
		return `INSERT INTO ` + t.ident + ` AS t (k, content_type, doc, rev) SELECT * FROM unnest($1::bytea[], $2::text[], $3::bytea[], $4::bytea[])
ON CONFLICT (k) DO UPDATE SET content_type = EXCLUDED.content_type, doc = EXCLUDED.doc, rev = EXCLUDED.rev RETURNING t.k, t.xmax <> 0`, []any{keys, cts, docs, revs}
	case dCreate:
		return `INSERT INTO ` + t.ident + ` (k, content_type, doc, rev) SELECT * FROM unnest($1::bytea[], $2::text[], $3::bytea[], $4::bytea[])
ON CONFLICT (k) DO NOTHING RETURNING k, false`, []any{keys, cts, docs, revs}
	default: // dUpdate
		return `UPDATE ` + t.ident + ` t SET content_type = u.ct, doc = u.doc, rev = u.rev
FROM unnest($1::bytea[], $2::text[], $3::bytea[], $4::bytea[], $5::bytea[]) AS u(k, ct, doc, rev, cond)
WHERE t.k = u.k AND (u.cond IS NULL OR t.rev = u.cond) RETURNING t.k, true`, []any{keys, cts, docs, revs, conds}
	}
}

// readDirect reads one statement's rows (the key and whether the row
// existed, for each row written) into the results. A revision-conditioned
// operation that changed nothing is returned in pending: whether its
// record exists (NOT_FOUND or REVISION_MISMATCH) takes another look.
func readDirect(rows pgx.Rows, st *directStmt, ops []ports.WriteOp, valid []int, res []ports.WriteResult, pending []int) ([]int, error) {
	byKey := make(map[string]int, len(st.rows))
	for x := range st.rows {
		byKey[string(st.rows[x].key)] = x
	}
	done := make([]bool, len(st.rows))
	var k []byte
	var existed bool
	for rows.Next() {
		if err := rows.Scan(&k, &existed); err != nil {
			rows.Close()
			return pending, err
		}
		x, ok := byKey[string(k)]
		if !ok {
			continue
		}
		r := &st.rows[x]
		res[r.j] = ports.WriteResult{Revision: r.rev, Existed: existed}
		done[x] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return pending, err
	}
	for x := range st.rows {
		if !done[x] {
			pending = unchanged(st, &st.rows[x], ops, valid, res, pending)
		}
	}
	return pending, nil
}

// unchanged answers an operation whose statement changed nothing, or adds
// it to pending when that takes another look.
func unchanged(st *directStmt, r *directRow, ops []ports.WriteOp, valid []int, res []ports.WriteResult, pending []int) []int {
	op := &ops[valid[r.j]]
	switch {
	case st.kind == dCreate:
		res[r.j] = ports.WriteResult{Err: domain.Errorf(domain.CodeAlreadyExists, "record %s already exists", op.Address)}
	case op.Condition.Kind == ports.ConditionNone: // delete of an absent record
		res[r.j] = ports.WriteResult{}
	case op.Condition.Kind == ports.ConditionExists:
		res[r.j] = ports.WriteResult{Err: unmet(op, false, "")}
	default:
		pending = append(pending, r.j)
	}
	return pending
}

// settlePending answers the revision-conditioned operations that changed
// nothing: NOT_FOUND when the record does not exist, else
// REVISION_MISMATCH (one query per table).
func (s *Store) settlePending(ctx context.Context, ops []ports.WriteOp, valid []int, groups []*group, opGroup []int, opKey []string, pending []int, res []ports.WriteResult) error {
	byGroup := map[int][]int{}
	for _, j := range pending {
		byGroup[opGroup[j]] = append(byGroup[opGroup[j]], j)
	}
	for gi, js := range byGroup {
		keys := make([][]byte, len(js))
		for x, j := range js {
			keys[x] = []byte(opKey[j])
		}
		rows, err := s.pool.Query(ctx, "SELECT k FROM "+groups[gi].t.ident()+" WHERE k = ANY($1)", keys)
		if err != nil {
			return err
		}
		present := map[string]bool{}
		var k []byte
		_, err = pgx.ForEachRow(rows, []any{&k}, func() error { present[string(k)] = true; return nil })
		if err != nil {
			return err
		}
		for _, j := range js {
			op := &ops[valid[j]]
			if present[opKey[j]] {
				res[j] = ports.WriteResult{Err: domain.Errorf(domain.CodeRevisionMismatch, "record %s does not have the expected revision %s", op.Address, op.Condition.Revision)}
			} else {
				res[j] = ports.WriteResult{Err: unmet(op, false, "")}
			}
		}
	}
	return nil
}

// directOneSQL is directSQL for one row, with scalar parameters (cheaper
// than unnest for the server and the driver), returning only whether the
// row existed.
func directOneSQL(t *tableSQL, st *directStmt, ops []ports.WriteOp, valid []int) (string, []any) {
	r := st.rows[0]
	if st.kind == dDelete {
		return t.deleteOne, []any{r.key, r.cond}
	}
	d := ops[valid[r.j]].Document
	switch st.kind {
	case dUpsert:
		return t.upsertOne, []any{r.key, d.ContentType, orEmpty(d.Data), []byte(r.rev)}
	case dCreate:
		return t.createOne, []any{r.key, d.ContentType, orEmpty(d.Data), []byte(r.rev)}
	default: // dUpdate
		return t.updateOne, []any{r.key, d.ContentType, orEmpty(d.Data), []byte(r.rev), r.cond}
	}
}
