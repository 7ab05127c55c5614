package mongodb

import (
	"context"
	"errors"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"

	"github.com/sink-io/sink/domain"
)

// Puts without a mark must keep the record's applied mark. With a plain
// replacement that needs a filter that excludes records with a mark
// ({_id, "__sink.m": {$exists: false}}, see noMarkFilter), and servers that
// serve only a bare _id from the _id index (FerretDB v1 scans the
// collection for anything else) pay a scan per put. Servers with update
// pipelines (MongoDB 4.2 and later) instead get an update whose pipeline
// builds the same stored document and carries the old mark over, so the
// filter is the bare _id (keepMarkPipeline). Whether the server takes
// update pipelines is asked once per Store (pipelines).

// Pipeline support, as the Store last learned it.
const (
	pipelinesUnknown int32 = iota
	pipelinesYes
	pipelinesNo
)

// keepMarkPipeline returns the update pipeline that turns the record (or,
// for an upsert that creates it, the document {_id: key}) into the stored
// document of a put of b with revision rev, keeping the applied mark the
// record has:
//
//	[{$replaceWith: {$mergeObjects: [
//	    {_id: "$_id"},
//	    {$literal: {<the client's fields>}},
//	    {<hidden>: {$mergeObjects: [
//	        {$literal: {v: 1, rev: <rev>[, idAdded: true]}},
//	        {m: {$cond: [{$eq: [{$type: "$<hidden>.m"}, "object"]}, "$<hidden>.m", "$$REMOVE"]}}]}}]}}]
//
// The result has the layout assemble gives ( _id as stored, the client's
// fields in their order, then the hidden field v, rev, idAdded, m). The
// client's fields are a $literal, so values that look like expressions
// ("$x" strings, {$op: ...} documents nested anywhere) are stored as they
// are. Only a sub-document "m" is carried: a record whose hidden field is
// not Sink's (a legacy field of the same name) gets none.
func (e *encoder) keepMarkPipeline(b body, rev bson.ObjectID) pipeline {
	markPath := "$" + e.hidden + "." + metaMark

	fields := make([]byte, 0, 5+len(b.fields))
	fields = bsoncore.AppendInt32(fields, int32(5+len(b.fields)))
	fields = append(fields, b.fields...)
	fields = append(fields, 0)

	meta := bsoncore.NewDocumentBuilder().AppendInt32("v", metaVersion).AppendObjectID("rev", rev)
	if b.idAdded {
		meta.AppendBoolean(metaIDAdded, true)
	}
	isObject := bsoncore.NewDocumentBuilder().AppendArray("$eq", bsoncore.NewArrayBuilder().
		AppendDocument(bsoncore.NewDocumentBuilder().AppendString("$type", markPath).Build()).
		AppendString("object").Build()).Build()
	mark := bsoncore.NewDocumentBuilder().AppendDocument(metaMark, bsoncore.NewDocumentBuilder().
		AppendArray("$cond", bsoncore.NewArrayBuilder().AppendDocument(isObject).AppendString(markPath).AppendString("$$REMOVE").Build()).
		Build()).Build()
	hidden := bsoncore.NewDocumentBuilder().AppendDocument(e.hidden, bsoncore.NewDocumentBuilder().
		AppendArray("$mergeObjects", bsoncore.NewArrayBuilder().
			AppendDocument(bsoncore.NewDocumentBuilder().AppendDocument("$literal", meta.Build()).Build()).
			AppendDocument(mark).Build()).
		Build()).Build()

	merged := bsoncore.NewArrayBuilder().
		AppendDocument(bsoncore.NewDocumentBuilder().AppendString(idKey, "$"+idKey).Build()).
		AppendDocument(bsoncore.NewDocumentBuilder().AppendDocument("$literal", fields).Build()).
		AppendDocument(hidden).Build()
	stage := bsoncore.NewDocumentBuilder().AppendDocument("$replaceWith",
		bsoncore.NewDocumentBuilder().AppendArray("$mergeObjects", merged).Build()).Build()
	return pipeline(bsoncore.NewArrayBuilder().AppendDocument(stage).Build())
}

// pipeline is an update pipeline, a BSON array. The driver sends it as an
// array (a bson.Raw would be taken for an update document).
type pipeline []byte

// MarshalBSONValue implements bson.ValueMarshaler.
func (p pipeline) MarshalBSONValue() (byte, []byte, error) {
	return byte(bsoncore.TypeArray), p, nil
}

// pipelines reports whether puts without a mark use keepMarkPipeline with
// a bare _id filter on coll's server. The first call (per Store) asks the
// server with an update that cannot match anything (a fresh ObjectID _id,
// no upsert: nothing is written) and the pipeline's own stages: a server
// that refuses it (FerretDB v1: TypeMismatch, "u" must be an object;
// MongoDB before 4.2; servers without $replaceWith) gets the $exists
// filter from then on. An answer that is not the server's own (a network
// error, a timeout) decides nothing: that call uses the $exists filter and
// a later one asks again. Options.NoUpdatePipelines skips the question.
func (s *Store) pipelines(ctx context.Context, coll *mongo.Collection) bool {
	switch s.pipelineState.Load() {
	case pipelinesYes:
		return true
	case pipelinesNo:
		return false
	}
	probe := s.enc.keepMarkPipeline(body{}, newRevision())
	_, err := coll.UpdateOne(ctx, bson.D{{Key: idKey, Value: bson.NewObjectID()}}, probe)
	switch {
	case err == nil:
		s.pipelineState.CompareAndSwap(pipelinesUnknown, pipelinesYes)
		return true
	case refused(err):
		s.pipelineState.CompareAndSwap(pipelinesUnknown, pipelinesNo)
	}
	return false
}

// refused reports whether err is the server's own refusal of a command
// it does not support (an invalid or unknown command, stage or field, or
// any other error that is neither transient, nor a timeout, nor about
// credentials), as opposed to a failure to get an answer.
func refused(err error) bool {
	var se mongo.ServerError
	if !errors.As(err, &se) {
		return false // the driver's own error: nothing was asked
	}
	switch classify(err).Code {
	case domain.CodeInvalidArgument, domain.CodeInternal:
		return true
	}
	return false
}
