package kafka

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sink-io/sink/domain"
	queuev1 "github.com/sink-io/sink/proto/sink/queue/v1"
)

// MutationEncodingV1 is the first byte of every mutation record value
// written by this version of Sink.
//
// Value encoding v1:
//
//	byte   version = 0x01
//	bytes  protobuf sink.queue.v1.Mutation (proto/sink/queue/v1/mutation.proto)
//
// The key of a mutation record is domain.EncodeAddress(m.Address) (see
// domain.AddressEncodingV1), so that every mutation of one record lands in
// the same partition, in submission order.
const MutationEncodingV1 byte = 0x01

// ErrMalformedMutation is wrapped by every DecodeMutation error.
var ErrMalformedMutation = errors.New("malformed mutation record")

var marshalOptions = proto.MarshalOptions{Deterministic: true}

// EncodeMutation returns the record value of m (encoding v1). It fails only
// for mutations that no valid request can produce (unknown kind, no key).
func EncodeMutation(m domain.Mutation) ([]byte, error) {
	pm, err := toProto(m)
	if err != nil {
		return nil, fmt.Errorf("cannot encode mutation %s: %w", m.ID, err)
	}
	b := make([]byte, 1, 1+marshalOptions.Size(pm))
	b[0] = MutationEncodingV1
	b, err = marshalOptions.MarshalAppend(b, pm)
	if err != nil {
		return nil, fmt.Errorf("cannot encode mutation %s: %w", m.ID, err)
	}
	return b, nil
}

func toProto(m domain.Mutation) (*queuev1.Mutation, error) {
	if m.ID == "" {
		return nil, errors.New("no mutation id")
	}
	pm := &queuev1.Mutation{Id: m.ID}
	addr, err := addressToProto(m.Address)
	if err != nil {
		return nil, err
	}
	pm.Address = addr
	switch m.Kind {
	case domain.MutationPut:
		pm.Operation = &queuev1.Mutation_Put{Put: &queuev1.Put{
			Document:         docToProto(m.Document),
			Mode:             queuev1.PutMode(m.Mode),
			ExpectedRevision: []byte(m.ExpectedRevision),
		}}
	case domain.MutationMerge:
		pm.Operation = &queuev1.Mutation_Merge{Merge: &queuev1.Merge{
			Profile:     m.Merge.Profile,
			Intent:      docToProto(m.Merge.Intent),
			Fingerprint: m.Merge.Fingerprint,
		}}
	case domain.MutationDelete:
		pm.Operation = &queuev1.Mutation_Delete{Delete: &queuev1.Delete{
			ExpectedRevision: []byte(m.ExpectedRevision),
		}}
	default:
		return nil, fmt.Errorf("unknown mutation kind %d", m.Kind)
	}
	if !m.SubmittedAt.IsZero() {
		pm.SubmittedAt = timestamppb.New(m.SubmittedAt)
	}
	return pm, nil
}

func addressToProto(a domain.Address) (*queuev1.Address, error) {
	pa := &queuev1.Address{Store: a.Store, Namespace: a.Namespace, Dataset: a.Dataset}
	switch a.Key.Kind {
	case domain.KeyString:
		pa.Key = &queuev1.Address_StringKey{StringKey: a.Key.StringValue()}
	case domain.KeyInt64:
		pa.Key = &queuev1.Address_Int64Key{Int64Key: a.Key.Int64()}
	case domain.KeyBytes:
		pa.Key = &queuev1.Address_BytesKey{BytesKey: a.Key.Bytes()}
	case domain.KeyObjectID:
		pa.Key = &queuev1.Address_ObjectIdKey{ObjectIdKey: a.Key.Bytes()}
	default:
		return nil, fmt.Errorf("address %s has no key", a)
	}
	return pa, nil
}

func docToProto(d domain.Document) *queuev1.Document {
	return &queuev1.Document{ContentType: d.ContentType, Data: d.Data}
}

func docFromProto(d *queuev1.Document) domain.Document {
	return domain.Document{ContentType: d.GetContentType(), Data: d.GetData()}
}

