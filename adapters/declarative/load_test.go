package declarative

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func loadErr(t *testing.T, src string, opts Options) *LoadError {
	t.Helper()
	_, err := Parse("p.yaml", []byte(src), opts)
	var le *LoadError
	if !errors.As(err, &le) {
		t.Fatalf("Parse error = %v, want a *LoadError", err)
	}
	return le
}

// TestLoadErrorClasses: every class of problem is found, each names the
// file, line, profile and rule, and all are reported at once.
func TestLoadErrorClasses(t *testing.T) {
	cases := []struct {
		name, src string
		want      []string
	}{
		{"not YAML", "profiles: [", []string{"p.yaml: not valid YAML or JSON"}},
		{"not a mapping", "- a", []string{`must be a mapping with the key "profiles"`}},
		{"unknown top-level key", "profiles: []\nextra: 1", []string{`p.yaml:2: unknown key "extra"`, `"profiles" is empty`}},
		{"missing profiles", "other: 1", []string{`the key "profiles" is missing`}},
		{"profiles not a list", "profiles: {}", []string{`"profiles" must be a list`}},
		{"two documents", "profiles: []\n---\nprofiles: []", []string{"more than one YAML document"}},
		{"profile not a mapping", "profiles: [1]", []string{`profile "profiles[0]": a profile must be a mapping`}},
		{"unknown profile key", "profiles:\n  - name: a\n    rulez: []\n    rules: [{op: remove, path: /a}]", []string{`p.yaml:3: profile "a": unknown key "rulez"`}},
		{"missing name", "profiles:\n  - rules: [{op: remove, path: /a}]", []string{`profile "profiles[0]": name: required`}},
		{"bad name", "profiles:\n  - name: Bad Name\n    rules: [{op: remove, path: /a}]", []string{`profile "Bad Name": name: must be`}},
		{"reserved name", "profiles:\n  - name: merge-patch\n    rules: [{op: remove, path: /a}]", []string{`profile "merge-patch": name: collides with the built-in profile of the same name`}},
		{"duplicate name", "profiles:\n  - name: a\n    rules: [{op: remove, path: /a}]\n  - name: a\n    rules: [{op: remove, path: /a}]", []string{`p.yaml:4: profile "a": the name is already used by the profile at line 2`}},
		{"bad content type", "profiles:\n  - name: a\n    content_types: [text/plain]\n    rules: [{op: remove, path: /a}]", []string{`content_types: "text/plain" is not supported`}},
		{"initial not a mapping", "profiles:\n  - name: a\n    initial: [1]\n    rules: [{op: remove, path: /a}]", []string{"initial: must be a mapping"}},
		{"initial with alias", "profiles:\n  - name: a\n    initial: {x: &v 1, y: *v}\n    rules: [{op: remove, path: /a}]", []string{"aliases are not supported"}},
		{"initial too large integer", "profiles:\n  - name: a\n    initial: {x: !!int 99999999999999999999}\n    rules: [{op: remove, path: /a}]", []string{"integer out of the int64 range"}},
		{"no rules", "profiles:\n  - name: a", []string{"rules: required, a non-empty list"}},
		{"rule not a mapping", "profiles:\n  - name: a\n    rules: [x]", []string{`profile "a": rules[0]: a rule must be a mapping`}},
		{"unknown rule key", "profiles:\n  - name: a\n    rules: [{op: remove, path: /a, vale: x}]", []string{`rules[0]: unknown key "vale"`}},
		{"non-scalar field", "profiles:\n  - name: a\n    rules: [{op: set, path: /a, value: {x: 1}}]", []string{"rules[0]: value: must be a scalar"}},
		{"missing op", "profiles:\n  - name: a\n    rules: [{path: /a}]", []string{"rules[0]: op: required"}},
		{"unknown op", "profiles:\n  - name: a\n    rules: [{op: inc, path: /a}]", []string{`rules[0]: op: unknown operation "inc"`}},
		{"missing path", "profiles:\n  - name: a\n    rules: [{op: set, value: '1'}]", []string{"rules[0]: path: required for set"}},
		{"bad pointer", "profiles:\n  - name: a\n    rules: [{op: set, path: a, value: '1'}, {op: set, path: /a~2, value: '1'}]", []string{"rules[0]: path: a JSON Pointer must be empty", "rules[1]: path: '~' must be followed"}},
		{"root path outside merge_patch", "profiles:\n  - name: a\n    rules: [{op: set, path: '', value: '1'}]", []string{"can only be the target of merge_patch"}},
		{"field not used by op", "profiles:\n  - name: a\n    rules: [{op: remove, path: /a, value: '1'}, {op: require, check: 'true', path: /a}, {op: set, path: /a, value: '1', message: m}]", []string{"rules[0]: value: not used by remove", "rules[1]: path: not used by require", "rules[2]: message: only require rules have a message"}},
		{"missing value", "profiles:\n  - name: a\n    rules: [{op: add, path: /a}]", []string{"rules[0]: value: required for add"}},
		{"missing check", "profiles:\n  - name: a\n    rules: [{op: require}]", []string{"rules[0]: check: required"}},
		{"CEL syntax error", "profiles:\n  - name: a\n    rules: [{op: set, path: /a, value: 'intent.'}]", []string{"rules[0]: value: invalid CEL"}},
		{"CEL unknown variable", "profiles:\n  - name: a\n    rules: [{op: set, path: /a, value: 'request.x'}]", []string{"rules[0]: value: invalid CEL", "undeclared reference to 'request'"}},
		{"no clock", "profiles:\n  - name: a\n    rules: [{op: set, path: /a, value: 'now()'}]", []string{"rules[0]: value: invalid CEL", "undeclared reference to 'now'"}},
		{"CEL type of a condition", "profiles:\n  - name: a\n    rules: [{op: require, check: '1 + 1'}, {op: set, path: /a, value: '1', when: '\"x\"'}]", []string{"rules[0]: check: the expression has type int, want bool", "rules[1]: when: the expression has type string, want bool"}},
		{"expression too long", "profiles:\n  - name: a\n    rules: [{op: set, path: /a, value: '" + strings.Repeat("1+", 2100) + "1'}]", []string{"the expression is longer than 4096 bytes"}},
		{"append without max_items", "profiles:\n  - name: a\n    rules: [{op: append, path: /a, value: '1'}]", []string{"max_items: required for append"}},
		{"bad max_items and drop", "profiles:\n  - name: a\n    rules: [{op: append, path: /a, value: '1', max_items: 0, drop: first}, {op: add_to_set, path: /s, value: '1', drop: oldest}]", []string{"rules[0]: max_items: must be an integer from 1", `rules[0]: drop: "first" is not one of`, "rules[1]: drop: only append drops items"}},
		{"too many rules", "profiles:\n  - name: a\n    rules:\n" + strings.Repeat("      - {op: remove, path: /a}\n", MaxRules+1), []string{"more than 256 rules"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			le := loadErr(t, c.src, Options{Reserved: map[string]string{"merge-patch": "built-in"}})
			msg := le.Error()
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error does not contain %q:\n%s", w, msg)
				}
			}
		})
	}
}

