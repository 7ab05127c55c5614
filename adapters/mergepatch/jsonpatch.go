// Package mergepatch provides the built-in "merge-patch" merge profile:
// RFC 7396 JSON Merge Patch, applied to application/json documents (and to
// application/bson documents with the same semantics).
package mergepatch

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// object is a JSON object that keeps its member order.
type object = ordered[json.RawMessage]

func isObject(raw []byte) bool {
	raw = bytes.TrimLeft(raw, " \t\r\n")
	return len(raw) > 0 && raw[0] == '{'
}

func isNull(raw []byte) bool { return string(bytes.TrimSpace(raw)) == "null" }

// parseObject parses a JSON object keeping member order; a repeated key
// keeps its first position and its last value.
func parseObject(raw []byte) (*object, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	o := newOrdered[json.RawMessage]()
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, errors.New("not a JSON object")
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, err
		}
		k, ok := t.(string)
		if !ok {
			return nil, errors.New("object key is not a string")
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		o.set(k, v)
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	return o, nil
}

func marshalObject(o *object) []byte {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, m := range o.list {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(m.key)
		b.Write(k)
		b.WriteByte(':')
		_ = json.Compact(&b, m.val)
	}
	b.WriteByte('}')
	return b.Bytes()
}

// MergeJSON applies the RFC 7396 merge patch to target (nil: no document)
// and returns the result. Member order of the target is kept; new members
// are appended in patch order.
func MergeJSON(target, patch []byte) ([]byte, error) {
	if !json.Valid(patch) {
		return nil, errors.New("the intent is not valid JSON")
	}
	if target != nil && !json.Valid(target) {
		return nil, errors.New("the current document is not valid JSON")
	}
	out, err := mergeJSON(target, patch)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	if err := json.Compact(&b, out); err != nil {
		return nil, fmt.Errorf("cannot compact the result: %w", err)
	}
	return b.Bytes(), nil
}

func mergeJSON(target, patch []byte) ([]byte, error) {
	if !isObject(patch) {
		return patch, nil
	}
	p, err := parseObject(patch)
	if err != nil {
		return nil, err
	}
	t := newOrdered[json.RawMessage]()
	if target != nil && isObject(target) {
		if t, err = parseObject(target); err != nil {
			return nil, err
		}
	}
	for _, m := range p.list {
		if isNull(m.val) {
			t.remove(m.key)
			continue
		}
		cur, _ := t.get(m.key)
		v, err := mergeJSON(cur, m.val)
		if err != nil {
			return nil, err
		}
		t.set(m.key, v)
	}
	return marshalObject(t), nil
}
