package cli

import (
	"regexp"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
)

// commandForms are the commands and subcommands whose flags the CLI
// parses, as they are invoked.
var commandForms = [][]string{
	{"read"}, {"put"}, {"merge"}, {"delete"}, {"scan"}, {"count"}, {"health"}, {"hash-token"},
	{"profiles", "check"}, {"profiles", "apply"}, {"dead-letter", "list"}, {"dead-letter", "replay"},
}

var helpFlag = regexp.MustCompile(`(?m)^  -(\S+)(?: (\S+))?`)

// flagsOf returns the flags that `sink FORM --help` lists, with a value of
// the type each takes ("" for a boolean flag).
func flagsOf(t *testing.T, form []string) map[string]string {
	t.Helper()
	code, out, errs := sink(t, "", append(append([]string{}, form...), "--help")...)
	if code != ExitOK {
		t.Fatalf("%v --help: exit %d %s", form, code, errs)
	}
	if len(form) > 1 {
		// Only the section of this subcommand.
		_, section, ok := strings.Cut(out, "Flags of sink "+strings.Join(form, " ")+":\n")
		if !ok {
			return nil
		}
		section, _, _ = strings.Cut(section, "\nFlags of ")
		out = section
	}
	flags := map[string]string{}
	for _, m := range helpFlag.FindAllStringSubmatch(out, -1) {
		switch m[2] {
		case "":
			flags[m[1]] = ""
		case "duration":
			flags[m[1]] = "1s"
		case "int":
			flags[m[1]] = "1"
		default:
			flags[m[1]] = "v"
		}
	}
	return flags
}

// Every flag of every command given twice is a usage error that names it
// (a shorthand counts with its long flag): never silently the last value.
func TestRepeatedFlagsAreUsageErrors(t *testing.T) {
	total := 0
	for _, form := range commandForms {
		flags := flagsOf(t, form)
		if len(flags) == 0 && len(form) == 1 {
			t.Fatalf("%v: no flags found in --help; is the extraction broken?", form)
		}
		for name, value := range flags {
			args := append([]string{}, form...)
			for range 2 {
				args = append(args, "--"+name)
				if value != "" {
					args = append(args, value)
				}
			}
			long := name
			switch name {
			case "n":
				long = "namespace"
			case "d":
				long = "dataset"
			}
			code, out, errs := sink(t, "", args...)
			if code != ExitUsage || out != "" || !strings.Contains(errs, "--"+long+" is given 2 times") {
				t.Errorf("sink %q: exit %d, stdout %q, stderr %q; want a usage error naming --%s", args, code, out, errs, long)
			}
			total++
		}
	}
	code, _, errs := sink(t, "", "read", "-n", "a", "--namespace", "b", "-d", "d", "--key", "k")
	if code != ExitUsage || !strings.Contains(errs, "--namespace is given 2 times") {
		t.Errorf("-n and --namespace: exit %d %q", code, errs)
	}
	code, _, errs = sink(t, "", "read", "-n", "a", "-d", "d", "--key", "a", "--key", "b")
	if code != ExitUsage || !strings.Contains(errs, "--key is given 2 times") {
		t.Errorf("two --key: exit %d %q", code, errs)
	}
	if total < 40 {
		t.Fatalf("checked %d flags; is the extraction broken?", total)
	}
}

// The flags keep their types in --help (the counting wrapper is only
// there while parsing).
func TestHelpShowsFlagTypes(t *testing.T) {
	_, out, _ := sink(t, "", "put", "--help")
	for _, want := range []string{"  -timeout duration", "  -key string", "  -bson\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("put --help lacks %q:\n%s", want, out)
		}
	}
}

