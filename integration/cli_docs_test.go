package integration_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/sink-io/sink/integration/sinktest"
	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
)

var sinkBinary struct {
	once sync.Once
	path string
	err  error
}

// buildSink builds cmd/sink once per test binary (the packages are already
// compiled for the tests, so this mostly links).
func buildSink(t *testing.T) string {
	t.Helper()
	sinkBinary.once.Do(func() {
		dir, err := os.MkdirTemp("", "sink-bin-")
		if err != nil {
			sinkBinary.err = err
			return
		}
		sinkBinary.path = filepath.Join(dir, "sink")
		cmd := exec.Command("go", "build", "-o", sinkBinary.path, "./cmd/sink")
		cmd.Dir = repoRoot(t)
		if out, err := cmd.CombinedOutput(); err != nil {
			sinkBinary.err = fmt.Errorf("go build ./cmd/sink: %v\n%s", err, out)
		}
	})
	if sinkBinary.err != nil {
		t.Fatal(sinkBinary.err)
	}
	return sinkBinary.path
}

// shellBlocks returns the ```sh blocks of a Markdown file that stand
// between the <!-- cli-examples:begin --> and <!-- cli-examples:end --> markers.
func shellBlocks(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	const begin, end = "<!-- cli-examples:begin -->", "<!-- cli-examples:end -->"
	i, j := strings.Index(text, begin), strings.Index(text, end)
	if i < 0 || j < i {
		t.Fatalf("%s: no %s ... %s section", path, begin, end)
	}
	text = text[i+len(begin) : j]
	var blocks []string
	var cur *strings.Builder
	for _, line := range strings.Split(text, "\n") {
		switch {
		case cur == nil && strings.TrimSpace(line) == "```sh":
			cur = &strings.Builder{}
		case cur != nil && strings.TrimSpace(line) == "```":
			blocks = append(blocks, cur.String())
			cur = nil
		case cur != nil:
			cur.WriteString(line + "\n")
		}
	}
	if cur != nil {
		t.Fatalf("%s: unterminated code block", path)
	}
	return blocks
}

// The CLI examples of the README run, as written, with bash and the real
// binary against a real server, and do what the page says.
func TestCLIDocExamplesRun(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	bin := buildSink(t)
	s := sinktest.Start(t, nil)
	blocks := shellBlocks(t, filepath.Join(repoRoot(t), "README.md"))
	if len(blocks) < 5 {
		t.Fatalf("found %d sh blocks in the README's CLI examples; is the extraction broken?", len(blocks))
	}
	work := t.TempDir()
	var all bytes.Buffer
	for i, block := range blocks {
		cmd := exec.Command("bash", "-euo", "pipefail", "-c", block)
		cmd.Dir = work
		cmd.Env = append(os.Environ(), "SINK_ADDRESS="+s.Addr, "PATH="+filepath.Dir(bin)+string(os.PathListSeparator)+os.Getenv("PATH"))
		cmd.Env = append(cmd.Env, "SINK_TOKEN=")
		out, err := cmd.CombinedOutput()
		all.Write(out)
		if err != nil {
			t.Fatalf("example block %d failed: %v\n--- block\n%s--- output\n%s", i+1, err, block, out)
		}
	}
	output := all.String()
	for _, want := range []string{`"status": "FOUND"`, "exit code 3", "exit code 4", `"status": "NOT_FOUND"`, `"$date": "2024-01-02T03:04:05Z"`} {
		if !strings.Contains(output, want) {
			t.Errorf("the examples' output lacks %q:\n%s", want, output)
		}
	}
	// What the examples did is in the store.
	if got := readJSON(t, s.Client, addr("shop", "orders", "o-1")); got != "" {
		t.Errorf("the delete example left o-1: %s", got)
	}
	for key, want := range map[int64]string{42: `{"name":"Ada"}`, 43: `{"name":"Grace"}`} {
		a := &sinkv1.RecordAddress{Namespace: "shop", Dataset: "customers", Key: &sinkv1.RecordKey{Kind: &sinkv1.RecordKey_Int64{Int64: key}}}
		if got := strings.TrimSpace(readJSON(t, s.Client, a)); got != want {
			t.Errorf("customer %d: %q, want %q", key, got, want)
		}
	}
}

// The binary wires the CLI and hash-token into its command switch.
func TestSinkBinaryCommands(t *testing.T) {
	bin := buildSink(t)
	out, err := exec.Command(bin, "help").CombinedOutput()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"read", "put", "merge", "delete", "hash-token"} {
		if !strings.Contains(string(out), "\n  "+c+" ") {
			t.Errorf("sink help does not list %s:\n%s", c, out)
		}
	}
	cmd := exec.Command(bin, "hash-token")
	cmd.Stdin = strings.NewReader("secret\n")
	out, err = cmd.Output()
	if err != nil || strings.TrimSpace(string(out)) != "sha256:2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b" {
		t.Fatalf("sink hash-token: %q %v", out, err)
	}
	err = exec.Command(bin, "read", "--namespace", "n").Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 {
		t.Fatalf("usage error: %v, want exit 2", err)
	}
}
