package testkit

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

func TestEnvPutsListenersOnLoopback(t *testing.T) {
	env := Env()
	for _, k := range []string{"SINK_GRPC_ADDRESS", "SINK_HTTP_ADDRESS"} {
		if env[k] != "127.0.0.1:0" {
			t.Errorf("Env()[%s] = %q, want 127.0.0.1:0", k, env[k])
		}
	}
	env = Env("SINK_HTTP_ADDRESS", "off", "SINK_MODE", "worker")
	if env["SINK_HTTP_ADDRESS"] != "off" || env["SINK_MODE"] != "worker" || env["SINK_GRPC_ADDRESS"] != "127.0.0.1:0" {
		t.Errorf("overrides not applied: %v", env)
	}
	defer func() {
		if recover() == nil {
			t.Error("Env with an odd number of arguments did not panic")
		}
	}()
	//lint:ignore SA5012 the odd number of arguments is what this test checks
	Env("SINK_MODE")
}

func TestEnvironLetsTheListenersWin(t *testing.T) {
	t.Setenv("SINK_GRPC_ADDRESS", ":8080")
	env := Environ("SINK_LOG_FORMAT", "json")
	last := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		last[k] = v
	}
	if last["SINK_GRPC_ADDRESS"] != "127.0.0.1:0" || last["SINK_HTTP_ADDRESS"] != "127.0.0.1:0" || last["SINK_LOG_FORMAT"] != "json" {
		t.Errorf("the last entries are %v", last)
	}
	if !slices.Contains(env, "SINK_GRPC_ADDRESS=:8080") {
		t.Error("the process environment is missing")
	}
}

func TestRepoRoot(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "internal", "testkit", "testkit.go")); err != nil {
		t.Fatalf("RepoRoot() = %s, which does not hold this package: %v", root, err)
	}
	t.Chdir(t.TempDir())
	if _, err := RepoRoot(); err == nil {
		t.Error("RepoRoot found a root outside the repository")
	}
}

func TestModulePath(t *testing.T) {
	for gomod, want := range map[string]string{
		"module github.com/sink-io/sink\n\ngo 1.26\n": ModulePath,
		"// c\nmodule \"x/y\" // c\n":                 "x/y",
		"modulex a\nmodule\tb\n":                      "b",
		"go 1.26\n":                                   "",
	} {
		if got := modulePath([]byte(gomod)); got != want {
			t.Errorf("modulePath(%q) = %q, want %q", gomod, got, want)
		}
	}
}

func TestLockedBuffer(t *testing.T) {
	var b LockedBuffer
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				_, _ = b.Write([]byte("x"))
				_ = b.String()
			}
		})
	}
	wg.Wait()
	if n := len(b.String()); n != 800 {
		t.Fatalf("len = %d, want 800", n)
	}
}
