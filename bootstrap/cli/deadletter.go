package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/sink-io/sink/adapters/kafka"
	"github.com/sink-io/sink/bootstrap/envconfig"
	"github.com/sink-io/sink/domain"
)

// deadLetterHelp is the help of `sink dead-letter`.
func deadLetterHelp() help {
	list, _ := deadLetterFlags("list")
	replay, _ := deadLetterFlags("replay")
	return help{
		name: "dead-letter",
		forms: []string{
			"list [--json] [--timeout D]",
			"replay (--all | --offset [PARTITION:]OFFSET[,...] | --id MUTATION_ID[,...]) [--dry-run] [--timeout D]",
		},
		summary: `list prints every record of the dead-letter topic (SINK_KAFKA_DEAD_LETTER_TOPIC,
default <SINK_KAFKA_TOPIC>.dead-letter): its dead-letter position, mutation id,
kind, address, error class and message, attempts and source position.

replay re-submits the chosen dead letters to the mutation log (SINK_KAFKA_TOPIC)
with their original key, value and mutation id, in dead-letter order, once the
cause is fixed. --all picks every decodable dead letter, the latest one of each
mutation id. Undecodable records cannot be replayed. A replayed mutation that
fails again is dead-lettered again.

Both read SINK_KAFKA_BROKERS, SINK_KAFKA_TOPIC, SINK_KAFKA_DEAD_LETTER_TOPIC and
the Kafka TLS and SASL settings from the environment.`,
		examples: "  sink dead-letter list\n  sink dead-letter replay --id fcb72873-a0e3-4832-bfc8-513357792a1b --dry-run\n  sink dead-letter replay --offset 0:17\n",
		exits:    exitsTool,
		flags:    []*flag.FlagSet{list, replay},
	}
}

// deadLetterRun is one parsed dead-letter subcommand.
type deadLetterRun struct {
	sub          string // list or replay
	timeout      time.Duration
	asJSON       bool   // list
	all, dryRun  bool   // replay
	offsets, ids string // replay
}

// deadLetterFlags returns the flags of the subcommand sub (list or replay)
// and what they parse into.
func deadLetterFlags(sub string) (*flag.FlagSet, *deadLetterRun) {
	r := &deadLetterRun{sub: sub}
	fs := newFlags("sink dead-letter " + sub)
	fs.DurationVar(&r.timeout, "timeout", 30*time.Second, "time limit of the command")
	switch sub {
	case "list":
		fs.BoolVar(&r.asJSON, "json", false, "print a JSON array")
	case "replay":
		fs.BoolVar(&r.all, "all", false, "replay every decodable dead letter (the latest of each mutation id)")
		fs.StringVar(&r.offsets, "offset", "", "comma-separated dead-letter offsets, PARTITION:OFFSET or OFFSET")
		fs.StringVar(&r.ids, "id", "", "comma-separated mutation ids")
		fs.BoolVar(&r.dryRun, "dry-run", false, "print what would be replayed and replay nothing")
	}
	return fs, r
}

// parseDeadLetter parses the arguments of `sink dead-letter`. Its errors
// are badUsage, or wrap flag.ErrHelp when help was asked for.
func parseDeadLetter(args []string) (*deadLetterRun, error) {
	if len(args) == 0 {
		return nil, badUsage{"missing subcommand: list or replay"}
	}
	if isHelp(args[0]) {
		return nil, flag.ErrHelp
	}
	if args[0] != "list" && args[0] != "replay" {
		return nil, badUsage{fmt.Sprintf("unknown subcommand %q: use list or replay", args[0])}
	}
	fs, r := deadLetterFlags(args[0])
	if err := parseOnce(fs, args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, badUsage{err.Error()}
	}
	if fs.NArg() > 0 {
		return nil, badUsage{fmt.Sprintf("unexpected arguments %q", fs.Args())}
	}
	if r.sub == "replay" {
		chosen := 0
		for _, set := range []bool{r.all, r.offsets != "", r.ids != ""} {
			if set {
				chosen++
			}
		}
		if chosen != 1 {
			return nil, badUsage{"choose exactly one of --all, --offset and --id"}
		}
	}
	return r, nil
}

