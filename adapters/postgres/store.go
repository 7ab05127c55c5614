// Package postgres is the PostgreSQL storage adapter: a ports.Storage over
// pgx (github.com/jackc/pgx/v5) and its connection pool. docs/postgres.md
// describes it for users.
//
// Mapping:
//   - A namespace is a schema and a dataset a table of the same names
//     (quoted: case, spaces and dots are kept; at most 63 bytes; never
//     pg_* or information_schema), created on first write, unless
//     SINK_POSTGRES_BINDINGS binds the pair to an existing table.
//   - Sink's tables: k bytea primary key (the key kind's byte and the
//     key's bytes, see encodeKey), content_type text, doc bytea (the exact
//     bytes written), rev bytea (the revision, see revisions), mark bytea
//     (the applied mark, NULL when none).
//   - Bound (legacy) tables keep their shape: a key column, a document
//     column and one column Sink adds, sink_meta bytea (revision token,
//     hash of the document, applied mark; see meta).
//
// Writes (READ COMMITTED): a call without applied marks that touches each
// record of Sink's tables once takes the direct path (fast.go): one
// statement per table and kind of operation, conditions in the statements,
// each row's outcome from RETURNING, all in one round trip. Any other call
// takes the locked path (write.go): one transaction whose records' rows
// are locked (SELECT … FOR UPDATE, in key order), the operations decided in
// slice order against them (applied marks, conditions), and the final state
// of each changed record written with the COMMIT in the same round trip; a
// create that meets a row another transaction created meanwhile (23505) or
// a deadlock makes the call start over. Reads: one SELECT per table, all in
// one round trip.
package postgres

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/internal/check"
	"github.com/sink-io/sink/ports"
)

var (
	_ ports.Storage          = (*Store)(nil)
	_ ports.ReadBackReporter = (*Store)(nil)
)

// MaxDocumentBytes is the largest document the adapter accepts (PostgreSQL
// holds up to 1 GB in a bytea; Sink's own request limit is far lower).
const MaxDocumentBytes = 256 << 20

// DefaultMaxAttempts bounds how often one Write call starts over after a
// deadlock, a serialization failure or a create that met a concurrent one.
const DefaultMaxAttempts = 20

// Options configure a Store.
type Options struct {
	// Store is the store name used in messages (default "primary").
	Store string
	// Bindings map logical datasets to existing tables.
	Bindings []Binding
	// MarkRing is the most mutation IDs a record's applied mark keeps
	// (default domain.DefaultAppliedRing, at most domain.MaxAppliedRing);
	// a write's MarkUpdate.Keep above it is lowered to it.
	MarkRing int
	// MaxAttempts bounds the restarts of one Write call (default
	// DefaultMaxAttempts).
	MaxAttempts int
	// Secrets are strings no message may show (the connection's password;
	// Connection fills them in).
	Secrets []string
	// TracerProvider makes a span per Read and Write call (nil: none).
	TracerProvider trace.TracerProvider
	// ScanStreams is the most connections of the pool that streamed scans
	// (OpenScan) hold at once (0: half the pool's, rounded down; at most
	// all but one; negative: none, every read of a stream is a query). A
	// stream that finds none free reads with a query per read until one is.
	ScanStreams int
	// ScanStreamIdle is how long a streamed scan that nobody reads keeps
	// its SELECT and connection (default DefaultScanStreamIdle).
	ScanStreamIdle time.Duration
}

// DefaultOptions returns Options with every default filled in.
func DefaultOptions() Options {
	var o Options
	o.setDefaults()
	return o
}

func (o *Options) setDefaults() {
	if o.Store == "" {
		o.Store = "primary"
	}
	if o.MarkRing == 0 {
		o.MarkRing = domain.DefaultAppliedRing
	}
	if o.MaxAttempts == 0 {
		o.MaxAttempts = DefaultMaxAttempts
	}
	if o.ScanStreamIdle == 0 {
		o.ScanStreamIdle = DefaultScanStreamIdle
	}
}

