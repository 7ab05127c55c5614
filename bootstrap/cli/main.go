// Package cli is the sink binary's command line: every subcommand, one
// dispatch (Main) and one layout of help and errors. read, put, merge,
// delete and health are clients of a running Sink (over its gRPC API and
// its HTTP operations endpoint); dead-letter, profiles, hash-token and
// config-table are operator tools over the Kafka log, merge profiles
// files, bearer tokens and the configuration reference. It never imports
// the server's layers (application, ports, bootstrap): the server's role
// is run by the serve function that Main is given.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/sink-io/sink/bootstrap/envconfig"
)

// StdIO is the process's standard streams and environment.
func StdIO() IO {
	return IO{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv}
}

// subcommand is one entry of the sink command switch.
type subcommand struct {
	name    string
	summary string // one line of `sink help`
	run     func(args []string, stdio IO) int
}

func commands() []subcommand {
	api := func(name string) func([]string, IO) int {
		return func(args []string, stdio IO) int { return runAPI(name, args, stdio) }
	}
	return []subcommand{
		{"config-table", "print the configuration reference (Markdown)", configTable},
		{"dead-letter", "list or replay dead-lettered mutations", deadLetterMain},
		{"read", "read a record from a running Sink", api("read")},
		{"put", "write a document", api("put")},
		{"merge", "merge an intent into a record", api("merge")},
		{"delete", "delete a record", api("delete")},
		{"scan", "list the records of a dataset in key order, optionally filtered (JSON lines)", api("scan")},
		{"count", "count the records of a dataset that match a filter", api("count")},
		{"health", "exit 0 when a role's /readyz answers 200: a container health check", health},
		{"hash-token", "hash a bearer token for SINK_AUTH_TOKEN_FILE", hashTokenMain},
		{"profiles", "check a merge profiles file or try a merge without a server", profilesMain},
	}
}

// Main runs `sink ARGS` and returns the process exit code. With no
// arguments it calls serve, which runs the role that the SINK_* environment
// configures until SIGINT or SIGTERM and logs to the writer it is given.
// `sink COMMAND help` is `sink COMMAND --help`.
func Main(args []string, stdio IO, serve func(stderr io.Writer) error) int {
	if stdio.Getenv == nil {
		stdio.Getenv = func(string) string { return "" }
	}
	if len(args) == 0 {
		if err := serve(stdio.Stderr); err != nil {
			fmt.Fprintln(stdio.Stderr, "sink:", err)
			var ce *envconfig.ConfigError
			if errors.As(err, &ce) {
				return ExitUsage
			}
			return ExitFailed
		}
		return ExitOK
	}
	if isHelp(args[0]) {
		fmt.Fprint(stdio.Stdout, Usage())
		return ExitOK
	}
	for _, c := range commands() {
		if c.name == args[0] {
			rest := args[1:]
			if len(rest) > 0 && rest[0] == "help" {
				rest = []string{"--help"}
			}
			return c.run(rest, stdio)
		}
	}
	fmt.Fprintf(stdio.Stderr, "sink: unknown command %q\n\n%s", args[0], Usage())
	return ExitUsage
}

// Usage is the text of `sink help`.
func Usage() string {
	var b strings.Builder
	b.WriteString(`Usage: sink [command]

Without a command, sink runs the role named by SINK_MODE (server, worker or all),
configured from SINK_* environment variables (docs/configuration.md, or sink config-table),
until SIGINT or SIGTERM.

Commands:
`)
	for _, c := range commands() {
		fmt.Fprintf(&b, "  %-13s  %s\n", c.name, c.summary)
	}
	fmt.Fprintf(&b, "  %-13s  %s\n", "help", "show this help")
	b.WriteString("\nRun 'sink COMMAND --help' for a command's flags and examples.\n")
	return b.String()
}

func isHelp(arg string) bool { return arg == "-h" || arg == "--help" || arg == "help" }

// help is a command's --help text, printed by every command in the same
// layout: usage lines, summary, examples, exit codes, flags.
type help struct {
	name     string   // the command, as in `sink NAME`
	forms    []string // what follows `sink NAME` on each usage line
	summary  string
	examples string          // lines indented by two spaces, each ending in a newline
	exits    string          // the exit codes sentence
	flags    []*flag.FlagSet // flags; a subcommand's set is titled with its name
}

const (
	exitsTool = "Exit codes: 0 ok, 1 failed, 2 usage."
	exitsAPI  = "Exit codes: 0 ok, 1 failed, 2 usage, 3 not found, 4 precondition failed, 5 unavailable, 6 auth."
)

