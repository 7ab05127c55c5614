package domain

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"
)

// Opaque bytes (revisions, bytes and ObjectID keys) never reach a message
// raw: they render in one encoding, so %s and %v are safe by construction.
func TestOpaqueBytesRenderAsValidUTF8(t *testing.T) {
	rev := Revision([]byte{0xff})
	for _, got := range []string{rev.String(), fmt.Sprintf("%s|%v|%s", rev, rev, Errorf(CodeRevisionMismatch, "%s", rev))} {
		if got != "/w==" && got != "/w==|/w==|/w==" {
			t.Fatalf("revision 0xff renders as %q, want its base64 /w==", got)
		}
	}
	if Revision("").String() != "" {
		t.Fatal("the empty revision must render empty")
	}
	if string(rev) != "\xff" || !bytes.Equal([]byte(rev), []byte{0xff}) {
		t.Fatal("conversions must still give the raw token")
	}

	cases := []struct {
		key  Key
		want string
	}{
		{BytesKey([]byte{0xfe, 0xff}), "/v8="},
		{BytesKey(nil), ""},
		{ObjectIDKey([]byte{0x65, 0xa1, 0xf0, 0xc2, 0xe4, 0xb0, 0xa1, 0xb2, 0xc3, 0xd4, 0xe5, 0xf6}), "65a1f0c2e4b0a1b2c3d4e5f6"},
		{StringKey("k-1"), "k-1"},
		{StringKey("a\xffb"), "a\uFFFDb"},
		{Int64Key(-7), "-7"},
	}
	for _, c := range cases {
		if got := c.key.String(); got != c.want {
			t.Errorf("%s key renders as %q, want %q", c.key.Kind, got, c.want)
		}
	}
	a := Address{Store: "s", Namespace: "n\xff", Dataset: "d", Key: BytesKey([]byte{0xff})}
	if got, want := a.String(), "s/n\uFFFD/d/bytes:/w=="; got != want {
		t.Fatalf("address renders as %q, want %q", got, want)
	}
	if got, want := a.DatasetRef().String(), "s/n\uFFFD/d"; got != want {
		t.Fatalf("dataset renders as %q, want %q", got, want)
	}
}

// Property: whatever bytes an address or a revision holds, its rendering is
// valid UTF-8, and a bytes key's rendering decodes back to the key.
func TestRenderingIsValidUTF8ForArbitraryBytes(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 1))
	random := func() []byte {
		b := make([]byte, rng.IntN(20))
		for i := range b {
			b[i] = byte(rng.UintN(256))
		}
		return b
	}
	for range 2000 {
		raw := random()
		rev := Revision(raw)
		back, err := base64.StdEncoding.DecodeString(rev.String())
		if err != nil || !bytes.Equal(back, raw) {
			t.Fatalf("revision %x renders as %q, which does not decode back", raw, rev)
		}
		keys := []Key{StringKey(string(random())), BytesKey(random()), ObjectIDKey(random()), Int64Key(rng.Int64())}
		for _, k := range keys {
			a := Address{Store: string(random()), Namespace: string(random()), Dataset: string(random()), Key: k}
			for _, s := range []string{a.String(), a.DatasetRef().String(), k.String(), fmt.Sprintf("%s %v", a, rev)} {
				if !utf8.ValidString(s) {
					t.Fatalf("rendering %q is not valid UTF-8", s)
				}
			}
			if k.Kind == KeyBytes {
				if b, err := base64.StdEncoding.DecodeString(k.String()); err != nil || !bytes.Equal(b, k.Bytes()) {
					t.Fatalf("bytes key %x renders as %q", k.Bytes(), k.String())
				}
			}
			if !strings.HasSuffix(a.String(), k.Kind.String()+":"+k.String()) && k.Kind != KeyString {
				t.Fatalf("address %q does not end with its key %q", a, k)
			}
		}
	}
}