// Validate reports every problem of the (defaulted) options at once.
func (o Options) Validate() error {
	var p check.Problems
	if o.MarkRing < 1 || o.MarkRing > domain.MaxAppliedRing {
		p.Add("MarkRing must be between 1 and %d, got %d", domain.MaxAppliedRing, o.MarkRing)
	}
	p.Positive("MaxAttempts", o.MaxAttempts)
	if o.ScanStreamIdle < 0 {
		p.Add("ScanStreamIdle must be positive, got %s", o.ScanStreamIdle)
	}
	return p.Err()
}

// Store is the PostgreSQL ports.Storage. It is safe for concurrent use.
type Store struct {
	pool        *pgxpool.Pool
	names       *mapper
	revs        *revisions
	markRing    int
	maxAttempts int
	secrets     []string
	tracer      trace.Tracer
	readsBack   bool
	// streamSlots holds a token per connection a streamed scan holds;
	// its capacity is Options.ScanStreams. streamIdle is
	// Options.ScanStreamIdle; streamIdleHook, when set (tests), runs when
	// a stream gives its connection back for being idle.
	streamSlots    chan struct{}
	streamIdle     time.Duration
	streamIdleHook func()
	// streamStop bounds the end of a SELECT a stream stops early.
	streamStop time.Duration

	mu    sync.Mutex
	ready map[target]*tableSQL // tables known to exist (and, bound, checked)
}

// New returns a Store over pool. It performs no I/O: tables are created or
// checked on first use.
func New(pool *pgxpool.Pool, opts Options) (*Store, error) {
	if pool == nil {
		return nil, errors.New("cannot create the PostgreSQL store: no connection pool")
	}
	opts.setDefaults()
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("cannot create the PostgreSQL store: %w", err)
	}
	m, err := newMapper(opts.Bindings)
	if err != nil {
		return nil, fmt.Errorf("cannot create the PostgreSQL store: %w", err)
	}
	readsBack := true
	for _, b := range m.bound {
		if b.DocumentType == DocTypeJSONB {
			readsBack = false // jsonb normalises what it stores
		}
	}
	// Streams never hold the whole pool: writes keep a connection at least.
	poolSize := int(pool.Config().MaxConns)
	streams := min(opts.ScanStreams, poolSize-1)
	if opts.ScanStreams == 0 {
		streams = poolSize / 2
	}
	return &Store{
		pool: pool, names: m, revs: newRevisions(), markRing: opts.MarkRing, maxAttempts: opts.MaxAttempts,
		secrets: opts.Secrets, tracer: tracerOf(opts.TracerProvider), readsBack: readsBack,
		streamSlots: make(chan struct{}, max(streams, 0)), streamIdle: opts.ScanStreamIdle, streamStop: defaultStopLimit,
		ready: map[target]*tableSQL{},
	}, nil
}

// ReadsBackWrites implements ports.ReadBackReporter: true unless a binding
// stores documents in a jsonb column, which normalises key order and
// whitespace.
func (s *Store) ReadsBackWrites() bool { return s.readsBack }

// ContentTypes implements ports.Storage: Sink's tables hold any content
// type (bound tables hold their binding's; Validate checks it).
func (s *Store) ContentTypes() []string { return nil }

// Ping implements ports.Storage.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		e := s.classify(ctx, err, phaseRead)
		e.Message = "cannot ping PostgreSQL: " + e.Message
		return e
	}
	return nil
}

func invalidArg(format string, args ...any) *domain.Error {
	return domain.Errorf(domain.CodeInvalidArgument, format, args...)
}

// Validate implements ports.Storage, without I/O.
func (s *Store) Validate(op ports.WriteOp) error {
	r := resolver{s: s}
	if _, _, err := s.validate(op, &r); err != nil {
		return err
	}
	return nil
}

// validate checks op and returns its table and key argument.
func (s *Store) validate(op ports.WriteOp, r *resolver) (target, any, *domain.Error) {
	t, k, err := r.resolve(op.Address)
	if err != nil {
		return t, nil, err
	}
	switch op.Kind {
	case ports.WritePut:
		if err := checkDocument(t, op.Document); err != nil {
			return t, nil, invalidArg("record %s: %v", op.Address, err)
		}
	case ports.WriteDelete:
	default:
		return t, nil, invalidArg("unknown write kind %d", op.Kind)
	}
	if err := validMark(op.Mark); err != nil {
		return t, nil, err
	}
	return t, k, nil
}

