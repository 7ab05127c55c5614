package postgres

import (
	"bytes"
	"slices"
	"testing"

	"github.com/sink-io/sink/domain"
)

func TestMarkRoundTrip(t *testing.T) {
	for _, m := range []domain.AppliedMark{
		{},
		{Position: domain.SourcePosition{Log: "log-ü", Partition: -3, Offset: 1 << 40}},
		{Recent: []domain.AppliedEntry{{ID: "a", Revision: "r1"}, {ID: "\xff\x00id", Revision: domain.Revision([]byte{0, 1, 2})}}},
	} {
		got, err := decodeMark(encodeMark(m))
		if err != nil || got.Position != m.Position || !slices.Equal(got.Recent, m.Recent) {
			t.Fatalf("mark %+v came back as %+v (%v)", m, got, err)
		}
	}
	for _, bad := range [][]byte{{2}, {1, 5, 'a'}, append(encodeMark(domain.AppliedMark{Position: domain.SourcePosition{Log: "l"}}), 0)} {
		if _, err := decodeMark(bad); err == nil {
			t.Fatalf("decodeMark(%x) accepted it", bad)
		}
	}
}

func TestMetaRoundTripAndLegacyRevision(t *testing.T) {
	rev := newRevisions().next()
	doc := []byte(`{"a": 1}`)
	mark := domain.AppliedMark{Recent: []domain.AppliedEntry{{ID: "m", Revision: rev}}}
	b := append([]byte{1}, appendBytes(nil, string(rev))...)
	b = appendBytes(b, string(docHash(doc)))
	b = appendMark(b, mark)
	m, err := decodeMeta(b)
	if err != nil || m.rev != rev || !slices.Equal(m.mark.Recent, mark.Recent) {
		t.Fatalf("meta: %+v %v", m, err)
	}
	if got := legacyRevision(m, doc); got != rev {
		t.Fatalf("revision of an unchanged row %x, want the token %x", got, rev)
	}
	changed := legacyRevision(m, []byte(`{"a": 2}`))
	if changed == rev || changed[0] != 'L' || changed == legacyRevision(meta{}, doc) {
		t.Fatalf("revision of a row another program changed: %x", changed)
	}
	if legacyRevision(meta{}, doc) != legacyRevision(meta{}, slices.Clone(doc)) {
		t.Fatal("the revision of a row Sink never wrote is not stable")
	}
}

func TestKeysAreDistinctPerKindAndOrdered(t *testing.T) {
	s, _ := encodeKey(domain.StringKey("42"))
	i, _ := encodeKey(domain.Int64Key(42))
	b, _ := encodeKey(domain.BytesKey([]byte("42")))
	if bytes.Equal(s, i) || bytes.Equal(s, b) || bytes.Equal(i, b) {
		t.Fatal("keys of different kinds encode the same")
	}
	var prev []byte
	for _, n := range []int64{-1 << 63, -5, -1, 0, 1, 7, 1 << 62} {
		k, _ := encodeKey(domain.Int64Key(n))
		if prev != nil && bytes.Compare(prev, k) >= 0 {
			t.Fatalf("int64 keys do not sort numerically at %d", n)
		}
		prev = k
	}
	if _, err := encodeKey(domain.ObjectIDKey([]byte{1, 2})); err == nil {
		t.Fatal("an ObjectID of 2 bytes was accepted")
	}
	r := newRevisions()
	if a, c := r.next(), r.next(); a == c || len(a) != revisionBytes {
		t.Fatalf("revisions %x %x", a, c)
	}
}
