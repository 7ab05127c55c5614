package cli

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/sink-io/sink/bootstrap/envconfig"
)

// sink runs `sink ARGS` in process with stdin; serving is a test failure.
func sink(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = Main(args, IO{Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errb}, func(io.Writer) error {
		t.Errorf("sink %q ran the role", args)
		return nil
	})
	return code, out.String(), errb.String()
}

func TestMainServesWithoutACommand(t *testing.T) {
	for _, c := range []struct {
		err  error
		code int
	}{
		{nil, ExitOK},
		{&envconfig.ConfigError{Problems: []string{"SINK_MODE is bad"}}, ExitUsage},
		{errors.New("cannot start Sink: boom"), ExitFailed},
	} {
		var errb bytes.Buffer
		var got io.Writer
		code := Main(nil, IO{Stdout: io.Discard, Stderr: &errb}, func(w io.Writer) error { got = w; return c.err })
		if code != c.code || got != &errb {
			t.Errorf("serve returning %v: exit %d (want %d), log to %v", c.err, code, c.code, got)
		}
		if c.err != nil && errb.String() != "sink: "+c.err.Error()+"\n" {
			t.Errorf("serve returning %v: stderr %q", c.err, errb.String())
		}
	}
}

func TestMainUsage(t *testing.T) {
	for _, arg := range []string{"help", "-h", "--help"} {
		code, out, _ := sink(t, "", arg)
		if code != ExitOK || out != Usage() {
			t.Fatalf("sink %s: exit %d, %q", arg, code, out)
		}
	}
	for _, c := range commands() {
		if !strings.Contains(Usage(), "\n  "+c.name+" ") {
			t.Errorf("sink help does not list %s:\n%s", c.name, Usage())
		}
	}
	code, out, errs := sink(t, "", "frobnicate")
	if code != ExitUsage || out != "" || !strings.HasPrefix(errs, `sink: unknown command "frobnicate"`) || !strings.Contains(errs, "Commands:") {
		t.Fatalf("unknown command: exit %d, stdout %q, stderr %q", code, out, errs)
	}
}

// Every command prints its help in one layout for -h, --help and help,
// and reports a bad flag as `sink NAME: ...` with exit code 2.
func TestEveryCommandHelpAndUsageError(t *testing.T) {
	for _, c := range commands() {
		code, help, errs := sink(t, "", c.name, "--help")
		if code != ExitOK || errs != "" {
			t.Errorf("sink %s --help: exit %d, stderr %q", c.name, code, errs)
		}
		if !strings.HasPrefix(help, "Usage: sink "+c.name) && !strings.HasPrefix(help, "Usage:\n  sink "+c.name+" ") {
			t.Errorf("sink %s --help does not start with its usage:\n%s", c.name, help)
		}
		if !strings.Contains(help, "\nExit codes: ") {
			t.Errorf("sink %s --help has no exit codes:\n%s", c.name, help)
		}
		if c.name != "config-table" && !strings.Contains(help, "\nFlags") {
			t.Errorf("sink %s --help has no flags:\n%s", c.name, help)
		}
		for _, arg := range []string{"-h", "help"} {
			if code, out, _ := sink(t, "", c.name, arg); code != ExitOK || out != help {
				t.Errorf("sink %s %s: exit %d, output differs from --help:\n%s", c.name, arg, code, out)
			}
		}
		code, out, errs := sink(t, "", c.name, "--no-such-flag")
		if code != ExitUsage || out != "" || !strings.HasPrefix(errs, "sink "+c.name+": ") || !strings.HasSuffix(errs, "Run 'sink "+c.name+" --help' for usage.\n") {
			t.Errorf("sink %s --no-such-flag: exit %d, stdout %q, stderr %q", c.name, code, out, errs)
		}
	}
}

func TestConfigTableCommand(t *testing.T) {
	code, out, _ := sink(t, "", "config-table")
	if code != ExitOK || out != envconfig.ConfigTable() || !strings.Contains(out, "SINK_MODE") {
		t.Fatalf("sink config-table: exit %d\n%s", code, out)
	}
}
