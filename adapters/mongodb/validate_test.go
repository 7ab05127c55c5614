package mongodb_test

import (
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/sink-io/sink/adapters/mongodb"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

// offlineClient is a client that is never used for I/O (Validate does none).
func offlineClient(t *testing.T) *mongo.Client {
	c, err := mongo.Connect(options.Client().ApplyURI("mongodb://127.0.0.1:1/?serverSelectionTimeoutMS=100"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Disconnect(t.Context()) })
	return c
}

func addr(ns, ds string, k domain.Key) domain.Address {
	return domain.Address{Store: "primary", Namespace: ns, Dataset: ds, Key: k}
}

func TestValidate(t *testing.T) {
	s := newStore(t, offlineClient(t), mongodb.Options{Store: "main-db"})
	oid := bson.NewObjectID()
	a := addr("shop", "orders", domain.StringKey("o1"))
	putOf := func(a domain.Address, d domain.Document) ports.WriteOp {
		return ports.WriteOp{Kind: ports.WritePut, Address: a, Document: d}
	}
	valid := []struct {
		name string
		op   ports.WriteOp
	}{
		{"document without _id", putOf(a, bsonDoc(t, bson.D{{Key: "x", Value: 1}}))},
		{"empty document", putOf(a, bsonDoc(t, bson.D{}))},
		{"matching string _id", putOf(a, bsonDoc(t, bson.D{{Key: "_id", Value: "o1"}}))},
		{"matching int64 _id", putOf(addr("shop", "orders", domain.Int64Key(-5)), bsonDoc(t, bson.D{{Key: "_id", Value: int64(-5)}}))},
		// The same key to MongoDB: merges of legacy records carry them.
		{"int32 _id of an int64 key", putOf(addr("shop", "orders", domain.Int64Key(-5)), bsonDoc(t, bson.D{{Key: "_id", Value: int32(-5)}}))},
		{"integral double _id of an int64 key", putOf(addr("shop", "orders", domain.Int64Key(42)), bsonDoc(t, bson.D{{Key: "_id", Value: 42.0}}))},
		{"matching binary _id", putOf(addr("shop", "orders", domain.BytesKey([]byte{0, 1})), bsonDoc(t, bson.D{{Key: "_id", Value: bson.Binary{Data: []byte{0, 1}}}}))},
		{"matching ObjectID _id", putOf(addr("shop", "orders", domain.ObjectIDKey(oid[:])), bsonDoc(t, bson.D{{Key: "_id", Value: oid}}))},
		{"hidden name nested", putOf(a, bsonDoc(t, bson.D{{Key: "x", Value: bson.D{{Key: "__sink", Value: 1}}}}))},
		{"delete", ports.WriteOp{Kind: ports.WriteDelete, Address: a}},
		{"long but legal names", putOf(addr(strings.Repeat("d", 63), strings.Repeat("c", 191), domain.StringKey("k")), bsonDoc(t, bson.D{}))},
		{"unicode collection", putOf(addr("shop", "Bestellungen ü.2024", domain.StringKey("k")), bsonDoc(t, bson.D{}))},
		{"content type with parameters", putOf(a, domain.Document{ContentType: "Application/BSON; charset=binary", Data: mustMarshal(t, bson.D{})})},
		{"database named like a system one", putOf(addr("admins", "orders", domain.StringKey("k")), bsonDoc(t, bson.D{}))},
	}
	for _, c := range valid {
		if err := s.Validate(c.op); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
	}

	big := make([]byte, mongodb.MaxDocumentBytes)
	invalid := []struct {
		name string
		op   ports.WriteOp
		want []string
	}{
		{"json content type", putOf(a, domain.Document{ContentType: domain.ContentTypeJSON, Data: []byte(`{}`)}), []string{`"main-db"`, "application/bson", `"application/json"`}},
		{"truncated BSON", putOf(a, domain.Document{ContentType: domain.ContentTypeBSON, Data: []byte{9, 0, 0}}), []string{"not valid BSON"}},
		{"JSON bytes as BSON", putOf(a, domain.Document{ContentType: domain.ContentTypeBSON, Data: []byte(`{"a":1}`)}), []string{"not valid BSON"}},
		{"hidden field", putOf(a, bsonDoc(t, bson.D{{Key: "__sink", Value: bson.D{{Key: "rev", Value: oid}}}})), []string{`"__sink"`, "reserves"}},
		{"_id value mismatch", putOf(a, bsonDoc(t, bson.D{{Key: "_id", Value: "o2"}})), []string{"_id", "another string value", "(string)"}},
		{"_id type mismatch", putOf(addr("shop", "orders", domain.Int64Key(5)), bsonDoc(t, bson.D{{Key: "_id", Value: "5"}})), []string{"_id", "type string", "int64"}},
		{"int32 _id of another value", putOf(addr("shop", "orders", domain.Int64Key(5)), bsonDoc(t, bson.D{{Key: "_id", Value: int32(6)}})), []string{"_id", "int32", "int64"}},
		{"fractional double _id", putOf(addr("shop", "orders", domain.Int64Key(5)), bsonDoc(t, bson.D{{Key: "_id", Value: 5.5}})), []string{"_id", "double", "int64"}},
		{"int32 _id of a string key", putOf(a, bsonDoc(t, bson.D{{Key: "_id", Value: int32(5)}})), []string{"_id", "int32", "string"}},
		{"_id string vs bytes", putOf(addr("shop", "orders", domain.BytesKey([]byte("o1"))), bsonDoc(t, bson.D{{Key: "_id", Value: "o1"}})), []string{"_id", "string", "binary"}},
		{"dollar field", putOf(a, bsonDoc(t, bson.D{{Key: "a", Value: 1}, {Key: "$set", Value: 1}})), []string{"field 1", "'$'"}},
		{"duplicate field", putOf(a, domain.Document{ContentType: domain.ContentTypeBSON, Data: dupField(t)}), []string{"fields 0 and 1", "same name"}},
		{"json content type with parameters", putOf(a, domain.Document{ContentType: "application/json; charset=utf-8", Data: []byte(`{}`)}), []string{"application/bson"}},
		{"system database admin", putOf(addr("admin", "orders", domain.StringKey("k")), bsonDoc(t, bson.D{})), []string{`"admin"`, "system database", "SINK_MONGODB_BINDINGS"}},
		{"system database config", putOf(addr("config", "orders", domain.StringKey("k")), bsonDoc(t, bson.D{})), []string{`"config"`, "system database"}},
		{"system database local", putOf(addr("local", "orders", domain.StringKey("k")), bsonDoc(t, bson.D{})), []string{`"local"`, "system database"}},
		{"system database in another case", putOf(addr("Admin", "orders", domain.StringKey("k")), bsonDoc(t, bson.D{})), []string{`"Admin"`, `system database "admin"`}},
		{"oversized", putOf(a, bsonDoc(t, bson.D{{Key: "b", Value: bson.Binary{Data: big[:mongodb.MaxDocumentBytes-40]}}})), []string{"16777216"}},
		{"empty namespace", putOf(addr("", "orders", domain.StringKey("k")), bsonDoc(t, bson.D{})), []string{"database name must not be empty"}},
		{"dot in namespace", putOf(addr("a.b", "orders", domain.StringKey("k")), bsonDoc(t, bson.D{})), []string{`"a.b"`, "'.'"}},
		{"dollar in namespace", putOf(addr("a$b", "orders", domain.StringKey("k")), bsonDoc(t, bson.D{})), []string{"'$'"}},
		{"space in namespace", putOf(addr("a b", "orders", domain.StringKey("k")), bsonDoc(t, bson.D{})), []string{"' '"}},
		{"slash in namespace", putOf(addr("a/b", "orders", domain.StringKey("k")), bsonDoc(t, bson.D{})), []string{"'/'"}},
		{"long namespace", putOf(addr(strings.Repeat("d", 64), "orders", domain.StringKey("k")), bsonDoc(t, bson.D{})), []string{"64 bytes", "63"}},
		{"system collection", putOf(addr("shop", "system.users", domain.StringKey("k")), bsonDoc(t, bson.D{})), []string{`"system.users"`, "system."}},
		{"dollar collection", putOf(addr("shop", "or$ders", domain.StringKey("k")), bsonDoc(t, bson.D{})), []string{"'$'"}},
		{"NUL collection", putOf(addr("shop", "or\x00ders", domain.StringKey("k")), bsonDoc(t, bson.D{})), []string{"NUL"}},
		{"long namespace+collection", putOf(addr(strings.Repeat("d", 63), strings.Repeat("c", 192), domain.StringKey("k")), bsonDoc(t, bson.D{})), []string{"256 bytes", "255"}},
		{"short object id", ports.WriteOp{Kind: ports.WriteDelete, Address: addr("shop", "orders", domain.ObjectIDKey([]byte{1, 2}))}, []string{"12 bytes"}},
	}
	for _, c := range invalid {
		err := s.Validate(c.op)
		if domain.CodeOf(err) != domain.CodeInvalidArgument {
			t.Errorf("%s: error %v (%s), want INVALID_ARGUMENT", c.name, err, domain.CodeOf(err))
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not mention %s", c.name, err, w)
			}
		}
		// Write rejects the same operation, without I/O.
		if r := s.Write(t.Context(), []ports.WriteOp{c.op})[0]; domain.CodeOf(r.Err) != domain.CodeInvalidArgument {
			t.Errorf("%s: Write error %v, want INVALID_ARGUMENT", c.name, r.Err)
		}
	}
	// The largest document MongoDB can hold with Sink's additions, a full
	// applied-mark ring included, passes; one byte more does not. (The
	// document {b: binary} has 13 bytes around the binary, the _id "o1" 12.)
	largest := mongodb.MaxDocumentBytes - 13 - 12 - s.ReservedBytes()
	fits := bsonDoc(t, bson.D{{Key: "b", Value: bson.Binary{Data: big[:largest]}}})
	if err := s.Validate(putOf(a, fits)); err != nil {
		t.Fatalf("the largest document: %v", err)
	}
	over := bsonDoc(t, bson.D{{Key: "b", Value: bson.Binary{Data: big[:largest+1]}}})
	if err := s.Validate(putOf(a, over)); domain.CodeOf(err) != domain.CodeInvalidArgument {
		t.Fatalf("one byte over the largest document: %v", err)
	}
	// The reserve covers the configured ring: 32 IDs by default, more
	// with a larger ring, which then refuses the same document.
	if r := s.ReservedBytes(); r < domain.DefaultAppliedRing*domain.MaxMutationIDBytes || r > 2*domain.DefaultAppliedRing*domain.MaxMutationIDBytes {
		t.Fatalf("reserved %d bytes for a ring of %d", r, domain.DefaultAppliedRing)
	}
	wide := newStore(t, offlineClient(t), mongodb.Options{MarkRing: domain.MaxAppliedRing})
	if wide.ReservedBytes() < domain.MaxAppliedRing*domain.MaxMutationIDBytes {
		t.Fatalf("reserved %d bytes for a ring of %d", wide.ReservedBytes(), domain.MaxAppliedRing)
	}
	if err := wide.Validate(putOf(a, fits)); domain.CodeOf(err) != domain.CodeInvalidArgument {
		t.Fatalf("a store with a larger ring accepted a document without room for it: %v", err)
	}
	if _, err := mongodb.New(offlineClient(t), mongodb.Options{MarkRing: domain.MaxAppliedRing + 1}); err == nil {
		t.Fatal("a ring above domain.MaxAppliedRing was accepted")
	}
	// Mark updates beyond the reserved room are refused.
	for name, m := range map[string]*ports.MarkUpdate{
		"long mutation ID":  {IDs: []string{strings.Repeat("i", domain.MaxMutationIDBytes+1)}, Keep: 4},
		"empty mutation ID": {IDs: []string{""}, Keep: 4},
		"no mutation ID":    {Keep: 4},
		"long log identity": {IDs: []string{"m"}, Position: domain.SourcePosition{Log: strings.Repeat("l", domain.MaxLogBytes+1)}, Keep: 4},
	} {
		op := putOf(a, bsonDoc(t, bson.D{}))
		op.Mark = m
		if err := s.Validate(op); domain.CodeOf(err) != domain.CodeInvalidArgument {
			t.Errorf("%s: Validate %v, want INVALID_ARGUMENT", name, err)
		}
		if r := s.Write(t.Context(), []ports.WriteOp{op})[0]; domain.CodeOf(r.Err) != domain.CodeInvalidArgument {
			t.Errorf("%s: Write %v, want INVALID_ARGUMENT", name, r.Err)
		}
	}
	longest := putOf(a, bsonDoc(t, bson.D{}))
	longest.Mark = &ports.MarkUpdate{IDs: []string{strings.Repeat("i", domain.MaxMutationIDBytes)}, Position: domain.SourcePosition{Log: strings.Repeat("l", domain.MaxLogBytes)}, Keep: 4}
	if err := s.Validate(longest); err != nil {
		t.Fatalf("the longest mutation ID and log identity: %v", err)
	}
	// Reads validate names too.
	r := s.Read(t.Context(), []domain.Address{addr("a.b", "c", domain.StringKey("k"))})[0]
	if domain.CodeOf(r.Err) != domain.CodeInvalidArgument {
		t.Fatalf("read with an invalid namespace: %v", r.Err)
	}
}

