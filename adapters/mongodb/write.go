package mongodb

import (
	"context"
	"errors"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
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
	body body           // the client's document, split (puts)
	doc  []byte         // stored document of a put without a mark (with _id for creates)
	rev  bson.ObjectID  // the revision the put writes
	bulk bool           // goes into the per-collection bulk write
	// Writes with a mark: the ring size, and whether the record existed
	// when the current attempt read it.
	keep    int
	existed bool
}

// marked reports whether the item goes through the read-check-write path
// of writes with a mark (markedChunk); revision-conditional writes with a
// Base mark do not need the read (singleBase).
func (it *item) marked() bool {
	return it.op.Mark != nil && (it.op.Condition.Kind != ports.ConditionRevision || it.op.Mark.Base == nil)
}

// size estimates the bytes the item adds to a bulk command.
func (it *item) size(reserve int) int {
	if it.doc != nil {
		return len(it.doc)
	}
	return len(it.body.fields) + reserve
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
	if err := validMark(op.Mark); err != nil {
		return nil, err
	}
	it := &item{i: i, op: op, t: t, id: id}
	if op.Mark != nil {
		it.keep = min(op.Mark.Keep, s.markRing)
	}
	switch op.Kind {
	case ports.WritePut:
		it.rev = newRevision()
		if it.body, err = s.enc.body(op.Address.Key, op.Document, true); err != nil {
			return nil, invalidArg("%v", err)
		}
		if op.Mark == nil && (op.Condition.Kind == ports.ConditionAbsent || s.pipelineState.Load() != pipelinesYes) {
			// Replacements keep the stored _id as it is (see assemble).
			// With update pipelines only creates send the document as it
			// is (keepMarkPipeline builds the others).
			it.doc = s.enc.assemble(it.body, op.Condition.Kind == ports.ConditionAbsent, it.rev, domain.AppliedMark{})
		}
		it.bulk = op.Mark == nil && (op.Condition.Kind == ports.ConditionNone || op.Condition.Kind == ports.ConditionAbsent)
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
//   - unconditional puts (upserts) and creates without a mark go to
//     unordered bulk writes, one per collection and BulkChunk operations
//     (BulkConcurrency of them at once), and each operation's result is
//     recovered from the bulk result and error. Upserts keep the record's
//     applied mark: on servers with update pipelines they filter on _id
//     alone and the pipeline carries the mark over (keepMarkPipeline);
//     elsewhere they match only records without a mark, and one that meets
//     a record with a mark (a duplicate key) is redone carrying the mark
//     over (markedChunk);
//   - writes with a mark (other than revision-conditional ones with a Base)
//     read the chunk's hidden fields with one query, check the marks, and
//     write with one unordered bulk write conditional on what was read
//     (markedChunk);
//   - replaces, revision-conditional writes and deletes run as individual
//     ReplaceOne/DeleteOne calls with the condition in the filter, at most
//     MaxConcurrency at once.
func (s *Store) Write(ctx context.Context, ops []ports.WriteOp) []ports.WriteResult {
	out := make([]ports.WriteResult, len(ops))
	ctx, span := s.startSpan(ctx, "write", len(ops))
	defer endWriteSpan(span, out)
	items := make([]*item, 0, len(ops))
	for i := range ops {
		it, err := s.prepare(i, &ops[i])
		if err != nil {
			out[i].Err = err
			continue
		}
		items = append(items, it)
	}
	if span != nil {
		spanTargets(span, "write", len(items), func(j int) target { return items[j].t })
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
	type group struct {
		t      target
		marked bool
	}
	bulks := map[group][]*item{}
	var order []group
	serialUpserts := s.untrustedUpdateBulks.Load()
	for _, it := range wave {
		marked := it.marked()
		if !marked && (!it.bulk || (serialUpserts && it.upsert())) {
			tasks = append(tasks, func() { out[it.i] = s.single(ctx, it) })
			continue
		}
		g := group{it.t, marked}
		if _, ok := bulks[g]; !ok {
			order = append(order, g)
		}
		bulks[g] = append(bulks[g], it)
	}
	var chunks []func()
	for _, g := range order {
		items := bulks[g]
		for len(items) > 0 {
			n, size := 0, 0
			for n < len(items) && n < s.bulkChunk && (n == 0 || size+items[n].size(s.enc.reserve) <= maxBulkBytes) {
				size += items[n].size(s.enc.reserve)
				n++
			}
			chunk := items[:n]
			items = items[n:]
			if g.marked {
				chunks = append(chunks, func() { s.markedChunk(ctx, g.t, chunk, out) })
			} else {
				chunks = append(chunks, func() { s.bulkWrite(ctx, g.t, chunk, out) })
			}
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
	pipe := items[0].upsert() && s.pipelines(ctx, coll)
	for j, it := range items {
		switch {
		case it.upsert() && pipe:
			models[j] = mongo.NewUpdateOneModel().SetFilter(idFilter(it.id)).SetUpdate(s.enc.keepMarkPipeline(it.body, it.rev)).SetUpsert(true)
		case it.upsert():
			if it.doc == nil {
				it.doc = s.enc.assemble(it.body, false, it.rev, domain.AppliedMark{})
			}
			models[j] = mongo.NewReplaceOneModel().SetFilter(s.noMarkFilter(it.id)).SetReplacement(bson.Raw(it.doc)).SetUpsert(true)
		default:
			models[j] = mongo.NewInsertOneModel().SetDocument(bson.Raw(it.doc))
		}
	}
	res, failed, wce, ok := s.sendBulk(ctx, coll, t, models, items, out)
	if !ok {
		return
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
			// The record has an applied mark (the filter excluded it), or
			// a concurrent upsert created it first: replace it on its own.
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
	// Upserts that met a record with a mark (or a concurrent create) carry
	// the mark over, in one read and one bulk write (markedChunk).
	var carry, single []*item
	for _, it := range again {
		if it.upsert() {
			carry = append(carry, it)
		} else {
			single = append(single, it)
		}
	}
	if len(carry) > 0 {
		s.markedChunk(ctx, t, carry, out)
	}
	s.parallel(len(single), func(k int) { out[single[k].i] = s.single(ctx, single[k]) })
}

// sendBulk sends models (one per item, in order) as one unordered bulk
// write and decodes the answer: the result (never nil), the write errors by
// model index, and the write concern error (nil when there is none). When
// the whole call failed it sets that error on every item and returns
// ok=false.
func (s *Store) sendBulk(ctx context.Context, coll *mongo.Collection, t target, models []mongo.WriteModel, items []*item, out []ports.WriteResult) (res *mongo.BulkWriteResult, failed map[int]mongo.WriteError, wce *domain.Error, ok bool) {
	res, err := coll.BulkWrite(ctx, models, unorderedBulk)
	var bwe mongo.BulkWriteException
	if err != nil && (!errors.As(err, &bwe) || res == nil) {
		e := classifyWrite(fmt.Errorf("cannot write to %s: %w", t, err))
		for _, it := range items {
			out[it.i].Err = e
		}
		return nil, nil, nil, false
	}
	if bwe.WriteConcernError != nil {
		wce = classifyWrite(fmt.Errorf("cannot confirm the write to %s: %w", t, mongo.BulkWriteException{WriteConcernError: bwe.WriteConcernError, Labels: bwe.Labels}))
	}
	if res == nil {
		res = &mongo.BulkWriteResult{}
	}
	failed = make(map[int]mongo.WriteError, len(bwe.WriteErrors))
	for _, we := range bwe.WriteErrors {
		failed[we.Index] = we.WriteError
	}
	return res, failed, wce, true
}

// resolve looks up operations whose outcome a bulk result left open: those
// whose record carries their new revision succeeded; a create whose record
// exists with another revision collided; the others are returned to run
// again.
func (s *Store) resolve(ctx context.Context, coll *mongo.Collection, items []*item, out []ports.WriteResult) ([]*item, error) {
	cur, err := coll.Find(ctx, itemsFilter(items))
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
// write, a delete, an upsert or create whose bulk outcome was unclear, or a
// revision-conditional write with a mark and its Base.
func (s *Store) single(ctx context.Context, it *item) ports.WriteResult {
	coll := s.collection(it.t)
	op := it.op
	switch {
	case op.Mark != nil:
		return s.singleBase(ctx, coll, it)
	case op.Kind == ports.WritePut && op.Condition.Kind == ports.ConditionAbsent:
		if _, err := coll.InsertOne(ctx, bson.Raw(it.doc)); err != nil {
			return ports.WriteResult{Err: s.writeError(it, err)}
		}
		return it.success(false)
	case op.Kind == ports.WritePut:
		return s.putKeepingMark(ctx, coll, it)
	}
	// A delete.
	filter := idFilter(it.id)
	switch op.Condition.Kind {
	case ports.ConditionAbsent: // delete of a record that must not exist
		return s.conditionFailed(ctx, it)
	case ports.ConditionRevision:
		var ok bool
		if filter, ok = s.revisionFilter(it.id, op.Condition.Revision); !ok {
			// A token this adapter never issued matches no record.
			return s.conditionFailed(ctx, it)
		}
	}
	res, err := coll.DeleteOne(ctx, filter)
	if err != nil {
		return ports.WriteResult{Err: s.writeError(it, err)}
	}
	if res.DeletedCount > 0 {
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

// maxMarkAttempts bounds the attempts of a write that reads the record's
// hidden field and then writes conditional on it, when concurrent writes
// keep changing the record in between.
const maxMarkAttempts = 8

// aborted is the result of a write whose attempts ran out (retryable).
func aborted(it *item) ports.WriteResult {
	return ports.WriteResult{Err: domain.Errorf(domain.CodeAborted,
		"cannot write %s: the record kept changing concurrently (%d attempts to read its applied mark and write conditionally on it); retry", it.op.Address, maxMarkAttempts)}
}

// putKeepingMark runs a put without a mark (upsert, replace or
// revision-conditional) and keeps the record's applied mark. On servers
// with update pipelines the update carries the mark over itself, with the
// filter of the put's condition alone (keepMarkPipeline): one round trip.
// Elsewhere most records have no mark, so the put first replaces (or
// creates) the record only while it has no mark: one round trip.
// Otherwise it reads the record's hidden field and replaces the record
// conditional on the revision it read, carrying the mark over; a
// concurrent change makes it start again, a bounded number of times.
func (s *Store) putKeepingMark(ctx context.Context, coll *mongo.Collection, it *item) ports.WriteResult {
	op := it.op
	pipe := s.pipelines(ctx, coll)
	if !pipe && it.doc == nil {
		it.doc = s.enc.assemble(it.body, false, it.rev, domain.AppliedMark{})
	}
	for range maxMarkAttempts {
		filter := idFilter(it.id)
		if op.Condition.Kind == ports.ConditionRevision {
			var ok bool
			if filter, ok = s.revisionFilter(it.id, op.Condition.Revision); !ok {
				return s.conditionFailed(ctx, it)
			}
		}
		var res *mongo.UpdateResult
		var err error
		switch {
		case pipe && op.Condition.Kind == ports.ConditionNone:
			res, err = coll.UpdateOne(ctx, filter, s.enc.keepMarkPipeline(it.body, it.rev), upsertUpdate)
		case pipe:
			res, err = coll.UpdateOne(ctx, filter, s.enc.keepMarkPipeline(it.body, it.rev))
		case op.Condition.Kind == ports.ConditionNone:
			res, err = coll.ReplaceOne(ctx, s.andNoMark(filter), bson.Raw(it.doc), upsert)
		default:
			res, err = coll.ReplaceOne(ctx, s.andNoMark(filter), bson.Raw(it.doc))
		}
		switch {
		case err == nil && res.MatchedCount+res.UpsertedCount > 0:
			return it.success(res.UpsertedCount == 0)
		case err != nil && !mongo.IsDuplicateKeyError(err):
			return ports.WriteResult{Err: s.writeError(it, err)}
		}
		// The record has a mark (or was created or deleted meanwhile).
		st, err := s.readState(ctx, coll, it)
		if err != nil {
			return ports.WriteResult{Err: err}
		}
		switch {
		case !st.exists && op.Condition.Kind == ports.ConditionNone:
			continue // deleted meanwhile: upsert again
		case !st.exists:
			return ports.WriteResult{Err: domain.Errorf(domain.CodeNotFound, "record %s does not exist", op.Address)}
		case op.Condition.Kind == ports.ConditionRevision && st.revision() != op.Condition.Revision:
			return ports.WriteResult{Err: domain.Errorf(domain.CodeRevisionMismatch, "record %s does not have the expected revision %s", op.Address, describeRevision(op.Condition.Revision))}
		case st.legacy || st.mark.IsZero():
			continue // changed meanwhile
		}
		doc := s.enc.assemble(it.body, false, it.rev, st.mark)
		res, err = coll.ReplaceOne(ctx, s.stateFilter(it.id, st), bson.Raw(doc))
		if err != nil {
			return ports.WriteResult{Err: s.writeError(it, err)}
		}
		if res.MatchedCount > 0 {
			return it.success(true)
		}
	}
	return aborted(it)
}

// singleBase runs a revision-conditional write with a mark and the Base
// mark the caller read with that revision: the revision pins the mark, so
// the coverage check uses Base and the write stores Base advanced, with the
// revision in the filter. When the revision no longer matches,
// conditionFailed checks the current mark first (a retried write whose
// first attempt succeeded is ALREADY_APPLIED, not a mismatch).
func (s *Store) singleBase(ctx context.Context, coll *mongo.Collection, it *item) ports.WriteResult {
	op := it.op
	if r := ports.CheckMark(op, *op.Mark.Base); r != nil {
		return *r
	}
	filter, ok := s.revisionFilter(it.id, op.Condition.Revision)
	if !ok {
		return s.conditionFailed(ctx, it)
	}
	var matched int64
	if op.Kind == ports.WritePut {
		mark := op.Mark.Base.Advance(op.Mark.IDs, revisionToken(it.rev), op.Mark.Position, it.keep)
		res, err := coll.ReplaceOne(ctx, filter, bson.Raw(s.enc.assemble(it.body, false, it.rev, mark)))
		if err != nil {
			return ports.WriteResult{Err: s.writeError(it, err)}
		}
		matched = res.MatchedCount
	} else {
		res, err := coll.DeleteOne(ctx, filter)
		if err != nil {
			return ports.WriteResult{Err: s.writeError(it, err)}
		}
		matched = res.DeletedCount
	}
	if matched > 0 {
		return it.success(true)
	}
	return s.conditionFailed(ctx, it)
}

// state is what a write needs to know about a record's hidden field.
type state struct {
	exists bool
	legacy bool // exists without the hidden field
	rev    bson.ObjectID
	mark   domain.AppliedMark
	err    error // the hidden field cannot be read
}

// revision is the record's revision token.
func (st state) revision() domain.Revision {
	if st.legacy {
		return LegacyRevision
	}
	return revisionToken(st.rev)
}

// stateOf reads a stored document's (or its projection's) hidden field.
func (s *Store) stateOf(raw []byte) state {
	st := state{exists: true}
	meta, err := bsoncore.Document(raw).LookupErr(s.enc.hidden)
	if err != nil {
		st.legacy = true
		return st
	}
	if st.rev, st.err = s.enc.revisionOf(meta); st.err != nil {
		return st
	}
	st.mark, st.err = s.enc.markOf(meta.Document())
	return st
}

// stateFilter matches the record only while it is as st says: the same
// revision, or for a legacy record, still without the hidden field.
func (s *Store) stateFilter(id bsoncore.Value, st state) bson.Raw {
	b := bsoncore.NewDocumentBuilder().AppendValue(idKey, id)
	if st.legacy {
		b.AppendDocument(s.enc.hidden, bsoncore.NewDocumentBuilder().AppendBoolean("$exists", false).Build())
	} else {
		b.AppendObjectID(s.enc.hidden+".rev", st.rev)
	}
	return bson.Raw(b.Build())
}

// noMarkFilter matches the record only while it has no applied mark.
func (s *Store) noMarkFilter(id bsoncore.Value) bson.Raw {
	return s.andNoMark(idFilter(id))
}

// andNoMark adds "has no applied mark" to a filter.
func (s *Store) andNoMark(filter bson.Raw) bson.Raw {
	els, _ := bsoncore.Document(filter).Elements()
	b := bsoncore.NewDocumentBuilder()
	for _, el := range els {
		b.AppendValue(el.Key(), el.Value())
	}
	b.AppendDocument(s.enc.hidden+"."+metaMark, bsoncore.NewDocumentBuilder().AppendBoolean("$exists", false).Build())
	return bson.Raw(b.Build())
}

// metaProjection returns only _id and the hidden field.
func (s *Store) metaProjection() bson.D { return bson.D{{Key: s.enc.hidden, Value: 1}} }

// readState reads one record's hidden field.
func (s *Store) readState(ctx context.Context, coll *mongo.Collection, it *item) (state, error) {
	raw, err := coll.FindOne(ctx, idFilter(it.id), options.FindOne().SetProjection(s.metaProjection())).Raw()
	switch {
	case errors.Is(err, mongo.ErrNoDocuments):
		return state{}, nil
	case err != nil:
		return state{}, classify(fmt.Errorf("cannot read the metadata of %s: %w", it.op.Address, err))
	}
	st := s.stateOf(raw)
	if st.err != nil {
		return st, domain.Errorf(domain.CodeInternal, "cannot write %s: %v", it.op.Address, st.err)
	}
	return st, nil
}

// readStates reads the hidden fields of the items' records with one query,
// by the identity keyID gives their keys (absent records are missing).
func (s *Store) readStates(ctx context.Context, coll *mongo.Collection, items []*item) (map[string]state, error) {
	cur, err := coll.Find(ctx, itemsFilter(items), options.Find().SetProjection(s.metaProjection()))
	if err != nil {
		return nil, err
	}
	defer func() { _ = cur.Close(context.WithoutCancel(ctx)) }()
	states := make(map[string]state, len(items))
	for cur.Next(ctx) {
		idv, err := bsoncore.Document(cur.Current).LookupErr(idKey)
		if err != nil {
			continue
		}
		if id, ok := idOf(idv); ok {
			states[id] = s.stateOf(cur.Current)
		}
	}
	if err := cur.Err(); err != nil {
		return nil, err
	}
	return states, nil
}

// markedChunk applies writes with a mark to one collection, and upserts
// without a mark whose bulk write met a record with a mark: it reads the
// records' hidden fields with one query, checks each write's mark update
// and condition against what it read (ports.Storage: coverage first), and
// sends the writes that should happen as one unordered bulk write, each
// conditional on what was read (the revision, or for legacy records the
// hidden field's absence; an insert for absent records) and storing the
// advanced mark (or, without a mark update, the mark read). Writes that met
// a concurrent change start again, at most maxMarkAttempts times in all.
func (s *Store) markedChunk(ctx context.Context, t target, items []*item, out []ports.WriteResult) {
	coll := s.collection(t)
	pending := items
	for attempt := 1; len(pending) > 0; attempt++ {
		if attempt > maxMarkAttempts {
			for _, it := range pending {
				out[it.i] = aborted(it)
			}
			return
		}
		states, err := s.readStates(ctx, coll, pending)
		if err != nil {
			// Nothing of these operations was written since their last
			// definite answer, so a timeout here is a transient failure.
			e := classifyRead(fmt.Errorf("cannot read the applied marks in %s: %w", t, err))
			for _, it := range pending {
				out[it.i].Err = e
			}
			return
		}
		var writes []*item
		var models []mongo.WriteModel
		for _, it := range pending {
			st := states[keyID(it.op.Address.Key)]
			m, res, done := s.plan(it, st)
			if done {
				out[it.i] = res
				continue
			}
			writes = append(writes, it)
			models = append(models, m)
		}
		if len(models) == 0 {
			return
		}
		pending = s.markedBulk(ctx, coll, t, writes, models, out)
	}
}

// plan decides a write with a mark against its record's state: its result
// (done) or the conditional write to send.
func (s *Store) plan(it *item, st state) (mongo.WriteModel, ports.WriteResult, bool) {
	op := it.op
	fail := func(code domain.Code, format string, args ...any) (mongo.WriteModel, ports.WriteResult, bool) {
		return nil, ports.WriteResult{Err: domain.Errorf(code, format, args...)}, true
	}
	if st.err != nil {
		return fail(domain.CodeInternal, "cannot write %s: %v", op.Address, st.err)
	}
	if st.exists && op.Mark != nil {
		if r := ports.CheckMark(op, st.mark); r != nil {
			return nil, *r, true
		}
	}
	switch op.Condition.Kind {
	case ports.ConditionAbsent:
		if st.exists {
			return fail(domain.CodeAlreadyExists, "record %s already exists", op.Address)
		}
	case ports.ConditionExists:
		if !st.exists {
			return fail(domain.CodeNotFound, "record %s does not exist", op.Address)
		}
	case ports.ConditionRevision:
		if !st.exists {
			return fail(domain.CodeNotFound, "record %s does not exist (expected revision %s)", op.Address, describeRevision(op.Condition.Revision))
		}
		if st.revision() != op.Condition.Revision {
			return fail(domain.CodeRevisionMismatch, "record %s does not have the expected revision %s", op.Address, describeRevision(op.Condition.Revision))
		}
	}
	it.existed = st.exists
	if op.Kind == ports.WriteDelete {
		if !st.exists {
			return nil, it.success(false), true
		}
		return mongo.NewDeleteOneModel().SetFilter(s.stateFilter(it.id, st)), ports.WriteResult{}, false
	}
	mark := st.mark // a put without a mark update keeps the mark
	if op.Mark != nil {
		mark = st.mark.Advance(op.Mark.IDs, revisionToken(it.rev), op.Mark.Position, it.keep)
	}
	if !st.exists {
		return mongo.NewInsertOneModel().SetDocument(bson.Raw(s.enc.assemble(it.body, true, it.rev, mark))), ports.WriteResult{}, false
	}
	return mongo.NewReplaceOneModel().SetFilter(s.stateFilter(it.id, st)).SetReplacement(bson.Raw(s.enc.assemble(it.body, false, it.rev, mark))), ports.WriteResult{}, false
}

// markedBulk sends the planned writes of markedChunk and returns those that
// met a concurrent change (a replace or delete that matched nothing, an
// insert that found the record) to start again. When the counts of the
// bulk result account for every write without an error, each write's
// outcome is known; otherwise (a write matched nothing, or the server does
// not attribute results, as FerretDB v1) the writes are looked up: a put
// whose revision is stored and a delete whose record is gone took effect,
// the others start again.
func (s *Store) markedBulk(ctx context.Context, coll *mongo.Collection, t target, writes []*item, models []mongo.WriteModel, out []ports.WriteResult) []*item {
	res, failed, wce, ok := s.sendBulk(ctx, coll, t, models, writes, out)
	if !ok {
		return nil
	}
	trusted := wce != nil || res.MatchedCount+res.InsertedCount+res.DeletedCount == int64(len(writes)-len(failed))
	if !trusted {
		return s.confirm(ctx, coll, t, writes, failed, out)
	}
	var again []*item
	for j, it := range writes {
		we, isErr := failed[j]
		switch {
		case isErr && mongo.IsDuplicateKeyError(we):
			again = append(again, it) // created concurrently
		case isErr:
			out[it.i].Err = s.writeError(it, we)
		case wce != nil:
			out[it.i].Err = wce
		default:
			out[it.i] = it.success(it.existed)
		}
	}
	return again
}

// landed reports whether the mark shows that the put with a mark took
// effect and was then replaced by a later write (which carried the mark over).
func landed(it *item, m domain.AppliedMark) bool {
	if it.op.Mark == nil || len(it.op.Mark.IDs) == 0 {
		return false
	}
	e, ok := m.Find(it.op.Mark.IDs[len(it.op.Mark.IDs)-1])
	return ok && e.Revision == revisionToken(it.rev)
}

// confirm looks up the writes of a bulk whose result did not say which of
// them took effect (see markedBulk) and returns those to start again.
func (s *Store) confirm(ctx context.Context, coll *mongo.Collection, t target, writes []*item, failed map[int]mongo.WriteError, out []ports.WriteResult) []*item {
	states, err := s.readStates(ctx, coll, writes)
	if err != nil {
		e := &domain.Error{Code: domain.CodeOutcomeUnknown, Cause: err,
			Message: fmt.Sprintf("cannot tell whether the write to %s took effect: looking it up failed: %s", t, classify(err).Message)}
		for _, it := range writes {
			out[it.i].Err = e
		}
		return nil
	}
	var again []*item
	for j, it := range writes {
		st, exists := states[keyID(it.op.Address.Key)]
		we, isErr := failed[j]
		switch {
		case it.op.Kind == ports.WritePut && exists && !st.legacy && (st.rev == it.rev || landed(it, st.mark)),
			it.op.Kind == ports.WriteDelete && !exists:
			out[it.i] = it.success(it.existed)
		case isErr && !mongo.IsDuplicateKeyError(we):
			out[it.i].Err = s.writeError(it, we)
		default:
			again = append(again, it)
		}
	}
	return again
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
//
// For a write with a mark, the record's current mark is checked first, as
// ports.Storage requires: a retried write whose first attempt changed the
// revision is ALREADY_APPLIED, not a mismatch.
func (s *Store) conditionFailed(ctx context.Context, it *item) ports.WriteResult {
	op := it.op
	st, err := s.readState(ctx, s.collection(it.t), it)
	if err != nil && (op.Mark != nil || domain.CodeOf(err) != domain.CodeInternal) {
		return ports.WriteResult{Err: err}
	}
	exists := st.exists
	if op.Mark != nil && exists {
		if r := ports.CheckMark(op, st.mark); r != nil {
			return *r
		}
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

// itemsFilter returns the filter of the items' records.
func itemsFilter(items []*item) bson.Raw {
	ids := bsoncore.NewArrayBuilder()
	for _, it := range items {
		ids.AppendValue(it.id)
	}
	return idsFilter(ids)
}
