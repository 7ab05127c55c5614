package integration_test

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/rhysd/actionlint"
)

const releaseWorkflow = ".github/workflows/release-image.yml"

// actionlint (pinned in go.mod) finds no problem in the release workflow.
func TestReleaseWorkflowPassesActionlint(t *testing.T) {
	root := repoRoot(t)
	var out strings.Builder
	l, err := actionlint.NewLinter(&out, &actionlint.LinterOptions{WorkingDir: root})
	if err != nil {
		t.Fatal(err)
	}
	errs, err := l.LintFile(filepath.Join(root, releaseWorkflow), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(errs) > 0 {
		t.Fatalf("actionlint reports %d problems:\n%s", len(errs), out.String())
	}
	// The linter does catch problems (guards against a silently idle lint).
	errs, err = l.Lint("bad.yml", []byte("on: push\njobs:\n  x:\n    runs-on: ubuntu-latest\n    steps:\n      - uses: docker/metadata-action@v5\n        with:\n          tags: ${{ github.nope }}\n"), nil)
	if err != nil || len(errs) == 0 {
		t.Fatalf("actionlint found nothing in a broken workflow (%v)", err)
	}
}

func parseReleaseWorkflow(t *testing.T) *actionlint.Workflow {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), releaseWorkflow))
	if err != nil {
		t.Fatal(err)
	}
	wf, errs := actionlint.Parse(b)
	if len(errs) > 0 {
		t.Fatalf("parse: %v", errs[0])
	}
	return wf
}

// stepInputs returns the `with` inputs of the step using action (by prefix).
func stepInputs(t *testing.T, wf *actionlint.Workflow, action string) map[string]string {
	t.Helper()
	for _, job := range wf.Jobs {
		for _, st := range job.Steps {
			ex, ok := st.Exec.(*actionlint.ExecAction)
			if !ok || !strings.HasPrefix(ex.Uses.Value, action+"@") {
				continue
			}
			in := map[string]string{}
			for k, v := range ex.Inputs {
				in[k] = v.Value.Value
			}
			return in
		}
	}
	t.Fatalf("no step uses %s", action)
	return nil
}

func TestReleaseWorkflowShape(t *testing.T) {
	wf := parseReleaseWorkflow(t)
	if len(wf.On) != 1 || wf.On[0].EventName() != "release" {
		t.Fatalf("triggers: %v", wf.On)
	}
	if ev := wf.On[0].(*actionlint.WebhookEvent); len(ev.Types) != 1 || ev.Types[0].Value != "published" {
		t.Fatalf("release types: %v", ev.Types)
	}
	for _, a := range []string{"actions/checkout", "docker/setup-qemu-action", "docker/setup-buildx-action"} {
		stepInputs(t, wf, a)
	}
	if in := stepInputs(t, wf, "docker/login-action"); in["registry"] != "ghcr.io" || !strings.Contains(in["password"], "secrets.GITHUB_TOKEN") {
		t.Fatalf("login: %v", in)
	}
	build := stepInputs(t, wf, "docker/build-push-action")
	if build["platforms"] != "linux/amd64,linux/arm64" || build["push"] != "true" || !strings.Contains(build["tags"], "steps.meta.outputs.tags") {
		t.Fatalf("build-push: %v", build)
	}
	if p := wf.Permissions; p == nil || p.Scopes["packages"] == nil || p.Scopes["packages"].Value.Value != "write" {
		t.Fatal("the workflow needs packages: write to push to ghcr.io")
	}
}

// The metadata-action tag rules, evaluated for sample releases with a model
// of the action (type=semver patterns, which also skip {{major}} and
// {{major}}.{{minor}} for semver pre-releases; type=raw; enable=).
func TestReleaseImageTags(t *testing.T) {
	meta := stepInputs(t, parseReleaseWorkflow(t), "docker/metadata-action")
	if !strings.Contains(meta["flavor"], "latest=false") {
		t.Fatalf("flavor must turn off the automatic latest tag (it is given by an explicit rule): %q", meta["flavor"])
	}
	if meta["images"] != "ghcr.io/${{ github.repository }}" {
		t.Fatalf("images: %q", meta["images"])
	}
	cases := []struct {
		tag        string
		prerelease bool
		want       []string
	}{
		{"v0.1.0", false, []string{"0", "0.1", "0.1.0", "latest"}},
		{"v1.2.3", false, []string{"1", "1.2", "1.2.3", "latest"}},
		{"v0.2.0-rc.1", true, []string{"0.2.0-rc.1"}},
		{"v0.2.0-rc.1", false, []string{"0.2.0-rc.1"}}, // semver pre-release not flagged on GitHub
		{"v1.3.0", true, []string{"1.3.0"}},            // flagged as prerelease on GitHub
	}
	for _, c := range cases {
		got := evalTags(t, meta["tags"], map[string]any{
			"github.event.release.tag_name":   c.tag,
			"github.event.release.prerelease": c.prerelease,
		})
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("release %s (prerelease %v): tags %v, want %v", c.tag, c.prerelease, got, c.want)
		}
	}
}