func checkDocument(t target, d domain.Document) error {
	if len(d.Data) > MaxDocumentBytes {
		return fmt.Errorf("the document is %d bytes; the PostgreSQL store holds at most %d", len(d.Data), MaxDocumentBytes)
	}
	if !utf8.ValidString(d.ContentType) || strings.ContainsRune(d.ContentType, 0) {
		return errors.New("the content type is not UTF-8 text")
	}
	b := t.legacy
	if b == nil {
		return nil
	}
	if !strings.EqualFold(strings.TrimSpace(d.ContentType), b.ContentType) && !(isJSONType(d.ContentType) && isJSONType(b.ContentType)) {
		return fmt.Errorf("table %s holds %s documents, not %q", t, b.ContentType, d.ContentType)
	}
	switch b.DocumentType {
	case DocTypeJSON, DocTypeJSONB:
		if !json.Valid(d.Data) {
			return fmt.Errorf("table %s has a %s document column; the document is not valid JSON", t, b.DocumentType)
		}
		if b.DocumentType == DocTypeJSONB && strings.Contains(string(d.Data), `\u0000`) {
			return fmt.Errorf("table %s has a jsonb document column, which cannot hold \\u0000", t)
		}
		fallthrough
	case DocTypeText:
		if !utf8.Valid(d.Data) || slices.Contains(d.Data, 0) {
			return fmt.Errorf("table %s has a %s document column; the document must be UTF-8 without NUL", t, b.DocumentType)
		}
	}
	return nil
}

func validMark(m *ports.MarkUpdate) *domain.Error {
	if m == nil {
		return nil
	}
	if len(m.IDs) == 0 {
		return invalidArg("an applied-mark update names no mutation")
	}
	for i, id := range m.IDs {
		if id == "" || len(id) > domain.MaxMutationIDBytes {
			return invalidArg("mutation ID %d of the applied-mark update is %d bytes, want 1 to %d", i, len(id), domain.MaxMutationIDBytes)
		}
	}
	if len(m.Position.Log) > domain.MaxLogBytes {
		return invalidArg("the log identity of the applied-mark update is %d bytes, at most %d are allowed", len(m.Position.Log), domain.MaxLogBytes)
	}
	return nil
}

// keyArg returns the SQL argument for key k in table t: the encoded key
// for Sink's tables; for a bound table the key column's value (int64,
// string, UUID text or bytes).
func (s *Store) keyArg(t target, k domain.Key) (any, error) {
	b := t.legacy
	if b == nil {
		return encodeKey(k)
	}
	switch b.KeyType {
	case KeyTypeBigint:
		if k.Kind == domain.KeyInt64 {
			return k.Int64(), nil
		}
	case KeyTypeText:
		if k.Kind == domain.KeyString {
			if s := k.StringValue(); utf8.ValidString(s) && !strings.ContainsRune(s, 0) {
				return s, nil
			}
			return nil, errors.New("a text key column holds UTF-8 keys without NUL")
		}
	case KeyTypeUUID:
		if k.Kind == domain.KeyBytes && len(k.Bytes()) == 16 {
			return uuidText(k.Bytes()), nil
		}
		return nil, fmt.Errorf("table %s has a uuid key column: keys are bytes keys of 16 bytes", t)
	case KeyTypeBytea:
		if k.Kind == domain.KeyBytes {
			return k.Bytes(), nil
		}
	}
	return nil, fmt.Errorf("table %s has a %s key column, which holds no %s keys", t, b.KeyType, k.Kind)
}

// keyID is a map key for a key argument.
func keyID(arg any) string {
	switch v := arg.(type) {
	case []byte:
		return string(v)
	case string:
		return v
	case int64:
		return fmt.Sprint(v)
	}
	return fmt.Sprint(arg)
}

