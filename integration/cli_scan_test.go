package integration_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/sink-io/sink/bootstrap/cli"
	"github.com/sink-io/sink/internal/testkit/sinktest"
)

func TestCLIScanAndCount(t *testing.T) {
	s := sinktest.Start(t, nil)
	env := map[string]string{"SINK_ADDRESS": s.Addr}
	run := func(args ...string) cliResult { return runCLI(env, "", args...) }
	for i := range 5 {
		r := run("put", "-n", "shop", "-d", "orders", "--key", fmt.Sprintf("o-%d", i), "--data", fmt.Sprintf(`{"total":%d,"paid":%v}`, i*10, i%2 == 0))
		expectExit(t, "put", r, cli.ExitOK)
	}
	lines := func(r cliResult) []map[string]any {
		var out []map[string]any
		for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
			var m map[string]any
			if err := json.Unmarshal([]byte(l), &m); err != nil {
				t.Fatalf("line %q is not JSON: %v", l, err)
			}
			out = append(out, m)
		}
		return out
	}
	r := run("scan", "-n", "shop", "-d", "orders", "--where", "doc.paid == true", "--limit", "2")
	expectExit(t, "scan", r, cli.ExitOK)
	got := lines(r)
	if len(got) != 3 || got[0]["key"] != "o-0" || got[1]["key"] != "o-2" || got[2]["cursor"] == nil {
		t.Fatalf("scan output:\n%s", r.stdout)
	}
	if doc, _ := got[1]["document"].(map[string]any); doc["total"] != float64(20) {
		t.Fatalf("document of o-2: %v", got[1]["document"])
	}
	r = run("scan", "-n", "shop", "-d", "orders", "--where", "doc.paid == true", "--cursor", got[2]["cursor"].(string), "--keys-only")
	expectExit(t, "resumed scan", r, cli.ExitOK)
	got = lines(r)
	if len(got) != 1 || got[0]["key"] != "o-4" || got[0]["document"] != nil {
		t.Fatalf("resumed scan output:\n%s", r.stdout)
	}
	r = run("count", "-n", "shop", "-d", "orders", "--where", "doc.total >= 20")
	expectExit(t, "count", r, cli.ExitOK)
	if r.stdout != "3\n" {
		t.Fatalf("count printed %q", r.stdout)
	}
	r = run("count", "-n", "shop", "-d", "orders", "--where", "doc.total + 1 > 2")
	expectExit(t, "count with a bad filter", r, cli.ExitFailed)
	if !strings.Contains(r.stderr, "1:11") {
		t.Fatalf("bad filter error: %s", r.stderr)
	}
}
