package cli

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
	"github.com/sink-io/sink/bootstrap/envconfig"
	"github.com/sink-io/sink/domain"
)

// profilesFlags returns the flags of `sink profiles apply`.
func profilesFlags() (fs *flag.FlagSet, current, intent *string, asBSON *bool) {
	fs = newFlags("sink profiles apply")
	current = fs.String("current", "", "the current document (JSON object or @PATH); absent record when not set")
	intent = fs.String("intent", "", "the merge intent (JSON object or @PATH)")
	asBSON = fs.Bool("bson", false, "merge as BSON (documents in MongoDB Extended JSON)")
	return fs, current, intent, asBSON
}

// profilesHelp is the help of `sink profiles`.
func profilesHelp() help {
	apply, _, _, _ := profilesFlags()
	return help{
		name:  "profiles",
		forms: []string{"check FILE", "apply FILE PROFILE [--current DOC] --intent DOC [--bson]"},
		summary: `check validates a declarative merge profiles file (SINK_MERGE_PROFILES_FILE,
docs/profiles.md) and prints each profile's name and fingerprint as JSON; with
problems, it prints all of them as JSON and exits with status 1.

apply runs one merge of PROFILE without a server and prints the resulting
document. DOC is a JSON object, or @PATH to read it from a file. Without
--current the record is absent. With --bson the documents are converted to
BSON (from MongoDB Extended JSON), merged as BSON, and the result printed as
relaxed Extended JSON. Limits come from SINK_MAX_NESTING_DEPTH and
SINK_MAX_DOCUMENT_BYTES, as in the server.`,
		examples: `  sink profiles check examples/profiles.yaml
  sink profiles apply examples/profiles.yaml counter --current '{"n":1}' --intent '{"by":2}'
`,
		exits: exitsTool,
		flags: []*flag.FlagSet{apply},
	}
}

// profilesMain runs `sink profiles`.
func profilesMain(args []string, stdio IO) int {
	const name = "profiles"
	if len(args) == 0 {
		return usageError(stdio, name, "missing subcommand: check or apply")
	}
	if isHelp(args[0]) {
		fmt.Fprint(stdio.Stdout, profilesHelp())
		return ExitOK
	}
	if args[0] != "check" && args[0] != "apply" {
		return usageError(stdio, name, "unknown subcommand %q: use check or apply", args[0])
	}
	cfg, err := envconfig.Load(nil)
	if err != nil {
		return fail(stdio, name, ExitUsage, "%v", err)
	}
	if args[0] == "check" {
		return profilesCheck(cfg, args[1:], stdio)
	}
	return profilesApply(cfg, args[1:], stdio)
}

// loadProfiles loads a merge profiles file as the server would.
func loadProfiles(cfg envconfig.Config, file string) ([]*declarative.Profile, error) {
	ps, err := declarative.LoadFile(file, cfg.MergeProfilesOptions())
	if err != nil {
		return nil, fmt.Errorf("cannot load SINK_MERGE_PROFILES_FILE: %w", err)
	}
	return ps, nil
}

func writeJSON(w io.Writer, v any) {
	b, _ := json.MarshalIndent(v, "", "  ")
	w.Write(append(b, '\n'))
}

func profilesCheck(cfg envconfig.Config, args []string, stdio IO) int {
	fs := newFlags("sink profiles check")
	if code, done := parseFlags(fs, args, profilesHelp(), stdio); done {
		return code
	}
	if fs.NArg() != 1 {
		return usageError(stdio, "profiles", "check takes one FILE")
	}
	file := fs.Arg(0)
	ps, err := loadProfiles(cfg, file)
	if err != nil {
		var le *declarative.LoadError
		if !errors.As(err, &le) {
			return fail(stdio, "profiles", ExitFailed, "%v", err)
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
		writeJSON(stdio.Stdout, out)
		return fail(stdio, "profiles", ExitFailed, "%s: %d problems", file, len(le.Problems))
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
	writeJSON(stdio.Stdout, out)
	return ExitOK
}

func profilesApply(cfg envconfig.Config, args []string, stdio IO) int {
	const name = "profiles"
	fs, current, intent, asBSON := profilesFlags()
	var positional []string
	for {
		if code, done := parseFlags(fs, args, profilesHelp(), stdio); done {
			return code
		}
		if fs.NArg() == 0 {
			break
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if len(positional) != 2 || *intent == "" {
		return usageError(stdio, name, "apply takes FILE PROFILE and --intent")
	}
	ps, err := loadProfiles(cfg, positional[0])
	if err != nil {
		return fail(stdio, name, ExitFailed, "%v", err)
	}
	var p *declarative.Profile
	for _, q := range ps {
		if q.Name() == positional[1] {
			p = q
		}
	}
	if p == nil {
		return fail(stdio, name, ExitFailed, "%s has no profile %q", positional[0], positional[1])
	}
	addr := domain.Address{Store: cfg.Store, Namespace: "cli", Dataset: "cli", Key: domain.StringKey("cli")}
	doc := func(v string) (domain.Document, error) {
		data := []byte(v)
		if strings.HasPrefix(v, "@") {
			var err error
			if data, err = os.ReadFile(v[1:]); err != nil {
				return domain.Document{}, err
			}
		}
		if err := domain.CheckJSON(data, domain.MaxNestingLimit); err != nil {
			return domain.Document{}, fmt.Errorf("not valid JSON: %w", err)
		}
		if !*asBSON {
			return domain.Document{ContentType: domain.ContentTypeJSON, Data: data}, nil
		}
		d, err := jsonToBSON(data)
		if err != nil {
			return domain.Document{}, err
		}
		return domain.Document{ContentType: domain.ContentTypeBSON, Data: d.GetData()}, nil
	}
	in, err := doc(*intent)
	if err != nil {
		return usageError(stdio, name, "--intent: %v", err)
	}
	var cur *domain.Document
	if *current != "" {
		c, err := doc(*current)
		if err != nil {
			return usageError(stdio, name, "--current: %v", err)
		}
		cur = &c
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.MergeTimeout)
	defer cancel()
	out, err := p.Apply(ctx, addr, cur, in)
	if err != nil {
		return fail(stdio, name, ExitFailed, "%v", err)
	}
	data := out.Data
	if domain.IsMediaType(out.ContentType, domain.ContentTypeBSON) {
		if data, err = bson.MarshalExtJSON(bson.Raw(out.Data), false, false); err != nil {
			return fail(stdio, name, ExitFailed, "cannot print the result: %v", err)
		}
	}
	var pretty bytes.Buffer
	if json.Indent(&pretty, data, "", "  ") != nil {
		pretty.Reset()
		pretty.Write(data)
	}
	pretty.WriteByte('\n')
	if _, err := stdio.Stdout.Write(pretty.Bytes()); err != nil {
		return fail(stdio, name, ExitFailed, "cannot write the result: %v", err)
	}
	return ExitOK
}