// DecodeMutation parses a record value written by EncodeMutation. It
// rejects unknown versions, malformed protobuf, a missing id, address key or
// operation, an ObjectID key that is not 12 bytes, an unknown put mode and
// an invalid submission time. Whether the mutation is valid for the store
// (names, documents, profiles) is for the application to decide.
func DecodeMutation(b []byte) (domain.Mutation, error) {
	var m domain.Mutation
	if len(b) == 0 {
		return m, fmt.Errorf("%w: empty value", ErrMalformedMutation)
	}
	if b[0] != MutationEncodingV1 {
		return m, fmt.Errorf("%w: unknown encoding version 0x%02x (this Sink reads 0x%02x)", ErrMalformedMutation, b[0], MutationEncodingV1)
	}
	var pm queuev1.Mutation
	if err := proto.Unmarshal(b[1:], &pm); err != nil {
		return m, fmt.Errorf("%w: %w", ErrMalformedMutation, err)
	}
	if pm.GetId() == "" {
		return m, fmt.Errorf("%w: no mutation id", ErrMalformedMutation)
	}
	m.ID = pm.GetId()
	pa := pm.GetAddress()
	m.Address = domain.Address{Store: pa.GetStore(), Namespace: pa.GetNamespace(), Dataset: pa.GetDataset()}
	switch k := pa.GetKey().(type) {
	case *queuev1.Address_StringKey:
		m.Address.Key = domain.StringKey(k.StringKey)
	case *queuev1.Address_Int64Key:
		m.Address.Key = domain.Int64Key(k.Int64Key)
	case *queuev1.Address_BytesKey:
		m.Address.Key = domain.BytesKey(k.BytesKey)
	case *queuev1.Address_ObjectIdKey:
		if len(k.ObjectIdKey) != domain.ObjectIDLength {
			return domain.Mutation{}, fmt.Errorf("%w: mutation %s: ObjectID key of %d bytes, want %d", ErrMalformedMutation, m.ID, len(k.ObjectIdKey), domain.ObjectIDLength)
		}
		m.Address.Key = domain.ObjectIDKey(k.ObjectIdKey)
	default:
		return domain.Mutation{}, fmt.Errorf("%w: mutation %s: no address key", ErrMalformedMutation, m.ID)
	}
	switch op := pm.GetOperation().(type) {
	case *queuev1.Mutation_Put:
		m.Kind = domain.MutationPut
		switch mode := op.Put.GetMode(); mode {
		case queuev1.PutMode_PUT_MODE_UPSERT, queuev1.PutMode_PUT_MODE_CREATE, queuev1.PutMode_PUT_MODE_REPLACE:
			m.Mode = domain.PutMode(mode)
		default:
			return domain.Mutation{}, fmt.Errorf("%w: mutation %s: unknown put mode %d", ErrMalformedMutation, m.ID, mode)
		}
		m.Document = docFromProto(op.Put.GetDocument())
		m.ExpectedRevision = domain.Revision(op.Put.GetExpectedRevision())
	case *queuev1.Mutation_Merge:
		m.Kind = domain.MutationMerge
		m.Merge = domain.MergeIntent{Profile: op.Merge.GetProfile(), Intent: docFromProto(op.Merge.GetIntent()), Fingerprint: op.Merge.GetFingerprint()}
	case *queuev1.Mutation_Delete:
		m.Kind = domain.MutationDelete
		m.ExpectedRevision = domain.Revision(op.Delete.GetExpectedRevision())
	default:
		return domain.Mutation{}, fmt.Errorf("%w: mutation %s: no operation", ErrMalformedMutation, m.ID)
	}
	if ts := pm.GetSubmittedAt(); ts != nil {
		if err := ts.CheckValid(); err != nil {
			return domain.Mutation{}, fmt.Errorf("%w: mutation %s: submitted_at: %w", ErrMalformedMutation, m.ID, err)
		}
		m.SubmittedAt = ts.AsTime()
	}
	return m, nil
}
