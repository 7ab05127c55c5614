package integration_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// binaries are the commands buildBinary built, by package.
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
	binaries.mu.Lock()
	if binaries.byPkg == nil {
		binaries.byPkg = map[string]*builtBinary{}
	}
	b := binaries.byPkg[pkg]
	if b == nil {
		b = &builtBinary{}
		binaries.byPkg[pkg] = b
	}
	binaries.mu.Unlock()
	b.once.Do(func() {
		dir, err := os.MkdirTemp("", name+"-bin-")
		if err != nil {
			b.err = err
			return
		}
		b.path = filepath.Join(dir, name)
		cmd := exec.Command("go", "build", "-o", b.path, pkg)
		cmd.Dir = repoRoot(t)
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}
