package integration_test

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// bootstrapLineBudget bounds bootstrap's production lines: it composes
// modules of plain constructors, and code that grows it past the budget
// belongs in an adapter, the environment layer or the command line. (Raised
// from 900 when bootstrap got the in-process assembly of the public test
// kit, StartInProcess, and the PostgreSQL storage module: composition, as
// the rest.)
const bootstrapLineBudget = 1050

// bootstrapForbidden are imports that mean bootstrap does work of its own
// instead of composing: listeners and HTTP handlers (adapters/sinkgrpc,
// adapters/opshttp), TLS and SASL (adapters/auth, adapters/kafka), signal
// handling, flags and JSON (bootstrap/cli), URI parsing (adapters/mongodb).
var bootstrapForbidden = []string{
	"net", "net/http", "net/url", "crypto/tls", "crypto/x509", "os/signal",
	"flag", "encoding/json", "github.com/twmb/franz-go/pkg/sasl",
	"go.mongodb.org/mongo-driver/v2/x", "github.com/twmb/franz-go/plugin",
}

// bootstrapProblems lists what makes one bootstrap source file more than
// composition: a forbidden import, a goroutine, a select (serve, drain and
// watch loops live in the adapters' Start/Stop types, wired with
// fx.StartStopHook).
func bootstrapProblems(name string, src []byte) ([]string, error) {
	f, err := parser.ParseFile(token.NewFileSet(), name, src, 0)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, imp := range f.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		for _, bad := range bootstrapForbidden {
			if underPath(p, bad) {
				out = append(out, "imports "+p)
			}
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n.(type) {
		case *ast.GoStmt:
			out = append(out, "starts a goroutine")
		case *ast.SelectStmt:
			out = append(out, "has a select statement")
		}
		return true
	})
	return out, nil
}

// TestBootstrapOnlyComposes keeps bootstrap/ to composition: fx modules
// that call plain constructors, role selection, and lifecycle wiring.
func TestBootstrapOnlyComposes(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(repoRoot(t), "bootstrap", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	lines, checked := 0, 0
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		lines += bytes.Count(src, []byte("\n"))
		problems, err := bootstrapProblems(file, src)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range problems {
			t.Errorf("bootstrap/%s %s: bootstrap only composes", filepath.Base(file), p)
		}
	}
	if checked < 5 {
		t.Fatalf("checked only %d files; is the glob broken?", checked)
	}
	if lines > bootstrapLineBudget {
		t.Errorf("bootstrap has %d production lines, more than its budget of %d: move the work into the package it belongs to", lines, bootstrapLineBudget)
	}
	t.Logf("bootstrap: %d production lines in %d files", lines, checked)
}

func TestBootstrapRuleCatchesViolations(t *testing.T) {
	for name, src := range map[string]string{
		"listener": "package bootstrap\nimport \"net\"\nvar _ = net.Listen\n",
		"handler":  "package bootstrap\nimport \"net/http\"\nvar _ http.Handler\n",
		"tls":      "package bootstrap\nimport \"crypto/tls\"\nvar _ tls.Config\n",
		"sasl":     "package bootstrap\nimport \"github.com/twmb/franz-go/pkg/sasl/plain\"\nvar _ = plain.Auth{}\n",
		"loop":     "package bootstrap\nfunc f(c chan int) { go func() { for range c {} }() }\n",
		"drain":    "package bootstrap\nfunc f(a, b chan int) { select { case <-a: case <-b: } }\n",
	} {
		problems, err := bootstrapProblems(name+".go", []byte(src))
		if err != nil {
			t.Fatal(err)
		}
		if len(problems) == 0 {
			t.Errorf("%s was not flagged", name)
		}
	}
	ok := "package bootstrap\nimport (\n\t\"context\"\n\t\"go.uber.org/fx\"\n)\nfunc f(lc fx.Lifecycle, start func(context.Context) error) { lc.Append(fx.StartStopHook(start, start)) }\n"
	if problems, err := bootstrapProblems("ok.go", []byte(ok)); err != nil || len(problems) > 0 {
		t.Errorf("composition was flagged: %v %v", problems, err)
	}
}

// packageNameOK reports whether a package's name matches its folder: the
// folder's name, main for commands, and for generated protobuf packages
// (proto/<name>/v1) the folder names joined (sinkv1, queuev1).
func packageNameOK(dir, name string) bool {
	base := path.Base(dir)
	switch {
	case name == base, name == "main":
		return true
	case underPath(dir, "proto"):
		return name == path.Base(path.Dir(dir))+base
	}
	return false
}

func TestPackageNamesMatchFolders(t *testing.T) {
	checked := productionGoFiles(t, parser.PackageClauseOnly, func(rel string, f *ast.File) {
		if dir := path.Dir(rel); !packageNameOK(dir, f.Name.Name) {
			t.Errorf("%s: package %s in folder %s", rel, f.Name.Name, dir)
		}
	})
	if checked < 20 {
		t.Fatalf("checked only %d files", checked)
	}
	for dir, name := range map[string]string{"adapters/grpc": "sinkgrpc", "adapters/prometheus": "sinkprom", "proto/sink/v1": "queuev1", "domain": "model"} {
		if packageNameOK(dir, name) {
			t.Errorf("package %s in %s was not flagged", name, dir)
		}
	}
}
