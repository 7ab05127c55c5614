package vtcodec

import (
	"bytes"
	"errors"
	"testing"

	"google.golang.org/grpc/encoding"
	protoenc "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/structpb"

	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
)

func sampleWrite() *sinkv1.WriteRequest {
	a := &sinkv1.RecordAddress{Store: "s", Namespace: "shop", Dataset: "orders", Key: &sinkv1.RecordKey{Kind: &sinkv1.RecordKey_String_{String_: "o-1"}}}
	return &sinkv1.WriteRequest{Operations: []*sinkv1.WriteOperation{
		{Kind: &sinkv1.WriteOperation_Put{Put: &sinkv1.PutOperation{Address: a, Document: &sinkv1.Document{ContentType: "application/json", Data: []byte(`{"a":1}`)},
			ExpectedRevision: []byte{1, 2, 3}, IdempotencyKey: "k-1"}}},
		{Kind: &sinkv1.WriteOperation_Merge{Merge: &sinkv1.MergeOperation{Address: a, Profile: "merge-patch", Intent: &sinkv1.Document{ContentType: "application/json", Data: []byte(`{"b":2}`)}}}},
	}}
}

// The codec's bytes are protobuf's: the stock codec reads what it writes
// and the other way round, large messages (pooled buffers) included.
func TestWireCompatibleWithTheStockCodec(t *testing.T) {
	stock := encoding.GetCodecV2(protoenc.Name)
	c := New()
	for _, big := range []bool{false, true} {
		in := sampleWrite()
		if big {
			in.Operations[0].GetPut().Document.Data = bytes.Repeat([]byte("x"), 1<<20)
		}
		ours, err := c.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		theirs, err := stock.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(ours.Materialize(), theirs.Materialize()) {
			t.Fatalf("big=%v: the bytes differ from the stock codec's", big)
		}
		var back sinkv1.WriteRequest
		if err := c.Unmarshal(theirs, &back); err != nil || !proto.Equal(&back, in) {
			t.Fatalf("big=%v: unmarshalled %v, %v", big, err, &back)
		}
		ours.Free()
	}
	// A message without generated VT methods goes through the stock codec.
	v, _ := structpb.NewValue("x")
	b, err := c.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var back structpb.Value
	if err := c.Unmarshal(b, &back); err != nil || back.GetStringValue() != "x" {
		t.Fatalf("fallback: %v %v", err, &back)
	}
}

// Invalid UTF-8 in any string field, however deep, is refused, as by the
// protobuf runtime; bytes fields may hold anything.
func TestRefusesInvalidUTF8InStrings(t *testing.T) {
	c := New()
	bad := []func(*sinkv1.WriteRequest){
		func(r *sinkv1.WriteRequest) { r.Operations[0].GetPut().Address.Namespace = "a\xff" },
		func(r *sinkv1.WriteRequest) {
			r.Operations[0].GetPut().Address.Key = &sinkv1.RecordKey{Kind: &sinkv1.RecordKey_String_{String_: "\xc3"}}
		},
		func(r *sinkv1.WriteRequest) { r.Operations[1].GetMerge().Profile = "\xed\xa0\x80" },
		func(r *sinkv1.WriteRequest) { r.Operations[0].GetPut().Document.ContentType = "text/\xfe" },
		func(r *sinkv1.WriteRequest) { r.Operations[0].GetPut().IdempotencyKey = "\x80" },
	}
	for i, mutate := range bad {
		r := sampleWrite()
		mutate(r)
		// MarshalVT does not check UTF-8; the stock codec would refuse to
		// marshal, so the bytes come from the VT code.
		b, err := r.MarshalVT()
		if err != nil {
			t.Fatal(err)
		}
		var back sinkv1.WriteRequest
		if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, &back); !errors.Is(err, errInvalidUTF8) {
			t.Errorf("case %d: %v, want the invalid UTF-8 error", i, err)
		}
		if err := proto.Unmarshal(b, &back); err == nil {
			t.Errorf("case %d: the protobuf runtime accepts it", i)
		}
	}
	r := sampleWrite()
	r.Operations[0].GetPut().Document.Data = []byte{0xff, 0xfe}
	r.Operations[0].GetPut().ExpectedRevision = []byte{0x80}
	b, _ := r.MarshalVT()
	var back sinkv1.WriteRequest
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, &back); err != nil {
		t.Fatalf("bytes fields with any content: %v", err)
	}
	// Malformed wire data is an error, not a panic.
	for _, junk := range [][]byte{{0x0a, 0xff}, {0x0a, 0x05, 0x01}, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}} {
		if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(junk)}, &back); err == nil {
			t.Errorf("junk %x accepted", junk)
		}
	}
}

// FuzzUnmarshalAgreesWithProto holds vtcodec to protobuf's runtime: it
// never accepts what protobuf refuses, and what it accepts it decodes the
// same.
func FuzzUnmarshalAgreesWithProto(f *testing.F) {
	b, _ := sampleWrite().MarshalVT()
	f.Add(b)
	f.Add([]byte{0x0a, 0x02, 0x12, 0x00})
	f.Fuzz(func(t *testing.T, data []byte) {
		var ours, theirs sinkv1.WriteRequest
		errOurs := New().Unmarshal(mem.BufferSlice{mem.SliceBuffer(data)}, &ours)
		errTheirs := proto.Unmarshal(data, &theirs)
		// What protobuf refuses, vtcodec refuses. vtcodec may refuse more:
		// a known field sent with another wire type, which protobuf keeps
		// as an unknown field (and the field is silently not set).
		if errTheirs != nil && errOurs == nil {
			t.Fatalf("vtcodec accepts what protobuf refuses (%v)", errTheirs)
		}
		dropUnknown(ours.ProtoReflect())
		dropUnknown(theirs.ProtoReflect())
		if errOurs == nil && !proto.Equal(&ours, &theirs) {
			t.Fatalf("different messages:\n%v\n%v", &ours, &theirs)
		}
	})
}

// write500 is a WriteRequest of 500 puts, and the codecs the benchmarks
// compare.
func write500() *sinkv1.WriteRequest {
	r := &sinkv1.WriteRequest{}
	for range 500 {
		r.Operations = append(r.Operations, sampleWrite().Operations[0])
	}
	return r
}

var benchCodecs = []struct {
	name  string
	codec encoding.CodecV2
}{{"vtcodec", New()}, {"stock", encoding.GetCodecV2(protoenc.Name)}}

func BenchmarkUnmarshalWrite500(b *testing.B) {
	data, _ := proto.Marshal(write500())
	for _, c := range benchCodecs {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var m sinkv1.WriteRequest
				if err := c.codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(data)}, &m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkMarshalWrite500(b *testing.B) {
	r := write500()
	for _, c := range benchCodecs {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				out, err := c.codec.Marshal(r)
				if err != nil {
					b.Fatal(err)
				}
				out.Free()
			}
		})
	}
}

// dropUnknown clears the unknown fields of m and the messages in it (Sink
// ignores them; the two runtimes keep their bytes slightly differently).
func dropUnknown(m protoreflect.Message) {
	m.SetUnknown(nil)
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList() && fd.Message() != nil:
			for i := range v.List().Len() {
				dropUnknown(v.List().Get(i).Message())
			}
		case fd.IsMap() && fd.MapValue().Message() != nil:
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				dropUnknown(mv.Message())
				return true
			})
		case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
			dropUnknown(v.Message())
		}
		return true
	})
}
