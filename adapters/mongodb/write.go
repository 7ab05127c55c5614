package mongodb

import (
	"context"
	"errors"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

// item is one validated write operation, ready for the driver.
type item struct {
	i    int // index in the caller's slice
	op   *ports.WriteOp
	t    target
	id   bsoncore.Value // the _id
	doc  []byte         // stored document (puts)
	rev  bson.ObjectID  // the revision the put writes
	bulk bool           // goes into the per-collection bulk write
}

func (it *item) upsert() bool {
	return it.op.Kind == ports.WritePut && it.op.Condition.Kind == ports.ConditionNone
}

func (it *item) success(existed bool) ports.WriteResult {
	r := ports.WriteResult{Existed: existed}
	if it.op.Kind == ports.WritePut {
		r.Revision = revisionToken(it.rev)
	}
	return r
}

// prepare validates op and builds what the driver needs.
func (s *Store) prepare(i int, op *ports.WriteOp) (*item, error) {
	t, err := s.names.resolve(op.Address)
	if err != nil {
		return nil, invalidArg("%v", err)
	}
	id, err := keyValue(op.Address.Key)
	if err != nil {
		return nil, invalidArg("%v", err)
	}
	it := &item{i: i, op: op, t: t, id: id}
	switch op.Kind {
	case ports.WritePut:
		it.rev = newRevision()
		if it.doc, err = s.enc.storedDocument(op.Address.Key, op.Document, &it.rev); err != nil {
			return nil, invalidArg("%v", err)
		}
		if op.Condition.Kind != ports.ConditionAbsent {
			// Replacements keep the stored _id as it is (see withoutID).
			it.doc = withoutID(it.doc)
		}
		it.bulk = op.Condition.Kind == ports.ConditionNone || op.Condition.Kind == ports.ConditionAbsent
	case ports.WriteDelete:
	default:
		return nil, invalidArg("unknown write kind %d", op.Kind)
	}
	switch op.Condition.Kind {
	case ports.ConditionNone, ports.ConditionAbsent, ports.ConditionExists, ports.ConditionRevision:
	default:
		return nil, invalidArg("unknown write condition %d", op.Condition.Kind)
	}
	return it, nil
}

// Write implements ports.Storage. The operations are split into dependency
// waves (domain.Waves) that run one after the other, so operations on the
// same record take effect in slice order. Within a wave:
//   - unconditional puts (upserts) and creates go to unordered bulk writes,
//     one per collection and BulkChunk operations (BulkConcurrency of them
//     at once), and each operation's result is recovered from the bulk
//     result and error;
//   - replaces, revision-conditional writes and deletes run as individual
//     ReplaceOne/DeleteOne calls with the condition in the filter, at most
//     MaxConcurrency at once.
func (s *Store) Write(ctx context.Context, ops []ports.WriteOp) []ports.WriteResult {
	out := make([]ports.WriteResult, len(ops))
	items := make([]*item, 0, len(ops))
	for i := range ops {
		it, err := s.prepare(i, &ops[i])
		if err != nil {
			out[i].Err = err
			continue
		}
		items = append(items, it)
	}
	for _, wave := range domain.Waves(len(items), func(j int) domain.RecordID { return items[j].op.Address.ID() }) {
		w := make([]*item, len(wave))
		for k, j := range wave {
			w[k] = items[j]
		}
		s.applyWave(ctx, w, out)
	}
	return out
}

// applyWave applies operations on distinct records.
func (s *Store) applyWave(ctx context.Context, wave []*item, out []ports.WriteResult) {
	var tasks []func()
	bulks := map[target][]*item{}
	var order []target
	serialUpserts := s.untrustedUpdateBulks.Load()
	for _, it := range wave {
		if !it.bulk || (serialUpserts && it.upsert()) {
			tasks = append(tasks, func() { out[it.i] = s.single(ctx, it) })
			continue
		}
		if _, ok := bulks[it.t]; !ok {
			order = append(order, it.t)
		}
		bulks[it.t] = append(bulks[it.t], it)
	}
	var chunks []func()
	for _, t := range order {
		items := bulks[t]
		for len(items) > 0 {
			n, size := 0, 0
			for n < len(items) && n < s.bulkChunk && (n == 0 || size+len(items[n].doc) <= maxBulkBytes) {
				size += len(items[n].doc)
				n++
			}
			chunk := items[:n]
			items = items[n:]
			chunks = append(chunks, func() { s.bulkWrite(ctx, t, chunk, out) })
		}
	}
	if len(chunks) > 0 {
		tasks = append(tasks, func() { parallel(s.bulkConcurrency, len(chunks), func(k int) { chunks[k]() }) })
	}
	s.parallel(len(tasks), func(k int) { tasks[k]() })
}

func idFilter(id bsoncore.Value) bson.Raw {
	return bson.Raw(bsoncore.NewDocumentBuilder().AppendValue(idKey, id).Build())
}

// maxBulkBytes bounds the documents of one bulk chunk so that each of its
// commands fits in one wire message (MongoDB's maxMessageSizeBytes is 48 MB,
// and the driver would split a larger command into several messages and, on
// an error in a later one, drop the results of the earlier ones).
const maxBulkBytes = 32 << 20

// maxWriteBatchSize is MongoDB's limit on the operations of one write
// command; larger bulks would be split by the driver.
const maxWriteBatchSize = 100000

// bulkWrite runs the upserts and creates of one collection. They are two
// commands (update and insert), sent as two unordered bulk writes one after
// the other, so that a command that fails as a whole (a network error, a
// timeout) decides only its own operations' results: the other command's
// operations get their own outcome.
func (s *Store) bulkWrite(ctx context.Context, t target, items []*item, out []ports.WriteResult) {
	var creates, upserts []*item
	for _, it := range items {
		if it.upsert() {
			upserts = append(upserts, it)
		} else {
			creates = append(creates, it)
		}
	}
	for _, cmd := range [][]*item{creates, upserts} {
		if len(cmd) > 0 {
			s.bulkCommand(ctx, t, cmd, out)
		}
	}
}

// bulkCommand runs operations of one kind (all upserts or all creates) of
// one collection as one unordered bulk write. Each operation gets its own
// result: its write error, or success with Existed from the bulk's upserted
// ids. When the command fails as a whole, every operation gets that error,
// classified as a write (classifyWrite): OUTCOME_UNKNOWN when the command
// may have taken effect (a network error after it was sent, a timeout, a
// failed retry), UNAVAILABLE when nothing was sent. A write concern error
// makes the operations without a write error OUTCOME_UNKNOWN.
//
// The per-operation attribution is trusted only when the counts add up (every
// operation without a write error ran). FerretDB v1 ignores ordered:false for
// updates: it stops at the first failing statement, reports it at index 0 and
// returns no counts. Then the outcome of each operation is looked up by its
// new revision: operations whose revision is stored ran and succeeded (an
// upsert that ran then reports Existed=true, because the server did not say
// whether it created the record), the others run again one by one, which
// gives them their own result. After that the Store sends upserts one by one,
// so that each reports Existed exactly.
func (s *Store) bulkCommand(ctx context.Context, t target, items []*item, out []ports.WriteResult) {
	coll := s.collection(t)
	models := make([]mongo.WriteModel, len(items))
	for j, it := range items {
		if it.upsert() {
			models[j] = mongo.NewReplaceOneModel().SetFilter(idFilter(it.id)).SetReplacement(bson.Raw(it.doc)).SetUpsert(true)
		} else {
			models[j] = mongo.NewInsertOneModel().SetDocument(bson.Raw(it.doc))
		}
	}
	res, err := coll.BulkWrite(ctx, models, unorderedBulk)
	var bwe mongo.BulkWriteException
	if err != nil && (!errors.As(err, &bwe) || res == nil) {
		e := classifyWrite(fmt.Errorf("cannot write to %s: %w", t, err))
		for _, it := range items {
			out[it.i].Err = e
		}
		return
	}
	var wce *domain.Error
	if bwe.WriteConcernError != nil {
		wce = classifyWrite(fmt.Errorf("cannot confirm the write to %s: %w", t, mongo.BulkWriteException{WriteConcernError: bwe.WriteConcernError, Labels: bwe.Labels}))
	}
	if res == nil {
		res = &mongo.BulkWriteResult{}
	}
	failed := make(map[int]mongo.WriteError, len(bwe.WriteErrors))
	for _, we := range bwe.WriteErrors {
		failed[we.Index] = we.WriteError
	}
	// With a write concern error the counts are the server's own answer.
	trusted := wce != nil || res.MatchedCount+res.UpsertedCount+res.InsertedCount == int64(len(items)-len(failed))
	if !trusted {
		// From now on upserts run one by one on this server (see applyWave).
		s.untrustedUpdateBulks.Store(true)
	}
	var again, unsure []*item
	for j, it := range items {
		_, created := res.UpsertedIDs[int64(j)]
		we, isErr := failed[j]
		switch {
		case !trusted && it.upsert() && created:
			out[it.i] = it.success(false)
		case !trusted:
			unsure = append(unsure, it)
		case isErr && it.upsert() && mongo.IsDuplicateKeyError(we):
			// A concurrent upsert created the record first; replace it now.
			again = append(again, it)
		case isErr:
			out[it.i].Err = s.writeError(it, we)
		case wce != nil:
			// Applied on the primary, its replication not confirmed.
			out[it.i].Err = wce
		case it.upsert():
			out[it.i] = it.success(!created)
		default:
			out[it.i] = it.success(false)
		}
	}
	if len(unsure) > 0 {
		retry, err := s.resolve(ctx, coll, unsure, out)
		if err != nil {
			e := &domain.Error{Code: domain.CodeOutcomeUnknown, Cause: err,
				Message: fmt.Sprintf("cannot tell whether the write to %s took effect: the server's bulk result did not say, and looking it up failed: %s", t, classify(err).Message)}
			for _, it := range unsure {
				out[it.i].Err = e
			}
		}
		again = append(again, retry...)
	}
	s.parallel(len(again), func(k int) { out[again[k].i] = s.single(ctx, again[k]) })
}

// resolve looks up operations whose outcome a bulk result left open: those
// whose record carries their new revision succeeded; a create whose record
// exists with another revision collided; the others are returned to run
// again.
func (s *Store) resolve(ctx context.Context, coll *mongo.Collection, items []*item, out []ports.WriteResult) ([]*item, error) {
	ids := bsoncore.NewArrayBuilder()
	for _, it := range items {
		ids.AppendValue(it.id)
	}
	filter := bsoncore.NewDocumentBuilder().
		AppendDocument(idKey, bsoncore.NewDocumentBuilder().AppendArray("$in", ids.Build()).Build()).
		Build()
	cur, err := coll.Find(ctx, bson.Raw(filter))
	if err != nil {
		return nil, err
	}
	defer func() { _ = cur.Close(context.WithoutCancel(ctx)) }()
	revs := map[string]bson.ObjectID{}
	for cur.Next(ctx) {
		doc := bsoncore.Document(cur.Current)
		idv, err := doc.LookupErr(idKey)
		if err != nil {
			continue
		}
		id, ok := idOf(idv)
		if !ok {
			continue
		}
		var rev bson.ObjectID
		if meta, err := doc.LookupErr(s.enc.hidden); err == nil {
			rev, _ = s.enc.revisionOf(meta)
		}
		revs[id] = rev
	}
	if err := cur.Err(); err != nil {
		return nil, err
	}
	var retry []*item
	for _, it := range items {
		rev, exists := revs[keyID(it.op.Address.Key)]
		switch {
		case exists && rev == it.rev:
			out[it.i] = it.success(it.upsert())
		case exists && !it.upsert():
			out[it.i].Err = domain.Errorf(domain.CodeAlreadyExists, "record %s already exists", it.op.Address)
		default:
			retry = append(retry, it)
		}
	}
	return retry, nil
}

// writeError classifies the error of one operation's write.
func (s *Store) writeError(it *item, err error) *domain.Error {
	e := classifyWrite(fmt.Errorf("cannot write %s: %w", it.op.Address, err))
	if e.Code == domain.CodeAlreadyExists {
		return &domain.Error{Code: domain.CodeAlreadyExists, Message: fmt.Sprintf("record %s already exists", it.op.Address), Cause: err}
	}
	return e
}

// single runs one operation on its own: a replace, a revision-conditional
// write, a delete, or an upsert or create whose bulk outcome was unclear.
func (s *Store) single(ctx context.Context, it *item) ports.WriteResult {
	coll := s.collection(it.t)
	op := it.op
	filter := idFilter(it.id)
	switch {
	case op.Kind == ports.WritePut && op.Condition.Kind == ports.ConditionNone:
		return s.singleUpsert(ctx, coll, it)
	case op.Kind == ports.WritePut && op.Condition.Kind == ports.ConditionAbsent:
		if _, err := coll.InsertOne(ctx, bson.Raw(it.doc)); err != nil {
			return ports.WriteResult{Err: s.writeError(it, err)}
		}
		return it.success(false)
	case op.Condition.Kind == ports.ConditionAbsent: // delete of a record that must not exist
		return s.conditionFailed(ctx, it)
	case op.Condition.Kind == ports.ConditionRevision:
		var ok bool
		if filter, ok = s.revisionFilter(it.id, op.Condition.Revision); !ok {
			// A token this adapter never issued matches no record.
			return s.conditionFailed(ctx, it)
		}
	}
	var matched int64
	switch op.Kind {
	case ports.WritePut:
		res, err := coll.ReplaceOne(ctx, filter, bson.Raw(it.doc))
		if err != nil {
			return ports.WriteResult{Err: s.writeError(it, err)}
		}
		matched = res.MatchedCount
	case ports.WriteDelete:
		res, err := coll.DeleteOne(ctx, filter)
		if err != nil {
			return ports.WriteResult{Err: s.writeError(it, err)}
		}
		matched = res.DeletedCount
	}
	if matched > 0 {
		return it.success(true)
	}
	switch op.Condition.Kind {
	case ports.ConditionNone: // delete of an absent record
		return it.success(false)
	case ports.ConditionExists:
		return ports.WriteResult{Err: domain.Errorf(domain.CodeNotFound, "record %s does not exist", op.Address)}
	}
	return s.conditionFailed(ctx, it)
}

// singleUpsert replaces or creates one record. Two concurrent upserts of a
// new record can collide on _id; the loser then replaces the winner's.
func (s *Store) singleUpsert(ctx context.Context, coll *mongo.Collection, it *item) ports.WriteResult {
	for attempt := 1; ; attempt++ {
		res, err := coll.ReplaceOne(ctx, idFilter(it.id), bson.Raw(it.doc), upsert)
		if err == nil {
			return it.success(res.UpsertedCount == 0)
		}
		if !mongo.IsDuplicateKeyError(err) || attempt == 3 {
			return ports.WriteResult{Err: s.writeError(it, err)}
		}
	}
}

// revisionFilter matches the record only at the given revision. The legacy
// token matches only while the record has no hidden field, so the first
// read-modify-write of a legacy record is atomic too.
func (s *Store) revisionFilter(id bsoncore.Value, r domain.Revision) (bson.Raw, bool) {
	b := bsoncore.NewDocumentBuilder().AppendValue(idKey, id)
	if r == LegacyRevision {
		b.AppendDocument(s.enc.hidden, bsoncore.NewDocumentBuilder().AppendBoolean("$exists", false).Build())
		return bson.Raw(b.Build()), true
	}
	oid, ok := parseRevision(r)
	if !ok {
		return nil, false
	}
	b.AppendObjectID(s.enc.hidden+".rev", oid)
	return bson.Raw(b.Build()), true
}

// conditionFailed decides, with an _id-only read, why a conditional write
// matched nothing: the record is missing (CodeNotFound) or has another
// revision (CodeRevisionMismatch). For a delete with ConditionAbsent it
// applies the condition itself.
func (s *Store) conditionFailed(ctx context.Context, it *item) ports.WriteResult {
	op := it.op
	err := s.collection(it.t).FindOne(ctx, idFilter(it.id), idOnly).Err()
	exists := err == nil
	if err != nil && !errors.Is(err, mongo.ErrNoDocuments) {
		return ports.WriteResult{Err: classify(fmt.Errorf("cannot check whether %s exists: %w", op.Address, err))}
	}
	switch {
	case op.Condition.Kind == ports.ConditionAbsent && exists:
		return ports.WriteResult{Err: domain.Errorf(domain.CodeAlreadyExists, "record %s already exists", op.Address)}
	case op.Condition.Kind == ports.ConditionAbsent:
		return it.success(false)
	case !exists:
		return ports.WriteResult{Err: domain.Errorf(domain.CodeNotFound, "record %s does not exist (expected revision %s)", op.Address, describeRevision(op.Condition.Revision))}
	default:
		return ports.WriteResult{Err: domain.Errorf(domain.CodeRevisionMismatch, "record %s does not have the expected revision %s", op.Address, describeRevision(op.Condition.Revision))}
	}
}

// describeRevision renders a client's expected revision for messages. A
// revision is opaque bytes from the client: only tokens this adapter issues
// (24 hex digits, or "legacy") are shown as they are.
func describeRevision(r domain.Revision) string {
	if r == LegacyRevision {
		return string(r)
	}
	if _, ok := parseRevision(r); ok {
		return string(r)
	}
	return fmt.Sprintf("(a token of %d bytes this store never issued)", len(r))
}
