package cli

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sink-io/sink/domain"
	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
)

// request is what build produced: the address and, for put and merge, the
// document as typed (JSON) and as sent.
type request struct {
	address  *sinkv1.RecordAddress
	doc      *sinkv1.Document // put/merge: what is sent
	jsonBody []byte           // put/merge: the JSON input, for the automatic BSON retry
	revision []byte
	mode     sinkv1.PutMode
	cursor   []byte // scan
}

func (c *command) build() (*request, int) {
	r := &request{}
	switch {
	case c.namespace == "" && c.dataset == "":
		return nil, c.usageError("--namespace and --dataset are required")
	case c.namespace == "":
		return nil, c.usageError("--namespace is required (-n)")
	case c.dataset == "":
		return nil, c.usageError("--dataset is required (-d)")
	}
	if c.name == "scan" || c.name == "count" {
		return r, c.buildScan(r)
	}
	key, err := c.recordKey()
	if err != nil {
		return nil, c.usageError("%v", err)
	}
	r.address = &sinkv1.RecordAddress{Store: c.store, Namespace: c.namespace, Dataset: c.dataset, Key: key}
	if c.ifRevision != "" {
		if r.revision, err = decodeRevision(c.ifRevision); err != nil {
			return nil, c.usageError("--if-revision: %v", err)
		}
	}
	if c.create && c.replace {
		return nil, c.usageError("--create and --replace exclude each other")
	}
	if c.returnDocument && c.async {
		return nil, c.usageError("--return-document cannot be combined with --async: nothing is written before a worker applies the write")
	}
	if c.create && c.ifRevision != "" {
		return nil, c.usageError("--create cannot be combined with --if-revision: a record that must not exist has no revision")
	}
	switch {
	case c.create:
		r.mode = sinkv1.PutMode_PUT_MODE_CREATE
	case c.replace:
		r.mode = sinkv1.PutMode_PUT_MODE_REPLACE
	default:
		r.mode = sinkv1.PutMode_PUT_MODE_UPSERT
	}
	if c.name != "put" && c.name != "merge" {
		return r, ExitOK
	}
	body, err := c.input()
	if err != nil {
		return nil, c.usageError("%v", err)
	}
	r.doc = &sinkv1.Document{ContentType: c.contentType, Data: body}
	if domain.FormatOf(c.contentType) == domain.FormatJSON || c.bson {
		if err := domain.CheckJSON(body, domain.MaxNestingLimit); err != nil {
			return nil, c.usageError("the %s is not valid JSON: %v", c.what(), err)
		}
		r.jsonBody = body
	}
	if c.bson {
		if r.doc, err = jsonToBSON(body); err != nil {
			return nil, c.usageError("%v", err)
		}
	}
	return r, ExitOK
}

// input returns the document from --data or --file (or standard input).
func (c *command) input() ([]byte, error) {
	switch {
	case c.data != "" && c.file != "":
		return nil, fmt.Errorf("give the document with either --data or --file, not both")
	case c.data != "":
		return []byte(c.data), nil
	case c.file == "-":
		b, err := io.ReadAll(c.io.Stdin)
		if err != nil {
			return nil, fmt.Errorf("cannot read standard input: %w", err)
		}
		return b, nil
	case c.file != "":
		b, err := os.ReadFile(c.file)
		if err != nil {
			return nil, fmt.Errorf("cannot read the document: %w", err)
		}
		return b, nil
	default:
		return nil, fmt.Errorf("give the document with --data JSON, --file PATH or --file - (standard input)")
	}
}