// keyArray returns the array argument of keys for `= ANY($1)`.
func keyArray(t target, args []any) any {
	kt := KeyTypeBytea
	if t.legacy != nil {
		kt = t.legacy.KeyType
	}
	switch kt {
	case KeyTypeBigint:
		out := make([]int64, len(args))
		for i, a := range args {
			out[i] = a.(int64)
		}
		return out
	case KeyTypeText, KeyTypeUUID:
		out := make([]string, len(args))
		for i, a := range args {
			out[i] = a.(string)
		}
		return out
	default:
		out := make([][]byte, len(args))
		for i, a := range args {
			out[i] = a.([]byte)
		}
		return out
	}
}

// selectColumns returns the columns eachRow reads from table t: key,
// content type, document, revision (Sink's tables) or meta (bound tables),
// and the mark (NULL unless withMark).
func selectColumns(t target, withMark bool) string {
	b := t.legacy
	if b == nil {
		if withMark {
			return "k, content_type, doc, rev, mark"
		}
		return "k, content_type, doc, rev, NULL::bytea"
	}
	kc, dc, mc := pgx.Identifier{b.KeyColumn}.Sanitize(), pgx.Identifier{b.DocumentColumn}.Sanitize(), pgx.Identifier{b.MetaColumn}.Sanitize()
	key := kc
	if b.KeyType == KeyTypeUUID {
		key = kc + "::text"
	}
	doc := dc + "::text"
	if b.DocumentType == DocTypeBytea {
		doc = dc
	}
	return key + ", NULL::text, " + doc + ", " + mc + ", NULL::bytea"
}

// selectSQL returns the statement reading the rows of keys $1 of table t
// (columns: selectColumns), locking them when forUpdate.
func selectSQL(t target, forUpdate bool) string {
	q := "SELECT " + selectColumns(t, true) + " FROM " + t.ident()
	if b := t.legacy; b == nil {
		q += " WHERE k = ANY($1)"
		if forUpdate {
			q += " ORDER BY k" // key order: concurrent calls lock rows in the same order
		}
	} else {
		kc := pgx.Identifier{b.KeyColumn}.Sanitize()
		q += " WHERE " + kc + " = ANY($1::" + b.KeyType + "[])"
		if forUpdate {
			q += " ORDER BY " + kc
		}
	}
	if forUpdate {
		q += " FOR UPDATE"
	}
	return q
}

// row is a record as read.
type row struct {
	doc  domain.Document
	rev  domain.Revision
	mark domain.AppliedMark
	// meta of a bound row (its hash and token), for writes.
	meta meta
}

// scanRows reads the rows of selectSQL into found (by keyID).
func scanRows(t target, rows pgx.Rows, found map[string]*row) error {
	return eachRow(t, rows, func(id []byte, r *row) {
		c := *r
		found[string(id)] = &c
	})
}

// eachRow hands every row of selectSQL to emit with its keyID; r is reused
// for the next row (the values it holds are not).
func eachRow(t target, rows pgx.Rows, emit func(id []byte, r *row)) error {
	defer rows.Close()
	// A copy per record (no arena): a read keeps few.
	_, err := readRows(t, rows, nil, func(id []byte, r *row) bool { emit(id, r); return true })
	return err
}

