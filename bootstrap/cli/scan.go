package cli

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"

	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
)

// buildScan checks the flags of scan and count; it returns an exit code.
func (c *command) buildScan(r *request) int {
	r.address = &sinkv1.RecordAddress{Store: c.store, Namespace: c.namespace, Dataset: c.dataset}
	if c.limit < 0 {
		return c.usageError("--limit must not be negative")
	}
	if c.cursor != "" {
		b, err := base64.StdEncoding.DecodeString(c.cursor)
		if err != nil {
			return c.usageError("--cursor: not a cursor scan printed (base64): %v", err)
		}
		r.cursor = b
	}
	return ExitOK
}

// scanLine is one line scan prints.
type scanLine struct {
	Key         *string         `json:"key,omitempty"`
	KeyInt      *int64          `json:"key_int,omitempty"`
	KeyBytes    *string         `json:"key_bytes,omitempty"`
	KeyOID      *string         `json:"key_oid,omitempty"`
	Revision    string          `json:"revision,omitempty"`
	ContentType string          `json:"content_type,omitempty"`
	Document    json.RawMessage `json:"document,omitempty"`
	DataBase64  string          `json:"data_base64,omitempty"`
	Cursor      string          `json:"cursor,omitempty"`
}

func (c *command) scan(ctx context.Context, client sinkv1.SinkClient, r *request) int {
	st, err := client.Scan(ctx, &sinkv1.ScanRequest{Dataset: &sinkv1.DatasetRef{Store: r.address.Store, Namespace: r.address.Namespace, Dataset: r.address.Dataset},
		Where: c.where, Cursor: r.cursor, Limit: uint32(min(c.limit, 1<<31)), KeysOnly: c.keysOnly})
	if err != nil {
		return c.callError(err)
	}
	enc := json.NewEncoder(c.io.Stdout)
	enc.SetEscapeHTML(false)
	var last *sinkv1.ScanPage
	for {
		page, err := st.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return c.callError(err)
		}
		last = page
		for _, rec := range page.GetRecords() {
			line := keyLine(rec.GetKey())
			line.Revision = base64.StdEncoding.EncodeToString(rec.GetRevision())
			if d := rec.GetDocument(); d != nil {
				var out output
				c.setDocument(&out, d)
				line.ContentType, line.Document, line.DataBase64 = out.ContentType, out.Document, out.DataBase64
			}
			if err := enc.Encode(line); err != nil {
				return c.fail(ExitFailed, "cannot write the result: %v", err)
			}
		}
	}
	if last != nil && len(last.GetCursor()) > 0 {
		if err := enc.Encode(scanLine{Cursor: base64.StdEncoding.EncodeToString(last.GetCursor())}); err != nil {
			return c.fail(ExitFailed, "cannot write the result: %v", err)
		}
	}
	return ExitOK
}

func keyLine(k *sinkv1.RecordKey) scanLine {
	var l scanLine
	switch v := k.GetKind().(type) {
	case *sinkv1.RecordKey_String_:
		l.Key = &v.String_
	case *sinkv1.RecordKey_Int64:
		l.KeyInt = &v.Int64
	case *sinkv1.RecordKey_Bytes:
		s := base64.StdEncoding.EncodeToString(v.Bytes)
		l.KeyBytes = &s
	case *sinkv1.RecordKey_ObjectId:
		s := hex.EncodeToString(v.ObjectId)
		l.KeyOID = &s
	}
	return l
}

func (c *command) count(ctx context.Context, client sinkv1.SinkClient, r *request) int {
	resp, err := client.Count(ctx, &sinkv1.CountRequest{Dataset: &sinkv1.DatasetRef{Store: r.address.Store, Namespace: r.address.Namespace, Dataset: r.address.Dataset}, Where: c.where})
	if err != nil {
		return c.callError(err)
	}
	var b bytes.Buffer
	b.WriteString(jsonNumber(resp.GetCount()))
	b.WriteByte('\n')
	if _, err := c.io.Stdout.Write(b.Bytes()); err != nil {
		return c.fail(ExitFailed, "cannot write the result: %v", err)
	}
	return ExitOK
}

func jsonNumber(n uint64) string {
	b, _ := json.Marshal(n)
	return string(b)
}