func TestUsageErrorsSayWhatAndWhere(t *testing.T) {
	for _, c := range []struct {
		args  []string
		stdin string
		want  string
	}{
		{[]string{"read", "-d", "d", "--key", "a"}, "", "sink read: --namespace is required (-n)\n"},
		{[]string{"read", "-n", "n", "--key", "a"}, "", "sink read: --dataset is required (-d)\n"},
		{[]string{"read", "--key", "a"}, "", "sink read: --namespace and --dataset are required\n"},
		{[]string{"put", "-n", "n", "-d", "d", "--key", "a", "--file", "-"}, "{\n  \"a\": 1,\n  \"b\": x\n}", "sink put: the document is not valid JSON: syntax error at byte 19 (line 3, column 8)\n"},
		{[]string{"merge", "-n", "n", "-d", "d", "--key", "a", "--data", `{"a":`}, "", "sink merge: the merge intent is not valid JSON: it ends before the value is complete (byte 5 (line 1, column 6))\n"},
		{[]string{"put", "-n", "n", "-d", "d", "--key", "a", "--content-type", "application/ld+json", "--data", `{]`}, "", "sink put: the document is not valid JSON: syntax error at byte 1 (line 1, column 2)\n"},
		{[]string{"put", "-n", "n", "-d", "d", "--key", "a", "--bson", "--data", `{"a":{"n":{"$numberLong":"x"}}}`}, "", `sink put: cannot convert the JSON to BSON: at /a/n: $numberLong "x" is not a 64-bit integer (a string of decimal digits, e.g. "7")` + "\n"},
		{[]string{"put", "-n", "n", "-d", "d", "--key", "a", "--bson", "--data", `{"l":[1,{"$numberLong":7}]}`}, "", `sink put: cannot convert the JSON to BSON: at /l/1: $numberLong takes a string of decimal digits, as in {"$numberLong": "7"}; the input has 7` + "\n"},
		{[]string{"put", "-n", "n", "-d", "d", "--key", "a", "--bson", "--data", `{"i":{"$numberInt":"3000000000"}}`}, "", `sink put: cannot convert the JSON to BSON: at /i: $numberInt "3000000000" is not a 32-bit integer`},
		{[]string{"put", "-n", "n", "-d", "d", "--key", "a", "--bson", "--data", `[1]`}, "", "sink put: cannot convert the JSON to BSON: a BSON document is a JSON object ({...}), the input is not one\n"},
		{[]string{"profiles", "apply", "../../examples/profiles.yaml", "counter", "--current", `{"n":1`, "--intent", `{"by":2}`}, "", "sink profiles: --current: not valid JSON: it ends before the value is complete (byte 6 (line 1, column 7))\n"},
		{[]string{"profiles", "apply", "../../examples/profiles.yaml", "counter", "--bson", "--intent", `{"by":{"$numberLong":"x"}}`}, "", `sink profiles: --intent: cannot convert the JSON to BSON: at /by: $numberLong "x" is not a 64-bit integer`},
		{[]string{"health", "--url", "http://localhost:1/readyz", "--address", "localhost:1"}, "", "sink health: give --url (HTTP operations endpoint) or --address (gRPC API), not both\n"},
	} {
		code, out, errs := sink(t, c.stdin, c.args...)
		if code != ExitUsage || out != "" || !strings.HasPrefix(errs, c.want) {
			t.Errorf("sink %q: exit %d, stdout %q, stderr %q; want exit 2 and %q", c.args, code, out, errs, c.want)
		}
		if strings.Contains(errs, "it must be an object") || strings.Contains(errs, "strconv.") {
			t.Errorf("sink %q: the message does not match the input: %q", c.args, errs)
		}
	}
}

func TestCodeNamesAreCanonical(t *testing.T) {
	for c, want := range map[int]string{0: "OK", 1: "CANCELLED", 3: "INVALID_ARGUMENT", 9: "FAILED_PRECONDITION", 14: "UNAVAILABLE", 16: "UNAUTHENTICATED", 99: "CODE_99"} {
		if got := codeName(codesCode(c)); got != want {
			t.Errorf("code %d: %q, want %q", c, got, want)
		}
	}
	if got := errorLine(codesCode(9), "REVISION_MISMATCH", "m"); got != "FAILED_PRECONDITION (REVISION_MISMATCH): m" {
		t.Errorf("errorLine: %q", got)
	}
	if got := errorLine(codesCode(3), "INVALID_ARGUMENT", "m"); got != "INVALID_ARGUMENT: m" {
		t.Errorf("errorLine: %q", got)
	}
}

func codesCode(c int) codes.Code { return codes.Code(c) }
