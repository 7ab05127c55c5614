package declarative

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"cel.dev/cel-go/cel"
	"go.yaml.in/yaml/v3"

	"github.com/sink-io/sink/domain"
)

// Limits bound what a profiles file may declare and what one merge may do.
type Limits struct {
	// MaxDepth bounds the nesting of documents, intents and results below
	// the top level (SINK_MAX_NESTING_DEPTH).
	MaxDepth int
	// MaxDocumentBytes bounds the encoded result (SINK_MAX_DOCUMENT_BYTES).
	MaxDocumentBytes int
	// MaxCost bounds the CEL cost of one merge (all its expressions).
	MaxCost uint64
	// MaxItems bounds the items (array elements and object members) of
	// one value an expression produces.
	MaxItems int
}

// Defaults and hard limits.
const (
	DefaultMaxDepth         = 100
	DefaultMaxDocumentBytes = 4 << 20
	DefaultMaxCost          = 1_000_000
	DefaultMaxItems         = 100_000
	MaxFileBytes            = 1 << 20
	MaxProfiles             = 1000
	MaxRules                = 256
	MaxExpressionBytes      = 4096
	MaxAppendItems          = 100_000
)

func (l Limits) withDefaults() Limits {
	if l.MaxDepth <= 0 {
		l.MaxDepth = DefaultMaxDepth
	}
	if l.MaxDocumentBytes <= 0 {
		l.MaxDocumentBytes = DefaultMaxDocumentBytes
	}
	if l.MaxCost == 0 {
		l.MaxCost = DefaultMaxCost
	}
	if l.MaxItems <= 0 {
		l.MaxItems = DefaultMaxItems
	}
	return l
}

// Options configure loading.
type Options struct {
	Limits Limits
	// Reserved names profiles must not take (built-in and code-registered
	// profiles), with where each comes from, for messages.
	Reserved map[string]string
}

// Problem is one thing wrong in a profiles file.
type Problem struct {
	File    string
	Line    int    // 0 when unknown
	Profile string // "" for file-level problems
	Rule    int    // -1 when not about one rule
	Msg     string
}

func (p Problem) String() string {
	var b strings.Builder
	b.WriteString(p.File)
	if p.Line > 0 {
		b.WriteString(":" + strconv.Itoa(p.Line))
	}
	if p.Profile != "" {
		b.WriteString(": profile " + strconv.Quote(p.Profile))
	}
	if p.Rule >= 0 {
		b.WriteString(": rules[" + strconv.Itoa(p.Rule) + "]")
	}
	b.WriteString(": " + p.Msg)
	return b.String()
}

// LoadError lists every problem of a profiles file.
type LoadError struct{ Problems []Problem }

func (e *LoadError) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = p.String()
	}
	return fmt.Sprintf("invalid merge profiles file (%d problems):\n  %s", len(lines), strings.Join(lines, "\n  "))
}

// LoadFile reads and compiles the profiles file at path.
func LoadFile(path string, opts Options) ([]*Profile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read merge profiles file: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("cannot read merge profiles file %s: %w", path, err)
	}
	return Parse(path, data, opts)
}

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

// ops lists the rule operations with which fields each takes: p path, v
// value, k key, c check, m max_items/drop.
var ops = map[string]string{
	"set":             "pkv",
	"set_if_absent":   "pkv",
	"remove":          "pk",
	"add":             "pkv",
	"max":             "pkv",
	"min":             "pkv",
	"append":          "pkvm",
	"add_to_set":      "pkvm",
	"remove_from_set": "pkv",
	"merge_patch":     "pkv",
	"require":         "c",
}

var ruleKeys = map[string]bool{"op": true, "path": true, "key": true, "value": true, "when": true, "check": true, "message": true, "max_items": true, "drop": true}
var profileKeys = map[string]bool{"name": true, "description": true, "content_types": true, "initial": true, "rules": true}

type loader struct {
	file     string
	opts     Options
	env      *cel.Env
	problems []Problem
}

func (l *loader) add(line int, profile string, rule int, format string, args ...any) {
	msg := strings.ToValidUTF8(fmt.Sprintf(format, args...), "\uFFFD")
	l.problems = append(l.problems, Problem{File: l.file, Line: line, Profile: profile, Rule: rule, Msg: msg})
}

