package integration_test

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/sink-io/sink/bootstrap/cli"
)

// maxREADMELines keeps the README a ten-minute read; the rest belongs in docs/.
const maxREADMELines = 350

// docFiles returns the Markdown files whose links are checked, relative to
// the repository root: README.md, CONTRIBUTING.md and docs/*.md.
func docFiles(t *testing.T) []string {
	t.Helper()
	root := repoRoot(t)
	files := []string{"README.md", "CONTRIBUTING.md"}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range docs {
		files = append(files, filepath.Join("docs", filepath.Base(d)))
	}
	if len(files) < 10 {
		t.Fatalf("found %d documentation files; is the walk broken?", len(files))
	}
	return files
}

var (
	mdLink     = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	inlineCode = regexp.MustCompile("`[^`]*`")
	mdHeading  = regexp.MustCompile(`^(#{1,6})\s+(.*?)\s*#*\s*$`)
	linkText   = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
)

// prose returns the lines of a Markdown text outside fenced code blocks,
// with inline code removed, numbered from 1 (0 for lines in blocks).
func prose(text string) []string {
	lines := strings.Split(text, "\n")
	out := make([]string, len(lines))
	fence := ""
	for i, line := range lines {
		trimmed := strings.TrimSpace(line)
		switch {
		case fence == "" && (strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~")):
			fence = trimmed[:3]
		case fence != "" && strings.HasPrefix(trimmed, fence):
			fence = ""
		case fence == "":
			out[i] = line
		}
	}
	return out
}

// anchors returns the anchors GitHub gives the headings of a Markdown
// text: the heading's text lower-cased, without the characters other than
// letters, digits, spaces, hyphens and underscores, spaces turned into
// hyphens, and "-1", "-2", … added to repeats.
func anchors(text string) map[string]bool {
	seen := map[string]int{}
	out := map[string]bool{}
	for _, line := range prose(text) {
		m := mdHeading.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		h := linkText.ReplaceAllString(m[2], "$1")
		h = strings.ReplaceAll(h, "`", "")
		var b strings.Builder
		for _, r := range strings.ToLower(h) {
			switch {
			case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteByte('-')
			}
		}
		slug := b.String()
		if n := seen[slug]; n > 0 {
			out[fmt.Sprintf("%s-%d", slug, n)] = true
		} else {
			out[slug] = true
		}
		seen[slug]++
	}
	return out
}

func TestAnchorsFollowGitHubsRules(t *testing.T) {
	got := anchors("# Sink\n## The API at a glance\n## Keys: what a key is and is not\n### `SINK_MODE` and [links](x.md)\n## Applying (the worker)\n## Dup\n## Dup\n```\n## not a heading\n```\n## Go runtime\n")
	for _, want := range []string{"sink", "the-api-at-a-glance", "keys-what-a-key-is-and-is-not", "sink_mode-and-links", "applying-the-worker", "dup", "dup-1", "go-runtime"} {
		if !got[want] {
			t.Errorf("no anchor %q in %v", want, got)
		}
	}
	if got["not-a-heading"] {
		t.Error("a line in a code block counted as a heading")
	}
}

// Every relative link of the README, CONTRIBUTING.md and docs/*.md leads
// to a file or directory of the repository, and every #anchor to a heading
// of the linked page (or of the page itself).
func TestDocLinksResolve(t *testing.T) {
	root := repoRoot(t)
	texts := map[string]string{}
	read := func(rel string) (string, bool) {
		if s, ok := texts[rel]; ok {
			return s, true
		}
		b, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			return "", false
		}
		texts[rel] = string(b)
		return string(b), true
	}
	links := 0
	for _, file := range docFiles(t) {
		text, ok := read(file)
		if !ok {
			t.Fatalf("cannot read %s", file)
		}
		for n, line := range prose(text) {
			for _, m := range mdLink.FindAllStringSubmatch(inlineCode.ReplaceAllString(line, ""), -1) {
				target := strings.Trim(m[1], "<>")
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				links++
				path, anchor, _ := strings.Cut(target, "#")
				where := fmt.Sprintf("%s:%d: %s", file, n+1, target)
				linked := file
				if path != "" {
					linked = filepath.Join(filepath.Dir(file), filepath.FromSlash(path))
					if rel, err := filepath.Rel(root, filepath.Join(root, linked)); err != nil || strings.HasPrefix(rel, "..") {
						t.Errorf("%s: leads out of the repository", where)
						continue
					}
					if _, err := os.Stat(filepath.Join(root, linked)); err != nil {
						t.Errorf("%s: no such file or directory", where)
						continue
					}
				}
				if anchor == "" {
					continue
				}
				if !strings.HasSuffix(linked, ".md") {
					t.Errorf("%s: an anchor into a file that is not Markdown", where)
					continue
				}
				page, _ := read(linked)
				if !anchors(page)[anchor] {
					t.Errorf("%s: %s has no heading with the anchor #%s", where, linked, anchor)
				}
			}
		}
	}
	if links < 40 {
		t.Fatalf("checked %d links; is the extraction broken?", links)
	}
}