// deadLetterMain runs `sink dead-letter ARGS` with the configuration from
// the environment and returns the exit code.
func deadLetterMain(args []string, stdio IO) int {
	const name = "dead-letter"
	r, err := parseDeadLetter(args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdio.Stdout, deadLetterHelp())
		return ExitOK
	}
	if err != nil {
		return usageError(stdio, name, "%v", err)
	}
	cfg, err := envconfig.Load(nil)
	if err != nil {
		return fail(stdio, name, ExitUsage, "%v", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := r.run(ctx, cfg, stdio.Stdout); err != nil {
		var bu badUsage
		if errors.As(err, &bu) {
			return usageError(stdio, name, "%v", err)
		}
		return fail(stdio, name, ExitFailed, "%v", err)
	}
	return ExitOK
}

// badUsage is a mistake in a command's arguments.
type badUsage struct{ msg string }

func (e badUsage) Error() string { return e.msg }

// DeadLetter runs a dead-letter subcommand (args: list or replay and its
// flags) for cfg, writing its report to stdout.
func DeadLetter(ctx context.Context, cfg envconfig.Config, args []string, stdout io.Writer) error {
	r, err := parseDeadLetter(args)
	if err != nil {
		return err
	}
	return r.run(ctx, cfg, stdout)
}

func (r *deadLetterRun) run(ctx context.Context, cfg envconfig.Config, stdout io.Writer) error {
	if !cfg.Kafka.Enabled() || cfg.Kafka.Topic == "" || len(cfg.Kafka.Brokers) == 0 {
		return errors.New("the dead-letter commands need SINK_KAFKA_BROKERS and SINK_KAFKA_TOPIC")
	}
	sec, err := cfg.Kafka.Security.Kafka().Opts()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	dlt := cfg.Kafka.DeadLetter()
	letters, err := kafka.ReadDeadLetters(ctx, cfg.Kafka.Brokers, dlt, sec...)
	if err != nil {
		return err
	}
	if r.sub == "list" {
		return printDeadLetters(stdout, dlt, letters, r.asJSON)
	}
	pick, err := selectDeadLetters(letters, r.all, r.offsets, r.ids, stdout)
	if err != nil {
		return err
	}
	if len(pick) == 0 {
		fmt.Fprintln(stdout, "nothing to replay")
		return nil
	}
	verb := "replayed"
	if r.dryRun {
		verb = "would replay"
	} else {
		cl, err := kafka.NewClient(kafka.ClientConfig{Brokers: cfg.Kafka.Brokers, ClientID: "sink-dead-letter", PublishTimeout: cfg.Kafka.PublishTimeout,
			MaxRecordBytes: cfg.MaxDocumentBytes + 64<<10, ExtraOpts: sec})
		if err != nil {
			return err
		}
		defer cl.Close()
		if err := kafka.Replay(ctx, kafka.NewPublisher(cl), dlt, cfg.Kafka.Topic, pick); err != nil {
			return err
		}
	}
	for _, d := range pick {
		fmt.Fprintf(stdout, "%s %d/%d mutation %s (%s %s) to %s\n", verb, d.Partition, d.Offset, d.MutationID,
			d.Mutation.Kind, d.Mutation.Address, cfg.Kafka.Topic)
	}
	fmt.Fprintf(stdout, "%s %d mutation(s)\n", verb, len(pick))
	return nil
}

// selectDeadLetters picks the dead letters to replay, in dead-letter order.
func selectDeadLetters(letters []kafka.DeadLetter, all bool, offsets, ids string, out io.Writer) ([]kafka.DeadLetter, error) {
	var pick []kafka.DeadLetter
	switch {
	case all:
		latest := map[string]int{}
		for i, d := range letters {
			if d.Mutation == nil {
				fmt.Fprintf(out, "skipping %d/%d: undecodable (%s)\n", d.Partition, d.Offset, d.DecodeError)
				continue
			}
			latest[d.MutationID] = i
		}
		for i, d := range letters {
			if d.Mutation != nil && latest[d.MutationID] == i {
				pick = append(pick, d)
			}
		}
	case offsets != "":
		seen := map[[2]int64]bool{}
		for _, s := range strings.Split(offsets, ",") {
			s = strings.TrimSpace(s)
			part := int64(-1)
			offStr := s
			if p, o, ok := strings.Cut(s, ":"); ok {
				v, err := strconv.ParseInt(p, 10, 32)
				if err != nil || v < 0 {
					return nil, badUsage{fmt.Sprintf("--offset %q: bad partition", s)}
				}
				part, offStr = v, o
			}
			off, err := strconv.ParseInt(offStr, 10, 64)
			if err != nil || off < 0 {
				return nil, badUsage{fmt.Sprintf("--offset %q: bad offset", s)}
			}
			var match []kafka.DeadLetter
			for _, d := range letters {
				if d.Offset == off && (part < 0 || int64(d.Partition) == part) {
					match = append(match, d)
				}
			}
			switch {
			case len(match) == 0:
				return nil, fmt.Errorf("no dead letter at offset %s", s)
			case len(match) > 1:
				return nil, fmt.Errorf("offset %s exists in %d partitions: write PARTITION:OFFSET", s, len(match))
			case match[0].Mutation == nil:
				return nil, fmt.Errorf("dead letter %s is undecodable and cannot be replayed: %s", s, match[0].DecodeError)
			}
			k := [2]int64{int64(match[0].Partition), match[0].Offset}
			if !seen[k] {
				seen[k] = true
				pick = append(pick, match[0])
			}
		}
	default:
		want := map[string]bool{}
		for _, id := range strings.Split(ids, ",") {
			if id = strings.TrimSpace(id); id != "" {
				want[id] = true
			}
		}
		latest := map[string]int{}
		for i, d := range letters {
			if d.Mutation != nil && want[d.MutationID] {
				latest[d.MutationID] = i
			}
		}
		for id := range want {
			if _, ok := latest[id]; !ok {
				return nil, fmt.Errorf("no decodable dead letter of mutation %s", id)
			}
		}
		for i, d := range letters {
			if d.Mutation != nil && latest[d.MutationID] == i && want[d.MutationID] {
				pick = append(pick, d)
			}
		}
	}
	sort.SliceStable(pick, func(i, j int) bool {
		if pick[i].Partition != pick[j].Partition {
			return pick[i].Partition < pick[j].Partition
		}
		return pick[i].Offset < pick[j].Offset
	})
	return pick, nil
}

// DeadLetterView is the JSON form of one dead letter printed by
// `sink dead-letter list --json`.
type DeadLetterView struct {
	Topic           string `json:"topic"`
	Partition       int32  `json:"partition"`
	Offset          int64  `json:"offset"`
	MutationID      string `json:"mutation_id,omitempty"`
	Kind            string `json:"kind,omitempty"`
	Address         string `json:"address,omitempty"`
	Profile         string `json:"profile,omitempty"`
	Reason          string `json:"reason"`
	ErrorCode       string `json:"error_code"`
	ErrorMessage    string `json:"error_message"`
	Attempts        int    `json:"attempts"`
	SourceTopic     string `json:"source_topic"`
	SourcePartition int32  `json:"source_partition"`
	SourceOffset    int64  `json:"source_offset"`
	DeadLetteredAt  string `json:"dead_lettered_at,omitempty"`
	SubmittedAt     string `json:"submitted_at,omitempty"`
	DecodeError     string `json:"decode_error,omitempty"`
}

func viewOf(topic string, d kafka.DeadLetter) DeadLetterView {
	v := DeadLetterView{
		Topic: topic, Partition: d.Partition, Offset: d.Offset, MutationID: d.MutationID,
		Reason: d.Reason, ErrorCode: d.ErrorCode, ErrorMessage: d.ErrorMessage, Attempts: d.Attempts,
		SourceTopic: d.SourceTopic, SourcePartition: d.SourcePartition, SourceOffset: d.SourceOffset,
		DecodeError: d.DecodeError,
	}
	if !d.DeadLetteredAt.IsZero() {
		v.DeadLetteredAt = d.DeadLetteredAt.UTC().Format(time.RFC3339Nano)
	}
	if m := d.Mutation; m != nil {
		v.Kind = m.Kind.String()
		v.Address = m.Address.String()
		if m.Kind == domain.MutationMerge {
			v.Profile = m.Merge.Profile
		}
		if !m.SubmittedAt.IsZero() {
			v.SubmittedAt = m.SubmittedAt.UTC().Format(time.RFC3339Nano)
		}
	}
	return v
}

func printDeadLetters(w io.Writer, topic string, letters []kafka.DeadLetter, asJSON bool) error {
	if asJSON {
		views := make([]DeadLetterView, len(letters))
		for i, d := range letters {
			views[i] = viewOf(topic, d)
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(views)
	}
	if len(letters) == 0 {
		_, err := fmt.Fprintf(w, "no dead letters in %s\n", topic)
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "POSITION\tMUTATION ID\tKIND\tADDRESS\tERROR\tATTEMPTS\tSOURCE\tDEAD-LETTERED AT\tMESSAGE")
	for _, d := range letters {
		v := viewOf(topic, d)
		id, kind, address, msg := v.MutationID, v.Kind, v.Address, v.ErrorMessage
		if d.Mutation == nil {
			kind, address = "-", "(undecodable)"
			if id == "" {
				id = "-"
			}
		} else if v.Profile != "" {
			kind += "(" + v.Profile + ")"
		}
		fmt.Fprintf(tw, "%d/%d\t%s\t%s\t%s\t%s\t%d\t%s/%d/%d\t%s\t%s\n", d.Partition, d.Offset, id, kind, address,
			v.ErrorCode, v.Attempts, v.SourceTopic, v.SourcePartition, v.SourceOffset, v.DeadLetteredAt, oneLine(msg))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "%d dead letter(s) in %s\n", len(letters), topic)
	return err
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
