package integration_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// binaries are the commands buildBinary built, by package (and flags).
var binaries struct {
	mu    sync.Mutex
	byPkg map[string]*builtBinary
}

type builtBinary struct {
	once sync.Once
	path string
	err  error
}

// buildBinary builds the command package pkg (a path from the repository
// root, like ./cmd/sink) once per test binary, as an executable called
// name in a directory of its own, and returns its path (the packages are
// already compiled for the tests, so this mostly links).
func buildBinary(t testing.TB, pkg, name string) string {
	t.Helper()
	return buildBinaryWith(t, pkg, name)
}

// buildBinaryWith is buildBinary with extra go build flags (such as
// -tags), built once per package and flags.
func buildBinaryWith(t testing.TB, pkg, name string, flags ...string) string {
	t.Helper()
	id := strings.Join(append([]string{pkg}, flags...), " ")
	binaries.mu.Lock()
	if binaries.byPkg == nil {
		binaries.byPkg = map[string]*builtBinary{}
	}
	b := binaries.byPkg[id]
	if b == nil {
		b = &builtBinary{}
		binaries.byPkg[id] = b
	}
	binaries.mu.Unlock()
	b.once.Do(func() {
		dir, err := os.MkdirTemp("", name+"-bin-")
		if err != nil {
			b.err = err
			return
		}
		b.path = filepath.Join(dir, name)
		cmd := exec.Command("go", append(append([]string{"build", "-o", b.path}, flags...), pkg)...)
		cmd.Dir = repoRoot(t)
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build %s: %v\n%s", id, err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}
