package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/sink-io/sink/internal/testkit"
)

func writeProfiles(t *testing.T, src string) string {
	return testkit.WriteFile(t, "profiles.yaml", src)
}

func TestProfilesCommand(t *testing.T) {
	code, out, errs := sink(t, "", "profiles", "check", "../../examples/profiles.yaml")
	if code != ExitOK {
		t.Fatalf("check: %d %s", code, errs)
	}
	var checked struct {
		Valid    bool
		Profiles []struct{ Name, Fingerprint string }
	}
	if err := json.Unmarshal([]byte(out), &checked); err != nil || !checked.Valid || len(checked.Profiles) < 4 || !strings.HasPrefix(checked.Profiles[0].Fingerprint, "sha256:") {
		t.Fatalf("check output %s (%v)", out, err)
	}

	bad := writeProfiles(t, "profiles:\n  - name: a\n    rules: [{op: nope}, {op: set, path: x, value: '1'}]\n")
	code, out, errs = sink(t, "", "profiles", "check", bad)
	if code != ExitFailed || !strings.Contains(errs, "sink profiles: "+bad+": 2 problems") {
		t.Fatalf("check of a bad file: exit %d, %q", code, errs)
	}
	var problems struct {
		Valid    bool
		Problems []struct {
			File, Profile, Message string
			Line                   int
			Rule                   *int
		}
	}
	if err := json.Unmarshal([]byte(out), &problems); err != nil || problems.Valid || len(problems.Problems) != 2 || *problems.Problems[1].Rule != 1 || problems.Problems[1].Line != 3 {
		t.Fatalf("check output %s (%v)", out, err)
	}

	for _, c := range []struct {
		args []string
		want string
		code int
	}{
		{[]string{"apply", "../../examples/profiles.yaml", "counter", "--current", `{"n":1,"merges":4}`, "--intent", `{"by":2}`}, `{"n":3,"merges":5}`, 0},
		{[]string{"apply", "../../examples/profiles.yaml", "counter", "--intent", `{}`}, `{"n":1,"merges":1}`, 0},
		{[]string{"apply", "--bson", "../../examples/profiles.yaml", "counter", "--current", `{"n":{"$numberLong":"1"}}`, "--intent", `{"by":2}`}, `{"n":3,"merges":1}`, 0},
		{[]string{"apply", "../../examples/profiles.yaml", "order-status", "--current", `{"status":"new"}`, "--intent", `{"status":"shipped"}`}, "", 1},
		{[]string{"apply", "../../examples/profiles.yaml", "nope", "--intent", `{}`}, "", 1},
		{[]string{"apply", "../../examples/profiles.yaml", "counter"}, "", 2},
		{[]string{"apply", "../../examples/profiles.yaml", "counter", "--intent", "@missing.json"}, "", 2},
		{[]string{"check"}, "", 2},
		{[]string{}, "", 2},
	} {
		code, out, errs := sink(t, "", append([]string{"profiles"}, c.args...)...)
		if code != c.code {
			t.Fatalf("%v: exit %d, want %d (%s)", c.args, code, c.code, errs)
		}
		if code != ExitOK && !strings.HasPrefix(errs, "sink profiles: ") {
			t.Errorf("%v: stderr %q", c.args, errs)
		}
		if c.want != "" {
			var got, want any
			if json.Unmarshal([]byte(out), &got) != nil || json.Unmarshal([]byte(c.want), &want) != nil {
				t.Fatalf("%v: output %s", c.args, out)
			}
			g, _ := json.Marshal(got)
			w, _ := json.Marshal(want)
			if !bytes.Equal(g, w) {
				t.Fatalf("%v: got %s, want %s", c.args, g, w)
			}
		}
	}
}
