package postgres_test

import (
	"bytes"
	"fmt"
	"sync"
	"testing"

	"github.com/sink-io/sink/adapters/postgres"
	"github.com/sink-io/sink/application"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/internal/testkit/countprofile"
	"github.com/sink-io/sink/ports"
)

// BSON documents are stored byte for byte and merged like any other: a
// BSON counter merged concurrently through the application stays BSON and
// exact, and the table holds exactly the bytes reads return.
func TestBSONDocumentsAreStoredAndMerged(t *testing.T) {
	const writers, merges = 4, 25
	p, _ := newPool(t, writers)
	s := newStore(t, p, postgres.Options{})
	cfg := application.DefaultConfig()
	cfg.Merge.MaxAttempts = 10000
	svc, err := application.NewService(cfg, s, []ports.MergeProfile{countprofile.New()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	a := domain.Address{Store: cfg.Store, Namespace: "app", Dataset: "bson", Key: domain.ObjectIDKey([]byte("0123456789ab"))}
	first, err := countprofile.Encode(domain.ContentTypeBSON, countprofile.Counter{N: 1, IDs: []string{"start"}})
	if err != nil {
		t.Fatal(err)
	}
	if r := s.Write(ctx, []ports.WriteOp{{Kind: ports.WritePut, Address: a, Document: first}})[0]; r.Err != nil {
		t.Fatal(r.Err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < merges; i++ {
				intent, err := countprofile.Encode(domain.ContentTypeBSON, countprofile.Intent{Add: 1, ID: fmt.Sprintf("w%d-%d", w, i)})
				if err != nil {
					errs <- err
					return
				}
				res, err := svc.Write(ctx, []domain.Mutation{{Kind: domain.MutationMerge, Address: a, Merge: domain.MergeIntent{Profile: countprofile.Name, Intent: intent}}}, application.WaitUntilApplied)
				if err != nil || res[0].Status != application.StatusApplied {
					errs <- fmt.Errorf("merge: %v %+v", err, res)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	r := s.Read(ctx, []domain.Address{a})[0]
	if !r.Found || r.Record.Document.ContentType != domain.ContentTypeBSON {
		t.Fatalf("read: %+v", r)
	}
	var c countprofile.Counter
	if err := countprofile.Decode(r.Record.Document, &c); err != nil {
		t.Fatal(err)
	}
	if c.N != 1+writers*merges || len(c.IDs) != 1+writers*merges {
		t.Fatalf("counter %d with %d ids, want %d", c.N, len(c.IDs), 1+writers*merges)
	}
	var stored []byte
	if err := p.QueryRow(ctx, `SELECT doc FROM app.bson`).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(stored, r.Record.Document.Data) {
		t.Fatal("the table holds other bytes than the read returns")
	}
}
