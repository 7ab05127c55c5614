package integration_test

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/internal/testkit/sinktest"
	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
)

// buildSink builds cmd/sink once per test binary (the packages are already
// compiled for the tests, so this mostly links).
func buildSink(t testing.TB) string {
	t.Helper()
	return buildBinary(t, "./cmd/sink", "sink")
}

// shellBlocks returns the fenced code blocks of a Markdown file whose info
// string is exactly "sh": the examples that run as written. Blocks that
// must not run (they need a secured server, or start one) are marked
// "console" or "text".
func shellBlocks(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var blocks []string
	var cur *strings.Builder
	fence := ""
	for _, line := range strings.Split(string(b), "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case fence == "" && strings.HasPrefix(trimmed, "```"):
			fence = "```"
			if strings.TrimPrefix(trimmed, "```") == "sh" {
				cur = &strings.Builder{}
			}
		case fence != "" && trimmed == fence:
			if cur != nil {
				blocks = append(blocks, cur.String())
			}
			cur, fence = nil, ""
		case cur != nil:
			cur.WriteString(line + "\n")
		}
	}
	if fence != "" {
		t.Fatalf("%s: unterminated code block", path)
	}
	return blocks
}

// The CLI examples of docs/cli.md run, as written, with bash and the real
// binary against a real server, in a scratch directory (they write no file
// into the checkout), and do what the page says.
func TestCLIDocExamplesRun(t *testing.T) {
	bin := buildSink(t)
	s := sinktest.Start(t, nil)
	needJQ(t)
	blocks := shellBlocks(t, filepath.Join(repoRoot(t), "docs", "cli.md"))
	if len(blocks) < 5 {
		t.Fatalf("found %d sh blocks in docs/cli.md; is the extraction broken?", len(blocks))
	}
	output := runDocBlocks(t, blocks, "", []string{"SINK_ADDRESS=" + s.Addr, "SINK_TOKEN="}, filepath.Dir(bin))
	for _, want := range []string{`"status": "FOUND"`, "exit code 3", "exit code 4", `"status": "NOT_FOUND"`,
		`"$date": "2024-01-02T03:04:05Z"`, `"$numberLong": "7"`, `"$numberDouble": "1.0"`, `"count": 3`} {
		if !strings.Contains(output, want) {
			t.Errorf("the examples' output lacks %q:\n%s", want, output)
		}
	}
	// What the examples did is in the store.
	if got := readJSON(t, s.Client, addr("shop", "orders", "o-2")); got != "" {
		t.Errorf("the delete example left o-2: %s", got)
	}
	for key, want := range map[int64]string{42: `{"name":"Ada"}`, 43: `{"name":"Grace"}`} {
		a := &sinkv1.RecordAddress{Namespace: "shop", Dataset: "customers", Key: &sinkv1.RecordKey{Kind: &sinkv1.RecordKey_Int64{Int64: key}}}
		if got := strings.TrimSpace(readJSON(t, s.Client, a)); got != want {
			t.Errorf("customer %d: %q, want %q", key, got, want)
		}
	}
	// The event copied through `sink read | jq | sink put --bson` is the
	// same BSON, byte for byte: int64, integral double, int32, date.
	event := func(oid string) []byte {
		b, err := hex.DecodeString(oid)
		if err != nil {
			t.Fatal(err)
		}
		r := read(t, s.Client, &sinkv1.RecordAddress{Namespace: "shop", Dataset: "events", Key: &sinkv1.RecordKey{Kind: &sinkv1.RecordKey_ObjectId{ObjectId: b}}})[0]
		if r.Status != sinkv1.OperationStatus_OPERATION_STATUS_FOUND || r.Document.ContentType != domain.ContentTypeBSON {
			t.Fatalf("event %s: %v %v", oid, r.Status, r.Document)
		}
		return r.Document.Data
	}
	original, copied := event("65a1f0c2e4b0a1b2c3d4e5f6"), event("65a1f0c2e4b0a1b2c3d4e5f7")
	if !bytes.Equal(original, copied) {
		t.Errorf("the copied event differs from the original:\n%s\n%s", bson.Raw(original), bson.Raw(copied))
	}
	if n := bson.Raw(original).Lookup("n"); n.Type != bson.TypeInt64 {
		t.Errorf("the example stores n as %v, want int64", n.Type)
	}
}

// needJQ skips a test whose documented examples use jq when it is missing.
func needJQ(t *testing.T) {
	t.Helper()
	for _, tool := range []string{"bash", "jq", "base64"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("the README's examples need %s: %v", tool, err)
		}
	}
}