func dupField(t *testing.T) []byte {
	one := mustMarshal(t, bson.D{{Key: "x", Value: int32(1)}})
	body := one[4 : len(one)-1]
	out := append([]byte{0, 0, 0, 0}, body...)
	out = append(out, body...)
	out = append(out, 0)
	out[0] = byte(len(out))
	return out
}

func TestCustomHiddenField(t *testing.T) {
	s := newStore(t, offlineClient(t), mongodb.Options{HiddenField: "_meta"})
	a := addr("shop", "orders", domain.StringKey("k"))
	err := s.Validate(ports.WriteOp{Kind: ports.WritePut, Address: a, Document: bsonDoc(t, bson.D{{Key: "_meta", Value: 1}})})
	if domain.CodeOf(err) != domain.CodeInvalidArgument || !strings.Contains(err.Error(), `"_meta"`) {
		t.Fatalf("custom hidden field: %v", err)
	}
	if err := s.Validate(ports.WriteOp{Kind: ports.WritePut, Address: a, Document: bsonDoc(t, bson.D{{Key: "__sink", Value: 1}})}); err != nil {
		t.Fatalf("default name with a custom hidden field: %v", err)
	}
	for _, bad := range []string{"_id", "a.b", "$x"} {
		if _, err := mongodb.New(offlineClient(t), mongodb.Options{HiddenField: bad}); err == nil {
			t.Errorf("hidden field %q accepted", bad)
		}
	}
}