// Parse compiles a profiles file's contents (YAML or JSON). It reports every
// problem at once in a *LoadError.
func Parse(file string, data []byte, opts Options) ([]*Profile, error) {
	opts.Limits = opts.Limits.withDefaults()
	env, err := newEnv()
	if err != nil {
		return nil, err
	}
	l := &loader{file: file, opts: opts, env: env}
	if len(data) > MaxFileBytes {
		l.add(0, "", -1, "the file is larger than %d bytes", MaxFileBytes)
		return nil, &LoadError{Problems: l.problems}
	}
	if !utf8.Valid(data) {
		l.add(0, "", -1, "the file is not valid UTF-8")
		return nil, &LoadError{Problems: l.problems}
	}
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&root); err != nil {
		l.add(0, "", -1, "not valid YAML or JSON: %v", err)
		return nil, &LoadError{Problems: l.problems}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		l.add(extra.Line, "", -1, "the file holds more than one YAML document")
	}
	doc := &root
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		doc = doc.Content[0]
	}
	var profiles []*Profile
	if doc.Kind != yaml.MappingNode {
		l.add(doc.Line, "", -1, "the file must be a mapping with the key \"profiles\"")
		return nil, &LoadError{Problems: l.problems}
	}
	var list *yaml.Node
	for i := 0; i+1 < len(doc.Content); i += 2 {
		k, v := doc.Content[i], doc.Content[i+1]
		if k.Value != "profiles" {
			l.add(k.Line, "", -1, "unknown key %q (the file has only \"profiles\")", k.Value)
			continue
		}
		list = v
	}
	switch {
	case list == nil:
		l.add(doc.Line, "", -1, "the key \"profiles\" is missing")
	case list.Kind != yaml.SequenceNode:
		l.add(list.Line, "", -1, "\"profiles\" must be a list")
	case len(list.Content) == 0:
		l.add(list.Line, "", -1, "\"profiles\" is empty")
	case len(list.Content) > MaxProfiles:
		l.add(list.Line, "", -1, "more than %d profiles", MaxProfiles)
	default:
		seen := map[string]int{}
		for i, n := range list.Content {
			p := l.profile(i, n)
			if p == nil {
				continue
			}
			if line, dup := seen[p.def.Name]; dup {
				l.add(n.Line, p.def.Name, -1, "the name is already used by the profile at line %d", line)
				continue
			}
			seen[p.def.Name] = n.Line
			profiles = append(profiles, p)
		}
	}
	if len(l.problems) > 0 {
		return nil, &LoadError{Problems: l.problems}
	}
	return profiles, nil
}

func (l *loader) profile(index int, n *yaml.Node) *Profile {
	label := "profiles[" + strconv.Itoa(index) + "]"
	if n.Kind != yaml.MappingNode {
		l.add(n.Line, label, -1, "a profile must be a mapping")
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k, v := n.Content[i], n.Content[i+1]; k.Value == "name" && v.Kind == yaml.ScalarNode && v.Value != "" {
			label = v.Value
		}
	}
	fields := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		if !profileKeys[k.Value] {
			l.add(k.Line, label, -1, "unknown key %q (known: content_types, description, initial, name, rules)", k.Value)
			continue
		}
		fields[k.Value] = n.Content[i+1]
	}
	bad := len(l.problems)
	def := Definition{}
	if f := fields["name"]; f == nil || f.Kind != yaml.ScalarNode || f.Value == "" {
		l.add(n.Line, label, -1, "name: required")
	} else {
		def.Name = f.Value
		label = f.Value
		if !nameRE.MatchString(f.Value) {
			l.add(f.Line, label, -1, "name: must be 1 to 63 of a-z, 0-9, '.', '_' and '-', starting with a letter or digit")
		} else if from, taken := l.opts.Reserved[f.Value]; taken {
			l.add(f.Line, label, -1, "name: collides with the %s profile of the same name", from)
		}
	}
	if f := fields["description"]; f != nil && f.Kind != yaml.ScalarNode {
		l.add(f.Line, label, -1, "description: must be a string")
	}
	def.ContentTypes = []string{domain.ContentTypeJSON, domain.ContentTypeBSON}
	if f := fields["content_types"]; f != nil {
		def.ContentTypes = nil
		if f.Kind != yaml.SequenceNode || len(f.Content) == 0 {
			l.add(f.Line, label, -1, "content_types: must be a non-empty list")
		} else {
			for _, c := range f.Content {
				mt, err := domain.MediaType(c.Value)
				if err != nil || mt != domain.ContentTypeJSON && mt != domain.ContentTypeBSON {
					l.add(c.Line, label, -1, "content_types: %q is not supported (supported: %s, %s)", c.Value, domain.ContentTypeJSON, domain.ContentTypeBSON)
					continue
				}
				def.ContentTypes = append(def.ContentTypes, mt)
			}
		}
	}
	var initial *object
	if f := fields["initial"]; f != nil {
		v, err := fromYAML(f, 0, l.opts.Limits.MaxDepth)
		if err != nil {
			l.add(f.Line, label, -1, "initial: %v", err)
		} else if o, ok := v.(*object); !ok {
			l.add(f.Line, label, -1, "initial: must be a mapping (the document of an absent record)")
		} else {
			initial = o
			canon, err := appendJSON(nil, o)
			if err != nil {
				l.add(f.Line, label, -1, "initial: %v", err)
			}
			def.Initial = canon
		}
	}
	var rules []*rule
	if f := fields["rules"]; f == nil || f.Kind != yaml.SequenceNode || len(f.Content) == 0 {
		l.add(n.Line, label, -1, "rules: required, a non-empty list")
	} else if len(f.Content) > MaxRules {
		l.add(f.Line, label, -1, "rules: more than %d rules", MaxRules)
	} else {
		for i, rn := range f.Content {
			rd, r := l.rule(label, i, rn)
			def.Rules = append(def.Rules, rd)
			rules = append(rules, r)
		}
	}
	if len(l.problems) > bad {
		return nil
	}
	p := newProfile(def, initial, rules, l.opts.Limits)
	p.origin = "file " + l.file + ", line " + strconv.Itoa(n.Line)
	return p
}

