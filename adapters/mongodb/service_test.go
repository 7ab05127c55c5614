package mongodb_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/sink-io/sink/adapters/mongodb"
	"github.com/sink-io/sink/application"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/internal/testkit/mongotest"
	"github.com/sink-io/sink/ports"
)

func TestServiceMixedBatch(t *testing.T) {
	srv := mongotest.Shared(t)
	c := client(t, srv.URI())
	db := freshDatabase(t, c)
	ctx := ctxT(t)
	s := newStore(t, c, mongodb.Options{})
	svc := newService(t, s, nil)
	at := func(k string) domain.Address {
		return domain.Address{Namespace: db, Dataset: "mixed", Key: domain.StringKey(k)}
	}
	doc := func(v string) domain.Document { return bsonDoc(t, bson.D{{Key: "v", Value: v}}) }

	// Existing records e1..e5.
	var seed []domain.Mutation
	for _, k := range []string{"e1", "e2", "e3", "e4", "e5"} {
		seed = append(seed, domain.Mutation{Kind: domain.MutationPut, Address: at(k), Document: doc("seed-" + k)})
	}
	res, err := svc.Write(ctx, seed, application.WaitUntilApplied)
	if err != nil {
		t.Fatal(err)
	}
	revs := map[string]domain.Revision{}
	for i, r := range res {
		if r.Status != application.StatusApplied {
			t.Fatalf("seed %d: %s %v", i, r.Status, r.Err)
		}
		revs[seed[i].Address.Key.StringValue()] = r.Revision
	}

	muts := []domain.Mutation{
		{Kind: domain.MutationPut, Mode: domain.PutCreate, Address: at("n1"), Document: doc("new")},                                                            // 0 applied
		{Kind: domain.MutationPut, Mode: domain.PutCreate, Address: at("e1"), Document: doc("collide")},                                                        // 1 collides
		{Kind: domain.MutationPut, Address: at("e2"), Document: doc("upserted")},                                                                               // 2 applied (existed)
		{Kind: domain.MutationPut, Address: at("e3"), Document: doc("stale"), ExpectedRevision: revs["e2"]},                                                    // 3 stale revision
		{Kind: domain.MutationPut, Address: at("e4"), Document: doc("cas"), ExpectedRevision: revs["e4"]},                                                      // 4 applied
		{Kind: domain.MutationPut, Mode: domain.PutReplace, Address: at("m1"), Document: doc("nope")},                                                          // 5 missing
		{Kind: domain.MutationPut, Mode: domain.PutCreate, Address: at("n1"), Document: doc("again")},                                                          // 6 collides with op 0
		{Kind: domain.MutationPut, Address: at("m2"), Document: doc("nope"), ExpectedRevision: revs["e1"]},                                                     // 7 missing
		{Kind: domain.MutationMerge, Address: at("e5"), Merge: domain.MergeIntent{Profile: "count", Intent: bsonDoc(t, bson.D{{Key: "by", Value: int64(3)}})}}, // 8 applied
		{Kind: domain.MutationPut, Address: at("j1"), Document: domain.Document{ContentType: domain.ContentTypeJSON, Data: []byte(`{}`)}},                      // 9 invalid
		{Kind: domain.MutationPut, Address: at("u1"), Document: doc("fresh upsert")},                                                                           // 10 applied (new)
		{Kind: domain.MutationMerge, Address: at("m3"), Merge: domain.MergeIntent{Profile: "count", Intent: bsonDoc(t, bson.D{{Key: "by", Value: int64(1)}})}}, // 11 creates
	}
	res, err = svc.Write(ctx, muts, application.WaitUntilApplied)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		status application.Status
		code   domain.Code
	}{
		{application.StatusApplied, 0},
		{application.StatusPreconditionFailed, domain.CodeAlreadyExists},
		{application.StatusApplied, 0},
		{application.StatusPreconditionFailed, domain.CodeRevisionMismatch},
		{application.StatusApplied, 0},
		{application.StatusNotFound, domain.CodeNotFound},
		{application.StatusPreconditionFailed, domain.CodeAlreadyExists},
		{application.StatusNotFound, domain.CodeNotFound},
		{application.StatusApplied, 0},
		{application.StatusFailed, domain.CodeInvalidArgument},
		{application.StatusApplied, 0},
		{application.StatusApplied, 0},
	}
	for i, w := range want {
		r := res[i]
		if r.Status != w.status {
			t.Errorf("op %d: status %s (%v), want %s", i, r.Status, r.Err, w.status)
			continue
		}
		if w.status == application.StatusApplied {
			if r.Err != nil || r.Revision.IsZero() {
				t.Errorf("op %d: applied without revision or with error %v", i, r.Err)
			}
		} else if r.Err == nil || r.Err.Code != w.code {
			t.Errorf("op %d: error %v, want %s", i, r.Err, w.code)
		}
	}

	reads, err := svc.Read(ctx, []domain.Address{at("n1"), at("m1"), at("e2"), at("m2"), at("e1"), at("e3"), at("e5"), at("m3"), at("j1")})
	if err != nil {
		t.Fatal(err)
	}
	wantDocs := []string{"new", "", "upserted", "", "seed-e1", "seed-e3", "seed-e5", "", ""}
	for i, w := range wantDocs {
		r := reads[i]
		switch {
		case i == 6 || i == 7: // merged records
			if r.Status != application.StatusFound {
				t.Fatalf("read %d: %s", i, r.Status)
			}
			n := bson.Raw(r.Record.Document.Data).Lookup("counter").Int64()
			if (i == 6 && n != 3) || (i == 7 && n != 1) {
				t.Errorf("read %d: counter %d", i, n)
			}
		case w == "":
			if r.Status != application.StatusNotFound {
				t.Errorf("read %d: %s, want not found", i, r.Status)
			}
		default:
			if r.Status != application.StatusFound || bson.Raw(r.Record.Document.Data).Lookup("v").StringValue() != w {
				t.Errorf("read %d: %s %v, want %q", i, r.Status, bson.Raw(r.Record.Document.Data), w)
			}
		}
	}
	if reads[0].Record.Revision != res[0].Revision {
		t.Error("read revision differs from the create's")
	}

	dres, err := svc.Delete(ctx, []domain.Mutation{
		{Kind: domain.MutationDelete, Address: at("e1"), ExpectedRevision: revs["e2"]}, // stale
		{Kind: domain.MutationDelete, Address: at("m1")},                               // absent
		{Kind: domain.MutationDelete, Address: at("e2")},                               // applied
		{Kind: domain.MutationDelete, Address: at("e3"), ExpectedRevision: revs["e3"]}, // applied
	}, application.WaitUntilApplied)
	if err != nil {
		t.Fatal(err)
	}
	if dres[0].Status != application.StatusPreconditionFailed || dres[1].Status != application.StatusNotFound ||
		dres[2].Status != application.StatusApplied || dres[3].Status != application.StatusApplied {
		t.Fatalf("deletes: %+v", dres)
	}
	// The raw driver sees exactly the expected records.
	var ids []string
	cur, err := c.Database(db).Collection("mixed").Find(ctx, bson.D{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for cur.Next(ctx) {
		ids = append(ids, cur.Current.Lookup("_id").StringValue())
	}
	if got := strings.Join(sorted(ids), ","); got != "e1,e4,e5,m3,n1,u1" {
		t.Fatalf("records left: %s", got)
	}
}

func sorted(s []string) []string {
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	return s
}

func TestServiceRejectsBadInput(t *testing.T) {
	srv := mongotest.Shared(t)
	c := client(t, srv.URI())
	db := freshDatabase(t, c)
	ctx := ctxT(t)
	s := newStore(t, c, mongodb.Options{Store: "primary"})
	// Application limits above MongoDB's, so that the adapter's own limit shows.
	svc := newService(t, s, func(cfg *application.Config) {
		cfg.Limits.MaxDocumentBytes = 24 << 20
		cfg.Limits.MaxRequestBytes = 64 << 20
	})
	at := func(ns, ds, k string) domain.Address {
		return domain.Address{Namespace: ns, Dataset: ds, Key: domain.StringKey(k)}
	}
	good := at(db, "things", "k1")
	put := func(a domain.Address, d domain.Document) domain.Mutation {
		return domain.Mutation{Kind: domain.MutationPut, Address: a, Document: d}
	}
	huge := bsonDoc(t, bson.D{{Key: "blob", Value: bson.Binary{Data: make([]byte, mongodb.MaxDocumentBytes)}}})
	cases := []struct {
		name string
		mut  domain.Mutation
		want []string
	}{
		{"wrong content type", put(good, domain.Document{ContentType: domain.ContentTypeJSON, Data: []byte(`{"a":1}`)}), []string{"application/bson", `"application/json"`, `store "primary"`}},
		{"malformed BSON", put(good, domain.Document{ContentType: domain.ContentTypeBSON, Data: []byte{0x10, 0, 0, 0, 0x02, 'a', 0}}), []string{"not valid BSON"}},
		{"hidden field", put(good, bsonDoc(t, bson.D{{Key: "a", Value: 1}, {Key: "__sink", Value: bson.D{{Key: "rev", Value: bson.NewObjectID()}}}})), []string{`"__sink"`}},
		{"_id mismatch", put(good, bsonDoc(t, bson.D{{Key: "_id", Value: "secret-k2"}})), []string{"_id", "another string value"}},
		{"_id type mismatch", put(good, bsonDoc(t, bson.D{{Key: "_id", Value: int64(1)}})), []string{"_id", "int64", "string"}},
		{"invalid database name", put(at("bad.name", "things", "k"), bsonDoc(t, bson.D{})), []string{`"bad.name"`, "database"}},
		{"invalid collection name", put(at(db, "system.things", "k"), bsonDoc(t, bson.D{})), []string{`"system.things"`, "collection"}},
		{"dollar collection name", put(at(db, "a$b", "k"), bsonDoc(t, bson.D{})), []string{`"a$b"`, "'$'"}},
		{"system database", put(at("local", "things", "k"), bsonDoc(t, bson.D{})), []string{`"local"`, "system database"}},
		{"oversized document", put(good, huge), []string{"16777216"}},
		{"merge into invalid name", domain.Mutation{Kind: domain.MutationMerge, Address: at("x y", "things", "k"),
			Merge: domain.MergeIntent{Profile: "count", Intent: bsonDoc(t, bson.D{{Key: "by", Value: int64(1)}})}}, []string{`"x y"`}},
		{"delete with invalid name", domain.Mutation{Kind: domain.MutationDelete, Address: at(db, "", "k")}, []string{"dataset", "empty"}},
	}
	for i, c := range cases {
		var res []application.WriteResult
		var err error
		if c.mut.Kind == domain.MutationDelete {
			res, err = svc.Delete(ctx, []domain.Mutation{c.mut}, application.WaitUntilApplied)
		} else {
			res, err = svc.Write(ctx, []domain.Mutation{c.mut}, application.WaitUntilApplied)
		}
		if err != nil {
			t.Fatalf("%s: request error %v", c.name, err)
		}
		r := res[0]
		if r.Status != application.StatusFailed || r.Err == nil || r.Err.Code != domain.CodeInvalidArgument || r.Err.Retryable {
			t.Errorf("%d %s: %s %v, want a failed, non-retryable INVALID_ARGUMENT", i, c.name, r.Status, r.Err)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(r.Err.Message, w) {
				t.Errorf("%s: %q does not mention %s", c.name, r.Err.Message, w)
			}
		}
		// Messages never quote the client's document.
		if strings.Contains(r.Err.Message, "secret") {
			t.Errorf("%s: %q quotes the document", c.name, r.Err.Message)
		}
	}
	// A merge whose result the store cannot hold fails the same way.
	res, err := svc.Write(ctx, []domain.Mutation{{Kind: domain.MutationMerge, Address: good,
		Merge: domain.MergeIntent{Profile: "count", Intent: bsonDoc(t, bson.D{{Key: "by", Value: int64(1)}})}},
	}, application.WaitUntilApplied)
	if err != nil || res[0].Status != application.StatusApplied {
		t.Fatalf("valid merge: %v %+v", err, res)
	}
	// Nothing but that merge was written: the raw driver sees one document.
	names, err := c.Database(db).ListCollectionNames(ctx, bson.D{})
	if err != nil {
		t.Fatal(err)
	}
	total := int64(0)
	for _, n := range names {
		k, err := c.Database(db).Collection(n).CountDocuments(ctx, bson.D{})
		if err != nil {
			t.Fatal(err)
		}
		total += k
	}
	if total != 1 || len(names) != 1 {
		t.Fatalf("collections %v hold %d documents, want only the merged one", names, total)
	}
	raw, err := c.Database(db).Collection("things").FindOne(ctx, bson.D{{Key: "_id", Value: "k1"}}).Raw()
	if err != nil || raw.Lookup("counter").Int64() != 1 || bytes.Contains(raw, []byte("k2")) {
		t.Fatalf("stored %v %v", raw, err)
	}
}

// TestLargeBatches writes and rewrites more records in one call than one
// bulk write carries (FerretDB v1 hangs on update commands that modify 100
// documents or more, so the adapter splits bulks).
func TestLargeBatches(t *testing.T) {
	srv := mongotest.Shared(t)
	c := client(t, srv.URI())
	db := freshDatabase(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s := newStore(t, c, mongodb.Options{})
	const n = 250
	ops := make([]ports.WriteOp, n)
	addrs := make([]domain.Address, n)
	for i := range ops {
		addrs[i] = domain.Address{Namespace: db, Dataset: "big", Key: domain.Int64Key(int64(i))}
		ops[i] = ports.WriteOp{Kind: ports.WritePut, Address: addrs[i], Document: bsonDoc(t, bson.D{{Key: "i", Value: int64(i)}})}
	}
	for round := 0; round < 2; round++ {
		for i, r := range s.Write(ctx, ops) {
			if r.Err != nil || r.Existed != (round == 1) {
				t.Fatalf("round %d op %d: existed=%v err=%v", round, i, r.Existed, r.Err)
			}
		}
	}
	for i, r := range s.Read(ctx, addrs) {
		if !r.Found || bson.Raw(r.Record.Document.Data).Lookup("i").Int64() != int64(i) {
			t.Fatalf("read %d: %+v", i, r)
		}
	}
	// Creates of existing records in one big call all collide.
	for i := range ops {
		ops[i].Condition = ports.Condition{Kind: ports.ConditionAbsent}
	}
	for i, r := range s.Write(ctx, ops) {
		if domain.CodeOf(r.Err) != domain.CodeAlreadyExists {
			t.Fatalf("create %d: %v", i, r.Err)
		}
	}
}

// TestBulkWithServerRejectedDocument puts a document the server may reject
// (FerretDB refuses nested field names with '.', MongoDB 5+ stores them) in
// the middle of bulk upserts and creates: that operation alone fails, with
// INVALID_ARGUMENT, and every other one is applied. On FerretDB this runs
// the recovery path for servers that stop an update bulk at the first error.
func TestBulkWithServerRejectedDocument(t *testing.T) {
	srv := mongotest.Shared(t)
	c := client(t, srv.URI())
	db := freshDatabase(t, c)
	ctx := ctxT(t)
	s := newStore(t, c, mongodb.Options{})
	for _, cond := range []ports.ConditionKind{ports.ConditionNone, ports.ConditionAbsent} {
		var ops []ports.WriteOp
		var addrs []domain.Address
		for i := 0; i < 6; i++ {
			a := domain.Address{Namespace: db, Dataset: fmt.Sprintf("c%d", cond), Key: domain.Int64Key(int64(i))}
			d := bson.D{{Key: "i", Value: int64(i)}}
			if i == 2 {
				d = bson.D{{Key: "i", Value: int64(i)}, {Key: "x", Value: bson.D{{Key: "a.b", Value: 1}}}}
			}
			addrs = append(addrs, a)
			ops = append(ops, ports.WriteOp{Kind: ports.WritePut, Address: a, Document: bsonDoc(t, d), Condition: ports.Condition{Kind: cond}})
		}
		// Records 4 and 5 exist already, so their upserts replace them.
		for _, r := range s.Write(ctx, ops[4:]) {
			if r.Err != nil {
				t.Fatal(r.Err)
			}
		}
		res := s.Write(ctx, ops)
		reads := s.Read(ctx, addrs)
		for i, r := range res {
			switch {
			case i == 2 && r.Err != nil:
				if domain.CodeOf(r.Err) != domain.CodeInvalidArgument || reads[i].Found {
					t.Errorf("condition %d op %d: %v (found %v), want INVALID_ARGUMENT and nothing stored", cond, i, r.Err, reads[i].Found)
				}
			case i >= 4 && cond == ports.ConditionAbsent:
				if domain.CodeOf(r.Err) != domain.CodeAlreadyExists {
					t.Errorf("condition %d op %d: %v, want ALREADY_EXISTS", cond, i, r.Err)
				}
			case r.Err != nil:
				t.Errorf("condition %d op %d: %v", cond, i, r.Err)
			default:
				// Upserts that ran before the failing one in a FerretDB bulk
				// cannot tell whether they created their record.
				unknownExisted := srv.IsFerretDB() && cond == ports.ConditionNone && i < 2
				if (r.Existed != (i >= 4) && !unknownExisted) || !reads[i].Found || reads[i].Record.Revision != r.Revision {
					t.Errorf("condition %d op %d: existed=%v, read %+v", cond, i, r.Existed, reads[i])
				}
			}
		}
		t.Logf("condition %d: the server answered %v for the document with a dotted nested field name", cond, res[2].Err)
	}
	// The same Store now reports Existed exactly in the same situation.
	var ops []ports.WriteOp
	for i := 0; i < 4; i++ {
		d := bson.D{{Key: "i", Value: int64(i)}}
		if i == 1 {
			d = append(d, bson.E{Key: "x", Value: bson.D{{Key: "a.b", Value: 1}}})
		}
		ops = append(ops, ports.WriteOp{Kind: ports.WritePut, Address: domain.Address{Namespace: db, Dataset: "again", Key: domain.Int64Key(int64(i))}, Document: bsonDoc(t, d)})
	}
	if r := s.Write(ctx, ops[3:]); r[0].Err != nil {
		t.Fatal(r[0].Err)
	}
	for i, r := range s.Write(ctx, ops) {
		if i != 1 && (r.Err != nil || r.Existed != (i == 3)) {
			t.Errorf("second call op %d: existed=%v err=%v", i, r.Existed, r.Err)
		}
	}
}
