package memory_test

import (
	"encoding/json"
	"testing"

	"github.com/sink-io/sink/adapters/memory"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
	"github.com/sink-io/sink/ports/storagetest"
)

type counterDoc struct {
	N       int    `json:"n"`
	Payload []byte `json:"payload,omitempty"`
}

func TestConformance(t *testing.T) {
	storagetest.Run(t, func(t *testing.T) ports.Storage { return memory.New() }, storagetest.Features{
		Store:     "primary",
		Namespace: func(testing.TB) string { return "test" },
		NewDocument: func(t testing.TB, _ domain.Address, n int, payload []byte) domain.Document {
			b, err := json.Marshal(counterDoc{N: n, Payload: payload})
			if err != nil {
				t.Fatal(err)
			}
			return domain.Document{ContentType: domain.ContentTypeJSON, Data: b}
		},
		Counter: func(t testing.TB, d domain.Document) int {
			var c counterDoc
			if err := json.Unmarshal(d.Data, &c); err != nil {
				t.Fatalf("decode %q: %v", d.Data, err)
			}
			return c.N
		},
		EmptyDocument: func(testing.TB, domain.Address) domain.Document {
			return domain.Document{ContentType: "application/octet-stream"}
		},
		LargePayloadBytes: 4 << 20,
		KeyKinds:          storagetest.AllKeyKinds,
	})
}

func TestWritesDoNotAliasCallerBuffers(t *testing.T) {
	s := memory.New()
	a := domain.Address{Store: "p", Namespace: "n", Dataset: "d", Key: domain.StringKey("k")}
	data := []byte(`{"n":1}`)
	s.Write(t.Context(), []ports.WriteOp{{Kind: ports.WritePut, Address: a, Document: domain.Document{ContentType: "application/json", Data: data}}})
	data[2] = 'X'
	r := s.Read(t.Context(), []domain.Address{a})[0]
	if string(r.Record.Document.Data) != `{"n":1}` {
		t.Fatalf("stored document changed with the caller's buffer: %q", r.Record.Document.Data)
	}
	if s.Len() != 1 {
		t.Fatalf("Len = %d", s.Len())
	}
}
