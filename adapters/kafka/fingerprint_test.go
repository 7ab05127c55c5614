package kafka

import (
	"testing"

	"github.com/sink-io/sink/domain"
)

// A queued merge carries its profile's fingerprint; one without (a Go
// profile, or a mutation queued before fingerprints existed) decodes with
// an empty one.
func TestMergeFingerprintRoundTrip(t *testing.T) {
	m := domain.Mutation{ID: "m1", Kind: domain.MutationMerge,
		Address: domain.Address{Store: "s", Namespace: "n", Dataset: "d", Key: domain.StringKey("k")},
		Merge: domain.MergeIntent{Profile: "counter", Intent: domain.Document{ContentType: domain.ContentTypeJSON, Data: []byte(`{}`)},
			Fingerprint: "sha256:0123"}}
	for _, fp := range []string{"sha256:0123", ""} {
		m.Merge.Fingerprint = fp
		b, err := EncodeMutation(m)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeMutation(b)
		if err != nil {
			t.Fatal(err)
		}
		if got.Merge.Fingerprint != fp || got.Merge.Profile != "counter" {
			t.Fatalf("decoded %+v, want fingerprint %q", got.Merge, fp)
		}
	}
}
