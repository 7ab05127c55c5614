package integration_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/sink-io/sink"

// The dependency rule of the hexagonal layout, checked on every production
// (non-test) Go file of the module:
//   - domain imports only the standard library;
//   - ports imports the standard library and domain;
//   - application imports the standard library, domain and ports;
//   - adapters import domain and ports (the gRPC adapter also application),
//     never each other, never bootstrap;
//   - the client (client/) imports only domain and proto of the module;
//   - internal/ (technology helpers shared by adapters, such as the BSON
//     wire-format check) imports none of Sink's layers;
//   - only bootstrap imports fx.
func TestDependencyRule(t *testing.T) {
	root := repoRoot(t)
	files := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", ".bin", "tools", "testdata", "node_modules":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		files++
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if msg := violates(rel, p); msg != "" {
				t.Errorf("%s imports %s: %s", rel, p, msg)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 20 {
		t.Fatalf("checked only %d files; is the walk broken?", files)
	}
}

func TestDependencyRuleCatchesViolations(t *testing.T) {
	bad := map[string]string{
		"domain/x.go":            "google.golang.org/grpc",
		"ports/x.go":             module + "/application",
		"application/x.go":       module + "/adapters/memory",
		"adapters/memory/x.go":   module + "/adapters/grpc",
		"adapters/mongodb/x.go":  module + "/application",
		"adapters/kafka/x.go":    "go.uber.org/fx",
		"application/y.go":       "go.mongodb.org/mongo-driver/v2/bson",
		"adapters/grpc/x.go":     module + "/bootstrap",
		"cmd/sink/main.go":       "go.uber.org/fx",
		"ports/storagetest/x.go": module + "/adapters/memory",
	}
	for file, imp := range bad {
		if violates(file, imp) == "" {
			t.Errorf("%s importing %s was not flagged", file, imp)
		}
	}
	good := map[string]string{
		"domain/x.go":           "encoding/binary",
		"ports/x.go":            module + "/domain",
		"application/x.go":      module + "/ports",
		"adapters/grpc/x.go":    module + "/application",
		"adapters/memory/x.go":  module + "/ports",
		"bootstrap/x.go":        "go.uber.org/fx",
		"adapters/mongodb/x.go": module + "/internal/bsonwire",
	}
	for file, imp := range good {
		if msg := violates(file, imp); msg != "" {
			t.Errorf("%s importing %s was flagged: %s", file, imp, msg)
		}
	}
}

func stdlib(p string) bool { return !strings.Contains(strings.SplitN(p, "/", 2)[0], ".") }

func violates(file, imp string) string {
	internal := strings.HasPrefix(imp, module+"/")
	target := strings.TrimPrefix(imp, module+"/")
	layer := strings.SplitN(file, "/", 2)[0]
	if (imp == "go.uber.org/fx" || strings.HasPrefix(imp, "go.uber.org/fx/")) && layer != "bootstrap" && layer != "integration" {
		return "only bootstrap imports fx"
	}
	under := func(prefix string) bool { return target == prefix || strings.HasPrefix(target, prefix+"/") }
	switch layer {
	case "domain":
		if !stdlib(imp) {
			return "domain imports only the standard library"
		}
	case "ports":
		if !stdlib(imp) && !(internal && (under("domain") || under("ports"))) {
			return "ports imports only the standard library and domain"
		}
	case "application":
		if !stdlib(imp) && !(internal && (under("domain") || under("ports"))) {
			return "application imports only the standard library, domain and ports"
		}
	case "internal":
		if internal && !under("internal") {
			return "internal/ holds shared technology helpers that import none of Sink's layers"
		}
	case "client":
		if internal && !(under("domain") || under("proto") || under("client")) {
			return "the client talks to Sink over the API only: it imports domain and proto, never the server's layers"
		}
	case "adapters":
		if !internal {
			return ""
		}
		own := strings.SplitN(file, "/", 3)[1]
		switch {
		case under("adapters/" + own), under("domain"), under("ports"), under("proto"), under("internal"):
		case under("application") && own == "grpc":
		case under("adapters"):
			return "adapters never import each other"
		default:
			return "adapters import only domain, ports (and the gRPC adapter application)"
		}
	}
	return ""
}

func repoRoot(t *testing.T) string {
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && strings.Contains(string(b), "module "+module+"\n") {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("repository root not found")
		}
		dir = parent
	}
}
