package integration_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sink-io/sink/internal/testkit"
)

const module = testkit.ModulePath

// The dependency rule of the hexagonal layout, checked on every production
// (non-test) Go file of the module:
//   - domain imports only the standard library;
//   - ports imports the standard library and domain;
//   - application imports the standard library, domain, ports and
//     internal/ctxtime (the context-bound sleep it shares with the Kafka
//     adapter, itself standard library only);
//   - adapters import domain and ports (the gRPC adapter also application),
//     never each other, never bootstrap;
//   - the command line (bootstrap/cli: the API client and the operator
//     tools) never imports application, ports or the composition root (package bootstrap);
//   - bootstrap/envconfig (the environment layer: SINK_* variables mapped
//     onto the application's and adapters' configs) never imports
//     bootstrap or the command line, and adapters never import it;
//   - the rest of internal/ (technology helpers shared by adapters, such as
//     the BSON wire-format check and the tracing helpers) imports no
//     layer of Sink but domain;
//   - only bootstrap imports fx;
//   - the Go client (client/) is a library for Sink's users: it imports
//     only the generated API (proto/) of Sink, never a layer of the server;
//   - the public test kit sinktest/ (an in-process Sink for users' tests)
//     imports only the composition root (package bootstrap), the client,
//     ports, domain, the memory adapter and the generated API, and never
//     internal/testkit (it is production-level code); no production code
//     but itself imports it (tests and the test kit may);
//   - production code (everything outside integration/ and the test kit
//     internal/testkit/) never imports the test kit or the conformance
//     suites ports/storagetest and ports/mergetest.
func TestDependencyRule(t *testing.T) {
	files := productionGoFiles(t, parser.ImportsOnly, func(rel string, f *ast.File) {
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if msg := violates(rel, p); msg != "" {
				t.Errorf("%s imports %s: %s", rel, p, msg)
			}
		}
	})
	if files < 20 {
		t.Fatalf("checked only %d files; is the walk broken?", files)
	}
}