// readRows hands the rows of selectColumns(t) to emit with their keyIDs
// (r is reused for the next row, the values it holds are not), copying
// raw values into a (nil: a copy each), until the rows end or emit returns
// false; stopped tells which. It never closes rows: a stopped reader
// leaves the rest of them to be read later (a streamed scan). Every read
// of rows goes through it.
func readRows(t target, rows pgx.Rows, a *arena, emit func(id []byte, r *row) bool) (stopped bool, err error) {
	if t.legacy == nil && rawReadable(rows) {
		return eachRawRow(rows, a, emit)
	}
	// One set of destinations for every row: each Scan assigns freshly
	// allocated values to them.
	var (
		kb   []byte
		ki   int64
		ks   string
		ct   *string
		doc  []byte
		dtxt string
		rev  []byte
		mark []byte
	)
	var dest []any
	b := t.legacy
	if b == nil {
		dest = []any{&kb, &ct, &doc, &rev, &mark}
	} else {
		var kd any = &kb
		switch b.KeyType {
		case KeyTypeBigint:
			kd = &ki
		case KeyTypeText, KeyTypeUUID:
			kd = &ks
		}
		var dd any = &doc
		if b.DocumentType != DocTypeBytea {
			dd = &dtxt
		}
		dest = []any{kd, &ct, dd, &rev, &mark}
	}
	var r row
	var idBuf []byte
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return false, err
		}
		r = row{}
		var id []byte
		if b == nil {
			id = kb
			m, err := decodeMark(mark)
			if err != nil {
				return false, err
			}
			r.doc = domain.Document{ContentType: deref(ct), Data: orEmpty(doc)}
			r.rev = domain.Revision(rev)
			r.mark = m
		} else {
			switch b.KeyType {
			case KeyTypeBigint:
				idBuf = append(idBuf[:0], keyID(ki)...)
			case KeyTypeText, KeyTypeUUID:
				idBuf = append(idBuf[:0], ks...)
			default:
				idBuf = append(idBuf[:0], kb...)
			}
			id = idBuf
			if b.DocumentType != DocTypeBytea {
				doc = []byte(dtxt)
			}
			m, err := decodeMeta(rev)
			if err != nil {
				return false, err
			}
			r.doc = domain.Document{ContentType: b.ContentType, Data: orEmpty(doc)}
			r.rev = legacyRevision(m, r.doc.Data)
			r.mark = m.mark
			r.meta = m
		}
		if !emit(id, &r) {
			return true, nil
		}
	}
	return false, rows.Err()
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func orEmpty(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// group is the operations of one call on one table.
type group struct {
	t    target
	idx  []int    // the call's operations/addresses
	idOf []string // the keyID of each of idx
	keys []any    // distinct key arguments, in first-seen order
	ids  []string // their keyIDs
	// first maps a keyID to the first of idx with that key; nil while the
	// group has one address.
	first map[string]int
	sql   *tableSQL // set once the table is known to exist
}

// firstOf returns the first address of the group with keyID id.
func (g *group) firstOf(id string) (int, bool) {
	if g.first == nil {
		if len(g.ids) == 1 && g.ids[0] == id {
			return g.idx[0], true
		}
		return 0, false
	}
	i, ok := g.first[id]
	return i, ok
}

// add adds address i with key argument k; more is how many addresses of
// the call may still come (to size the map once).
func (g *group) add(i int, k any, more int) {
	id := keyID(k)
	g.idx = append(g.idx, i)
	g.idOf = append(g.idOf, id)
	if len(g.idx) == 1 {
		g.keys, g.ids = append(g.keys, k), append(g.ids, id)
		return
	}
	if g.first == nil {
		g.first = make(map[string]int, 1+more)
		g.first[g.idOf[0]] = g.idx[0]
	}
	if _, ok := g.first[id]; !ok {
		g.first[id] = i
		g.keys, g.ids = append(g.keys, k), append(g.ids, id)
	}
}

// resolver resolves addresses to their table and key argument, reusing
// the previous address's table when the dataset is the same (a batch's
// addresses mostly share one).
type resolver struct {
	s      *Store
	ns, ds string
	t      target
	err    error
	ok     bool
}

func (r *resolver) resolve(a domain.Address) (target, any, *domain.Error) {
	if !r.ok || a.Namespace != r.ns || a.Dataset != r.ds {
		r.t, r.err = r.s.names.resolve(a)
		r.ns, r.ds, r.ok = a.Namespace, a.Dataset, true
	}
	if r.err != nil {
		return target{}, nil, invalidArg("%v", r.err)
	}
	k, err := r.s.keyArg(r.t, a.Key)
	if err != nil {
		return target{}, nil, invalidArg("record %s: %v", a, err)
	}
	return r.t, k, nil
}

// groupBy groups n addresses, resolved by at, by table; it reports those
// that cannot be resolved through bad.
func groupBy(n int, at func(i int) (target, any, *domain.Error), bad func(i int, err *domain.Error)) []*group {
	var out []*group
	var byT map[[2]string]*group // when the call spans tables
	var last *group
	for i := 0; i < n; i++ {
		t, k, err := at(i)
		if err != nil {
			bad(i, err)
			continue
		}
		g := last
		if g == nil || g.t.Schema != t.Schema || g.t.Table != t.Table {
			tk := [2]string{t.Schema, t.Table}
			if byT == nil && last != nil {
				byT = map[[2]string]*group{{last.t.Schema, last.t.Table}: last}
			}
			if g = byT[tk]; g == nil {
				g = &group{t: t}
				if out == nil {
					// The call's first table: room for every address
					// left (most calls have one table).
					m := n - i
					g.idx, g.idOf, g.keys, g.ids = make([]int, 0, m), make([]string, 0, m), make([]any, 0, m), make([]string, 0, m)
				}
				out = append(out, g)
				if byT != nil {
					byT[tk] = g
				}
			}
			last = g
		}
		g.add(i, k, n-i)
	}
	slices.SortFunc(out, func(a, b *group) int {
		return cmp.Or(strings.Compare(a.t.Schema, b.t.Schema), strings.Compare(a.t.Table, b.t.Table))
	})
	return out
}

// Read implements ports.Storage: one SELECT per table, sent together.
func (s *Store) Read(ctx context.Context, addrs []domain.Address) []ports.ReadResult {
	out := make([]ports.ReadResult, len(addrs))
	ctx, span := s.startSpan(ctx, "read", len(addrs))
	defer endReadSpan(span, out)
	if err := ctx.Err(); err != nil {
		for i := range out {
			out[i].Err = s.classify(ctx, err, phaseRead)
		}
		return out
	}
	r := resolver{s: s}
	groups := groupBy(len(addrs), func(i int) (target, any, *domain.Error) { return r.resolve(addrs[i]) }, func(i int, err *domain.Error) { out[i].Err = err })
	if len(groups) == 0 {
		return out
	}
	if span != nil {
		spanTargets(span, "read", groups)
	}
	fail := func(err error) {
		e := s.classify(ctx, err, phaseRead)
		for _, g := range groups {
			for _, i := range g.idx {
				out[i] = ports.ReadResult{Err: e}
			}
		}
	}
	for attempt := 0; ; attempt++ {
		exists, err := s.existing(ctx, groups)
		if err != nil && connectionLost(err) && attempt < 2 && ctx.Err() == nil {
			continue
		}
		if err != nil {
			fail(err)
			return out
		}
		// Each record's first address gets the row; others copy it after.
		fill := func(gi int) func(id []byte, r *row) {
			g := groups[gi]
			return func(id []byte, r *row) {
				if i, ok := g.firstOf(string(id)); ok {
					out[i] = ports.ReadResult{Found: true, Record: domain.Record{Document: r.doc, Revision: r.rev, Mark: r.mark}}
				}
			}
		}
		var queued []int
		for gi := range groups {
			if exists[gi] {
				queued = append(queued, gi)
			}
		}
		if len(queued) == 1 {
			// One table: a plain query, without a batch's extra work.
			g := groups[queued[0]]
			q, arg := selectSQL(g.t, false), keyArray(g.t, g.keys)
			if len(g.keys) == 1 && g.t.legacy == nil {
				// One record: a scalar parameter, cheaper than an array.
				q, arg = g.sql.selectOne, g.keys[0]
			}
			var rows pgx.Rows
			if rows, err = s.pool.Query(ctx, q, arg); err == nil {
				err = eachRow(g.t, rows, fill(queued[0]))
			}
		} else if len(queued) > 1 {
			b := &pgx.Batch{}
			for _, gi := range queued {
				b.Queue(selectSQL(groups[gi].t, false), keyArray(groups[gi].t, groups[gi].keys))
			}
			err = s.runBatch(ctx, b, func(br pgx.BatchResults) error {
				for _, gi := range queued {
					rows, err := br.Query()
					if err != nil {
						return err
					}
					if err := eachRow(groups[gi].t, rows, fill(gi)); err != nil {
						return err
					}
				}
				return nil
			})
		}
		if err != nil {
			for _, g := range groups {
				for _, i := range g.idx {
					out[i] = ports.ReadResult{}
				}
			}
			if missingTable(err) && attempt == 0 {
				s.forget(groups)
				continue
			}
			if connectionLost(err) && attempt < 2 && ctx.Err() == nil {
				continue // a read has no effect: another connection
			}
			fail(err)
			return out
		}
		for _, g := range groups {
			if len(g.ids) == len(g.idx) {
				continue // no record asked for twice
			}
			for x, i := range g.idx {
				f := g.first[g.idOf[x]]
				if f == i || !out[f].Found {
					continue
				}
				// The same record asked for again: a copy of its own.
				rec := out[f].Record
				rec.Document.Data = slices.Clone(rec.Document.Data)
				rec.Mark.Recent = slices.Clone(rec.Mark.Recent)
				out[i] = ports.ReadResult{Found: true, Record: rec}
			}
		}
		return out
	}
}

// runBatch sends b on a pooled connection and hands its results to fn.
func (s *Store) runBatch(ctx context.Context, b *pgx.Batch, fn func(pgx.BatchResults) error) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	br := conn.SendBatch(ctx, b)
	err = fn(br)
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return err
}

