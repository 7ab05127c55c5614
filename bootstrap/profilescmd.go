package bootstrap

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/sink-io/sink/adapters/declarative"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

const profilesUsage = `Usage:
  sink profiles check FILE
  sink profiles apply FILE PROFILE [--current DOC] --intent DOC [--bson]

check validates a declarative merge profiles file (SINK_MERGE_PROFILES_FILE,
docs/profiles.md) and prints each profile's name and fingerprint as JSON; with
problems, it prints all of them as JSON and exits with status 1.

apply runs one merge of PROFILE without a server and prints the resulting
document. DOC is a JSON object, or @PATH to read it from a file. Without
--current the record is absent. With --bson the documents are converted to
BSON (from MongoDB Extended JSON), merged as BSON, and the result printed as
relaxed Extended JSON. Limits come from SINK_MAX_NESTING_DEPTH and
SINK_MAX_DOCUMENT_BYTES, as in the server.

Examples:
  sink profiles check examples/profiles.yaml
  sink profiles apply examples/profiles.yaml counter --current '{"n":1}' --intent '{"by":2}'
`

// ProfilesMain implements `sink profiles`.
func ProfilesMain(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		io.WriteString(stdout, profilesUsage)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	cfg, err := LoadConfig(environ())
	if err != nil {
		fmt.Fprintln(stderr, "sink profiles:", err)
		return 2
	}
	switch args[0] {
	case "check":
		if len(args) != 2 {
			fmt.Fprint(stderr, profilesUsage)
			return 2
		}
		return profilesCheck(cfg, args[1], stdout, stderr)
	case "apply":
		return profilesApply(cfg, args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "sink profiles: unknown command %q\n\n%s", args[0], profilesUsage)
	return 2
}

func environ() map[string]string {
	m := map[string]string{}
	for _, kv := range os.Environ() {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return m
}

func writeJSON(w io.Writer, v any) {
	b, _ := json.MarshalIndent(v, "", "  ")
	w.Write(append(b, '\n'))
}

func profilesCheck(cfg Config, file string, stdout, stderr io.Writer) int {
	ps, err := LoadMergeProfilesFile(cfg, file)
	if err != nil {
		var le *declarative.LoadError
		if !errors.As(err, &le) {
			fmt.Fprintln(stderr, "sink profiles:", err)
			return 1
		}
		type problem struct {
			File    string `json:"file"`
			Line    int    `json:"line,omitempty"`
			Profile string `json:"profile,omitempty"`
			Rule    *int   `json:"rule,omitempty"`
			Message string `json:"message"`
		}
		out := struct {
			Valid    bool      `json:"valid"`
			Problems []problem `json:"problems"`
		}{}
		for _, p := range le.Problems {
			pr := problem{File: p.File, Line: p.Line, Profile: p.Profile, Message: p.Msg}
			if p.Rule >= 0 {
				r := p.Rule
				pr.Rule = &r
			}
			out.Problems = append(out.Problems, pr)
		}
		writeJSON(stdout, out)
		fmt.Fprintf(stderr, "sink profiles: %s: %d problems\n", file, len(le.Problems))
		return 1
	}
	type profile struct {
		Name         string   `json:"name"`
		Fingerprint  string   `json:"fingerprint"`
		ContentTypes []string `json:"content_types"`
		Origin       string   `json:"origin"`
	}
	out := struct {
		Valid    bool      `json:"valid"`
		Profiles []profile `json:"profiles"`
	}{Valid: true}
	for _, p := range ps {
		out.Profiles = append(out.Profiles, profile{p.Name(), p.Fingerprint(), p.ContentTypes(), p.Origin()})
	}
	writeJSON(stdout, out)
	return 0
}

func profilesApply(cfg Config, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sink profiles apply", flag.ContinueOnError)
	fs.SetOutput(stderr)
	current := fs.String("current", "", "the current document (JSON object or @PATH); absent record when not set")
	intent := fs.String("intent", "", "the merge intent (JSON object or @PATH)")
	asBSON := fs.Bool("bson", false, "merge as BSON (documents in MongoDB Extended JSON)")
	var positional []string
	for len(args) > 0 {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				io.WriteString(stdout, profilesUsage)
				return 0
			}
			return 2
		}
		if fs.NArg() == 0 {
			break
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if len(positional) != 2 || *intent == "" {
		fmt.Fprint(stderr, "sink profiles apply: expected FILE PROFILE and --intent\n\n"+profilesUsage)
		return 2
	}
	ps, err := LoadMergeProfilesFile(cfg, positional[0])
	if err != nil {
		fmt.Fprintln(stderr, "sink profiles:", err)
		return 1
	}
	var p *declarative.Profile
	for _, q := range ps {
		if q.Name() == positional[1] {
			p = q
		}
	}
	if p == nil {
		fmt.Fprintf(stderr, "sink profiles: %s has no profile %q\n", positional[0], positional[1])
		return 1
	}
	in := ports.MergeInput{Address: domain.Address{Store: cfg.Store, Namespace: "cli", Dataset: "cli", Key: domain.StringKey("cli")}}
	doc := func(flagName, v string) (domain.Document, bool) {
		data := []byte(v)
		if strings.HasPrefix(v, "@") {
			var err error
			if data, err = os.ReadFile(v[1:]); err != nil {
				fmt.Fprintf(stderr, "sink profiles: --%s: %v\n", flagName, err)
				return domain.Document{}, false
			}
		}
		if !*asBSON {
			return domain.Document{ContentType: domain.ContentTypeJSON, Data: data}, true
		}
		var d bson.D
		if err := bson.UnmarshalExtJSON(data, false, &d); err != nil {
			fmt.Fprintf(stderr, "sink profiles: --%s: not a JSON object in Extended JSON: %v\n", flagName, err)
			return domain.Document{}, false
		}
		b, err := bson.Marshal(d)
		if err != nil {
			fmt.Fprintf(stderr, "sink profiles: --%s: %v\n", flagName, err)
			return domain.Document{}, false
		}
		return domain.Document{ContentType: domain.ContentTypeBSON, Data: b}, true
	}
	var ok bool
	if in.Intent, ok = doc("intent", *intent); !ok {
		return 2
	}
	if *current != "" {
		c, ok := doc("current", *current)
		if !ok {
			return 2
		}
		in.Current = &c
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.MergeTimeout)
	defer cancel()
	out, err := p.Merge(ctx, in)
	if err != nil {
		fmt.Fprintln(stderr, "sink profiles:", err)
		return 1
	}
	data := out.Data
	if domain.IsMediaType(out.ContentType, domain.ContentTypeBSON) {
		if data, err = bson.MarshalExtJSON(bson.Raw(out.Data), false, false); err != nil {
			fmt.Fprintln(stderr, "sink profiles: cannot print the result:", err)
			return 1
		}
	}
	var pretty bytes.Buffer
	if json.Indent(&pretty, data, "", "  ") != nil {
		pretty.Reset()
		pretty.Write(data)
	}
	pretty.WriteByte('\n')
	stdout.Write(pretty.Bytes())
	return 0
}
