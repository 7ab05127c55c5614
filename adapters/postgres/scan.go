package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

var _ ports.Scanner = (*Store)(nil)

// Scans and counts (ports.Scanner), docs/postgres.md#scan-and-count.
//
// The key order is domain.CompareKeys: int64 keys, then string keys, then
// bytes keys, then ObjectID keys. Sink's tables keep every kind in one
// bytea column k (the kind's byte, then the key's bytes, see encodeKey),
// whose primary key orders the bytes of k: within one kind that is the
// key order for int64 (big-endian, sign flipped), string (the bytes of the
// UTF-8) and ObjectID keys, but not for bytes keys (length first), and the
// kinds' bytes ('b' < 'i' < 'o' < 's') are not in key order. So a scan
// runs one SELECT per key kind, in key order, each selecting its kind's
// slice of k with literal bounds, and the bytes kind orders by
// (length(k), k), which the partial index bytesIndexSQL serves. Key ranges
// and the resume key become conditions on k, so every SELECT is a range
// of an index.
//
// Bound (legacy) tables hold one key kind, ordered by their key column:
// bigint numerically, text COLLATE "C" (bytes of the UTF-8, whatever the
// column's collation), uuid by its 16 bytes, bytea by (length, bytes).
//
// Filters are not pushed down: the application evaluates the filter on
// every record returned (docs/postgres.md says why).

// keySpace is how the keys of one kind are stored and ordered in a table.
type keySpace struct {
	kind domain.KeyKind
	// kindCond selects the kind's rows (Sink's tables: a slice of k;
	// bound tables: the key column is not NULL).
	kindCond string
	// order lists the ORDER BY terms of the key order, ascending.
	order []string
	// compare is the expression a bound is compared with: one of order's
	// terms, or a row of them.
	compare string
	t       target
}

// kindByte is the first byte of k for the keys of a kind (encodeKey).
func kindByte(k domain.KeyKind) byte {
	switch k {
	case domain.KeyInt64:
		return kindInt64
	case domain.KeyString:
		return kindString
	case domain.KeyBytes:
		return kindBytes
	}
	return kindObjectID
}

// kindSliceSQL selects the rows of Sink's table whose k starts with c: a
// literal range (no parameter), so the planner matches it with the
// predicate of the bytes index.
func kindSliceSQL(c byte) string {
	return fmt.Sprintf(`k >= '\x%02x'::bytea AND k < '\x%02x'::bytea`, c, c+1)
}

// bytesIndexSQL creates the index that serves the order of bytes keys in a
// Sink table: (length(k), k) over the rows of bytes keys only, so the
// other kinds' writes never touch it. Its name is derived from the table's
// (index names share the schema with tables and are at most 63 bytes).
func bytesIndexSQL(t target) string {
	h := sha256.Sum256([]byte(t.Table))
	return "CREATE INDEX IF NOT EXISTS " + pgx.Identifier{"sink_bytes_keys_" + hex.EncodeToString(h[:8])}.Sanitize() +
		" ON " + t.ident() + " (length(k), k) WHERE " + kindSliceSQL(kindBytes)
}

// keySpaces returns the key kinds of table t in key order.
func keySpaces(t target) []keySpace {
	b := t.legacy
	if b == nil {
		out := make([]keySpace, 0, len(domain.KeyKindsInOrder))
		for _, k := range domain.KeyKindsInOrder {
			ks := keySpace{kind: k, kindCond: kindSliceSQL(kindByte(k)), order: []string{"k"}, compare: "k", t: t}
			if k == domain.KeyBytes {
				ks.order, ks.compare = []string{"length(k)", "k"}, "(length(k), k)"
			}
			out = append(out, ks)
		}
		return out
	}
	kc := pgx.Identifier{b.KeyColumn}.Sanitize()
	ks := keySpace{kindCond: kc + " IS NOT NULL", order: []string{kc}, compare: kc, t: t}
	switch b.KeyType {
	case KeyTypeBigint:
		ks.kind = domain.KeyInt64
	case KeyTypeText:
		ks.kind = domain.KeyString
		ks.order[0] = kc + ` COLLATE "C"`
		ks.compare = ks.order[0]
	case KeyTypeUUID:
		ks.kind = domain.KeyBytes
	default:
		ks.kind = domain.KeyBytes
		ks.order, ks.compare = []string{"length(" + kc + ")", kc}, "(length("+kc+"), "+kc+")"
	}
	return []keySpace{ks}
}