func (l *loader) rule(profile string, index int, n *yaml.Node) (RuleDefinition, *rule) {
	var d RuleDefinition
	if n.Kind != yaml.MappingNode {
		l.add(n.Line, profile, index, "a rule must be a mapping")
		return d, nil
	}
	fields := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if !ruleKeys[k.Value] {
			l.add(k.Line, profile, index, "unknown key %q (known: check, drop, key, max_items, message, op, path, value, when)", k.Value)
			continue
		}
		if v.Kind != yaml.ScalarNode {
			l.add(v.Line, profile, index, "%s: must be a scalar (write CEL expressions as strings)", k.Value)
			continue
		}
		fields[k.Value] = v
	}
	str := func(k string) string {
		if f := fields[k]; f != nil {
			return f.Value
		}
		return ""
	}
	d = RuleDefinition{Op: str("op"), Path: str("path"), Key: str("key"), Value: str("value"), When: str("when"), Check: str("check"), Message: str("message"), Drop: str("drop")}
	r := &rule{index: index, def: d}
	allowed, known := ops[d.Op]
	if !known {
		names := make([]string, 0, len(ops))
		for k := range ops {
			names = append(names, k)
		}
		sort.Strings(names)
		if d.Op == "" {
			l.add(n.Line, profile, index, "op: required (one of %s)", strings.Join(names, ", "))
		} else {
			l.add(fields["op"].Line, profile, index, "op: unknown operation %q (one of %s)", d.Op, strings.Join(names, ", "))
		}
		return d, nil
	}
	line := func(k string) int {
		if f := fields[k]; f != nil {
			return f.Line
		}
		return n.Line
	}
	has := func(c byte) bool { return strings.IndexByte(allowed, c) >= 0 }
	for k, c := range map[string]byte{"path": 'p', "key": 'k', "value": 'v', "check": 'c', "max_items": 'm', "drop": 'm'} {
		if fields[k] != nil && !has(c) {
			l.add(line(k), profile, index, "%s: not used by %s", k, d.Op)
		}
	}
	if d.Message != "" && d.Op != "require" {
		l.add(line("message"), profile, index, "message: only require rules have a message")
	}
	if has('p') {
		if fields["path"] == nil {
			l.add(n.Line, profile, index, "path: required for %s (a JSON Pointer such as /counts/total)", d.Op)
		} else if segs, err := parsePointer(d.Path); err != nil {
			l.add(line("path"), profile, index, "path: %v", err)
		} else if len(segs) == 0 && d.Op != "merge_patch" && d.Key == "" {
			l.add(line("path"), profile, index, "path: the whole document (\"\") can only be the target of merge_patch")
		} else {
			r.path = segs
		}
	}
	compile := func(field, src string, want *cel.Type) *expr {
		if len(src) > MaxExpressionBytes {
			l.add(line(field), profile, index, "%s: the expression is longer than %d bytes", field, MaxExpressionBytes)
			return nil
		}
		e, err := compileExpr(l.env, src, want, l.opts.Limits.MaxCost)
		if err != nil {
			l.add(line(field), profile, index, "%s: %v", field, err)
			return nil
		}
		return e
	}
	if has('v') {
		if fields["value"] == nil {
			l.add(n.Line, profile, index, "value: required for %s (a CEL expression such as intent.amount)", d.Op)
		} else {
			r.value = compile("value", d.Value, nil)
		}
	}
	if d.Key != "" {
		r.key = compile("key", d.Key, nil)
	}
	if d.When != "" {
		r.when = compile("when", d.When, cel.BoolType)
	}
	if d.Op == "require" {
		if d.Check == "" {
			l.add(n.Line, profile, index, "check: required for require (a CEL condition)")
		} else {
			r.check = compile("check", d.Check, cel.BoolType)
		}
		if !utf8.ValidString(d.Message) || len(d.Message) > 512 {
			l.add(line("message"), profile, index, "message: at most 512 bytes of text")
		}
	}
	if has('m') {
		if f := fields["max_items"]; f != nil {
			v, err := strconv.Atoi(f.Value)
			if err != nil || v < 1 || v > MaxAppendItems {
				l.add(f.Line, profile, index, "max_items: must be an integer from 1 to %d", MaxAppendItems)
			} else {
				d.MaxItems, r.def.MaxItems = v, v
			}
		} else if d.Op == "append" {
			l.add(n.Line, profile, index, "max_items: required for append (the most items the array may hold)")
		}
		switch d.Drop {
		case "", "oldest", "newest", "error":
			if d.Drop != "" && d.Op != "append" {
				l.add(line("drop"), profile, index, "drop: only append drops items (add_to_set fails when full)")
			}
		default:
			l.add(line("drop"), profile, index, "drop: %q is not one of oldest, newest, error", d.Drop)
		}
		if d.Op == "append" && d.Drop == "" {
			d.Drop, r.def.Drop = "oldest", "oldest"
		}
	}
	return d, r
}

