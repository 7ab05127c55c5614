package mongodb

import (
	"context"
	"fmt"
	"math"
	"regexp"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

var _ ports.Scanner = (*Store)(nil)

// keyOf returns the key a stored _id addresses: int32, int64 and integral
// doubles are int64 keys (MongoDB compares them by value), strings,
// binary data of subtype 0 and ObjectIds their kinds. ok is false for any
// other _id (such a record cannot be addressed, so scans leave it out).
func keyOf(v bsoncore.Value) (domain.Key, bool) {
	switch v.Type {
	case bsoncore.TypeInt32:
		n, ok := v.Int32OK()
		return domain.Int64Key(int64(n)), ok
	case bsoncore.TypeInt64:
		n, ok := v.Int64OK()
		return domain.Int64Key(n), ok
	case bsoncore.TypeDouble:
		f, ok := v.DoubleOK()
		if !ok || f != math.Trunc(f) || f < math.MinInt64 || f >= math.MaxInt64 {
			return domain.Key{}, false
		}
		return domain.Int64Key(int64(f)), true
	case bsoncore.TypeString:
		s, ok := v.StringValueOK()
		return domain.StringKey(s), ok
	case bsoncore.TypeBinary:
		sub, data, ok := v.BinaryOK()
		if !ok || sub != 0 {
			return domain.Key{}, false
		}
		return domain.BytesKey(data), true
	case bsoncore.TypeObjectID:
		oid, ok := v.ObjectIDOK()
		return domain.ObjectIDKey(oid[:]), ok
	}
	return domain.Key{}, false
}

// kindFloor is the least _id value of a key kind in MongoDB's order: a
// condition {_id: {$gte: floor}} selects exactly the _ids of that type
// bracket (comparisons never cross brackets).
func kindFloor(k domain.KeyKind) bsoncore.Value {
	switch k {
	case domain.KeyInt64:
		return bsoncore.Value{Type: bsoncore.TypeDouble, Data: bsoncore.AppendDouble(nil, math.Inf(-1))}
	case domain.KeyString:
		return bsoncore.Value{Type: bsoncore.TypeString, Data: bsoncore.AppendString(nil, "")}
	case domain.KeyBytes:
		return bsoncore.Value{Type: bsoncore.TypeBinary, Data: bsoncore.AppendBinary(nil, 0, nil)}
	}
	return bsoncore.Value{Type: bsoncore.TypeObjectID, Data: make([]byte, 12)}
}

func rank(k domain.KeyKind) int {
	for i, kk := range domain.KeyKindsInOrder {
		if kk == k {
			return i
		}
	}
	return -1
}

// idCond is one condition on _id.
type idCond struct {
	op string
	v  bsoncore.Value
}

// kindConds returns the conditions on _id that select the keys of kind k
// that are in r and after after (in the scan direction), or ok false when
// no key of kind k can be.
func kindConds(k domain.KeyKind, r domain.KeyRange, after *domain.Key, desc bool) (conds []idCond, ok bool) {
	conds = []idCond{{"$gte", kindFloor(k)}}
	bound := func(b domain.Key, lower, inclusive bool) bool {
		switch rb, rk := rank(b.Kind), rank(k); {
		case lower && rb > rk, !lower && rb < rk:
			return false // the whole kind is outside
		case rb != rk:
			return true // the whole kind is inside
		}
		v, _ := keyValue(b)
		op := map[[2]bool]string{{true, true}: "$gte", {true, false}: "$gt", {false, true}: "$lte", {false, false}: "$lt"}[[2]bool{lower, inclusive}]
		conds = append(conds, idCond{op, v})
		return true
	}
	if r.Start != nil && !bound(r.Start.Key, true, r.Start.Inclusive) {
		return nil, false
	}
	if r.End != nil && !bound(r.End.Key, false, r.End.Inclusive) {
		return nil, false
	}
	if after != nil && !bound(*after, !desc, false) {
		return nil, false
	}
	if r.Prefix != nil {
		if k != domain.KeyString {
			return nil, false
		}
		if p := *r.Prefix; p != "" {
			conds = append(conds,
				idCond{"$gte", bsoncore.Value{Type: bsoncore.TypeString, Data: bsoncore.AppendString(nil, p)}},
				idCond{"$regex", bsoncore.Value{Type: bsoncore.TypeRegex, Data: bsoncore.AppendRegex(nil, "^"+regexp.QuoteMeta(p), "")}})
		}
	}
	return conds, true
}

// condsDoc builds {$and: [{_id: {op: v}}...]}.
func condsDoc(conds []idCond) bsoncore.Document {
	arr := bsoncore.NewArrayBuilder()
	for _, c := range conds {
		arr.AppendDocument(bsoncore.NewDocumentBuilder().AppendDocument(idKey, bsoncore.NewDocumentBuilder().AppendValue(c.op, c.v).Build()).Build())
	}
	return bsoncore.NewDocumentBuilder().AppendArray("$and", arr.Build()).Build()
}

// rangeFilter returns the query selecting the keys in r after after (in
// the scan direction) of every kind, as an $or of one _id range per kind
// (comparisons never cross type brackets), and whether any key can match.
// resume, when set, is the last _id a previous find returned (one no key
// may address): the scan continues after it within its kind.
func rangeFilter(r domain.KeyRange, after *domain.Key, desc bool, resume *bsoncore.Value) (bsoncore.Document, bool) {
	or := bsoncore.NewArrayBuilder()
	n := 0
	resumeKind := domain.KeyInvalid
	if resume != nil {
		resumeKind = idKind(resume.Type)
	}
	for _, kind := range domain.KeyKindsInOrder {
		if resume != nil {
			if c := rank(kind) - rank(resumeKind); (!desc && c < 0) || (desc && c > 0) {
				continue
			}
		}
		conds, ok := kindConds(kind, r, after, desc)
		if !ok {
			continue
		}
		if resume != nil && kind == resumeKind {
			op := "$gt"
			if desc {
				op = "$lt"
			}
			conds = append(conds, idCond{op, *resume})
		}
		or.AppendDocument(condsDoc(conds))
		n++
	}
	if n == 0 {
		return nil, false
	}
	return bsoncore.NewDocumentBuilder().AppendArray("$or", or.Build()).Build(), true
}

// idKind is the key kind whose type bracket holds _ids of BSON type t.
func idKind(t bsoncore.Type) domain.KeyKind {
	switch t {
	case bsoncore.TypeInt32, bsoncore.TypeInt64, bsoncore.TypeDouble, bsoncore.TypeDecimal128:
		return domain.KeyInt64
	case bsoncore.TypeString, bsoncore.TypeSymbol:
		return domain.KeyString
	case bsoncore.TypeBinary:
		return domain.KeyBytes
	}
	return domain.KeyObjectID
}

func and(docs ...bsoncore.Document) bson.Raw {
	arr := bsoncore.NewArrayBuilder()
	for _, d := range docs {
		if d != nil {
			arr.AppendDocument(d)
		}
	}
	return bson.Raw(bsoncore.NewDocumentBuilder().AppendArray("$and", arr.Build()).Build())
}

func (s *Store) scanTarget(d domain.DatasetRef) (target, error) {
	t, err := s.names.resolve(domain.Address{Store: d.Store, Namespace: d.Namespace, Dataset: d.Dataset, Key: domain.Int64Key(0)})
	if err != nil {
		return target{}, invalidArg("%v", err)
	}
	return t, nil
}

// scanItem returns the record of a stored document a scan found, and its
// _id (zero when it has none). ok is false for a document whose _id no
// key addresses (scans leave it out).
func (s *Store) scanItem(raw bson.Raw, d domain.DatasetRef) (it ports.ScanItem, id bsoncore.Value, ok bool, err error) {
	id, err = bsoncore.Document(raw).LookupErr(idKey)
	if err != nil {
		return ports.ScanItem{}, bsoncore.Value{}, false, nil
	}
	k, ok := keyOf(id)
	if !ok {
		return ports.ScanItem{}, id, false, nil
	}
	rec, err := s.enc.clientRecord(raw)
	if err != nil {
		return ports.ScanItem{}, id, false, domain.Errorf(domain.CodeInternal, "cannot read record %s of %s: %v", k, d, err)
	}
	return ports.ScanItem{Key: k, Record: rec}, id, true, nil
}

// scanShape returns what a scan's finds share: the part of q's filter
// MongoDB evaluates (pushdown; nil: none) and the sort on _id in q's
// direction.
func (s *Store) scanShape(q ports.ScanQuery) (extra bsoncore.Document, sort bson.D) {
	if q.Filter != nil {
		extra, _ = pushdown(q.Filter, s.enc.hidden)
	}
	dir := int32(1)
	if q.Descending {
		dir = -1
	}
	return extra, bson.D{{Key: idKey, Value: dir}}
}

// Scan implements ports.Scanner: one find per key kind (in key order)
// with the kind's _id range, sorted on _id, so MongoDB walks its _id
// index; the parts of the filter MongoDB evaluates exactly like Sink are
// pushed down (pushdown).
func (s *Store) Scan(ctx context.Context, q ports.ScanQuery) (ports.ScanResult, error) {
	if q.Limit < 1 {
		return ports.ScanResult{}, invalidArg("scan limit must be at least 1")
	}
	ctx, span := s.startSpan(ctx, "scan", q.Limit)
	if span != nil {
		defer span.End()
	}
	t, err := s.scanTarget(q.Dataset)
	if err != nil {
		return ports.ScanResult{}, err
	}
	extra, sort := s.scanShape(q)
	coll := s.collection(t)
	var items []ports.ScanItem
	var resume *bsoncore.Value
	// One find sorted on _id: MongoDB's _id order across the four type
	// brackets is the key order. Records whose _id no key addresses are
	// skipped; when a find filled its limit with some of them, the next
	// resumes after the last _id it returned.
	for {
		rf, ok := rangeFilter(q.Range, q.After, q.Descending, resume)
		if !ok {
			return ports.ScanResult{Items: items, Done: true}, nil
		}
		want := q.Limit - len(items)
		opts := options.Find().SetSort(sort).SetLimit(int64(want))
		cur, err := coll.Find(ctx, and(rf, extra), opts)
		if err != nil {
			return ports.ScanResult{}, classifyRead(fmt.Errorf("cannot scan %s: %w", t, err))
		}
		n := 0
		var lastID bsoncore.Value
		for cur.Next(ctx) {
			n++
			it, id, ok, err := s.scanItem(cur.Current, q.Dataset)
			if err != nil {
				_ = cur.Close(context.WithoutCancel(ctx))
				return ports.ScanResult{}, err
			}
			if id.Type != 0 {
				lastID = bsoncore.Value{Type: id.Type, Data: append([]byte(nil), id.Data...)}
			}
			if ok {
				items = append(items, it)
			}
		}
		err = cur.Err()
		_ = cur.Close(context.WithoutCancel(ctx))
		if err != nil {
			return ports.ScanResult{}, classifyRead(fmt.Errorf("cannot scan %s: %w", t, err))
		}
		switch {
		case len(items) == q.Limit:
			return ports.ScanResult{Items: items}, nil
		case n < want:
			return ports.ScanResult{Items: items, Done: true}, nil
		}
		resume = &lastID
	}
}

var _ ports.ScanStreamer = (*Store)(nil)

// Streamed scans read in batches of this many records at most (and at
// least the first read's size, up to it), so a cursor's batch in the
// driver stays a few MiB for documents of a few KiB.
const (
	minStreamBatch = 256
	maxStreamBatch = 1000
)

// OpenScan implements ports.ScanStreamer: one find over the whole range,
// sorted on _id and without a limit, whose server-side cursor serves
// every Next; MongoDB walks its _id index once for the whole scan, and a
// server without a usable index (FerretDB v1's SQLite backend) reads and
// sorts the range once instead of once per page.
func (s *Store) OpenScan(ctx context.Context, q ports.ScanQuery) (ports.ScanStream, error) {
	t, err := s.scanTarget(q.Dataset)
	if err != nil {
		return nil, err
	}
	rf, ok := rangeFilter(q.Range, q.After, q.Descending, nil)
	if !ok {
		return &scanStream{done: true}, nil
	}
	extra, sort := s.scanShape(q)
	batch := int32(min(max(q.Limit, minStreamBatch), maxStreamBatch))
	opts := options.Find().SetSort(sort).SetBatchSize(batch)
	cur, err := s.collection(t).Find(ctx, and(rf, extra), opts)
	if err != nil {
		return nil, classifyRead(fmt.Errorf("cannot scan %s: %w", t, err))
	}
	return &scanStream{s: s, cur: cur, t: t, d: q.Dataset}, nil
}

// scanStream is an open streamed scan: a driver cursor.
type scanStream struct {
	s    *Store
	cur  *mongo.Cursor
	t    target
	d    domain.DatasetRef
	done bool
}

// Next implements ports.ScanStream.
func (st *scanStream) Next(ctx context.Context, n int) (ports.ScanResult, error) {
	if st.done {
		return ports.ScanResult{Done: true}, nil
	}
	if st.cur == nil {
		return ports.ScanResult{}, domain.Errorf(domain.CodeInternal, "the scan of %s was closed", st.d)
	}
	if n < 1 {
		return ports.ScanResult{}, invalidArg("scan limit must be at least 1")
	}
	if err := ctx.Err(); err != nil {
		return ports.ScanResult{}, err // the driver would serve its batch regardless
	}
	ctx, span := st.s.startSpan(ctx, "scan", n)
	if span != nil {
		defer span.End()
	}
	var items []ports.ScanItem
	for len(items) < n {
		if !st.cur.Next(ctx) {
			if err := st.cur.Err(); err != nil {
				return ports.ScanResult{}, classifyRead(fmt.Errorf("cannot scan %s: %w", st.t, err))
			}
			st.Close()
			st.done = true
			return ports.ScanResult{Items: items, Done: true}, nil
		}
		it, _, ok, err := st.s.scanItem(st.cur.Current, st.d)
		if err != nil {
			return ports.ScanResult{}, err
		}
		if ok {
			items = append(items, it)
		}
	}
	return ports.ScanResult{Items: items}, nil
}

// Close implements ports.ScanStream: the server-side cursor is killed
// (bounded by a short time of its own, so a cancelled scan still frees it).
func (st *scanStream) Close() {
	if st.cur == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = st.cur.Close(ctx)
	st.cur = nil
}

// Count implements ports.Scanner: a count per key kind of the range, or,
// for an estimate of a whole dataset, the collection's metadata count.
func (s *Store) Count(ctx context.Context, q ports.CountQuery) (ports.CountResult, error) {
	t, err := s.scanTarget(q.Dataset)
	if err != nil {
		return ports.CountResult{}, err
	}
	coll := s.collection(t)
	if q.Estimate && q.Range.Start == nil && q.Range.End == nil && q.Range.Prefix == nil {
		n, err := coll.EstimatedDocumentCount(ctx)
		if err != nil {
			return ports.CountResult{}, classifyRead(fmt.Errorf("cannot count %s: %w", t, err))
		}
		return ports.CountResult{Count: n}, nil
	}
	rf, ok := rangeFilter(q.Range, nil, false, nil)
	if !ok {
		return ports.CountResult{Exact: true}, nil
	}
	n, err := coll.CountDocuments(ctx, and(rf))
	if err != nil {
		return ports.CountResult{}, classifyRead(fmt.Errorf("cannot count %s: %w", t, err))
	}
	return ports.CountResult{Count: n, Exact: true}, nil
}

// pushdown translates the parts of a filter that MongoDB evaluates with
// exactly the domain semantics into a query document. The result may
// select more records than the filter (it leaves out what it cannot
// translate: not, ne, null operands, conjuncts of an and it cannot
// translate, paths into _id or the hidden field), never fewer: the
// application evaluates the whole filter on every record returned.
// ok is false when nothing can be pushed down.
func pushdown(f *domain.Filter, hidden string) (bsoncore.Document, bool) {
	switch f.Op {
	case domain.FilterAnd:
		arr := bsoncore.NewArrayBuilder()
		n := 0
		for _, c := range f.Children {
			if d, ok := pushdown(c, hidden); ok {
				arr.AppendDocument(d)
				n++
			}
		}
		if n == 0 {
			return nil, false
		}
		return bsoncore.NewDocumentBuilder().AppendArray("$and", arr.Build()).Build(), true
	case domain.FilterOr:
		if len(f.Children) == 0 {
			return nil, false
		}
		arr := bsoncore.NewArrayBuilder()
		for _, c := range f.Children {
			d, ok := pushdown(c, hidden)
			if !ok {
				return nil, false
			}
			arr.AppendDocument(d)
		}
		return bsoncore.NewDocumentBuilder().AppendArray("$or", arr.Build()).Build(), true
	case domain.FilterNot, domain.FilterNe:
		return nil, false
	}
	if f.Path[0] == idKey || f.Path[0] == hidden {
		return nil, false
	}
	path := pathString(f.Path)
	cond := func(op string, v bsoncore.Value) (bsoncore.Document, bool) {
		return bsoncore.NewDocumentBuilder().AppendDocument(path, bsoncore.NewDocumentBuilder().AppendValue(op, v).Build()).Build(), true
	}
	switch f.Op {
	case domain.FilterEq, domain.FilterLt, domain.FilterLte, domain.FilterGt, domain.FilterGte:
		v, ok := scalar(f.Value)
		if !ok {
			return nil, false
		}
		return cond("$"+f.Op.String(), v)
	case domain.FilterIn:
		arr := bsoncore.NewArrayBuilder()
		for _, lit := range f.Values {
			v, ok := scalar(lit)
			if !ok {
				return nil, false
			}
			arr.AppendValue(v)
		}
		return cond("$in", bsoncore.Value{Type: bsoncore.TypeArray, Data: arr.Build()})
	case domain.FilterExists:
		if !f.Exists {
			return nil, false
		}
		return cond("$exists", bsoncore.Value{Type: bsoncore.TypeBoolean, Data: bsoncore.AppendBoolean(nil, true)})
	case domain.FilterPrefix:
		if f.Value.Str == "" {
			return nil, false
		}
		return cond("$regex", bsoncore.Value{Type: bsoncore.TypeRegex, Data: bsoncore.AppendRegex(nil, "^"+regexp.QuoteMeta(f.Value.Str), "")})
	}
	return nil, false
}

func pathString(p []string) string {
	s := p[0]
	for _, e := range p[1:] {
		s += "." + e
	}
	return s
}

// scalar returns the BSON value of a non-null filter operand.
func scalar(v domain.Value) (bsoncore.Value, bool) {
	switch v.Kind {
	case domain.ValueBool:
		return bsoncore.Value{Type: bsoncore.TypeBoolean, Data: bsoncore.AppendBoolean(nil, v.Bool)}, true
	case domain.ValueNumber:
		if v.IsFloat {
			return bsoncore.Value{Type: bsoncore.TypeDouble, Data: bsoncore.AppendDouble(nil, v.Float)}, true
		}
		return bsoncore.Value{Type: bsoncore.TypeInt64, Data: bsoncore.AppendInt64(nil, v.Int)}, true
	case domain.ValueString:
		return bsoncore.Value{Type: bsoncore.TypeString, Data: bsoncore.AppendString(nil, v.Str)}, true
	}
	return bsoncore.Value{}, false
}