func (c *command) recordKey() (*sinkv1.RecordKey, error) {
	var keys []*sinkv1.RecordKey
	set := func(name string) bool { return isSet(c.fs, name) }
	if set("key") {
		keys = append(keys, &sinkv1.RecordKey{Kind: &sinkv1.RecordKey_String_{String_: c.key}})
	}
	if set("key-int") {
		n, err := strconv.ParseInt(c.keyInt, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("--key-int %q is not a 64-bit integer", c.keyInt)
		}
		keys = append(keys, &sinkv1.RecordKey{Kind: &sinkv1.RecordKey_Int64{Int64: n}})
	}
	if set("key-bytes") {
		var b []byte
		var err error
		if v, ok := strings.CutPrefix(c.keyBytes, "base64:"); ok {
			b, err = base64.StdEncoding.DecodeString(v)
			if err != nil {
				b, err = base64.RawURLEncoding.DecodeString(strings.TrimRight(v, "="))
			}
		} else {
			b, err = hex.DecodeString(c.keyBytes)
		}
		if err != nil {
			return nil, fmt.Errorf("--key-bytes %q is neither hex nor base64:<base64>", c.keyBytes)
		}
		keys = append(keys, &sinkv1.RecordKey{Kind: &sinkv1.RecordKey_Bytes{Bytes: b}})
	}
	if set("key-oid") {
		b, err := hex.DecodeString(c.keyOID)
		if err != nil || len(b) != domain.ObjectIDLength {
			return nil, fmt.Errorf("--key-oid %q is not an ObjectID (24 hex digits)", c.keyOID)
		}
		keys = append(keys, &sinkv1.RecordKey{Kind: &sinkv1.RecordKey_ObjectId{ObjectId: b}})
	}
	if len(keys) != 1 {
		return nil, fmt.Errorf("give exactly one of --key, --key-int, --key-bytes, --key-oid")
	}
	return keys[0], nil
}

// isSet reports whether the flag was given on the command line.
func isSet(fs *flag.FlagSet, name string) bool {
	found := false
	fs.Visit(func(f *flag.Flag) { found = found || f.Name == name })
	return found
}

// decodeRevision accepts the base64 form the CLI prints.
func decodeRevision(s string) ([]byte, error) {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("%q is not a revision as printed by sink (base64)", s)
	}
	return b, nil
}

// what names the command's input in messages.
func (c *command) what() string {
	if c.name == "merge" {
		return "merge intent"
	}
	return "document"
}

// jsonToBSON converts a JSON document (relaxed or canonical Extended JSON)
// to an application/bson document. Its errors say where in the input the
// problem is.
func jsonToBSON(body []byte) (*sinkv1.Document, error) {
	if t := bytes.TrimLeft(body, " \t\r\n"); len(t) > 0 && t[0] != '{' {
		return nil, fmt.Errorf("cannot convert the JSON to BSON: a BSON document is a JSON object ({...}), the input is not one")
	}
	if err := checkExtJSONNumbers(body); err != nil {
		return nil, fmt.Errorf("cannot convert the JSON to BSON: %w", err)
	}
	var doc bson.D
	if err := bson.UnmarshalExtJSON(body, false, &doc); err != nil {
		return nil, fmt.Errorf("cannot convert the JSON to BSON (Extended JSON): %w", err)
	}
	b, err := bson.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("cannot convert the JSON to BSON: %w", err)
	}
	return &sinkv1.Document{ContentType: domain.ContentTypeBSON, Data: b}, nil
}

func (c *command) transportCredentials() (credentials.TransportCredentials, error) {
	if !c.tls && c.caFile == "" && c.certFile == "" && c.keyFile == "" {
		return insecure.NewCredentials(), nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.serverName}
	if c.caFile != "" {
		pem, err := os.ReadFile(c.caFile)
		if err != nil {
			return nil, fmt.Errorf("--ca-file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--ca-file %q contains no PEM certificate", c.caFile)
		}
		cfg.RootCAs = pool
	}
	if (c.certFile == "") != (c.keyFile == "") {
		return nil, fmt.Errorf("--cert-file and --key-file go together")
	}
	if c.certFile != "" {
		pair, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
		if err != nil {
			return nil, fmt.Errorf("cannot load the client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return credentials.NewTLS(cfg), nil
}
