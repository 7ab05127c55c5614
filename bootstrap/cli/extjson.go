package cli

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// maxRenderDepth bounds the nesting the renderer walks (MongoDB itself
// refuses documents nested deeper than 100 levels).
const maxRenderDepth = 200

// bsonToJSON renders a BSON document as Extended JSON that reads back as
// the same BSON: relaxed Extended JSON (plain numbers, ISO dates), except
// for the values whose relaxed form another JSON reader would take for a
// different type. An int64 prints as {"$numberLong":"7"} (relaxed 7 reads
// back as an int32) and a double without a fractional part as
// {"$numberDouble":"1.0"} (JSON tools such as jq print 1.0 as 1, an int32).
// So int32 values and doubles with a fraction stay plain numbers, and
// `sink put --bson` of the printed document, even after jq, stores the same
// types. canonical renders every value in canonical Extended JSON.
func bsonToJSON(b []byte, canonical bool) (json.RawMessage, error) {
	if err := bson.Raw(b).Validate(); err != nil {
		return nil, fmt.Errorf("cannot render the BSON document as JSON: %w", err)
	}
	var v any = bson.Raw(b)
	if !canonical {
		d, err := typedDocument(bson.Raw(b), 0)
		if err != nil {
			return nil, err
		}
		v = d
	}
	out, err := bson.MarshalExtJSON(v, canonical, false)
	if err != nil {
		return nil, fmt.Errorf("cannot render the BSON document as JSON: %w", err)
	}
	return out, nil
}

// typedDocument copies a document, replacing the values whose relaxed
// Extended JSON form loses their type by their canonical form, spelled as
// a sub-document ({"$numberLong": "7"}), which relaxed output prints as is.
// Every other value stays the original raw value.
func typedDocument(doc bson.Raw, depth int) (bson.D, error) {
	elems, err := doc.Elements()
	if err != nil {
		return nil, fmt.Errorf("cannot render the BSON document as JSON: %w", err)
	}
	d := make(bson.D, 0, len(elems))
	for _, e := range elems {
		v, err := typedValue(e.Value(), depth)
		if err != nil {
			return nil, err
		}
		d = append(d, bson.E{Key: e.Key(), Value: v})
	}
	return d, nil
}

func typedValue(v bson.RawValue, depth int) (any, error) {
	switch v.Type {
	case bson.TypeInt64:
		return bson.D{{Key: "$numberLong", Value: strconv.FormatInt(v.Int64(), 10)}}, nil
	case bson.TypeDouble:
		f := v.Double()
		if math.IsInf(f, 0) || math.IsNaN(f) || f != math.Trunc(f) {
			return v, nil // relaxed prints a fraction, or already {"$numberDouble": "NaN"}
		}
		s := strconv.FormatFloat(f, 'g', -1, 64)
		if !strings.ContainsAny(s, ".e") {
			s += ".0"
		}
		return bson.D{{Key: "$numberDouble", Value: s}}, nil
	case bson.TypeEmbeddedDocument, bson.TypeArray:
		if depth >= maxRenderDepth {
			return nil, fmt.Errorf("cannot render the BSON document as JSON: nested deeper than %d levels", maxRenderDepth)
		}
		if v.Type == bson.TypeEmbeddedDocument {
			return typedDocument(v.Document(), depth+1)
		}
		vals, err := v.Array().Values()
		if err != nil {
			return nil, fmt.Errorf("cannot render the BSON document as JSON: %w", err)
		}
		a := make(bson.A, 0, len(vals))
		for _, e := range vals {
			x, err := typedValue(e, depth+1)
			if err != nil {
				return nil, err
			}
			a = append(a, x)
		}
		return a, nil
	default:
		return v, nil
	}
}

// checkExtJSONNumbers finds the Extended JSON numbers of body whose value
// is not what their wrapper says ({"$numberLong": "x"}, {"$numberInt": 7})
// and reports the first with its JSON Pointer, the value as given and what
// it must be; the driver's own message ("strconv.ParseInt: parsing ...")
// names neither. body is valid JSON (build checked it).
func checkExtJSONNumbers(body []byte) error {
	var v any
	d := json.NewDecoder(strings.NewReader(string(body)))
	d.UseNumber()
	if err := d.Decode(&v); err != nil {
		return nil // (the conversion reports it)
	}
	return walkExtJSON(v, "")
}

func walkExtJSON(v any, path string) error {
	switch v := v.(type) {
	case map[string]any:
		for _, w := range [...]struct {
			key  string
			bits int
		}{{"$numberLong", 64}, {"$numberInt", 32}} {
			x, ok := v[w.key]
			if !ok {
				continue
			}
			s, isString := x.(string)
			if !isString {
				return fmt.Errorf("at %s: %s takes a string of decimal digits, as in {%q: \"7\"}; the input has %s", pointer(path), w.key, w.key, jsonText(x))
			}
			if _, err := strconv.ParseInt(s, 10, w.bits); err != nil {
				return fmt.Errorf("at %s: %s %q is not a %d-bit integer (a string of decimal digits, e.g. \"7\")", pointer(path), w.key, s, w.bits)
			}
			return nil
		}
		for _, k := range slices.Sorted(maps.Keys(v)) {
			if err := walkExtJSON(v[k], path+"/"+strings.NewReplacer("~", "~0", "/", "~1").Replace(k)); err != nil {
				return err
			}
		}
	case []any:
		for i, x := range v {
			if err := walkExtJSON(x, path+"/"+strconv.Itoa(i)); err != nil {
				return err
			}
		}
	}
	return nil
}

// pointer renders a JSON Pointer for messages ("/" for the whole document).
func pointer(path string) string {
	if path == "" {
		return "/ (the top level)"
	}
	return path
}

func jsonText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}
