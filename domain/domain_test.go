package domain

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
)

func sampleAddresses() []Address {
	return []Address{
		{Store: "primary", Namespace: "ns", Dataset: "ds", Key: StringKey("k")},
		{Store: "primary", Namespace: "ns", Dataset: "ds", Key: StringKey("")},
		{Store: "", Namespace: "", Dataset: "", Key: Int64Key(-1)},
		{Store: "s", Namespace: "n", Dataset: "d", Key: Int64Key(1 << 62)},
		{Store: "s", Namespace: "n", Dataset: "d", Key: BytesKey([]byte{0, 1, 2, 255})},
		{Store: "s", Namespace: "n", Dataset: "d", Key: ObjectIDKey(bytes.Repeat([]byte{7}, 12))},
		{Store: "ü", Namespace: string(make([]byte, 300)), Dataset: "x", Key: StringKey("long")},
	}
}

func TestAddressEncodingRoundTrip(t *testing.T) {
	seen := map[string]int{}
	for i, a := range sampleAddresses() {
		enc := EncodeAddress(a)
		if enc[0] != AddressEncodingV1 {
			t.Fatalf("version byte = %x", enc[0])
		}
		got, err := DecodeAddress(enc)
		if err != nil {
			t.Fatalf("decode %v: %v", a, err)
		}
		if got != a {
			t.Fatalf("round trip: got %v want %v", got, a)
		}
		if j, dup := seen[string(enc)]; dup {
			t.Fatalf("addresses %d and %d encode equally", i, j)
		}
		seen[string(enc)] = i
	}
}

func TestAddressEncodingIsStable(t *testing.T) {
	// The encoding is a wire format (Kafka keys): this vector must never change.
	a := Address{Store: "p", Namespace: "ns", Dataset: "d", Key: Int64Key(258)}
	want := []byte{1, 1, 'p', 2, 'n', 's', 1, 'd', 2, 0, 0, 0, 0, 0, 0, 1, 2}
	if got := EncodeAddress(a); !bytes.Equal(got, want) {
		t.Fatalf("encoding changed: got %v want %v", got, want)
	}
	s := Address{Store: "p", Namespace: "n", Dataset: "d", Key: StringKey("ab")}
	want = []byte{1, 1, 'p', 1, 'n', 1, 'd', 1, 2, 'a', 'b'}
	if got := EncodeAddress(s); !bytes.Equal(got, want) {
		t.Fatalf("encoding changed: got %v want %v", got, want)
	}
}

func TestDecodeAddressRejectsMalformed(t *testing.T) {
	valid := EncodeAddress(Address{Store: "p", Namespace: "n", Dataset: "d", Key: StringKey("ab")})
	cases := map[string][]byte{
		"empty":             nil,
		"bad version":       append([]byte{2}, valid[1:]...),
		"truncated":         valid[:len(valid)-1],
		"trailing":          append(append([]byte{}, valid...), 0),
		"bad kind":          {1, 0, 0, 0, 9},
		"short object id":   {1, 0, 0, 0, 4, 1, 2, 3},
		"short int64":       {1, 0, 0, 0, 2, 1},
		"huge length":       {1, 0xff, 0xff, 0xff, 0xff, 0x0f},
		"non-canonical len": {1, 0x80, 0x00, 0, 0, 1, 0},
	}
	for name, in := range cases {
		if _, err := DecodeAddress(in); !errors.Is(err, ErrMalformedAddress) {
			t.Errorf("%s: err = %v, want ErrMalformedAddress", name, err)
		}
	}
}

func FuzzDecodeAddress(f *testing.F) {
	for _, a := range sampleAddresses() {
		f.Add(EncodeAddress(a))
	}
	f.Add([]byte{1, 0x80, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := DecodeAddress(b)
		if err != nil {
			return
		}
		// Canonical: a valid encoding re-encodes to the same bytes.
		if re := EncodeAddress(a); !bytes.Equal(re, b) {
			t.Fatalf("re-encoding differs: %v vs %v", re, b)
		}
	})
}

func TestWaves(t *testing.T) {
	ids := []RecordID{"a", "b", "a", "c", "a", "b"}
	got := Waves(len(ids), func(i int) RecordID { return ids[i] })
	want := [][]int{{0, 1, 3}, {2, 5}, {4}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("waves = %v, want %v", got, want)
	}
	if Waves(0, nil) != nil {
		t.Fatal("no items must give no waves")
	}
}

func TestErrorClassification(t *testing.T) {
	base := Errorf(CodeUnavailable, "db down")
	wrapped := fmt.Errorf("cannot write: %w", base)
	if CodeOf(wrapped) != CodeUnavailable || !IsRetryable(wrapped) {
		t.Fatalf("wrapped error lost its class: %v", AsError(wrapped))
	}
	if CodeOf(context.Canceled) != CodeCanceled {
		t.Fatal("context.Canceled")
	}
	if CodeOf(context.DeadlineExceeded) != CodeOutcomeUnknown || IsRetryable(context.DeadlineExceeded) {
		t.Fatal("deadline must be outcome-unknown and not blindly retryable")
	}
	if CodeOf(errors.New("boom")) != CodeInternal || IsRetryable(errors.New("boom")) {
		t.Fatal("foreign errors are internal, not retryable")
	}
	if Errorf(CodeInvalidArgument, "x").Retryable {
		t.Fatal("invalid argument must not be retryable")
	}
	w := Wrap(CodeUnavailable, errors.New("eof"), "cannot read")
	if w.Error() != "cannot read: eof" || !errors.Is(w, w.Cause) {
		t.Fatalf("wrap: %q", w.Error())
	}
	for c := CodeInternal; c <= CodeAborted; c++ {
		if c.String() == "" || c.String()[0] == 'C' && c.String()[1] == 'O' && c.String()[2] == 'D' {
			t.Fatalf("code %d has no name", c)
		}
	}
}

func TestKeyAccessors(t *testing.T) {
	if StringKey("x").StringValue() != "x" || Int64Key(5).Int64() != 5 {
		t.Fatal("accessors")
	}
	b := []byte{1, 2}
	k := BytesKey(b)
	b[0] = 9
	if k.Bytes()[0] != 1 {
		t.Fatal("BytesKey must copy")
	}
	a := Address{Key: StringKey("1")}
	if a.ID() == (Address{Key: Int64Key(1)}).ID() {
		t.Fatal("keys of different kinds must differ")
	}
}
