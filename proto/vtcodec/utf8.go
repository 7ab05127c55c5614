package vtcodec

import (
	"errors"
	"sync"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// errInvalidUTF8 is what protobuf's own runtime answers for a string field
// that is not valid UTF-8.
var errInvalidUTF8 = errors.New("proto: string field contains invalid UTF-8")

// The generated UnmarshalVT does not check that string fields are valid
// UTF-8, as protobuf's runtime does (proto3 strings must be), nor that
// field numbers are in protobuf's range. checkUTF8
// walks the wire bytes of a message with a table of its fields made once
// from its descriptor, and checks every string field, in nested messages
// too, without allocating.

type fieldKind uint8

const (
	kindOther fieldKind = iota
	kindString
	kindMessage
)

type fieldInfo struct {
	kind fieldKind
	msg  *msgInfo // kindMessage
}

type msgInfo struct {
	once   sync.Once
	desc   protoreflect.MessageDescriptor
	fields map[protowire.Number]fieldInfo
}

var infos sync.Map // protoreflect.FullName → *msgInfo

func infoOf(d protoreflect.MessageDescriptor) *msgInfo {
	if v, ok := infos.Load(d.FullName()); ok {
		return v.(*msgInfo)
	}
	v, _ := infos.LoadOrStore(d.FullName(), &msgInfo{desc: d})
	return v.(*msgInfo)
}

func (m *msgInfo) table() map[protowire.Number]fieldInfo {
	m.once.Do(func() {
		fs := m.desc.Fields()
		m.fields = make(map[protowire.Number]fieldInfo, fs.Len())
		for i := range fs.Len() {
			f := fs.Get(i)
			switch f.Kind() {
			case protoreflect.StringKind:
				m.fields[f.Number()] = fieldInfo{kind: kindString}
			case protoreflect.MessageKind, protoreflect.GroupKind:
				m.fields[f.Number()] = fieldInfo{kind: kindMessage, msg: infoOf(f.Message())}
			}
		}
	})
	return m.fields
}

// maxDepth bounds the nesting the walk follows (protobuf's runtime stops
// at 10,000).
const maxDepth = 10000

func checkUTF8(b []byte, m *msgInfo, depth int) error {
	if depth > maxDepth {
		return errors.New("proto: exceeded maximum recursion depth")
	}
	fields := m.table()
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		if !num.IsValid() {
			return errors.New("proto: cannot parse invalid wire-format data: invalid field number")
		}
		b = b[n:]
		f := fields[num]
		if typ == protowire.BytesType && f.kind != kindOther {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return protowire.ParseError(n)
			}
			b = b[n:]
			if f.kind == kindString {
				if !utf8.Valid(v) {
					return errInvalidUTF8
				}
				continue
			}
			if err := checkUTF8(v, f.msg, depth+1); err != nil {
				return err
			}
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
	}
	return nil
}