// runDocBlocks runs each block with bash -euo pipefail in a new directory,
// with env added and the directories in path first on PATH, and returns
// the combined output of all of them. If replace is not empty, it names
// the "localhost:8080" replacement (the documented default address).
func runDocBlocks(t *testing.T, blocks []string, replace string, env []string, path ...string) string {
	t.Helper()
	work := t.TempDir()
	var all bytes.Buffer
	for i, block := range blocks {
		if replace != "" {
			block = strings.ReplaceAll(block, "localhost:8080", replace)
		}
		cmd := exec.Command("bash", "-euo", "pipefail", "-c", block)
		cmd.Dir = work
		cmd.Env = append(os.Environ(), "PATH="+strings.Join(append(path, os.Getenv("PATH")), string(os.PathListSeparator)))
		cmd.Env = append(cmd.Env, env...)
		out, err := cmd.CombinedOutput()
		all.Write(out)
		if err != nil {
			t.Fatalf("example block %d failed: %v\n--- block\n%s--- output\n%s", i+1, err, block, out)
		}
	}
	return all.String()
}

// grpcurlForDocs returns the grpcurl the README's examples run with:
// SINK_TEST_GRPCURL (a real grpcurl) when set, otherwise
// integration/cmd/fakegrpcurl, built once (it links packages the tests
// compiled already; grpcurl itself is a separate module with its own
// dependency versions, too slow to build in a test).
func grpcurlForDocs(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("SINK_TEST_GRPCURL"); p != "" {
		return p
	}
	return buildBinary(t, "./integration/cmd/fakegrpcurl", "grpcurl")
}

// The README's examples — grpcurl and the sink CLI — run as written (with
// bash, base64 and jq) against one real server: the request bodies that
// the shell builds are the API's JSON form (decoded with protojson, as
// grpcurl does), the document is long enough (> 57 bytes) that a wrapping
// base64 would break it, the decoding one-liner prints the stored
// document, and the records end as the text says (the CLI's examples use
// records of their own, not the grpcurl examples' o-1).
func TestREADMEExamplesRun(t *testing.T) {
	needJQ(t)
	grpcurl := grpcurlForDocs(t)
	bin := buildSink(t)
	s := sinktest.Start(t, nil)
	blocks := shellBlocks(t, filepath.Join(repoRoot(t), "README.md"))
	if len(blocks) < 8 {
		t.Fatalf("found %d sh blocks in the README; is the extraction broken?", len(blocks))
	}
	// A directory with the chosen grpcurl under that name, first on PATH.
	dir := t.TempDir()
	if err := os.Symlink(grpcurl, filepath.Join(dir, "grpcurl")); err != nil {
		t.Fatal(err)
	}
	output := runDocBlocks(t, blocks, s.Addr, []string{"SINK_ADDRESS=" + s.Addr, "SINK_TOKEN="}, dir, filepath.Dir(bin))

	stored := readJSON(t, s.Client, addr("shop", "orders", "o-1"))
	var doc map[string]any
	if err := json.Unmarshal([]byte(stored), &doc); err != nil || doc["paid"] != true || doc["total"] != float64(12) {
		t.Fatalf("after the examples o-1 is %q (%v); want the conditional put's document", stored, err)
	}
	if len(stored) <= 57 {
		t.Errorf("the README's example document has %d bytes; keep it above 57 so that it shows base64 -w0 is needed", len(stored))
	}
	// protojson (grpcurl's printer) puts one or two spaces after a colon,
	// on purpose, varying with the binary: compare with one.
	output = regexp.MustCompile(`":\s+`).ReplaceAllString(output, `": `)
	for _, want := range []string{"sink.v1.Sink\n", "OPERATION_STATUS_APPLIED", "OPERATION_STATUS_PRECONDITION_FAILED", `"index": 1`,
		`{"customer":"Ada Lovelace","items":["notebook","pencil"],"total":10}`, `"status": "FOUND"`, `{"name":"string key 42"}`} {
		if !strings.Contains(output, want) {
			t.Errorf("the examples' output lacks %q:\n%s", want, output)
		}
	}
	if got := readJSON(t, s.Client, addr("shop", "orders", "o-3")); got != "{}" {
		t.Errorf("the batch example's o-3: %q", got)
	}
	if got := readJSON(t, s.Client, addr("shop", "orders", "o-4")); got != "" {
		t.Errorf("the delete example left o-4: %q", got)
	}
	if got := readJSON(t, s.Client, addr("shop", "orders", "o-2")); got != `{"total":10,"paid":true}` {
		t.Errorf("the CLI example's o-2: %q", got)
	}
	for key, want := range map[*sinkv1.RecordKey]string{
		{Kind: &sinkv1.RecordKey_String_{String_: "42"}}: `{"name":"string key 42"}`,
		{Kind: &sinkv1.RecordKey_Int64{Int64: 42}}:       `{"name":"int64 key 42"}`,
	} {
		a := &sinkv1.RecordAddress{Namespace: "shop", Dataset: "customers", Key: key}
		if got := readJSON(t, s.Client, a); got != want {
			t.Errorf("customer %v: %q, want %q", key, got, want)
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
