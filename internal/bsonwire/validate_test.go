package bsonwire

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"
)

// nestedEmpty returns a document of depth levels of {"": {...}} around an
// empty document, built without recursion.
func nestedEmpty(depth int) []byte {
	// Each level is: int32 length, type 0x03, "" (one NUL), inner, NUL.
	n := 5 + 7*depth
	b := make([]byte, n)
	// Level i starts at 6*i and ends before the i trailing NULs of the
	// levels around it.
	for i := 0; i < depth; i++ {
		start := 6 * i
		binary.LittleEndian.PutUint32(b[start:], uint32(n-start-i))
		b[start+4] = byte(bsoncore.TypeEmbeddedDocument)
	}
	inner := 6 * depth
	binary.LittleEndian.PutUint32(b[inner:], 5)
	return b
}

func TestNestingIsBounded(t *testing.T) {
	if err := Validate(nestedEmpty(MaxNesting)); err != nil {
		t.Fatalf("%d levels: %v", MaxNesting, err)
	}
	err := Validate(nestedEmpty(MaxNesting + 1))
	if !errors.Is(err, ErrTooDeep) {
		t.Fatalf("%d levels: %v, want ErrTooDeep", MaxNesting+1, err)
	}
	// A 4 MiB document of nothing but nested empty documents is rejected
	// after at most MaxNesting+1 levels, at once.
	levels := (4<<20 - 5) / 7
	start := time.Now()
	err = Validate(nestedEmpty(levels))
	if !errors.Is(err, ErrTooDeep) {
		t.Fatalf("%d levels: %v, want ErrTooDeep", levels, err)
	}
	if len(err.Error()) > 200 {
		t.Fatalf("the message grows with the depth: %d bytes", len(err.Error()))
	}
	t.Logf("%d levels rejected in %s: %v", levels, time.Since(start), err)
}

func TestNestedEmptyIsWellFormed(t *testing.T) {
	for _, d := range []int{0, 1, 5} {
		b := nestedEmpty(d)
		if err := bsoncore.Document(b).Validate(); err != nil {
			t.Fatalf("depth %d: %v", d, err)
		}
	}
}

// Errors name positions, never the document's field names or values.
func TestErrorsDoNotQuoteTheDocument(t *testing.T) {
	secret := "s3cr3t-field-\xff"
	inner := bsoncore.NewDocumentBuilder().
		AppendString("ok", "fine").
		AppendString(secret, "value-"+secret).
		Build()
	// Break the inner string's NUL terminator.
	inner[len(inner)-2] = 'x'
	doc := bsoncore.NewDocumentBuilder().
		AppendInt32("first", 1).
		AppendDocument("outer-"+secret, inner).
		Build()
	err := Validate(doc)
	if err == nil {
		t.Fatal("a broken string passed")
	}
	msg := err.Error()
	if strings.Contains(msg, "s3cr3t") || strings.Contains(msg, "fine") || !utf8.ValidString(msg) {
		t.Fatalf("message quotes the document or is not UTF-8: %q", msg)
	}
	if !strings.Contains(msg, "element 1.1") {
		t.Fatalf("message does not give the path 1.1: %q", msg)
	}
}

func TestPathIsShortened(t *testing.T) {
	// 20 levels, the innermost document truncated.
	b := nestedEmpty(20)
	inner := 6 * 20
	binary.LittleEndian.PutUint32(b[inner:], 4)
	err := Validate(b)
	if err == nil {
		t.Fatal("a broken document passed")
	}
	if !strings.Contains(err.Error(), "(20 levels)") || strings.Count(err.Error(), ".") > maxPathElements {
		t.Fatalf("path not shortened: %q", err)
	}
}