func kindRank(k domain.KeyKind) int {
	for i, kk := range domain.KeyKindsInOrder {
		if kk == k {
			return i
		}
	}
	return -1
}

// args collects a statement's parameters.
type args []any

func (a *args) add(v any, cast string) string {
	*a = append(*a, v)
	return "$" + strconv.Itoa(len(*a)) + "::" + cast
}

// bound returns the condition that keeps the keys of ks that are op b
// (op: >, >=, < or <=; a lower bound when op starts with >). inside is
// true with cond "" when every key of the kind is; ok is false when none
// is.
func (ks keySpace) bound(a *args, b domain.Key, op string) (cond string, ok bool, err error) {
	lower := op[0] == '>'
	if rb, rk := kindRank(b.Kind), kindRank(ks.kind); rb != rk {
		// Another kind: the whole kind is on one side of b.
		return "", (lower && rb < rk) || (!lower && rb > rk), nil
	}
	lb := ks.t.legacy
	if lb == nil {
		enc, err := encodeKey(b)
		if err != nil {
			return "", false, err
		}
		if b.Kind == domain.KeyBytes {
			return ks.compare + " " + op + " (" + a.add(len(enc), "int4") + ", " + a.add(enc, "bytea") + ")", true, nil
		}
		return "k " + op + " " + a.add(enc, "bytea"), true, nil
	}
	switch lb.KeyType {
	case KeyTypeBigint:
		return ks.compare + " " + op + " " + a.add(b.Int64(), "int8"), true, nil
	case KeyTypeText:
		s := b.StringValue()
		if i := strings.IndexByte(s, 0); i >= 0 {
			// No text value holds NUL: against s, a value compares as
			// against s's part before the NUL, except that it is never
			// equal to s.
			s = s[:i]
			switch op {
			case ">=":
				op = ">"
			case "<":
				op = "<="
			}
		}
		if !utf8.ValidString(s) {
			return "", false, fmt.Errorf("a text key column holds UTF-8 keys; bound %q is not UTF-8", s)
		}
		return ks.compare + " " + op + " " + a.add(s, "text"), true, nil
	case KeyTypeUUID:
		// uuid values are bytes keys of 16 bytes: a bound of another length
		// (shorter keys come first) is below or above all of them.
		switch n := len(b.Bytes()); {
		case n < 16:
			return "", lower, nil
		case n > 16:
			return "", !lower, nil
		}
		return ks.compare + " " + op + " " + a.add(uuidText(b.Bytes()), "uuid"), true, nil
	}
	v := b.Bytes()
	return ks.compare + " " + op + " (" + a.add(len(v), "int4") + ", " + a.add(v, "bytea") + ")", true, nil
}

// conds returns the conditions selecting the keys of ks in range r and
// after the key after (in the scan direction), or ok false when no key of
// the kind can be.
func (ks keySpace) conds(a *args, r domain.KeyRange, after *domain.Key, desc bool) (conds []string, ok bool, err error) {
	conds = []string{ks.kindCond}
	add := func(b domain.Key, op string) bool {
		if !ok || err != nil {
			return false
		}
		var c string
		c, ok, err = ks.bound(a, b, op)
		if c != "" {
			conds = append(conds, c)
		}
		return ok && err == nil
	}
	ok = true
	if r.Start != nil {
		add(r.Start.Key, map[bool]string{true: ">=", false: ">"}[r.Start.Inclusive])
	}
	if r.End != nil {
		add(r.End.Key, map[bool]string{true: "<=", false: "<"}[r.End.Inclusive])
	}
	if after != nil {
		add(*after, map[bool]string{false: ">", true: "<"}[desc])
	}
	if err != nil || !ok {
		return nil, false, err
	}
	if r.Prefix != nil {
		if ks.kind != domain.KeyString {
			return nil, false, nil
		}
		p := *r.Prefix
		if ks.t.legacy == nil {
			lo := append([]byte{kindString}, p...)
			conds = append(conds, "k >= "+a.add(lo, "bytea"), "k < "+a.add(nextPrefix(lo), "bytea"))
			return conds, true, nil
		}
		if strings.IndexByte(p, 0) >= 0 {
			return nil, false, nil // no text value holds NUL
		}
		if !utf8.ValidString(p) {
			return nil, false, fmt.Errorf("a text key column holds UTF-8 keys; prefix %q is not UTF-8", p)
		}
		if p != "" {
			conds = append(conds, ks.compare+" >= "+a.add(p, "text"))
			if hi, ok := nextTextPrefix(p); ok {
				conds = append(conds, ks.compare+" < "+a.add(hi, "text"))
			}
		}
	}
	return conds, true, nil
}