// fromYAML converts an initial document from the file.
func fromYAML(n *yaml.Node, depth, maxDepth int) (any, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("nested deeper than %d levels", maxDepth)
	}
	switch n.Kind {
	case yaml.AliasNode:
		return nil, fmt.Errorf("line %d: aliases are not supported", n.Line)
	case yaml.MappingNode:
		o := newObject(len(n.Content) / 2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			if k.Kind != yaml.ScalarNode {
				return nil, fmt.Errorf("line %d: keys must be strings", k.Line)
			}
			if _, dup := o.get(k.Value); dup {
				return nil, fmt.Errorf("line %d: duplicate key", k.Line)
			}
			v, err := fromYAML(n.Content[i+1], depth+1, maxDepth)
			if err != nil {
				return nil, err
			}
			o.set(k.Value, v)
		}
		return o, nil
	case yaml.SequenceNode:
		a := make([]any, 0, len(n.Content))
		for _, e := range n.Content {
			v, err := fromYAML(e, depth+1, maxDepth)
			if err != nil {
				return nil, err
			}
			a = append(a, v)
		}
		return a, nil
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null":
			return nil, nil
		case "!!bool":
			return n.Value == "true" || n.Value == "True" || n.Value == "TRUE", nil
		case "!!int":
			i, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 0, 64)
			if err != nil {
				return nil, fmt.Errorf("line %d: integer out of the int64 range", n.Line)
			}
			return i, nil
		case "!!float":
			f, err := strconv.ParseFloat(n.Value, 64)
			if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
				return nil, fmt.Errorf("line %d: not a finite number", n.Line)
			}
			return f, nil
		case "!!str":
			return n.Value, nil
		}
		return nil, fmt.Errorf("line %d: unsupported value of type %s", n.Line, n.ShortTag())
	}
	return nil, fmt.Errorf("line %d: unsupported YAML node", n.Line)
}

// Definition is a profile's canonical definition: what its fingerprint
// hashes. The description is not part of it (it does not change merges).
type Definition struct {
	Name         string           `json:"name"`
	ContentTypes []string         `json:"content_types"`
	Initial      json.RawMessage  `json:"initial,omitempty"`
	Rules        []RuleDefinition `json:"rules"`
}

// RuleDefinition is one rule as written.
type RuleDefinition struct {
	Op       string `json:"op"`
	Path     string `json:"path,omitempty"`
	Key      string `json:"key,omitempty"`
	Value    string `json:"value,omitempty"`
	When     string `json:"when,omitempty"`
	Check    string `json:"check,omitempty"`
	Message  string `json:"message,omitempty"`
	MaxItems int    `json:"max_items,omitempty"`
	Drop     string `json:"drop,omitempty"`
}

// fingerprint is "sha256:" and the hex SHA-256 of the canonical JSON
// encoding of the definition (fixed field order, the initial document in
// the file's key order).
func fingerprint(d Definition) string {
	b, err := json.Marshal(d)
	if err != nil {
		panic(err) // plain strings and ints only
	}
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}