func missingTable(err error) bool {
	c := sqlState(err)
	return c == "42P01" || c == "3F000"
}

// forget drops the groups' tables from the cache of existing tables.
func (s *Store) forget(groups []*group) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, g := range groups {
		delete(s.ready, target{Schema: g.t.Schema, Table: g.t.Table})
	}
}

// existing reports which groups' tables exist, asking the server about
// those the Store has not seen yet (a read never creates a table). Bound
// tables are checked (and given their meta column) on first use.
func (s *Store) existing(ctx context.Context, groups []*group) ([]bool, error) {
	out := make([]bool, len(groups))
	var ask []int
	s.mu.Lock()
	for gi, g := range groups {
		if ts := s.ready[target{Schema: g.t.Schema, Table: g.t.Table}]; ts != nil {
			out[gi], g.sql = true, ts
		} else {
			ask = append(ask, gi)
		}
	}
	s.mu.Unlock()
	if len(ask) == 0 {
		return out, nil
	}
	var names []string
	for _, gi := range ask {
		names = append(names, groups[gi].t.ident())
	}
	rows, err := s.pool.Query(ctx, "SELECT n FROM unnest($1::text[]) WITH ORDINALITY AS u(name, n) WHERE to_regclass(name) IS NOT NULL", names)
	if err != nil {
		return nil, err
	}
	ns, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, err
	}
	for _, n := range ns {
		gi := ask[n-1]
		g := groups[gi]
		if g.t.legacy != nil {
			if err := s.prepareBound(ctx, g.t); err != nil {
				return nil, err
			}
		}
		out[gi] = true
		s.setReady(g)
	}
	return out, nil
}

