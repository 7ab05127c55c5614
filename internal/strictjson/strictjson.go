// Package strictjson parses settings that hold JSON arrays of objects,
// refusing fields the objects do not have (a misspelt field is a mistake,
// not something to ignore).
package strictjson

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// Array parses s, a JSON array of objects of type T, for the setting
// named setting; shape describes an entry's fields in the error for a value
// that is no such array. An empty (or blank) s is no entries. Errors name
// the offending entry by its index.
func Array[T any](s, setting, shape string) ([]T, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var raw []json.RawMessage
	if err := json.Unmarshal([]byte(s), &raw); err != nil {
		return nil, fmt.Errorf("cannot parse %s: it must be a JSON array of %s objects: %w", setting, shape, err)
	}
	out := make([]T, 0, len(raw))
	for i, r := range raw {
		dec := json.NewDecoder(bytes.NewReader(r))
		dec.DisallowUnknownFields()
		var v T
		if err := dec.Decode(&v); err != nil {
			return nil, fmt.Errorf("cannot parse %s entry %d: %w", setting, i, err)
		}
		out = append(out, v)
	}
	return out, nil
}