// productionGoFiles parses every production (non-test) Go file of the
// module with mode and calls check with its slash-separated path relative
// to the repository root; it returns how many files it checked.
func productionGoFiles(t *testing.T, mode parser.Mode, check func(rel string, f *ast.File)) int {
	t.Helper()
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
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, mode)
		if err != nil {
			return err
		}
		files++
		check(filepath.ToSlash(rel), f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func TestDependencyRuleCatchesViolations(t *testing.T) {
	bad := map[string]string{
		"domain/x.go":            "google.golang.org/grpc",
		"ports/x.go":             module + "/application",
		"application/x.go":       module + "/adapters/memory",
		"adapters/memory/x.go":   module + "/adapters/sinkgrpc",
		"adapters/mongodb/x.go":  module + "/application",
		"adapters/kafka/x.go":    "go.uber.org/fx",
		"application/y.go":       "go.mongodb.org/mongo-driver/v2/bson",
		"adapters/sinkgrpc/x.go": module + "/bootstrap",
		"cmd/sink/main.go":       "go.uber.org/fx",
		"ports/storagetest/x.go": module + "/adapters/memory",
		"application/z.go":       module + "/internal/bsonwire",
		"internal/ctxtime/x.go":  module + "/domain",
		"internal/ctxtime/y.go":  "golang.org/x/sync/errgroup",
		// Production code never imports test code.
		"adapters/mongodb/y.go":       module + "/internal/testkit/mongotest",
		"bootstrap/y.go":              module + "/internal/testkit",
		"cmd/sink/x.go":               module + "/internal/testkit/sinktest",
		"internal/bsonwire/x.go":      module + "/internal/testkit/testcerts",
		"adapters/memory/y.go":        module + "/ports/storagetest",
		"bootstrap/z.go":              module + "/ports/mergetest",
		"examples/customprofile/x.go": module + "/ports/mergetest",
		"ports/mergetest/x.go":        module + "/internal/testkit",
		"bootstrap/cli/x.go":          module + "/application",
		"bootstrap/cli/y.go":          module + "/ports",
		"bootstrap/cli/z.go":          module + "/bootstrap",
		"bootstrap/envconfig/x.go":    module + "/bootstrap",
		"bootstrap/envconfig/y.go":    module + "/bootstrap/cli",
		"adapters/kafka/z.go":         module + "/bootstrap/envconfig",
		"adapters/auth/x.go":          module + "/bootstrap/cli",
		"internal/pemfile/x.go":       module + "/adapters/kafka",
		"internal/spans/x.go":         module + "/ports",
		// The client is a library of the API, not of the server.
		"client/x.go": module + "/domain",
		"client/y.go": module + "/application",
		"client/z.go": module + "/internal/testkit",
		"client/w.go": module + "/sinktest",
		// The public test kit: the composition root, client and ports only.
		"sinktest/x.go": module + "/internal/testkit",
		"sinktest/y.go": module + "/internal/testkit/sinktest",
		"sinktest/z.go": module + "/application",
		"sinktest/w.go": module + "/adapters/mongodb",
		"sinktest/v.go": module + "/bootstrap/cli",
		"sinktest/u.go": "go.uber.org/fx",
		// Nothing in production imports the public test kit.
		"bootstrap/w.go":              module + "/sinktest",
		"cmd/sink/y.go":               module + "/sinktest",
		"examples/customprofile/y.go": module + "/sinktest",
		"adapters/memory/z.go":        module + "/sinktest",
	}
	for file, imp := range bad {
		if violates(file, imp) == "" {
			t.Errorf("%s importing %s was not flagged", file, imp)
		}
	}
	good := map[string]string{
		"domain/x.go":              "encoding/binary",
		"ports/x.go":               module + "/domain",
		"application/x.go":         module + "/ports",
		"adapters/sinkgrpc/x.go":   module + "/application",
		"adapters/memory/x.go":     module + "/ports",
		"bootstrap/x.go":           "go.uber.org/fx",
		"adapters/mongodb/x.go":    module + "/internal/bsonwire",
		"application/z.go":         module + "/internal/ctxtime",
		"adapters/kafka/y.go":      module + "/internal/ctxtime",
		"bootstrap/cli/x.go":       module + "/adapters/kafka",
		"bootstrap/cli/y.go":       module + "/bootstrap/envconfig",
		"bootstrap/envconfig/x.go": module + "/adapters/kafka",
		"bootstrap/envconfig/y.go": module + "/application",
		"adapters/auth/x.go":       module + "/internal/pemfile",
		"internal/spans/x.go":      module + "/domain",
		// Test code may import test code.
		"internal/testkit/sinktest/x.go":  module + "/bootstrap",
		"internal/testkit/kafkatest/x.go": module + "/internal/testkit",
		"integration/cmd/sinkcount/x.go":  module + "/internal/testkit/countprofile",
		"ports/storagetest/y.go":          module + "/ports/mergetest",
		// The client and the public test kit.
		"client/x.go":                    module + "/proto/sink/v1",
		"client/y.go":                    "go.mongodb.org/mongo-driver/v2/bson",
		"sinktest/x.go":                  module + "/bootstrap",
		"sinktest/y.go":                  module + "/client",
		"sinktest/z.go":                  module + "/ports",
		"sinktest/w.go":                  module + "/adapters/memory",
		"integration/x.go":               module + "/sinktest",
		"internal/testkit/sinktest/y.go": module + "/sinktest",
	}
	for file, imp := range good {
		if msg := violates(file, imp); msg != "" {
			t.Errorf("%s importing %s was flagged: %s", file, imp, msg)
		}
	}
}

func stdlib(p string) bool { return !strings.Contains(strings.SplitN(p, "/", 2)[0], ".") }

// underPath reports whether the slash-separated path p is dir or lies
// below it.
func underPath(p, dir string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }

// testCode reports whether a (non-_test.go) file is test code: the
// integration tests' programs and the test kit.
func testCode(file string) bool {
	return underPath(file, "integration") || underPath(file, "internal/testkit")
}

// conformanceSuite reports whether a file belongs to a public conformance
// suite, which third-party adapters and profiles import.
func conformanceSuite(file string) bool {
	return underPath(file, "ports/storagetest") || underPath(file, "ports/mergetest")
}

func violates(file, imp string) string {
	internal := strings.HasPrefix(imp, module+"/")
	target := strings.TrimPrefix(imp, module+"/")
	layer := strings.SplitN(file, "/", 2)[0]
	if internal && underPath(target, "internal/testkit") && !testCode(file) {
		return "production code and the conformance suites never import the test kit (internal/testkit is for tests only)"
	}
	if internal && (underPath(target, "ports/storagetest") || underPath(target, "ports/mergetest")) && !testCode(file) && !conformanceSuite(file) {
		return "production code never imports the conformance suites (they are for tests)"
	}
	if internal && underPath(target, "sinktest") && !underPath(file, "sinktest") && !testCode(file) {
		return "only tests import the public test kit sinktest"
	}
	if testCode(file) {
		return "" // test code may import every layer
	}
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
		if !stdlib(imp) && !(internal && (under("domain") || under("ports") || under("internal/ctxtime"))) {
			return "application imports only the standard library, domain, ports and internal/ctxtime"
		}
	case "bootstrap":
		if underPath(file, "bootstrap/cli") {
			if internal && (under("application") || under("ports") || target == "bootstrap") {
				return "the command line is a client of the API and an operator tool: it never imports application, ports or the composition root"
			}
			return ""
		}
		if underPath(file, "bootstrap/envconfig") {
			if internal && (target == "bootstrap" || under("bootstrap/cli")) {
				return "the environment layer maps SINK_* variables onto the configs of application and adapters; it never imports the composition root or the command line"
			}
			return ""
		}
	case "internal":
		if underPath(file, "internal/ctxtime") && !stdlib(imp) {
			return "internal/ctxtime imports only the standard library (the application layer imports it)"
		}
		if internal && !under("internal") && !under("domain") {
			return "internal/ holds shared technology helpers that import no layer of Sink but domain"
		}
	case "client":
		if internal && !under("proto") {
			return "the Go client imports only the generated API (proto/), never a layer of the server"
		}
	case "sinktest":
		if !internal {
			return ""
		}
		if !(target == "bootstrap" || under("client") || under("ports") || under("domain") || under("adapters/memory") || under("proto")) {
			return "the public test kit imports only the composition root (package bootstrap), the client, ports, domain, the memory adapter and the generated API"
		}
	case "adapters":
		if !internal {
			return ""
		}
		own := strings.SplitN(file, "/", 3)[1]
		switch {
		case under("bootstrap/envconfig"), under("bootstrap/cli"):
			return "adapters never import the environment layer or the command line (they take plain configs)"
		case under("adapters/" + own), under("domain"), under("ports"), under("proto"), under("internal"):
		case under("application") && own == "sinkgrpc":
		case under("adapters"):
			return "adapters never import each other"
		default:
			return "adapters import only domain, ports (and the gRPC adapter application)"
		}
	}
	return ""
}

func repoRoot(t testing.TB) string {
	t.Helper()
	root, err := testkit.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}
