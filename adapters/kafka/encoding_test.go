package kafka

import (
	"bytes"
	"encoding/hex"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sink-io/sink/domain"
	queuev1 "github.com/sink-io/sink/proto/sink/queue/v1"
)

var testTime = time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)

func sampleMutations() []domain.Mutation {
	addr := func(k domain.Key) domain.Address {
		return domain.Address{Store: "primary", Namespace: "shop", Dataset: "orders", Key: k}
	}
	return []domain.Mutation{
		{ID: "11111111-1111-4111-8111-111111111111", Kind: domain.MutationPut, Address: addr(domain.StringKey("order-1")),
			Document: domain.Document{ContentType: "application/json", Data: []byte(`{"a":1}`)}, Mode: domain.PutCreate, SubmittedAt: testTime},
		{ID: "22222222-2222-4222-8222-222222222222", Kind: domain.MutationPut, Address: addr(domain.Int64Key(-42)),
			Document: domain.Document{ContentType: "application/bson", Data: []byte{5, 0, 0, 0, 0}}, Mode: domain.PutReplace,
			ExpectedRevision: "rev-7", SubmittedAt: testTime},
		{ID: "33333333-3333-4333-8333-333333333333", Kind: domain.MutationMerge, Address: addr(domain.BytesKey([]byte{0, 1, 2, 0xff})),
			Merge: domain.MergeIntent{Profile: "merge-patch", Intent: domain.Document{ContentType: "application/json", Data: []byte(`{"b":null}`)}}, SubmittedAt: testTime},
		{ID: "44444444-4444-4444-8444-444444444444", Kind: domain.MutationDelete, Address: addr(domain.ObjectIDKey([]byte("0123456789ab"))),
			ExpectedRevision: "rev-9", SubmittedAt: testTime},
		{ID: "55555555-5555-4555-8555-555555555555", Kind: domain.MutationDelete, Address: addr(domain.StringKey("no-time"))},
	}
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	for _, m := range sampleMutations() {
		b, err := EncodeMutation(m)
		if err != nil {
			t.Fatalf("EncodeMutation(%s): %v", m.ID, err)
		}
		if b[0] != MutationEncodingV1 {
			t.Fatalf("version byte 0x%02x", b[0])
		}
		got, err := DecodeMutation(b)
		if err != nil {
			t.Fatalf("DecodeMutation(%s): %v", m.ID, err)
		}
		if !got.SubmittedAt.Equal(m.SubmittedAt) {
			t.Errorf("%s: submitted at %v, want %v", m.ID, got.SubmittedAt, m.SubmittedAt)
		}
		got.SubmittedAt, m.SubmittedAt = time.Time{}, time.Time{}
		if !reflect.DeepEqual(got, m) {
			t.Errorf("round trip of %s:\n got %+v\nwant %+v", m.ID, got, m)
		}
		again, _ := EncodeMutation(mustDecode(t, b))
		if !bytes.Equal(again, b) {
			t.Errorf("%s: re-encoding differs", m.ID)
		}
	}
}