// setReady records that g's table exists and gives g its statements.
func (s *Store) setReady(g *group) {
	ts := newTableSQL(g.t)
	s.mu.Lock()
	s.ready[target{Schema: g.t.Schema, Table: g.t.Table}] = ts
	s.mu.Unlock()
	g.sql = ts
}

// tableSQL is a ready table's quoted name and, for Sink's tables, the
// one-row statements of reads and of the direct path (fast.go), built
// once instead of for every call.
type tableSQL struct {
	ident                                                 string
	selectOne, upsertOne, createOne, updateOne, deleteOne string
}

func newTableSQL(t target) *tableSQL {
	id := t.ident()
	ts := &tableSQL{ident: id}
	if t.legacy != nil {
		return ts
	}
	ts.selectOne = "SELECT k, content_type, doc, rev, mark FROM " + id + " WHERE k = $1"
	ts.upsertOne = `INSERT INTO ` + id + ` AS t (k, content_type, doc, rev) VALUES ($1, $2, $3, $4)
ON CONFLICT (k) DO UPDATE SET content_type = EXCLUDED.content_type, doc = EXCLUDED.doc, rev = EXCLUDED.rev RETURNING t.xmax <> 0`
	ts.createOne = `INSERT INTO ` + id + ` (k, content_type, doc, rev) VALUES ($1, $2, $3, $4) ON CONFLICT (k) DO NOTHING RETURNING false`
	ts.updateOne = `UPDATE ` + id + ` SET content_type = $2, doc = $3, rev = $4 WHERE k = $1 AND ($5::bytea IS NULL OR rev = $5) RETURNING true`
	ts.deleteOne = `DELETE FROM ` + id + ` WHERE k = $1 AND ($2::bytea IS NULL OR rev = $2) RETURNING true`
	return ts
}