func TestParseBindings(t *testing.T) {
	bs, err := mongodb.ParseBindings(`[{"namespace":"shop","dataset":"orders","database":"legacy","collection":"Orders"},
		{"namespace":"shop","dataset":"customers","database":"crm","collection":"people"}]`)
	if err != nil || len(bs) != 2 || bs[1] != (mongodb.Binding{Namespace: "shop", Dataset: "customers", Database: "crm", Collection: "people"}) {
		t.Fatalf("valid bindings: %v %+v", err, bs)
	}
	if bs, err := mongodb.ParseBindings("  "); err != nil || bs != nil {
		t.Fatalf("empty bindings: %v %v", bs, err)
	}
	bad := map[string][]string{
		`{"namespace":"a"}`: {"JSON array"},
		`[{"namespace":`:    {"JSON array"},
		`[{"namespace":"a","dataset":"b","database":"c","collection":"d"},{"namespace":"a","dataset":"b2","database":"c"}]`:                 {"entry 1", "collection"},
		`[{"namespace":"a","dataset":"b","database":"","collection":"d"}]`:                                                                  {"entry 0", "database"},
		`[{"namespace":"a","dataset":"b","database":"c","collection":"d","colection":"x"}]`:                                                 {"entry 0", "colection"},
		`[{"namespace":"a","dataset":"b","database":"c","collection":"d"},{"namespace":"a","dataset":"b","database":"e","collection":"f"}]`: {"entry 1", "entry 0", "already bound"},
		`[{"namespace":"a","dataset":"b","database":"c","collection":"d"},{"namespace":"x","dataset":"y","database":"c","collection":"d"}]`: {"entry 1", "entry 0", "target"},
		`[{"namespace":"a","dataset":"b","database":"c.d","collection":"d"}]`:                                                               {"entry 0", `"c.d"`},
		`[{"namespace":"a","dataset":"b","database":"c","collection":"system.d"}]`:                                                          {"entry 0", "system."},
		`[1]`: {"entry 0"},
	}
	for in, want := range bad {
		_, err := mongodb.ParseBindings(in)
		if err == nil {
			t.Errorf("%s: accepted", in)
			continue
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not mention %q", in, err, w)
			}
		}
	}
}

