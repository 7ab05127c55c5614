package postgres

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/sink-io/sink/domain"
)

// Keys of Sink's own tables: one bytea column k = the key kind's byte, then
// the key's bytes. Different kinds are different records (a string "42"
// and an int64 42 differ), and the primary key orders by bytes, never by a
// collation. int64 keys are 8 bytes big-endian with the sign bit flipped,
// so that they sort numerically.
const (
	kindString   byte = 's'
	kindInt64    byte = 'i'
	kindBytes    byte = 'b'
	kindObjectID byte = 'o'
)

// encodeKey returns the stored key of k, or an error for a key the storage
// cannot hold.
func encodeKey(k domain.Key) ([]byte, error) {
	switch k.Kind {
	case domain.KeyString:
		s := k.StringValue()
		return append([]byte{kindString}, s...), nil
	case domain.KeyInt64:
		b := make([]byte, 9)
		b[0] = kindInt64
		binary.BigEndian.PutUint64(b[1:], uint64(k.Int64())^(1<<63))
		return b, nil
	case domain.KeyBytes:
		return append([]byte{kindBytes}, k.Bytes()...), nil
	case domain.KeyObjectID:
		b := k.Bytes()
		if len(b) != 12 {
			return nil, fmt.Errorf("an ObjectID key is 12 bytes, not %d", len(b))
		}
		return append([]byte{kindObjectID}, b...), nil
	}
	return nil, fmt.Errorf("key of unknown kind %d", k.Kind)
}

// Revisions are 16 bytes: 8 random bytes drawn when the Store is created,
// then a counter of the Store's writes. They are never reused, also not
// after a delete and re-create, and they are unique across processes with
// overwhelming probability (2^-64 per pair of stores). Revisions of bound
// tables: see legacyRevision.
type revisions struct {
	prefix [8]byte
	n      atomic.Uint64
}

func newRevisions() *revisions {
	r := &revisions{}
	if _, err := rand.Read(r.prefix[:]); err != nil {
		panic("postgres: no random bytes for revisions: " + err.Error())
	}
	var c [8]byte
	_, _ = rand.Read(c[:])
	r.n.Store(binary.BigEndian.Uint64(c[:]) >> 16) // a random start: revisions say nothing about counts
	return r
}

const revisionBytes = 16

func (r *revisions) next() domain.Revision {
	var b [revisionBytes]byte
	copy(b[:8], r.prefix[:])
	binary.BigEndian.PutUint64(b[8:], r.n.Add(1))
	return domain.Revision(b[:])
}

// docHashBytes is the length of the document hash in a bound row's meta.
const docHashBytes = 16

// docHash is the hash of a bound row's document as PostgreSQL returns it.
func docHash(stored []byte) []byte {
	h := sha256.Sum256(stored)
	return h[:docHashBytes]
}

// legacyRevision returns the revision of a bound row: the revision token in
// its meta when the meta's document hash matches the row's document, else
// (a row Sink never wrote, or one another program changed since) "L" and
// the document's hash. Either way a change by another program changes the
// revision, so a merge never overwrites it unseen.
func legacyRevision(m meta, stored []byte) domain.Revision {
	h := docHash(stored)
	if m.present && string(m.hash) == string(h) {
		return m.rev
	}
	return domain.Revision("L" + string(h))
}

// meta is what Sink keeps beside a document: the revision (bound tables
// only; Sink's tables have a column of their own), the hash of the stored
// document (bound tables only) and the applied mark.
//
// Encoding (bytea), version 1:
//
//	0x01, uvarint len + revision, uvarint len + hash, mark
//
// and a mark (also the whole "mark" column of Sink's tables, version 1):
//
//	0x01, uvarint len + log, varint partition, varint offset,
//	uvarint n, n × (uvarint len + id, uvarint len + revision)
//
// An empty mark column (NULL) is the zero mark.
type meta struct {
	present bool
	rev     domain.Revision
	hash    []byte
	mark    domain.AppliedMark
}

func appendBytes(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func encodeMark(m domain.AppliedMark) []byte {
	if m.IsZero() {
		return nil
	}
	b := make([]byte, 0, 16+len(m.Position.Log)+len(m.Recent)*40)
	return appendMark(b, m)
}

func appendMark(b []byte, m domain.AppliedMark) []byte {
	b = append(b, 1)
	b = appendBytes(b, m.Position.Log)
	b = binary.AppendVarint(b, int64(m.Position.Partition))
	b = binary.AppendVarint(b, m.Position.Offset)
	b = binary.AppendUvarint(b, uint64(len(m.Recent)))
	for _, e := range m.Recent {
		b = appendBytes(b, e.ID)
		b = appendBytes(b, string(e.Revision))
	}
	return b
}

var errBadMeta = errors.New("the record's metadata (Sink's columns) does not decode")

type reader struct {
	b   []byte
	bad bool
}

func (r *reader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.bad = true
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) varint() int64 {
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.bad = true
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) str() string {
	n := r.uvarint()
	if r.bad || n > uint64(len(r.b)) {
		r.bad = true
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

func (r *reader) mark() domain.AppliedMark {
	var m domain.AppliedMark
	if len(r.b) == 0 || r.b[0] != 1 {
		r.bad = true
		return m
	}
	r.b = r.b[1:]
	m.Position.Log = r.str()
	m.Position.Partition = int32(r.varint())
	m.Position.Offset = r.varint()
	n := r.uvarint()
	if r.bad || n > domain.MaxAppliedRing {
		r.bad = true
		return m
	}
	if n > 0 {
		m.Recent = make([]domain.AppliedEntry, n)
		for i := range m.Recent {
			m.Recent[i] = domain.AppliedEntry{ID: r.str(), Revision: domain.Revision(r.str())}
		}
	}
	return m
}

func decodeMark(b []byte) (domain.AppliedMark, error) {
	if len(b) == 0 {
		return domain.AppliedMark{}, nil
	}
	r := reader{b: b}
	m := r.mark()
	if r.bad || len(r.b) != 0 {
		return domain.AppliedMark{}, errBadMeta
	}
	return m, nil
}

func decodeMeta(b []byte) (meta, error) {
	if len(b) == 0 {
		return meta{}, nil
	}
	if b[0] != 1 {
		return meta{}, errBadMeta
	}
	r := reader{b: b[1:]}
	m := meta{present: true}
	m.rev = domain.Revision(r.str())
	m.hash = []byte(r.str())
	m.mark = r.mark()
	if r.bad || len(r.b) != 0 {
		return meta{}, errBadMeta
	}
	return m, nil
}

// uuidText renders 16 bytes as a UUID.
func uuidText(b []byte) string {
	h := hex.EncodeToString(b)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}