// nextPrefix returns the least byte string greater than every string that
// starts with p (p's first byte is a kind byte, never 0xff).
func nextPrefix(p []byte) []byte {
	hi := append([]byte(nil), p...)
	for len(hi) > 0 && hi[len(hi)-1] == 0xff {
		hi = hi[:len(hi)-1]
	}
	hi[len(hi)-1]++
	return hi
}

// nextTextPrefix returns the least UTF-8 string greater (by bytes) than
// every string that starts with p: p with its last code point that has a
// successor replaced by that successor and what follows it dropped (UTF-8
// keeps code point order in byte order). ok is false when every code
// point of p is U+10FFFF.
func nextTextPrefix(p string) (string, bool) {
	rs := []rune(p)
	for i := len(rs) - 1; i >= 0; i-- {
		r := rs[i] + 1
		if r >= 0xd800 && r <= 0xdfff {
			r = 0xe000
		}
		if r <= utf8.MaxRune {
			rs[i] = r
			return string(rs[:i+1]), true
		}
	}
	return "", false
}

// decodeKey is the inverse of encodeKey; ok is false for a stored key no
// key encodes to.
func decodeKey(b []byte) (domain.Key, bool) {
	if len(b) == 0 {
		return domain.Key{}, false
	}
	switch b[0] {
	case kindString:
		return domain.StringKey(string(b[1:])), true
	case kindInt64:
		if len(b) != 9 {
			return domain.Key{}, false
		}
		return domain.Int64Key(int64(binary.BigEndian.Uint64(b[1:]) ^ (1 << 63))), true
	case kindBytes:
		return domain.BytesKey(b[1:]), true
	case kindObjectID:
		if len(b) != 1+domain.ObjectIDLength {
			return domain.Key{}, false
		}
		return domain.ObjectIDKey(b[1:]), true
	}
	return domain.Key{}, false
}

// rowKey returns the key of a row read by eachRow from its keyID.
func rowKey(t target, id []byte) (domain.Key, bool) {
	b := t.legacy
	if b == nil {
		return decodeKey(id)
	}
	switch b.KeyType {
	case KeyTypeBigint:
		n, err := strconv.ParseInt(string(id), 10, 64)
		return domain.Int64Key(n), err == nil
	case KeyTypeText:
		return domain.StringKey(string(id)), true
	case KeyTypeUUID:
		u, err := hex.DecodeString(strings.ReplaceAll(string(id), "-", ""))
		return domain.BytesKey(u), err == nil && len(u) == 16
	}
	return domain.BytesKey(id), true
}

// scanTarget resolves a dataset and reports whether its table exists
// (checking a bound table, and adding its meta column, on first use).
func (s *Store) scanTarget(ctx context.Context, d domain.DatasetRef) (target, bool, error) {
	t, err := s.names.resolve(domain.Address{Store: d.Store, Namespace: d.Namespace, Dataset: d.Dataset, Key: domain.Int64Key(0)})
	if err != nil {
		return target{}, false, invalidArg("%v", err)
	}
	exists, err := s.existing(ctx, []*group{{t: t}})
	if err != nil {
		return target{}, false, s.readError(ctx, err, t)
	}
	return t, exists[0], nil
}

func (s *Store) readError(ctx context.Context, err error, t target) error {
	if _, ok := err.(*domain.Error); ok {
		return err
	}
	e := s.classify(ctx, err, phaseRead)
	e.Message = fmt.Sprintf("cannot scan %s: %s", t, e.Message)
	return e
}

// scanSQL returns the statement reading the next records of ks (conds
// hold), at most limit of them, in key order.
func scanSQL(ks keySpace, conds []string, desc bool, limit string) string {
	order := ks.order
	if desc {
		order = make([]string, len(ks.order))
		for i, o := range ks.order {
			order[i] = o + " DESC"
		}
	}
	return "SELECT " + selectColumns(ks.t, false) + " FROM " + ks.t.ident() + " WHERE " + strings.Join(conds, " AND ") +
		" ORDER BY " + strings.Join(order, ", ") + " LIMIT " + limit
}