func TestREADMEIsShort(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(b, []byte("\n")); n > maxREADMELines {
		t.Fatalf("README.md has %d lines; keep it at most %d and move the rest to docs/", n, maxREADMELines)
	}
	if bytes.Contains(b, []byte("<!--")) {
		t.Error("README.md holds HTML markers; the examples run from its sh blocks")
	}
}

// docs/README.md is the index: it links every page of docs/.
func TestDocsIndexListsEveryPage(t *testing.T) {
	root := repoRoot(t)
	index, err := os.ReadFile(filepath.Join(root, "docs", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range docFiles(t) {
		name := filepath.Base(file)
		if filepath.Dir(file) != "docs" || name == "README.md" {
			continue
		}
		if !strings.Contains(string(index), "]("+name+")") {
			t.Errorf("docs/README.md does not link %s", name)
		}
	}
}

// Every command of `sink help` has a section of docs/cli.md, and every
// flag of every command is named there.
func TestCLIReferenceCoversEveryCommandAndFlag(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "cli.md"))
	if err != nil {
		t.Fatal(err)
	}
	var headings []string
	for _, line := range prose(string(doc)) {
		if m := mdHeading.FindStringSubmatch(line); m != nil && m[1] == "##" {
			headings = append(headings, m[2])
		}
	}
	help := func(args ...string) string {
		var out bytes.Buffer
		cli.Main(args, cli.IO{Stdin: strings.NewReader(""), Stdout: &out, Stderr: io.Discard, Getenv: func(string) string { return "" }},
			func(io.Writer) error { t.Fatalf("sink %q ran the role", args); return nil })
		return out.String()
	}
	command := regexp.MustCompile(`(?m)^  (\S+)\s{2,}`)
	flag := regexp.MustCompile(`(?m)^  -(\S+)`)
	var commands []string
	for _, m := range command.FindAllStringSubmatch(help("help"), -1) {
		if m[1] != "help" {
			commands = append(commands, m[1])
		}
	}
	if len(commands) < 9 {
		t.Fatalf("found %d commands in sink help; is the extraction broken?", len(commands))
	}
	flags := 0
	for _, c := range commands {
		if !slices.ContainsFunc(headings, func(h string) bool {
			return slices.Contains(strings.FieldsFunc(h, func(r rune) bool { return r == ',' || r == ' ' }), c)
		}) {
			t.Errorf("docs/cli.md has no section for sink %s (its sections: %q)", c, headings)
		}
		for _, m := range flag.FindAllStringSubmatch(help(c, "--help"), -1) {
			flags++
			name := "--" + m[1]
			if len(m[1]) == 1 {
				name = "-" + m[1]
			}
			if !strings.Contains(string(doc), "`"+name+"`") {
				t.Errorf("docs/cli.md does not name %s of sink %s", name, c)
			}
		}
	}
	if flags < 30 {
		t.Fatalf("found %d flags; is the extraction broken?", flags)
	}
}