// TestEveryProblemAtOnce: problems of several profiles and rules are all
// reported in one error.
func TestEveryProblemAtOnce(t *testing.T) {
	src := `profiles:
  - name: one
    rules:
      - {op: set, path: /a}
      - {op: nope}
  - name: two
    content_types: [text/csv]
    rules:
      - {op: require, check: 'intent.x +'}
`
	le := loadErr(t, src, Options{})
	if len(le.Problems) != 4 {
		t.Fatalf("got %d problems, want 4:\n%v", len(le.Problems), le)
	}
	want := []Problem{
		{File: "p.yaml", Line: 4, Profile: "one", Rule: 0},
		{File: "p.yaml", Line: 5, Profile: "one", Rule: 1},
		{File: "p.yaml", Line: 7, Profile: "two", Rule: -1},
		{File: "p.yaml", Line: 9, Profile: "two", Rule: 0},
	}
	for i, w := range want {
		g := le.Problems[i]
		if g.File != w.File || g.Line != w.Line || g.Profile != w.Profile || g.Rule != w.Rule || g.Msg == "" {
			t.Errorf("problem %d = %+v, want %+v", i, g, w)
		}
	}
}

func TestLoadFile(t *testing.T) {
	dir := t.TempDir()
	if _, err := LoadFile(filepath.Join(dir, "missing.yaml"), Options{}); err == nil || !strings.Contains(err.Error(), "cannot read merge profiles file") {
		t.Fatalf("missing file: %v", err)
	}
	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, make([]byte, MaxFileBytes+1), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadFile(big, Options{}); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("big file: %v", err)
	}
	js := filepath.Join(dir, "p.json")
	if err := os.WriteFile(js, []byte(`{"profiles":[{"name":"c","rules":[{"op":"add","path":"/n","value":"1"}]}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	ps, err := LoadFile(js, Options{})
	if err != nil || len(ps) != 1 || ps[0].Name() != "c" {
		t.Fatalf("JSON file: %v %v", ps, err)
	}
	if _, err := Parse("x.yaml", []byte("profiles: [\xff]"), Options{}); err == nil || !strings.Contains(err.Error(), "not valid UTF-8") {
		t.Fatalf("invalid UTF-8: %v", err)
	}
}

func TestFingerprint(t *testing.T) {
	one := func(src string) string {
		t.Helper()
		ps, err := Parse("f.yaml", []byte(src), Options{})
		if err != nil {
			t.Fatal(err)
		}
		return ps[0].Fingerprint()
	}
	base := one("profiles:\n  - name: c\n    rules: [{op: add, path: /n, value: '1'}]")
	if !strings.HasPrefix(base, "sha256:") || len(base) != len("sha256:")+64 {
		t.Fatalf("fingerprint %q", base)
	}
	same := []string{
		"profiles:\n- name: c\n  description: comments and descriptions do not count # here\n  rules:\n  - op: add\n    value: '1'\n    path: /n\n",
		`{"profiles": [{"rules": [{"path": "/n", "op": "add", "value": "1"}], "name": "c"}]}`,
		"profiles:\n  - name: c\n    content_types: [application/json, application/bson]\n    rules: [{op: add, path: /n, value: '1'}]",
	}
	for _, s := range same {
		if got := one(s); got != base {
			t.Errorf("same definition, different fingerprint:\n%s", s)
		}
	}
	different := []string{
		"profiles:\n  - name: d\n    rules: [{op: add, path: /n, value: '1'}]",
		"profiles:\n  - name: c\n    rules: [{op: add, path: /m, value: '1'}]",
		"profiles:\n  - name: c\n    rules: [{op: add, path: /n, value: '2'}]",
		"profiles:\n  - name: c\n    rules: [{op: add, path: /n, value: '1', when: 'true'}]",
		"profiles:\n  - name: c\n    initial: {n: 1}\n    rules: [{op: add, path: /n, value: '1'}]",
		"profiles:\n  - name: c\n    content_types: [application/json]\n    rules: [{op: add, path: /n, value: '1'}]",
		"profiles:\n  - name: c\n    rules: [{op: max, path: /n, value: '1'}]",
	}
	for _, s := range different {
		if got := one(s); got == base {
			t.Errorf("different definition, same fingerprint:\n%s", s)
		}
	}
}