func (h help) String() string {
	var b strings.Builder
	if len(h.forms) == 1 {
		fmt.Fprintf(&b, "Usage: %s\n", strings.TrimSpace("sink "+h.name+" "+h.forms[0]))
	} else {
		b.WriteString("Usage:\n")
		for _, f := range h.forms {
			fmt.Fprintf(&b, "  sink %s %s\n", h.name, f)
		}
	}
	fmt.Fprintf(&b, "\n%s\n", h.summary)
	if h.examples != "" {
		fmt.Fprintf(&b, "\nExamples:\n%s", h.examples)
	}
	fmt.Fprintf(&b, "\n%s\n", h.exits)
	for _, fs := range h.flags {
		n := 0
		fs.VisitAll(func(*flag.Flag) { n++ })
		if n == 0 {
			continue
		}
		if fs.Name() == "sink "+h.name {
			b.WriteString("\nFlags:\n")
		} else {
			fmt.Fprintf(&b, "\nFlags of %s:\n", fs.Name())
		}
		out := fs.Output()
		fs.SetOutput(&b)
		fs.PrintDefaults()
		fs.SetOutput(out)
	}
	return b.String()
}

// newFlags returns a flag set that reports nothing itself: the command
// prints its errors (usageError) and its help (help).
func newFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// parseFlags parses args into fs. On -h or --help it prints h to stdout
// and returns ExitOK, done; on a bad flag it reports a usage error.
//
// Every flag may be given once (a shorthand such as -n counts with its long
// name): a repeated flag is a usage error, never silently the last value.
func parseFlags(fs *flag.FlagSet, args []string, h help, stdio IO) (code int, done bool) {
	if err := parseOnce(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdio.Stdout, h)
			return ExitOK, true
		}
		return usageError(stdio, h.name, "%v", err), true
	}
	return ExitOK, false
}

// parseOnce parses args into fs and fails when a flag is given more than
// once (with a shorthand "-n" counted as the flag its usage names:
// "shorthand for --namespace").
func parseOnce(fs *flag.FlagSet, args []string) error {
	uses := map[string]int{}
	var order []string
	originals := map[*flag.Flag]flag.Value{}
	fs.VisitAll(func(f *flag.Flag) {
		name := f.Name
		if long, ok := strings.CutPrefix(f.Usage, "shorthand for --"); ok {
			name = long
		}
		originals[f] = f.Value
		f.Value = countedValue{f.Value, func() {
			if uses[name] == 0 {
				order = append(order, name)
			}
			uses[name]++
		}}
	})
	err := fs.Parse(args)
	for f, v := range originals {
		f.Value = v // (help prints the flags' own types)
	}
	if err != nil {
		return err
	}
	for _, name := range order {
		if n := uses[name]; n > 1 {
			return fmt.Errorf("--%s is given %d times; give it once (a command reads or writes one record)", name, n)
		}
	}
	return nil
}

// countedValue is a flag value that calls count on every Set.
type countedValue struct {
	flag.Value
	count func()
}

func (v countedValue) Set(s string) error { v.count(); return v.Value.Set(s) }

// IsBoolFlag keeps a boolean flag boolean (--bson without a value).
func (v countedValue) IsBoolFlag() bool {
	b, ok := v.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// usageError reports a usage mistake of `sink NAME` on standard error and
// returns ExitUsage.
func usageError(stdio IO, name, format string, args ...any) int {
	fmt.Fprintf(stdio.Stderr, "sink %s: %s\n", name, fmt.Sprintf(format, args...))
	fmt.Fprintf(stdio.Stderr, "Run 'sink %s --help' for usage.\n", name)
	return ExitUsage
}

// fail reports the failure of `sink NAME` on standard error and returns code.
func fail(stdio IO, name string, code int, format string, args ...any) int {
	fmt.Fprintf(stdio.Stderr, "sink %s: %s\n", name, fmt.Sprintf(format, args...))
	return code
}

// configTable runs `sink config-table`: the configuration reference that
// docs/configuration.md holds.
func configTable(args []string, stdio IO) int {
	fs := newFlags("sink config-table")
	h := help{name: "config-table", forms: []string{""}, exits: exitsTool, flags: []*flag.FlagSet{fs},
		summary: "Print the configuration reference: every SINK_* environment variable with its type,\ndefault and meaning, as a Markdown table (the table of docs/configuration.md)."}
	if code, done := parseFlags(fs, args, h, stdio); done {
		return code
	}
	if fs.NArg() > 0 {
		return usageError(stdio, h.name, "unexpected argument %q", fs.Arg(0))
	}
	fmt.Fprint(stdio.Stdout, envconfig.ConfigTable())
	return ExitOK
}