// ensure makes sure the groups' tables exist: Sink's tables are created
// (CREATE SCHEMA/TABLE IF NOT EXISTS; two servers creating one at once can
// still collide in the catalog, 23505/42P06/42P07/42710, which is
// retried); bound
// tables must exist and are checked.
func (s *Store) ensure(ctx context.Context, groups []*group) error {
	exists, err := s.existing(ctx, groups)
	if err != nil {
		return err
	}
	for gi, g := range groups {
		if exists[gi] {
			continue
		}
		if g.t.legacy != nil {
			return domain.Errorf(domain.CodeFailedPrecondition, "table %s, which SINK_POSTGRES_BINDINGS binds to namespace %q dataset %q, does not exist", g.t, g.t.legacy.Namespace, g.t.legacy.Dataset)
		}
		if err := s.create(ctx, g.t); err != nil {
			return err
		}
		s.setReady(g)
	}
	return nil
}

func (s *Store) create(ctx context.Context, t target) error {
	schema := "CREATE SCHEMA IF NOT EXISTS " + pgx.Identifier{t.Schema}.Sanitize()
	table := "CREATE TABLE IF NOT EXISTS " + t.ident() + ` (
	k bytea PRIMARY KEY,
	content_type text NOT NULL,
	doc bytea NOT NULL,
	rev bytea NOT NULL,
	mark bytea
)`
	// The index of bytes keys (scan.go) comes with the table; tables
	// created before it work without it (docs/postgres.md).
	var err error
	for attempt := 0; attempt < 10; attempt++ {
		if _, err = s.pool.Exec(ctx, schema); err == nil {
			if _, err = s.pool.Exec(ctx, table); err == nil {
				if _, err = s.pool.Exec(ctx, bytesIndexSQL(t)); err == nil {
					return nil
				}
			}
		}
		switch sqlState(err) {
		case "23505", "42P06", "42P07", "42710":
			continue // another server created it at the same time
		}
		return err
	}
	return err
}

// prepareBound checks a bound table's columns against its binding and adds
// the meta column when it is missing.
func (s *Store) prepareBound(ctx context.Context, t target) error {
	b := t.legacy
	rows, err := s.pool.Query(ctx, `SELECT a.attname, format_type(a.atttypid, NULL) FROM pg_attribute a
WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped AND a.attname = ANY($2)`,
		t.ident(), []string{b.KeyColumn, b.DocumentColumn, b.MetaColumn})
	if err != nil {
		return err
	}
	types := map[string]string{}
	var name, typ string
	_, err = pgx.ForEachRow(rows, []any{&name, &typ}, func() error { types[name] = typ; return nil })
	if err != nil {
		return err
	}
	want := map[string]string{
		KeyTypeBigint: "bigint", KeyTypeText: "text", KeyTypeUUID: "uuid", KeyTypeBytea: "bytea",
		DocTypeJSONB: "jsonb", DocTypeJSON: "json",
	}
	for _, c := range []struct{ col, typ string }{{b.KeyColumn, b.KeyType}, {b.DocumentColumn, b.DocumentType}} {
		got, ok := types[c.col]
		if !ok {
			return domain.Errorf(domain.CodeFailedPrecondition, "table %s bound by SINK_POSTGRES_BINDINGS has no column %q", t, c.col)
		}
		if w := want[c.typ]; got != w && !(c.typ == KeyTypeText && (got == "character varying" || got == "text")) {
			return domain.Errorf(domain.CodeFailedPrecondition, "column %q of table %s is %s, but SINK_POSTGRES_BINDINGS says %s", c.col, t, got, c.typ)
		}
	}
	if mt, ok := types[b.MetaColumn]; ok {
		if mt != "bytea" {
			return domain.Errorf(domain.CodeFailedPrecondition, "column %q of table %s, Sink's meta column, is %s, not bytea", b.MetaColumn, t, mt)
		}
		return nil
	}
	_, err = s.pool.Exec(ctx, "ALTER TABLE "+t.ident()+" ADD COLUMN IF NOT EXISTS "+pgx.Identifier{b.MetaColumn}.Sanitize()+" bytea")
	if sqlState(err) == "42701" { // added by another server meanwhile
		err = nil
	}
	return err
}