// Scan implements ports.Scanner: one SELECT per key kind in the scan
// direction, each a range of an index in key order, until Limit records
// are read or the kinds are exhausted. Records are read like Read reads
// them (bound tables: the revision from Sink's meta column, which is never
// returned).
func (s *Store) Scan(ctx context.Context, q ports.ScanQuery) (ports.ScanResult, error) {
	if q.Limit < 1 {
		return ports.ScanResult{}, invalidArg("scan limit must be at least 1")
	}
	ctx, span := s.startSpan(ctx, "scan", q.Limit)
	if span != nil {
		defer span.End()
	}
	if err := ctx.Err(); err != nil {
		return ports.ScanResult{}, s.classify(ctx, err, phaseRead)
	}
	t, exists, err := s.scanTarget(ctx, q.Dataset)
	if err != nil || !exists {
		return ports.ScanResult{Done: true}, err
	}
	var items []ports.ScanItem
	var arena arena
	for _, ks := range scanSpaces(t, q.Descending) {
		want := q.Limit - len(items)
		sql, a, ok, err := ks.scanStatement(q, strconv.Itoa(want))
		if err != nil {
			return ports.ScanResult{}, err
		}
		if !ok {
			continue
		}
		if items == nil {
			items = make([]ports.ScanItem, 0, min(q.Limit, 1024))
		}
		rows, err := s.pool.Query(ctx, sql, a...)
		n := 0
		var bad error
		if err == nil {
			_, err = readRows(t, rows, &arena, func(id []byte, r *row) bool {
				n++
				if it, ok := scanItem(t, id, r, &bad); ok {
					items = append(items, it)
				}
				return true
			})
			rows.Close()
		}
		if err != nil {
			if missingTable(err) {
				s.forget([]*group{{t: t}})
				return ports.ScanResult{Done: true}, nil
			}
			return ports.ScanResult{}, s.readError(ctx, err, t)
		}
		if bad != nil {
			return ports.ScanResult{}, bad
		}
		if n == want {
			return ports.ScanResult{Items: items}, nil
		}
	}
	return ports.ScanResult{Items: items, Done: true}, nil
}

// scanSpaces returns the key spaces of t in the scan direction.
func scanSpaces(t target, desc bool) []keySpace {
	spaces := keySpaces(t)
	if desc {
		slices.Reverse(spaces)
	}
	return spaces
}

// scanStatement returns the statement reading the records of ks that q
// asks for (in q's range, after q.After, in q's direction), at most limit
// of them ("ALL": every one), and its arguments; ok is false when no key
// of the kind can be.
func (ks keySpace) scanStatement(q ports.ScanQuery, limit string) (sql string, a args, ok bool, err error) {
	conds, ok, err := ks.conds(&a, q.Range, q.After, q.Descending)
	if err != nil {
		return "", nil, false, invalidArg("cannot scan %s: %v", ks.t, err)
	}
	if !ok {
		return "", nil, false, nil
	}
	return scanSQL(ks, conds, q.Descending, limit), a, true, nil
}

// scanItem makes the record of a row a scan read; a key Sink cannot
// decode leaves it out and sets *bad (once).
func scanItem(t target, id []byte, r *row, bad *error) (ports.ScanItem, bool) {
	k, ok := rowKey(t, id)
	if !ok {
		if *bad == nil {
			*bad = domain.Errorf(domain.CodeInternal, "table %s holds a key Sink cannot decode", t)
		}
		return ports.ScanItem{}, false
	}
	return ports.ScanItem{Key: k, Record: domain.Record{Document: r.doc, Revision: r.rev}}, true
}

// rawReadable reports whether the columns of a Sink table's selectColumns
// (key, content type, document, revision, mark) come in formats whose raw
// values are the values' bytes: bytea in the binary format (its text
// format is hex; pgx's simple protocol), text in either. pgx knows the
// columns before the first row in every query mode.
func rawReadable(rows pgx.Rows) bool {
	fds := rows.FieldDescriptions()
	if len(fds) < 4 || len(fds) > 5 {
		return false
	}
	for i, fd := range fds {
		if i != 1 && fd.Format != pgx.BinaryFormatCode {
			return false
		}
	}
	return true
}

