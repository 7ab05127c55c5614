package integration_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.uber.org/fx"

	"github.com/sink-io/sink/adapters/memory"
	"github.com/sink-io/sink/bootstrap/cli"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/internal/testkit/kafkatest"
	"github.com/sink-io/sink/internal/testkit/sinktest"
	"github.com/sink-io/sink/internal/testkit/testcerts"
	"github.com/sink-io/sink/ports"
	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
)

// cliResult is one in-process run of the CLI.
type cliResult struct {
	code           int
	stdout, stderr string
}

// out decodes the printed JSON.
func (r cliResult) out(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &m); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, r.stdout)
	}
	return m
}

// runCLI runs `sink <args>` in process with the given environment and stdin.
func runCLI(env map[string]string, stdin string, args ...string) cliResult {
	var stdout, stderr bytes.Buffer
	code := cli.Main(args, cli.IO{Stdin: strings.NewReader(stdin), Stdout: &stdout, Stderr: &stderr,
		Getenv: func(k string) string { return env[k] }}, func(w io.Writer) error {
		fmt.Fprintln(w, "runCLI runs no role")
		return errors.New("no command")
	})
	return cliResult{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

func expectExit(t testing.TB, what string, r cliResult, code int) {
	t.Helper()
	if r.code != code {
		t.Fatalf("%s: exit %d, want %d\nstdout: %s\nstderr: %s", what, r.code, code, r.stdout, r.stderr)
	}
}

func TestCLICommandsAndExitCodes(t *testing.T) {
	s := sinktest.Start(t, nil)
	env := map[string]string{"SINK_ADDRESS": s.Addr}
	run := func(stdin string, args ...string) cliResult { return runCLI(env, stdin, args...) }
	at := []string{"--namespace", "shop", "--dataset", "orders", "--key", "o-1"}

	r := run("", append([]string{"put", "--data", `{"total":10}`}, at...)...)
	expectExit(t, "put", r, cli.ExitOK)
	put := r.out(t)
	if put["status"] != "APPLIED" || put["revision"] == "" {
		t.Fatalf("put output: %v", put)
	}
	r = run("", append([]string{"read"}, at...)...)
	expectExit(t, "read", r, cli.ExitOK)
	got := r.out(t)
	if got["status"] != "FOUND" || got["revision"] != put["revision"] || got["content_type"] != "application/json" ||
		fmt.Sprint(got["document"]) != "map[total:10]" {
		t.Fatalf("read output: %v", got)
	}
	expectExit(t, "merge", run("", append([]string{"merge", "--data", `{"paid":true}`}, at...)...), cli.ExitOK)
	if doc := readJSON(t, s.Client, addr("shop", "orders", "o-1")); doc != `{"total":10,"paid":true}` {
		t.Fatalf("after merge: %s", doc)
	}

	// Modes and revisions.
	expectExit(t, "create of an existing record", run("", append([]string{"put", "--create", "--data", `{}`}, at...)...), cli.ExitPrecondition)
	expectExit(t, "stale --if-revision", run("", append([]string{"put", "--if-revision", put["revision"].(string), "--data", `{}`}, at...)...), cli.ExitPrecondition)
	cur := run("", append([]string{"read"}, at...)...).out(t)["revision"].(string)
	expectExit(t, "current --if-revision", run("", append([]string{"put", "--if-revision", cur, "--data", `{"v":2}`}, at...)...), cli.ExitOK)
	expectExit(t, "replace of an absent record", run("", "put", "--replace", "-n", "shop", "-d", "orders", "--key", "nope", "--data", `{}`), cli.ExitNotFound)

	// Delete: applied, then absent (not an error), then read is not found.
	r = run("", append([]string{"delete"}, at...)...)
	expectExit(t, "delete", r, cli.ExitOK)
	if r.out(t)["status"] != "APPLIED" {
		t.Fatalf("delete output: %s", r.stdout)
	}
	r = run("", append([]string{"delete"}, at...)...)
	expectExit(t, "delete of an absent record", r, cli.ExitOK)
	if r.out(t)["status"] != "NOT_FOUND" {
		t.Fatalf("second delete output: %s", r.stdout)
	}
	r = run("", append([]string{"read"}, at...)...)
	expectExit(t, "read of an absent record", r, cli.ExitNotFound)
	if r.out(t)["status"] != "NOT_FOUND" {
		t.Fatalf("read output: %s", r.stdout)
	}

	// Failures.
	expectExit(t, "unknown profile", run("", append([]string{"merge", "--profile", "nope", "--data", `{}`}, at...)...), cli.ExitFailed)
	expectExit(t, "--async without a queue", run("", append([]string{"put", "--async", "--data", `{}`}, at...)...), cli.ExitFailed)
	expectExit(t, "another store", run("", append([]string{"read", "--store", "elsewhere"}, at...)...), cli.ExitFailed)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := lis.Addr().String()
	lis.Close()
	r = run("", append([]string{"read", "--address", closed, "--timeout", "5s"}, at...)...)
	expectExit(t, "unreachable server", r, cli.ExitUnavailable)
	if !strings.Contains(r.stderr, "sink read: UNAVAILABLE: ") {
		t.Fatalf("stderr: %s", r.stderr)
	}
}

// The CLI names error codes as the API does (INVALID_ARGUMENT, not
// InvalidArgument or 3), on standard error and in its JSON output, and
// `sink health` checks the gRPC API at SINK_ADDRESS or --address like the
// API commands.
func TestCLIErrorStyleAndHealthAddress(t *testing.T) {
	s := sinktest.Start(t, nil)
	env := map[string]string{"SINK_ADDRESS": s.Addr}
	at := []string{"-n", "shop", "-d", "orders", "--key", "style"}
	camel := regexp.MustCompile(`\b(InvalidArgument|FailedPrecondition|Unavailable|AlreadyExists|NotFound|ResourceExhausted)\b`)
	for _, c := range []struct {
		args   []string
		code   int
		stderr string
		json   string
	}{
		{append([]string{"merge", "--profile", "nope", "--data", `{}`}, at...), cli.ExitFailed, "sink merge: INVALID_ARGUMENT: operations[0] (merge): profile: unknown merge profile", "INVALID_ARGUMENT"},
		{append([]string{"put", "--async", "--data", `{}`}, at...), cli.ExitFailed, "sink put: FAILED_PRECONDITION: ", ""},
		{append([]string{"put", "--replace", "--data", `{}`}, at...), cli.ExitNotFound, "sink put: NOT_FOUND: operations[0] (put): mode: ", "NOT_FOUND"},
	} {
		r := runCLI(env, "", c.args...)
		expectExit(t, strings.Join(c.args, " "), r, c.code)
		if !strings.HasPrefix(r.stderr, c.stderr) || camel.MatchString(r.stdout+r.stderr) {
			t.Errorf("%v: stderr %q, want %q…", c.args, r.stderr, c.stderr)
		}
		if c.json != "" {
			e, _ := r.out(t)["error"].(map[string]any)
			if e["code"] != c.json {
				t.Errorf("%v: JSON error %v, want code %q", c.args, e, c.json)
			}
		}
	}
	r := runCLI(env, "", "health")
	if r.code != cli.ExitOK || r.stdout != "SERVING\n" {
		t.Errorf("health at SINK_ADDRESS: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	r = runCLI(nil, "", "health", "--address", s.Addr)
	if r.code != cli.ExitOK || r.stdout != "SERVING\n" {
		t.Errorf("health --address: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	r = runCLI(nil, "", "health", "--address", "127.0.0.1:1", "--timeout", "2s")
	if r.code != cli.ExitUnavailable || !strings.Contains(r.stderr, "sink health: 127.0.0.1:1: UNAVAILABLE: ") {
		t.Errorf("health of a closed port: exit %d %q", r.code, r.stderr)
	}
	if s.HTTPAddr != "" {
		r = runCLI(env, "", "health", "--url", "http://"+s.HTTPAddr+"/readyz")
		if r.code != cli.ExitOK {
			t.Errorf("health --url beside SINK_ADDRESS: exit %d %q", r.code, r.stderr)
		}
	}
}

func TestCLIInputFromFileAndStdin(t *testing.T) {
	s := sinktest.Start(t, nil)
	env := map[string]string{"SINK_ADDRESS": s.Addr}
	expectExit(t, "stdin", runCLI(env, `{"from":"stdin"}`, "put", "-n", "n", "-d", "d", "--key", "a", "--file", "-"), cli.ExitOK)
	path := filepath.Join(t.TempDir(), "doc.json")
	if err := os.WriteFile(path, []byte(`{"from":"file"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	expectExit(t, "file", runCLI(env, "", "put", "-n", "n", "-d", "d", "--key", "b", "--file", path), cli.ExitOK)
	expectExit(t, "merge from stdin", runCLI(env, `{"more":1}`, "merge", "-n", "n", "-d", "d", "--key", "b", "--file", "-"), cli.ExitOK)
	if readJSON(t, s.Client, addr("n", "d", "a")) != `{"from":"stdin"}` || readJSON(t, s.Client, addr("n", "d", "b")) != `{"from":"file","more":1}` {
		t.Fatal("documents from stdin/file were not written as given")
	}
	// A non-JSON content type is sent as is and read back as base64.
	expectExit(t, "text document", runCLI(env, "", "put", "-n", "n", "-d", "d", "--key", "t", "--content-type", "text/plain", "--data", "hello"), cli.ExitOK)
	out := runCLI(env, "", "read", "-n", "n", "-d", "d", "--key", "t").out(t)
	if out["content_type"] != "text/plain" || out["data_base64"] != base64.StdEncoding.EncodeToString([]byte("hello")) {
		t.Fatalf("text document: %v", out)
	}
}

func TestCLIKeyKinds(t *testing.T) {
	s := sinktest.Start(t, nil)
	env := map[string]string{"SINK_ADDRESS": s.Addr}
	oid := []byte{0x65, 0xa1, 0xf0, 0xc2, 0xe4, 0xb0, 0xa1, 0xb2, 0xc3, 0xd4, 0xe5, 0xf6}
	cases := []struct {
		flags []string
		key   *sinkv1.RecordKey
	}{
		{[]string{"--key-int", "-42"}, &sinkv1.RecordKey{Kind: &sinkv1.RecordKey_Int64{Int64: -42}}},
		{[]string{"--key-bytes", "0a0b"}, &sinkv1.RecordKey{Kind: &sinkv1.RecordKey_Bytes{Bytes: []byte{10, 11}}}},
		{[]string{"--key-bytes", "base64:DA0="}, &sinkv1.RecordKey{Kind: &sinkv1.RecordKey_Bytes{Bytes: []byte{12, 13}}}},
		{[]string{"--key-oid", "65a1f0c2e4b0a1b2c3d4e5f6"}, &sinkv1.RecordKey{Kind: &sinkv1.RecordKey_ObjectId{ObjectId: oid}}},
	}
	for i, c := range cases {
		args := append([]string{"put", "-n", "n", "-d", "keys", "--data", fmt.Sprintf(`{"i":%d}`, i)}, c.flags...)
		expectExit(t, strings.Join(c.flags, " "), runCLI(env, "", args...), cli.ExitOK)
		got := readJSON(t, s.Client, &sinkv1.RecordAddress{Namespace: "n", Dataset: "keys", Key: c.key})
		if got != fmt.Sprintf(`{"i":%d}`, i) {
			t.Fatalf("%v: record under the typed key is %q", c.flags, got)
		}
	}
}

func TestCLIUsageErrors(t *testing.T) {
	env := map[string]string{"SINK_ADDRESS": "127.0.0.1:1"} // never called
	for name, args := range map[string][]string{
		"no key":          {"read", "-n", "n", "-d", "d"},
		"two keys":        {"read", "-n", "n", "-d", "d", "--key", "a", "--key-int", "1"},
		"no dataset":      {"read", "-n", "n", "--key", "a"},
		"bad int":         {"read", "-n", "n", "-d", "d", "--key-int", "x"},
		"bad oid":         {"read", "-n", "n", "-d", "d", "--key-oid", "abc"},
		"bad bytes":       {"read", "-n", "n", "-d", "d", "--key-bytes", "xyz"},
		"invalid JSON":    {"put", "-n", "n", "-d", "d", "--key", "a", "--data", "{nope"},
		"no document":     {"put", "-n", "n", "-d", "d", "--key", "a"},
		"data and file":   {"put", "-n", "n", "-d", "d", "--key", "a", "--data", "{}", "--file", "x"},
		"missing file":    {"put", "-n", "n", "-d", "d", "--key", "a", "--file", "/nonexistent.json"},
		"create+replace":  {"put", "-n", "n", "-d", "d", "--key", "a", "--data", "{}", "--create", "--replace"},
		"bad revision":    {"delete", "-n", "n", "-d", "d", "--key", "a", "--if-revision", "%%%"},
		"unknown flag":    {"read", "--nope"},
		"positional":      {"read", "-n", "n", "-d", "d", "--key", "a", "extra"},
		"unknown command": {"list"},
		"bson not object": {"put", "-n", "n", "-d", "d", "--key", "a", "--bson", "--data", "[1]"},
	} {
		r := runCLI(env, "", args...)
		if r.code != cli.ExitUsage || r.stderr == "" || r.stdout != "" {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit 2 with a message", name, r.code, r.stdout, r.stderr)
		}
	}
	for _, c := range []string{"read", "put", "merge", "delete"} {
		r := runCLI(env, "", c, "--help")
		if r.code != cli.ExitOK || !strings.Contains(r.stdout, "Usage: sink "+c) || !strings.Contains(r.stdout, "--namespace") ||
			!strings.Contains(r.stdout, "Exit codes") {
			t.Errorf("%s --help: exit %d\n%s%s", c, r.code, r.stdout, r.stderr)
		}
	}
}

// bsonOnlyStorage refuses documents other than BSON with the MongoDB
// adapter's message, so the CLI's automatic conversion can be tested.
type bsonOnlyStorage struct{ ports.Storage }

func (s bsonOnlyStorage) Validate(op ports.WriteOp) error {
	if op.Kind == ports.WritePut && op.Document.ContentType != domain.ContentTypeBSON {
		return domain.Errorf(domain.CodeInvalidArgument, "store %q (MongoDB) accepts only %s documents, got content type %q",
			op.Address.Store, domain.ContentTypeBSON, op.Document.ContentType)
	}
	return s.Storage.Validate(op)
}

func TestCLIConvertsBSON(t *testing.T) {
	s := sinktest.Start(t, nil, fx.Decorate(func(ports.Storage) ports.Storage { return bsonOnlyStorage{memory.New()} }))
	env := map[string]string{"SINK_ADDRESS": s.Addr}
	// Plain JSON: the store says it accepts only BSON, the CLI converts.
	r := runCLI(env, "", "put", "-n", "n", "-d", "d", "--key", "a", "--data", `{"name":"Ada","n":{"$numberLong":"7"}}`)
	expectExit(t, "automatic BSON", r, cli.ExitOK)
	res := read(t, s.Client, addr("n", "d", "a"))[0]
	if res.Document.ContentType != domain.ContentTypeBSON {
		t.Fatalf("stored content type %q", res.Document.ContentType)
	}
	var stored bson.M
	if err := bson.Unmarshal(res.Document.Data, &stored); err != nil || stored["name"] != "Ada" || stored["n"] != int64(7) {
		t.Fatalf("stored BSON %v (%v)", stored, err)
	}
	// Explicit --bson, and the read prints (relaxed) Extended JSON.
	expectExit(t, "--bson", runCLI(env, "", "put", "-n", "n", "-d", "d", "--key", "b", "--bson", "--data", `{"at":{"$date":"2024-01-02T03:04:05Z"}}`), cli.ExitOK)
	out := runCLI(env, "", "read", "-n", "n", "-d", "d", "--key", "b")
	expectExit(t, "read BSON", out, cli.ExitOK)
	if m := out.out(t); m["content_type"] != domain.ContentTypeBSON || fmt.Sprint(m["document"]) != "map[at:map[$date:2024-01-02T03:04:05Z]]" {
		t.Fatalf("BSON read output: %v", m)
	}
}

// What `sink read` prints for a BSON document, fed back to `sink put
// --bson`, stores the same BSON types: an int64 that fits in an int32 and
// a double without a fraction keep their types.
func TestCLIBSONOutputRoundTrips(t *testing.T) {
	s := sinktest.Start(t, nil)
	env := map[string]string{"SINK_ADDRESS": s.Addr}
	at := func(key string) []string { return []string{"-n", "n", "-d", "bson", "--key", key} }
	stored := func(key string) bson.Raw {
		t.Helper()
		res := read(t, s.Client, addr("n", "bson", key))[0]
		if res.Status != sinkv1.OperationStatus_OPERATION_STATUS_FOUND || res.Document.ContentType != domain.ContentTypeBSON {
			t.Fatalf("%s: %v %v", key, res.Status, res.Document)
		}
		return res.Document.Data
	}
	// printed reads key and returns the document exactly as printed.
	printed := func(key string, flags ...string) string {
		t.Helper()
		r := runCLI(env, "", append(append([]string{"read"}, flags...), at(key)...)...)
		expectExit(t, "read "+key, r, cli.ExitOK)
		var out struct {
			Document json.RawMessage `json:"document"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || len(out.Document) == 0 {
			t.Fatalf("read %s printed no document (%v):\n%s", key, err, r.stdout)
		}
		return string(out.Document)
	}

	expectExit(t, "put", runCLI(env, "", append([]string{"put", "--bson", "--data", `{"n":{"$numberLong":"7"},"d":1.0,"i":3}`}, at("a")...)...), cli.ExitOK)
	want := stored("a")
	for name, typ := range map[string]bson.Type{"n": bson.TypeInt64, "d": bson.TypeDouble, "i": bson.TypeInt32} {
		if got := want.Lookup(name).Type; got != typ {
			t.Fatalf("put --bson stored %s as %v, want %v", name, got, typ)
		}
	}
	for _, flags := range [][]string{nil, {"--canonical"}} {
		doc := printed("a", flags...)
		expectExit(t, "put of the printed document", runCLI(env, "", append([]string{"put", "--bson", "--data", doc}, at("b")...)...), cli.ExitOK)
		if got := stored("b"); !bytes.Equal(got, want) {
			t.Fatalf("read %v printed %s; put --bson of it stored\n%s\nwant\n%s", flags, doc, got, want)
		}
		// And again: a second round changes nothing either.
		expectExit(t, "put of the copy", runCLI(env, "", append([]string{"put", "--bson", "--data", printed("b", flags...)}, at("c")...)...), cli.ExitOK)
		if got := stored("c"); !bytes.Equal(got, want) {
			t.Fatalf("second round %v stored\n%s\nwant\n%s", flags, got, want)
		}
	}
}

func TestCLISecurityFlags(t *testing.T) {
	ca := testcerts.NewCA(t, "ca")
	srv := ca.Server(t, "sink")
	me := ca.Client(t, "cli-user")
	file := newAuthFile(t,
		principalSpec{name: "writer", token: "tok-cli-writer-0123456789", grants: `[{"namespace":"shop","rights":["read","write"]}]`},
		principalSpec{name: "cert-user", certs: []string{"cn:cli-user"}, grants: `[{"namespace":"shop","rights":["read"]}]`},
	)
	s := sinktest.Start(t, map[string]string{
		"SINK_TLS_CERT_FILE": srv.CertFile, "SINK_TLS_KEY_FILE": srv.KeyFile, "SINK_TLS_CLIENT_CA_FILE": ca.CertFile,
		"SINK_AUTH_TOKEN_FILE": file, "SINK_RATE_LIMIT_OPS": "1", "SINK_RATE_LIMIT_OPS_BURST": "3", "SINK_MAX_OPERATIONS": "3",
	})
	env := map[string]string{"SINK_ADDRESS": s.Addr}
	tlsFlags := []string{"--ca-file", ca.CertFile, "--cert-file", me.CertFile, "--key-file", me.KeyFile}
	at := []string{"-n", "shop", "-d", "orders", "--key", "o-1"}

	expectExit(t, "plaintext against TLS", runCLI(env, "", append([]string{"read", "--timeout", "5s"}, at...)...), cli.ExitUnavailable)
	// Token from SINK_TOKEN over mutual TLS: the writer may write (token 1).
	withToken := map[string]string{"SINK_ADDRESS": s.Addr, "SINK_TOKEN": "tok-cli-writer-0123456789"}
	expectExit(t, "put with SINK_TOKEN", runCLI(withToken, "", append(append([]string{"put", "--data", `{"a":1}`}, tlsFlags...), at...)...), cli.ExitOK)
	// The certificate's principal may only read (tokens 2 and 3).
	expectExit(t, "read with the certificate", runCLI(env, "", append(append([]string{"read"}, tlsFlags...), at...)...), cli.ExitOK)
	r := runCLI(env, "", append(append([]string{"put", "--data", `{}`}, tlsFlags...), at...)...)
	expectExit(t, "put without the right", r, cli.ExitAuth)
	if !strings.Contains(r.stdout, "PERMISSION_DENIED") {
		t.Fatalf("stdout: %s", r.stdout)
	}
	expectExit(t, "wrong --token", runCLI(env, "", append(append([]string{"read", "--token", "tok-wrong"}, tlsFlags...), at...)...), cli.ExitAuth)
	// Reads use up the burst (3; refused calls may not have spent any),
	// then a call is rate limited: exit 5 and a retry delay.
	for i := 0; ; i++ {
		r = runCLI(env, "", append(append([]string{"read"}, tlsFlags...), at...)...)
		if r.code != cli.ExitOK || i == 4 {
			break
		}
	}
	expectExit(t, "rate limited", r, cli.ExitUnavailable)
	if !strings.Contains(r.stderr, "retry after") {
		t.Fatalf("stderr: %s", r.stderr)
	}
}

func TestCLIHelpDoesNotShowTheToken(t *testing.T) {
	r := runCLI(map[string]string{"SINK_TOKEN": "tok-secret-in-env"}, "", "read", "--help")
	if r.code != cli.ExitOK || strings.Contains(r.stdout+r.stderr, "tok-secret-in-env") {
		t.Fatalf("--help shows SINK_TOKEN (exit %d):\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// --async: the server's queue accepts the write (exit 0, ACCEPTED with a
// mutation id) and the worker applies it.
func TestCLIAsync(t *testing.T) {
	asyncSkipShort(t)
	brokers := kafkatest.InProcess(t, kafkatest.Topics(asyncTopic, asyncDLT))
	s := asyncStartAll(t, brokers, nil)
	env := map[string]string{"SINK_ADDRESS": s.Addr}
	at := []string{"-n", "shop", "-d", "orders", "--key", "async-1"}
	for _, args := range [][]string{
		append([]string{"put", "--async", "--data", `{"n":1}`}, at...),
		append([]string{"merge", "--async", "--data", `{"m":2}`}, at...),
	} {
		r := runCLI(env, "", args...)
		expectExit(t, args[0]+" --async", r, cli.ExitOK)
		if out := r.out(t); out["status"] != "ACCEPTED" || out["mutation_id"] == "" {
			t.Fatalf("%s --async output: %v", args[0], out)
		}
	}
	eventuallyState(t, s.Client, addr("shop", "orders", "async-1"), `{"n":1,"m":2}`, 30*time.Second)
	r := runCLI(env, "", append([]string{"delete", "--async"}, at...)...)
	expectExit(t, "delete --async", r, cli.ExitOK)
	eventuallyState(t, s.Client, addr("shop", "orders", "async-1"), "absent", 30*time.Second)
}
