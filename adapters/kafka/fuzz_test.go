package kafka

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/sink-io/sink/domain"
)

// FuzzDecodeMutation checks that the decoder never panics and that every
// value it accepts re-encodes canonically: decode(encode(decode(b))) equals
// decode(b), and encoding that again gives the same bytes. A normal test run
// executes the seed corpus; run `go test -fuzz FuzzDecodeMutation
// ./adapters/kafka/` to explore.
func FuzzDecodeMutation(f *testing.F) {
	for _, m := range sampleMutations() {
		b, err := EncodeMutation(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(b[:len(b)/2])
		f.Add(append([]byte{0x02}, b[1:]...))
	}
	f.Add([]byte{})
	f.Add([]byte{0x01})
	f.Add([]byte{0x01, 0x0a, 0x01, 'x'})
	f.Add([]byte{0x01, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeMutation(b)
		if err != nil {
			return
		}
		enc, err := EncodeMutation(m)
		if err != nil {
			t.Fatalf("decoded %+v but cannot encode it: %v", m, err)
		}
		m2, err := DecodeMutation(enc)
		if err != nil {
			t.Fatalf("cannot decode the re-encoding of %+v: %v", m, err)
		}
		if !m.SubmittedAt.Equal(m2.SubmittedAt) {
			t.Fatalf("submitted_at changed: %v → %v", m.SubmittedAt, m2.SubmittedAt)
		}
		m.SubmittedAt = m2.SubmittedAt
		if !reflect.DeepEqual(normalize(m), normalize(m2)) {
			t.Fatalf("round trip changed the mutation:\n%+v\n%+v", m, m2)
		}
		enc2, err := EncodeMutation(m2)
		if err != nil || !bytes.Equal(enc, enc2) {
			t.Fatalf("encoding is not canonical (%v)", err)
		}
	})
}

// normalize makes empty byte slices nil: protobuf does not distinguish them.
func normalize(m domain.Mutation) domain.Mutation {
	if len(m.Document.Data) == 0 {
		m.Document.Data = nil
	}
	if len(m.Merge.Intent.Data) == 0 {
		m.Merge.Intent.Data = nil
	}
	return m
}