// evalTags applies the tag rules (one per line) for the given context.
func evalTags(t *testing.T, rules string, ctx map[string]any) []string {
	t.Helper()
	var tags []string
	for _, line := range strings.Split(strings.TrimSpace(rules), "\n") {
		attrs := map[string]string{}
		for _, part := range splitOutsideExpr(strings.TrimSpace(line)) {
			k, v, ok := strings.Cut(part, "=")
			if !ok {
				t.Fatalf("rule %q: attribute %q has no value", line, part)
			}
			attrs[k] = evalTemplate(t, v, ctx)
		}
		if e, ok := attrs["enable"]; ok && e != "true" {
			continue
		}
		switch attrs["type"] {
		case "raw":
			tags = append(tags, attrs["value"])
		case "semver":
			major, minor, patch, pre, ok := parseSemver(attrs["value"])
			if !ok {
				t.Fatalf("rule %q: %q is not semver", line, attrs["value"])
			}
			full := fmt.Sprintf("%d.%d.%d", major, minor, patch)
			if pre != "" {
				full += "-" + pre
			}
			switch attrs["pattern"] {
			case "{{version}}":
				tags = append(tags, full)
			case "{{major}}.{{minor}}":
				if pre == "" {
					tags = append(tags, fmt.Sprintf("%d.%d", major, minor))
				}
			case "{{major}}":
				if pre == "" {
					tags = append(tags, fmt.Sprint(major))
				}
			default:
				t.Fatalf("rule %q: pattern %q not modelled", line, attrs["pattern"])
			}
		default:
			t.Fatalf("rule %q: type %q not modelled", line, attrs["type"])
		}
	}
	sort.Strings(tags)
	return tags
}

// splitOutsideExpr splits on commas that are not inside ${{ }}.
func splitOutsideExpr(s string) []string {
	var parts []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch {
		case strings.HasPrefix(s[i:], "${{"):
			depth++
		case strings.HasPrefix(s[i:], "}}") && depth > 0:
			depth--
		case s[i] == ',' && depth == 0:
			parts = append(parts, s[start:i])
			start = i + 1
		}
	}
	return append(parts, s[start:])
}

// evalTemplate replaces every ${{ expr }} with its value.
func evalTemplate(t *testing.T, s string, ctx map[string]any) string {
	t.Helper()
	for {
		i := strings.Index(s, "${{")
		if i < 0 {
			return s
		}
		j := strings.Index(s[i:], "}}")
		if j < 0 {
			t.Fatalf("unterminated expression in %q", s)
		}
		node, err := actionlint.NewExprParser().Parse(actionlint.NewExprLexer(s[i+3:i+j] + "}}"))
		if err != nil {
			t.Fatalf("expression %q: %v", s[i:i+j+2], err)
		}
		s = s[:i] + fmt.Sprint(evalExpr(t, node, ctx)) + s[i+j+2:]
	}
}

// evalExpr evaluates the expression forms the workflow uses.
func evalExpr(t *testing.T, n actionlint.ExprNode, ctx map[string]any) any {
	t.Helper()
	switch n := n.(type) {
	case *actionlint.NotOpNode:
		return !truthy(evalExpr(t, n.Operand, ctx))
	case *actionlint.LogicalOpNode:
		l, r := truthy(evalExpr(t, n.Left, ctx)), truthy(evalExpr(t, n.Right, ctx))
		if n.Kind == actionlint.LogicalOpNodeKindAnd {
			return l && r
		}
		return l || r
	case *actionlint.FuncCallNode:
		if strings.EqualFold(n.Callee, "contains") && len(n.Args) == 2 {
			return strings.Contains(fmt.Sprint(evalExpr(t, n.Args[0], ctx)), fmt.Sprint(evalExpr(t, n.Args[1], ctx)))
		}
	case *actionlint.StringNode:
		return n.Value
	case *actionlint.BoolNode:
		return n.Value
	case *actionlint.ObjectDerefNode, *actionlint.VariableNode:
		path := derefPath(n)
		v, ok := ctx[path]
		if !ok {
			t.Fatalf("context value %s not modelled", path)
		}
		return v
	}
	t.Fatalf("expression node %T not modelled", n)
	return nil
}

func derefPath(n actionlint.ExprNode) string {
	switch n := n.(type) {
	case *actionlint.VariableNode:
		return n.Name
	case *actionlint.ObjectDerefNode:
		return derefPath(n.Receiver) + "." + n.Property
	}
	return "?"
}

func truthy(v any) bool {
	switch v := v.(type) {
	case bool:
		return v
	case string:
		return v != ""
	}
	return v != nil
}

func parseSemver(v string) (major, minor, patch int, pre string, ok bool) {
	v = strings.TrimPrefix(v, "v")
	core, pre, _ := strings.Cut(v, "-")
	if _, err := fmt.Sscanf(core, "%d.%d.%d", &major, &minor, &patch); err != nil {
		return 0, 0, 0, "", false
	}
	return major, minor, patch, pre, true
}
