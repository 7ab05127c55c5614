// Package testkit holds what Sink's tests share: the environment that keeps
// a test's listeners off Sink's default ports, the repository root, and a
// goroutine-safe buffer for logs. Its subpackages start test servers
// (mongotest, kafkatest, sinktest), make certificates (testcerts) and hold a
// merge profile for tests (countprofile); cmd/ holds programs that tests
// build and run.
//
// Everything under internal/testkit is for tests only: production code never
// imports it (integration/architecture_test.go checks this).
package testkit

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// ModulePath is the path of Sink's main module.
const ModulePath = "github.com/sink-io/sink"

// listenEnv puts both of Sink's listeners on free loopback ports, so that no
// test uses the default addresses (:8080 for gRPC, :8081 for HTTP).
var listenEnv = []string{
	"SINK_GRPC_ADDRESS", "127.0.0.1:0",
	"SINK_HTTP_ADDRESS", "127.0.0.1:0",
}

// Env returns an environment for bootstrap.LoadConfig and sinktest.Start:
// SINK_GRPC_ADDRESS and SINK_HTTP_ADDRESS on 127.0.0.1:0, then kv as
// name, value pairs, which override them. It panics when kv has an odd
// length (a mistake in the test).
func Env(kv ...string) map[string]string {
	if len(kv)%2 != 0 {
		panic(fmt.Sprintf("testkit.Env: odd number of arguments (%d): want name, value pairs", len(kv)))
	}
	env := make(map[string]string, len(listenEnv)/2+len(kv)/2)
	for _, pairs := range [][]string{listenEnv, kv} {
		for i := 0; i < len(pairs); i += 2 {
			env[pairs[i]] = pairs[i+1]
		}
	}
	return env
}

// Environ is Env as NAME=value entries for exec.Cmd.Env, after this
// process's own environment (later entries win), for tests that run Sink as
// a separate process.
func Environ(kv ...string) []string {
	out := os.Environ()
	for k, v := range Env(kv...) {
		out = append(out, k+"="+v)
	}
	return out
}

// RepoRoot walks up from the working directory to the directory whose go.mod
// declares ModulePath.
func RepoRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("cannot get the working directory: %w", err)
	}
	for dir := wd; ; {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && modulePath(b) == ModulePath {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("cannot find the repository root: no go.mod of module %s in %s or its parents", ModulePath, wd)
		}
		dir = parent
	}
}

// modulePath returns the module path that a go.mod declares ("" when none).
func modulePath(gomod []byte) string {
	for line := range strings.Lines(string(gomod)) {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "module")
		if !ok || rest == "" || (rest[0] != ' ' && rest[0] != '\t') {
			continue
		}
		rest, _, _ = strings.Cut(rest, "//")
		return strings.Trim(strings.TrimSpace(rest), "\"`")
	}
	return ""
}

// LockedBuffer is a bytes.Buffer that goroutines may write and read at the
// same time, for example a process's or a logger's output. Its zero value is
// ready to use.
type LockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (l *LockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns everything written so far.
func (l *LockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// WriteFile writes content to a file named name in a fresh temporary
// directory of t and returns its path.
func WriteFile(t testing.TB, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
