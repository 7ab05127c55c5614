package mergepatch

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// isCompactJSON must agree with encoding/json: true exactly for the values
// json.Valid accepts and json.Compact leaves as they are (below the
// nesting it follows).
func FuzzIsCompactJSON(f *testing.F) {
	for _, s := range []string{
		`{}`, `[]`, `{"a":1}`, `{"a":[1,2,{"b":null}],"c":"x"}`, `"s"`, `0`, `-0`, `-0.5e+10`, `1E5`, `12.25`,
		`true`, `false`, `null`, `{"a":{"b":{"c":[[],[{}]]}}}`, `["\u00e9\n\"\\\/\b\f\r\t"]`,
		// not valid, or not compact
		``, ` `, `{} `, ` {}`, `{"a": 1}`, `[1 ,2]`, `{"a":1,}`, `[1,]`, `{,}`, `{"a"}`, `{"a":}`, `{1:2}`,
		`01`, `1.`, `.5`, `-`, `1e`, `1e+`, `+1`, `0x1`, `tru`, `nulll`, `"a`, `"\x"`, `"\u12"`, `"\u12g4"`,
		"\"a\x01\"", "\"\xff\xfe\"", `{"a":1}}`, `[[]`, `]`, `}`, `"a" "b"`, `[1]2`, "{\"a\":1}\n",
		strings.Repeat("[", 200) + strings.Repeat("]", 200),
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got := isCompactJSON(b)
		var buf bytes.Buffer
		want := json.Compact(&buf, b) == nil && bytes.Equal(buf.Bytes(), b)
		if got != want {
			t.Fatalf("isCompactJSON(%q) = %v, encoding/json says %v", b, got, want)
		}
	})
}

// Nesting: isCompactJSON follows encoding/json's limit exactly (10000
// levels pass, 10001 do not), without recursion.
func TestIsCompactJSONDepth(t *testing.T) {
	for _, levels := range []int{maxScanDepth, maxScanDepth + 1} {
		inner := "0"
		if levels%2 == 1 {
			inner = "[]"
		}
		b := []byte(strings.Repeat(`[{"a":`, levels/2) + inner + strings.Repeat(`}]`, levels/2))
		if got, want := isCompactJSON(b), json.Valid(b); got != want || want != (levels <= maxScanDepth) {
			t.Fatalf("%d levels: isCompactJSON %v, json.Valid %v", levels, got, want)
		}
	}
}
