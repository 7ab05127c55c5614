package storagetest

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

// Differential compares a storage's scans with the reference (the memory
// storage) on random documents and random filters: identical records in
// identical order.
type Differential struct {
	// Reference and Subject implement ports.Scanner.
	Reference, Subject ports.Storage
	// Store, and the namespaces to use on each (fresh ones).
	Store                   string
	RefNamespace, Namespace string
	// Encode makes the documents (the same bytes go to both).
	Encode func(t testing.TB, v domain.Value) domain.Document
	// SubjectEncode, when set, makes the subject's documents instead
	// (records are then compared by their decoded values).
	SubjectEncode func(t testing.TB, v domain.Value) domain.Document
	// KeyKinds the subject supports (nil: all).
	KeyKinds []domain.KeyKind
}

// Run runs rounds of the differential test from seed: each round writes
// docs random documents to a fresh dataset of both storages and compares
// filters random scans (random filter, order, range and page size),
// every other one through a stream where the subject streams scans
// (ports.ScanStreamer). It returns the number of cases compared.
func (d *Differential) Run(ctx context.Context, t testing.TB, seed uint64, rounds, docs, filters int) int {
	t.Helper()
	if d.KeyKinds == nil {
		d.KeyKinds = AllKeyKinds
	}
	r := NewRand(seed)
	ref, sub := d.Reference.(ports.Scanner), d.Subject.(ports.Scanner)
	cases := 0
	for round := range rounds {
		dataset := fmt.Sprintf("diff%d_%d", seed%1_000_000, round)
		rd := domain.DatasetRef{Store: d.Store, Namespace: d.RefNamespace, Dataset: dataset}
		sd := domain.DatasetRef{Store: d.Store, Namespace: d.Namespace, Dataset: dataset}
		var refOps, subOps []ports.WriteOp
		var keys []domain.Key
		seen := map[domain.Key]bool{}
		for len(keys) < docs {
			k := randomKey(r, d.KeyKinds)
			if seen[k] {
				continue
			}
			seen[k] = true
			keys = append(keys, k)
			v := RandomDocument(r)
			doc, sdoc := d.Encode(t, v), d.Encode(t, v)
			if d.SubjectEncode != nil {
				sdoc = d.SubjectEncode(t, v)
			}
			refOps = append(refOps, ports.WriteOp{Kind: ports.WritePut, Address: domain.Address{Store: d.Store, Namespace: rd.Namespace, Dataset: dataset, Key: k}, Document: doc})
			subOps = append(subOps, ports.WriteOp{Kind: ports.WritePut, Address: domain.Address{Store: d.Store, Namespace: sd.Namespace, Dataset: dataset, Key: k}, Document: sdoc})
		}
		for i, res := range d.Reference.Write(ctx, refOps) {
			if res.Err != nil {
				t.Fatalf("reference put %v: %v", refOps[i].Address, res.Err)
			}
		}
		for i := 0; i < len(subOps); i += 40 {
			chunk := subOps[i:min(i+40, len(subOps))]
			for j, res := range d.Subject.Write(ctx, chunk) {
				if res.Err != nil {
					t.Fatalf("subject put %v: %v", chunk[j].Address, res.Err)
				}
			}
		}
		for range filters {
			f := RandomFilter(r)
			q := ports.ScanQuery{Filter: f, Descending: r.IntN(2) == 0, Limit: []int{2, 25, 1000, 1000, 1000, 1000}[r.IntN(6)]}
			if r.IntN(4) == 0 {
				a, b := keys[r.IntN(len(keys))], keys[r.IntN(len(keys))]
				if domain.CompareKeys(a, b) > 0 {
					a, b = b, a
				}
				q.Range = domain.KeyRange{Start: &domain.KeyBound{Key: a, Inclusive: r.IntN(2) == 0}, End: &domain.KeyBound{Key: b, Inclusive: r.IntN(2) == 0}}
			}
			rq, sq := q, q
			rq.Dataset, sq.Dataset = rd, sd
			wantKeys, wantDocs := ScanAll(ctx, t, ref, rq, matcher(t, f))
			var gotKeys []domain.Key
			var gotDocs []domain.Document
			if st, ok := d.Subject.(ports.ScanStreamer); ok && cases%2 == 1 {
				gotKeys, gotDocs = ScanAllStream(ctx, t, st, sq, matcher(t, f))
			} else {
				gotKeys, gotDocs = ScanAll(ctx, t, sub, sq, matcher(t, f))
			}
			cases++
			if !equalKeys(gotKeys, wantKeys) {
				t.Fatalf("seed %d round %d: filter %s (descending %v, range %s, page %d): keys %v, reference %v", seed, round, FormatFilter(f), q.Descending, describeRange(q.Range), q.Limit, gotKeys, wantKeys)
			}
			for i := range gotDocs {
				if !sameDocument(gotDocs[i], wantDocs[i], d.SubjectEncode != nil) {
					t.Fatalf("seed %d: record %v differs from the reference", seed, gotKeys[i])
				}
			}
		}
	}
	return cases
}

func randomKey(r interface{ IntN(int) int }, kinds []domain.KeyKind) domain.Key {
	switch kinds[r.IntN(len(kinds))] {
	case domain.KeyString:
		return domain.StringKey(randomStrings[r.IntN(len(randomStrings))] + fmt.Sprint(r.IntN(50)))
	case domain.KeyBytes:
		b := make([]byte, 1+r.IntN(3))
		for i := range b {
			b[i] = byte(r.IntN(256))
		}
		return domain.BytesKey(b)
	case domain.KeyObjectID:
		b := make([]byte, domain.ObjectIDLength)
		for i := range b {
			b[i] = byte(r.IntN(4))
		}
		return domain.ObjectIDKey(b)
	}
	return domain.Int64Key(int64(r.IntN(200) - 100))
}

// sameDocument: the same bytes, or, in different formats or when byValue,
// the same values (objects as sets of fields: a storage may reorder them).
func sameDocument(a, b domain.Document, byValue bool) bool {
	if a.ContentType == b.ContentType && !byValue {
		return bytes.Equal(a.Data, b.Data)
	}
	va, err1 := domain.DecodeDocument(a)
	vb, err2 := domain.DecodeDocument(b)
	return err1 == nil && err2 == nil && sameValue(va, vb)
}

// sameValue compares decoded values: numbers numerically (a storage may
// write 1.0 as 1), objects whatever their fields' order, arrays in order.
func sameValue(a, b domain.Value) bool {
	if a.Kind != b.Kind {
		return false
	}
	switch a.Kind {
	case domain.ValueBool:
		return a.Bool == b.Bool
	case domain.ValueNumber:
		return numberOf(a) == numberOf(b)
	case domain.ValueString:
		return a.Str == b.Str
	case domain.ValueArray:
		return slices.EqualFunc(a.Elems, b.Elems, sameValue)
	case domain.ValueObject:
		if len(a.Fields) != len(b.Fields) {
			return false
		}
		for _, f := range a.Fields {
			g, ok := b.Lookup(f.Name)
			if !ok || !sameValue(f.Value, *g) {
				return false
			}
		}
		return true
	}
	return true
}

func numberOf(v domain.Value) float64 {
	if v.IsFloat {
		return v.Float
	}
	return float64(v.Int)
}