func mustDecode(t *testing.T, b []byte) domain.Mutation {
	t.Helper()
	m, err := DecodeMutation(b)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestEncodingIsStable pins the bytes of encoding v1: a change here breaks
// workers of other versions reading the same topic.
func TestEncodingIsStable(t *testing.T) {
	m := sampleMutations()[0]
	b, err := EncodeMutation(m)
	if err != nil {
		t.Fatal(err)
	}
	const want = "01" + // version
		"0a2431313131313131312d313131312d343131312d383131312d313131313131313131313131" + // 1: id
		"12200a077072696d617279120473686f701a066f726465727322076f726465722d31" + // 2: address
		"320908a5ebdcca0610f02e" + // 6: submitted_at
		"1a1f0a1b0a106170706c69636174696f6e2f6a736f6e12077b2261223a317d1001" // 3: put (document, mode CREATE)
	if got := hex.EncodeToString(b); got != want {
		t.Errorf("encoding v1 changed:\n got %s\nwant %s", got, want)
	}
}

func TestDecodeRejects(t *testing.T) {
	valid, err := EncodeMutation(sampleMutations()[0])
	if err != nil {
		t.Fatal(err)
	}
	enc := func(pm *queuev1.Mutation) []byte {
		b, err := proto.Marshal(pm)
		if err != nil {
			t.Fatal(err)
		}
		return append([]byte{MutationEncodingV1}, b...)
	}
	addr := &queuev1.Address{Store: "s", Namespace: "n", Dataset: "d", Key: &queuev1.Address_StringKey{StringKey: "k"}}
	del := &queuev1.Mutation_Delete{Delete: &queuev1.Delete{}}
	cases := map[string]struct {
		in   []byte
		want string
	}{
		"empty":           {nil, "empty value"},
		"unknown version": {append([]byte{0x02}, valid[1:]...), "unknown encoding version 0x02"},
		"version zero":    {append([]byte{0x00}, valid[1:]...), "unknown encoding version 0x00"},
		"truncated":       {valid[:len(valid)-3], "malformed mutation record"},
		"garbage":         {[]byte{0x01, 0xff, 0xff, 0xff}, "malformed mutation record"},
		"no id":           {enc(&queuev1.Mutation{Address: addr, Operation: del}), "no mutation id"},
		"no address":      {enc(&queuev1.Mutation{Id: "x", Operation: del}), "no address key"},
		"no key":          {enc(&queuev1.Mutation{Id: "x", Address: &queuev1.Address{Store: "s"}, Operation: del}), "no address key"},
		"no operation":    {enc(&queuev1.Mutation{Id: "x", Address: addr}), "no operation"},
		"short ObjectID": {enc(&queuev1.Mutation{Id: "x", Operation: del,
			Address: &queuev1.Address{Key: &queuev1.Address_ObjectIdKey{ObjectIdKey: []byte("short")}}}), "ObjectID key of 5 bytes"},
		"unknown put mode": {enc(&queuev1.Mutation{Id: "x", Address: addr,
			Operation: &queuev1.Mutation_Put{Put: &queuev1.Put{Mode: 256}}}), "unknown put mode 256"},
		"invalid time": {enc(&queuev1.Mutation{Id: "x", Address: addr, Operation: del,
			SubmittedAt: &timestamppb.Timestamp{Seconds: 1, Nanos: -1}}), "submitted_at"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := DecodeMutation(tc.in)
			if err == nil {
				t.Fatal("decoded, want an error")
			}
			if !errors.Is(err, ErrMalformedMutation) {
				t.Errorf("error %v does not wrap ErrMalformedMutation", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not mention %q", err, tc.want)
			}
		})
	}
}

func TestEncodeRejects(t *testing.T) {
	m := sampleMutations()[0]
	noID := m
	noID.ID = ""
	noKey := m
	noKey.Address.Key = domain.Key{}
	badKind := m
	badKind.Kind = 9
	for name, in := range map[string]domain.Mutation{"no id": noID, "no key": noKey, "unknown kind": badKind} {
		if _, err := EncodeMutation(in); err == nil {
			t.Errorf("%s: encoded, want an error", name)
		}
	}
}

func TestDecodeRecordChecksKey(t *testing.T) {
	m := sampleMutations()[0]
	v, _ := EncodeMutation(m)
	if _, err := decodeRecord(domain.EncodeAddress(m.Address), v); err != nil {
		t.Fatalf("matching key: %v", err)
	}
	other := m.Address
	other.Key = domain.StringKey("other")
	if _, err := decodeRecord(domain.EncodeAddress(other), v); err == nil || !strings.Contains(err.Error(), "record key") {
		t.Fatalf("mismatching key: got %v, want a key error", err)
	}
}