func TestBindingsMapAndReserveTargets(t *testing.T) {
	bs, err := mongodb.ParseBindings(`[{"namespace":"shop","dataset":"orders","database":"legacy","collection":"Orders"}]`)
	if err != nil {
		t.Fatal(err)
	}
	s := newStore(t, offlineClient(t), mongodb.Options{Bindings: bs})
	del := func(ns, ds string) error {
		return s.Validate(ports.WriteOp{Kind: ports.WriteDelete, Address: addr(ns, ds, domain.StringKey("k"))})
	}
	if err := del("shop", "orders"); err != nil {
		t.Fatalf("bound dataset: %v", err)
	}
	// The bound collection is reachable under its binding only.
	err = del("legacy", "Orders")
	if domain.CodeOf(err) != domain.CodeInvalidArgument || !strings.Contains(err.Error(), `namespace "shop" dataset "orders"`) {
		t.Fatalf("direct name of a bound collection: %v", err)
	}
	if err := del("shop", "other"); err != nil {
		t.Fatalf("unbound dataset: %v", err)
	}
	// A binding may map names MongoDB could not hold to legal ones.
	bs, err = mongodb.ParseBindings(`[{"namespace":"my.shop","dataset":"$orders","database":"shop","collection":"orders"}]`)
	if err != nil {
		t.Fatal(err)
	}
	s = newStore(t, offlineClient(t), mongodb.Options{Bindings: bs})
	if err := s.Validate(ports.WriteOp{Kind: ports.WriteDelete, Address: addr("my.shop", "$orders", domain.StringKey("k"))}); err != nil {
		t.Fatalf("binding of illegal names: %v", err)
	}
	// A system database is used only when a binding names it; its other
	// collections stay unreachable.
	bs, err = mongodb.ParseBindings(`[{"namespace":"ops","dataset":"startup","database":"local","collection":"startup_log"}]`)
	if err != nil {
		t.Fatal(err)
	}
	s = newStore(t, offlineClient(t), mongodb.Options{Bindings: bs})
	if err := s.Validate(ports.WriteOp{Kind: ports.WriteDelete, Address: addr("ops", "startup", domain.StringKey("k"))}); err != nil {
		t.Fatalf("explicit binding to a system database: %v", err)
	}
	if err := s.Validate(ports.WriteOp{Kind: ports.WriteDelete, Address: addr("local", "oplog.rs", domain.StringKey("k"))}); domain.CodeOf(err) != domain.CodeInvalidArgument {
		t.Fatalf("unbound collection of a system database: %v", err)
	}
	if _, err := mongodb.New(offlineClient(t), mongodb.Options{Bindings: []mongodb.Binding{{Namespace: "a"}}}); err == nil {
		t.Fatal("New accepted an incomplete binding")
	}
}

// FuzzParseBindings: no input makes the parser panic, and accepted bindings
// are complete and bind no logical pair or target twice.
func FuzzParseBindings(f *testing.F) {
	f.Add(`[{"namespace":"shop","dataset":"orders","database":"legacy","collection":"Orders"}]`)
	f.Add(`[{"namespace":"a","dataset":"b","database":"c","collection":"d"},{"namespace":"a","dataset":"b","database":"e","collection":"f"}]`)
	f.Add(`[]`)
	f.Add(`{`)
	f.Fuzz(func(t *testing.T, s string) {
		bs, err := mongodb.ParseBindings(s)
		if err != nil {
			return
		}
		logical, target := map[[2]string]bool{}, map[[2]string]bool{}
		for _, b := range bs {
			if b.Namespace == "" || b.Dataset == "" || b.Database == "" || b.Collection == "" {
				t.Fatalf("accepted an incomplete binding %+v", b)
			}
			l, g := [2]string{b.Namespace, b.Dataset}, [2]string{b.Database, b.Collection}
			if logical[l] || target[g] {
				t.Fatalf("accepted a duplicate binding %+v", b)
			}
			logical[l], target[g] = true, true
		}
	})
}
