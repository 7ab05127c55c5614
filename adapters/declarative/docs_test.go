package declarative

import (
	"os"
	"strings"
	"testing"
)

// The YAML examples of docs/profiles.md load, and those that show a
// profile of examples/profiles.yaml define exactly that profile (same
// fingerprint), so the two cannot drift apart.
func TestDocsExamples(t *testing.T) {
	md, err := os.ReadFile("../../docs/profiles.md")
	if err != nil {
		t.Fatal(err)
	}
	examples, err := LoadFile("../../examples/profiles.yaml", Options{})
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]string{}
	for _, p := range examples {
		byName[p.Name()] = p.Fingerprint()
	}
	blocks := strings.Split(string(md), "```yaml\n")[1:]
	if len(blocks) < 6 {
		t.Fatalf("found %d YAML blocks in docs/profiles.md", len(blocks))
	}
	shown := map[string]bool{}
	for i, b := range blocks {
		b = b[:strings.Index(b, "```")]
		src := b
		single := strings.HasPrefix(b, "- name:")
		if single {
			src = "profiles:\n  " + strings.ReplaceAll(strings.TrimRight(b, "\n"), "\n", "\n  ") + "\n"
		}
		ps, err := Parse("docs/profiles.md block "+string(rune('0'+i)), []byte(src), Options{})
		if err != nil {
			t.Fatalf("block %d:\n%s\n%v", i, b, err)
		}
		if !single {
			continue
		}
		p := ps[0]
		want, ok := byName[p.Name()]
		if !ok {
			t.Errorf("docs profile %q is not in examples/profiles.yaml", p.Name())
			continue
		}
		if p.Fingerprint() != want {
			t.Errorf("docs profile %q differs from the one in examples/profiles.yaml", p.Name())
		}
		shown[p.Name()] = true
	}
	for name := range byName {
		if !shown[name] {
			t.Errorf("example profile %q is not shown in docs/profiles.md", name)
		}
	}
}
