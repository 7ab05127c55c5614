package declarative

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

// goCounter is the example "counter" profile written by hand in Go, the
// way a custom binary would: decode, add, encode.
func goCounter(_ context.Context, in ports.MergeInput) (domain.Document, error) {
	doc := map[string]any{"n": json.Number("0"), "merges": json.Number("0")}
	if in.Current != nil {
		dec := json.NewDecoder(bytes.NewReader(in.Current.Data))
		dec.UseNumber()
		doc = nil
		if err := dec.Decode(&doc); err != nil {
			return domain.Document{}, domain.Errorf(domain.CodeInvalidArgument, "counter: current: %v", err)
		}
	}
	var intent struct {
		By *int64 `json:"by"`
	}
	if err := json.Unmarshal(in.Intent.Data, &intent); err != nil {
		return domain.Document{}, domain.Errorf(domain.CodeInvalidArgument, "counter: intent: %v", err)
	}
	by := int64(1)
	if intent.By != nil {
		by = *intent.By
	}
	for k, d := range map[string]int64{"n": by, "merges": 1} {
		old, _ := doc[k].(json.Number)
		v, err := old.Int64()
		if err != nil {
			return domain.Document{}, domain.Errorf(domain.CodeInvalidArgument, "counter: %s is not an integer", k)
		}
		doc[k] = json.Number(fmt.Sprint(v + d))
	}
	out, err := json.Marshal(doc)
	if err != nil {
		return domain.Document{}, err
	}
	return domain.Document{ContentType: domain.ContentTypeJSON, Data: out}, nil
}

// oneKB is a counter document of about 1 KB: the counters and 20 other
// fields.
func oneKB() domain.Document {
	var b strings.Builder
	b.WriteString(`{"n":12345,"merges":678`)
	for i := 0; b.Len() < 1000; i++ {
		fmt.Fprintf(&b, `,"field%02d":{"name":"value number %d","tags":["a","b"],"ok":true}`, i, i)
	}
	b.WriteString("}")
	return jsonDoc(b.String())
}

func counterProfile(b *testing.B) *Profile {
	ps, err := LoadFile("../../examples/profiles.yaml", Options{})
	if err != nil {
		b.Fatal(err)
	}
	for _, p := range ps {
		if p.Name() == "counter" {
			return p
		}
	}
	b.Fatal("no counter profile")
	return nil
}

// TestBenchProfilesAgree: the two benchmarked profiles compute the same.
func TestBenchProfilesAgree(t *testing.T) {
	p := counterProfile(&testing.B{})
	cur := oneKB()
	in := ports.MergeInput{Current: &cur, Intent: jsonDoc(`{"by":3}`)}
	a, err := p.Merge(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	g, err := goCounter(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	var x, y any
	if json.Unmarshal(a.Data, &x) != nil || json.Unmarshal(g.Data, &y) != nil || fmt.Sprint(x) != fmt.Sprint(y) {
		t.Fatalf("declarative %s\ngo %s", a.Data, g.Data)
	}
	if !bytes.Contains(a.Data, []byte(`"n":12348,"merges":679`)) {
		t.Fatalf("declarative %s", a.Data)
	}
}

// BenchmarkCounter1KB compares the declarative counter with the same logic
// in Go on a 1 KB document (target: declarative ≤ 2× Go).
func BenchmarkCounter1KB(b *testing.B) {
	cur := oneKB()
	in := ports.MergeInput{Current: &cur, Intent: jsonDoc(`{"by":3}`)}
	b.Run("declarative", func(b *testing.B) {
		p := counterProfile(b)
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if _, err := p.Merge(context.Background(), in); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("go", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if _, err := goCounter(context.Background(), in); err != nil {
				b.Fatal(err)
			}
		}
	})
}
