package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
)

// Exit codes that scripts can rely on.
const (
	ExitOK           = 0 // applied, found, accepted (and delete of an absent record)
	ExitFailed       = 1 // the operation failed (see the error)
	ExitUsage        = 2 // bad flags or input
	ExitNotFound     = 3 // read of an absent record, replace of an absent record
	ExitPrecondition = 4 // CREATE found a record, or the revision differed
	ExitUnavailable  = 5 // server unreachable, transport error, UNAVAILABLE, deadline, rate limited
	ExitAuth         = 6 // UNAUTHENTICATED or PERMISSION_DENIED
)

// IO is what a command reads and writes (StdIO in the binary). Getenv
// supplies SINK_ADDRESS and SINK_TOKEN to the API commands; the operator
// commands (dead-letter, profiles) read the SINK_* configuration from the
// process environment, as the server does.
type IO struct {
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	Getenv func(string) string
}

// runAPI runs the API command name (read, put, merge or delete) with args
// and returns the exit code.
func runAPI(name string, args []string, io IO) int {
	c := &command{name: name, io: io}
	c.define()
	if code, done := parseFlags(c.fs, args, c.help(), io); done {
		return code
	}
	if c.token == "" {
		// Read here, not as the flag's default: --help must not print it.
		c.token = io.Getenv("SINK_TOKEN")
	}
	if c.fs.NArg() > 0 {
		return c.usageError("unexpected argument %q (every value is a flag; see --help)", c.fs.Arg(0))
	}
	req, code := c.build()
	if code != ExitOK {
		return code
	}
	conn, err := c.dial()
	if err != nil {
		return c.usageError("%v", err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	if c.token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+c.token)
	}
	return c.call(ctx, sinkv1.NewSinkClient(conn), req)
}

// command is one invocation: its flags and what they parsed to.
type command struct {
	name string
	io   IO
	fs   *flag.FlagSet

	address, token            string
	tls                       bool
	caFile, certFile, keyFile string
	serverName                string
	timeout                   time.Duration

	store, namespace, dataset string
	key, keyInt, keyBytes     string
	keyOID                    string

	data, file, contentType string
	bson                    bool
	create, replace         bool
	ifRevision              string
	profile                 string
	async                   bool
	idempotencyKey          string
	returnDocument          bool
	canonical               bool

	where    string // scan, count
	limit    int    // scan
	cursor   string // scan
	keysOnly bool   // scan
}

func (c *command) usageError(format string, args ...any) int {
	return usageError(c.io, c.name, format, args...)
}

func (c *command) fail(code int, format string, args ...any) int {
	return fail(c.io, c.name, code, format, args...)
}

func (c *command) help() help {
	return help{name: c.name, forms: []string{"[flags]"}, summary: summaries[c.name], examples: examples[c.name],
		exits: exitsAPI, flags: []*flag.FlagSet{c.fs}}
}

var summaries = map[string]string{
	"read":   "Read one record and print its status, revision (base64, the form --if-revision takes) and document:\nJSON as stored; BSON as Extended JSON that put --bson reads back as the same types (int64 and\nintegral doubles keep their type: {\"$numberLong\":\"7\"}, {\"$numberDouble\":\"1.0\"}); other content types\nas data_base64.",
	"put":    "Write a complete document (upsert by default; --create, --replace, --if-revision).",
	"merge":  "Merge an intent into a record with a merge profile (default merge-patch).",
	"delete": "Delete one record (deleting an absent record is not an error).",
	"scan":   "Print the records of a dataset in key order, one JSON line each ({\"key\": ..., \"revision\", \"content_type\",\n\"document\"}; int64 keys as key_int, bytes keys as key_bytes in base64, ObjectIDs as key_oid); when --limit\nstops the scan early, a last line {\"cursor\": ...} that --cursor resumes. --where takes a filter in the\nrestricted CEL of docs/query.md.",
	"count":  "Print how many records of a dataset match --where (all records without it).",
}

var examples = map[string]string{
	"read":   "  sink read --namespace shop --dataset orders --key o-1\n  sink read -n shop -d events --key e-1 | jq -c .document | sink put -n shop -d events --key e-2 --bson --file -\n",
	"put":    "  sink put --namespace shop --dataset orders --key o-1 --data '{\"total\":10}'\n  echo '{\"total\":10}' | sink put -n shop -d orders --key o-1 --file - --create\n",
	"merge":  "  sink merge --namespace shop --dataset orders --key o-1 --data '{\"paid\":true}'\n  sink merge -n shop -d orders --key o-1 --data '{\"paid\":true}' --idempotency-key pay-o-1\n",
	"delete": "  sink delete --namespace shop --dataset orders --key o-1\n",
	"scan":   "  sink scan -n shop -d orders --where 'doc.total > 10 && doc.status == \"paid\"' --limit 100\n  sink scan -n shop -d orders --keys-only --cursor \"$CURSOR\"\n",
	"count":  "  sink count -n shop -d orders --where 'doc.status == \"paid\"'\n",
}

