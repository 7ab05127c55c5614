package mongodb

import (
	"reflect"
	"testing"
	"unsafe"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readconcern"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"
)

// field reads an unexported field of the driver's Collection: the driver
// has no getters for the options a collection was made with.
func field[T any](c *mongo.Collection, name string) T {
	v := reflect.ValueOf(c).Elem().FieldByName(name)
	return *(*T)(unsafe.Pointer(v.UnsafeAddr()))
}

// Every collection the Store reads reads from the primary with read concern
// "local", whatever readPreference and readConcernLevel the URI sets: reads
// that feed a merge must see the newest revision (docs/mongodb.md).
func TestReadsUsePrimaryAndLocalWhateverTheURI(t *testing.T) {
	for _, uri := range []string{
		"mongodb://127.0.0.1:1/?readPreference=secondary&readConcernLevel=majority",
		"mongodb://127.0.0.1:1/?readPreference=nearest&readConcernLevel=available",
		"mongodb://127.0.0.1:1/",
	} {
		c, err := mongo.Connect(options.Client().ApplyURI(uri))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Disconnect(t.Context()) })
		s, err := New(c, Options{})
		if err != nil {
			t.Fatal(err)
		}
		coll := s.collection(target{"shop", "orders"})
		rp := field[*readpref.ReadPref](coll, "readPreference")
		rc := field[*readconcern.ReadConcern](coll, "readConcern")
		if rp == nil || rp.Mode() != readpref.PrimaryMode {
			t.Errorf("%s: read preference %v, want primary", uri, rp)
		}
		if rc == nil || rc.Level != "local" {
			t.Errorf("%s: read concern %+v, want local", uri, rc)
		}
	}
}