// arena hands out copies of bytes from shared chunks: a page's keys,
// documents and revisions take a few allocations instead of three per
// record. Each copy's capacity ends where it does, so appending to one
// never writes into another. A nil arena copies each value on its own (a
// read of a few records would keep a whole chunk alive).
type arena struct{ buf []byte }

const arenaChunk = 64 << 10

func (a *arena) copy(b []byte) []byte {
	if a == nil || len(b) > arenaChunk/4 {
		return append([]byte(nil), b...)
	}
	if len(a.buf)+len(b) > cap(a.buf) {
		a.buf = make([]byte, 0, arenaChunk)
	}
	start := len(a.buf)
	a.buf = append(a.buf, b...)
	return a.buf[start:len(a.buf):len(a.buf)]
}

// eachRawRow is readRows for the rows of a Sink table's selectColumns in
// the formats rawReadable accepts, read from their raw values into a (nil:
// a copy per value): no copy of the key, the content type shared with the
// previous row's when equal, the mark (a fifth column) decoded.
func eachRawRow(rows pgx.Rows, a *arena, emit func(id []byte, r *row) bool) (stopped bool, err error) {
	var ct string
	var r row
	for rows.Next() {
		v := rows.RawValues()
		if len(v) < 4 || v[0] == nil || v[1] == nil || v[2] == nil || v[3] == nil {
			return false, fmt.Errorf("a row of %d columns with NULLs where Sink's tables have none", len(v))
		}
		if string(v[1]) != ct {
			ct = string(v[1])
		}
		var m domain.AppliedMark
		if len(v) > 4 {
			var err error
			if m, err = decodeMark(v[4]); err != nil {
				return false, err
			}
		}
		r = row{doc: domain.Document{ContentType: ct, Data: orEmpty(a.copy(v[2]))}, rev: domain.Revision(v[3]), mark: m}
		if !emit(v[0], &r) {
			return true, nil
		}
	}
	return false, rows.Err()
}

// Count implements ports.Scanner: SELECT count(*) with the range's
// conditions (the same as Scan's, so an index serves them), or, for an
// estimate of a whole dataset, the table's row estimate from pg_class
// (reltuples, kept by VACUUM and ANALYZE; Exact false), when the table
// has one.
func (s *Store) Count(ctx context.Context, q ports.CountQuery) (ports.CountResult, error) {
	ctx, span := s.startSpan(ctx, "count", 1)
	if span != nil {
		defer span.End()
	}
	t, exists, err := s.scanTarget(ctx, q.Dataset)
	if err != nil || !exists {
		return ports.CountResult{Exact: true}, err
	}
	whole := q.Range.Start == nil && q.Range.End == nil && q.Range.Prefix == nil
	if q.Estimate && whole {
		var est float64
		err := s.pool.QueryRow(ctx, "SELECT reltuples::float8 FROM pg_class WHERE oid = to_regclass($1)", t.ident()).Scan(&est)
		if err == nil && est >= 0 {
			return ports.CountResult{Count: int64(est)}, nil
		}
		if err != nil && err != pgx.ErrNoRows {
			return ports.CountResult{}, s.readError(ctx, err, t)
		}
		// Never analyzed (-1) or gone: count.
	}
	var a args
	sql := "SELECT count(*) FROM " + t.ident()
	if !whole || t.legacy != nil {
		var or []string
		for _, ks := range keySpaces(t) {
			conds, ok, err := ks.conds(&a, q.Range, nil, false)
			if err != nil {
				return ports.CountResult{}, invalidArg("cannot count %s: %v", t, err)
			}
			if ok {
				or = append(or, "("+strings.Join(conds, " AND ")+")")
			}
		}
		if len(or) == 0 {
			return ports.CountResult{Exact: true}, nil
		}
		sql += " WHERE " + strings.Join(or, " OR ")
	}
	var n int64
	if err := s.pool.QueryRow(ctx, sql, a...).Scan(&n); err != nil {
		if missingTable(err) {
			s.forget([]*group{{t: t}})
			return ports.CountResult{Exact: true}, nil
		}
		return ports.CountResult{}, s.readError(ctx, err, t)
	}
	return ports.CountResult{Count: n, Exact: true}, nil
}