func (c *command) define() {
	fs := newFlags("sink " + c.name)
	c.fs = fs
	address := c.io.Getenv("SINK_ADDRESS")
	if address == "" {
		address = "localhost:8080"
	}
	fs.StringVar(&c.address, "address", address, "host:port of the Sink gRPC API (env SINK_ADDRESS)")
	fs.StringVar(&c.token, "token", "", "bearer token (env SINK_TOKEN; prefer the variable: arguments show in process lists)")
	fs.BoolVar(&c.tls, "tls", false, "connect with TLS (implied by --ca-file, --cert-file, --key-file)")
	fs.StringVar(&c.caFile, "ca-file", "", "PEM CA certificates that verify the server (default: the system roots)")
	fs.StringVar(&c.certFile, "cert-file", "", "PEM client certificate for mutual TLS")
	fs.StringVar(&c.keyFile, "key-file", "", "PEM private key of --cert-file")
	fs.StringVar(&c.serverName, "server-name", "", "name to verify the server certificate against (default: the host of --address)")
	fs.DurationVar(&c.timeout, "timeout", 30*time.Second, "deadline of the call")

	fs.StringVar(&c.store, "store", "", "store (default: the one the server serves)")
	fs.StringVar(&c.namespace, "namespace", "", "namespace (required)")
	fs.StringVar(&c.namespace, "n", "", "shorthand for --namespace")
	fs.StringVar(&c.dataset, "dataset", "", "dataset (required)")
	fs.StringVar(&c.dataset, "d", "", "shorthand for --dataset")
	if c.name == "scan" || c.name == "count" {
		fs.StringVar(&c.where, "where", "", "filter: a restricted CEL expression over doc, e.g. 'doc.total > 10 && doc.status == \"paid\"' (docs/query.md)")
	} else {
		fs.StringVar(&c.key, "key", "", "string key (exactly one --key* flag is required)")
		fs.StringVar(&c.keyInt, "key-int", "", "int64 key")
		fs.StringVar(&c.keyBytes, "key-bytes", "", "bytes key in hex, or base64 with a base64: prefix")
		fs.StringVar(&c.keyOID, "key-oid", "", "ObjectID key: 24 hex digits")
	}
	if c.name == "scan" {
		fs.IntVar(&c.limit, "limit", 0, "print at most this many records, then a resume cursor (0: all)")
		fs.StringVar(&c.cursor, "cursor", "", "resume after the records of the scan that printed this cursor (same --where)")
		fs.BoolVar(&c.keysOnly, "keys-only", false, "print keys and revisions only")
		fs.BoolVar(&c.canonical, "canonical", false, "print BSON documents as canonical Extended JSON (see read --canonical)")
	}

	if c.name == "put" || c.name == "merge" {
		what := "document"
		if c.name == "merge" {
			what = "merge intent"
		}
		fs.StringVar(&c.data, "data", "", "the "+what+", inline")
		fs.StringVar(&c.file, "file", "", "read the "+what+" from this file ('-' = standard input)")
		fs.StringVar(&c.contentType, "content-type", "application/json", "content type of the "+what)
		fs.BoolVar(&c.bson, "bson", false, "convert the JSON "+what+" to BSON before sending; Extended JSON (relaxed or canonical, as read prints it) gives the types: 3 is an int32, {\"$numberLong\":\"3\"} an int64 (automatic when the store accepts only application/bson)")
		fs.BoolVar(&c.async, "async", false, "return once the server's durable queue accepted the write (RETURN_AFTER_ACCEPTED)")
		fs.BoolVar(&c.returnDocument, "return-document", false, "print the document as written (for a merge, the record right after this merge), so that no read is needed; not with --async")
	}
	if c.name == "put" || c.name == "merge" || c.name == "delete" {
		fs.StringVar(&c.idempotencyKey, "idempotency-key", "", "retry-safe key of this change (1-128 printable ASCII characters, no spaces): sending it again with the same key applies it at most once while the record remembers the key (its last SINK_IDEMPOTENCY_RING keys)")
	}
	switch c.name {
	case "put":
		fs.BoolVar(&c.create, "create", false, "the record must not exist (mode CREATE)")
		fs.BoolVar(&c.replace, "replace", false, "the record must exist (mode REPLACE)")
		fs.StringVar(&c.ifRevision, "if-revision", "", "write only if the record has this revision (as printed by read/put)")
	case "read":
		fs.BoolVar(&c.canonical, "canonical", false, "print a BSON document as canonical Extended JSON, every value typed ({\"$numberInt\":\"3\"}); the default types only what plain JSON would lose (int64, integral doubles)")
	case "merge":
		fs.StringVar(&c.profile, "profile", "merge-patch", "merge profile")
	case "delete":
		fs.StringVar(&c.ifRevision, "if-revision", "", "delete only if the record has this revision")
		fs.BoolVar(&c.async, "async", false, "return once the server's durable queue accepted the delete (RETURN_AFTER_ACCEPTED)")
	}
}

// dialer builds the connection (TLS and client certificate per the flags).
func (c *command) dial() (*grpc.ClientConn, error) {
	creds, err := c.transportCredentials()
	if err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient(c.address, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, fmt.Errorf("cannot connect to %q: %w", c.address, err)
	}
	return conn, nil
}
