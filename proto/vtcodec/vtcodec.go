// Package vtcodec is the gRPC codec of Sink's API: messages generated with
// vtprotobuf (proto/sink/..., `make proto`) are marshalled by their
// generated code (MarshalToSizedBufferVT, UnmarshalVT, SizeVT), without
// protobuf reflection; any other message falls back to grpc-go's proto
// codec. The wire format is protobuf's: a peer with the stock codec reads
// and writes the same bytes.
//
// The server and the Go client force it on their calls (grpc.ForceServerCodecV2,
// grpc.ForceCodecV2) rather than registering it for the whole process.
package vtcodec

import (
	"google.golang.org/grpc/encoding"
	protoenc "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// Name is the codec's content subtype, protobuf's.
const Name = protoenc.Name

// message is what vtprotobuf generates for marshal+unmarshal+size.
type message interface {
	proto.Message
	SizeVT() int
	MarshalToSizedBufferVT(dAtA []byte) (int, error)
	UnmarshalVT(dAtA []byte) error
}

// Codec implements encoding.CodecV2.
type Codec struct {
	fallback encoding.CodecV2
	pool     mem.BufferPool
}

// New returns the codec, with buffers from grpc-go's default pool.
func New() Codec { return WithPool(mem.DefaultBufferPool()) }

// WithPool returns the codec with buffers from pool (a server that bounds
// what it keeps passes its own pool, the one it gives grpc-go).
func WithPool(pool mem.BufferPool) Codec {
	return Codec{fallback: encoding.GetCodecV2(protoenc.Name), pool: pool}
}

// Marshal marshals v into one buffer of its exact size (from the codec's
// pool above grpc-go's pooling threshold, as the stock codec does).
func (c Codec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(message)
	if !ok {
		return c.fallback.Marshal(v)
	}
	size := sizeOf(m)
	if mem.IsBelowBufferPoolingThreshold(size) {
		buf := make([]byte, size)
		if err := marshalTo(m, buf); err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(buf)}, nil
	}
	buf := c.pool.Get(size)
	if err := marshalTo(m, (*buf)[:size]); err != nil {
		c.pool.Put(buf)
		return nil, err
	}
	return mem.BufferSlice{mem.NewBuffer(buf, c.pool)}, nil
}

// Unmarshal unmarshals data into v, refusing string fields that are not
// valid UTF-8 as protobuf's runtime does (checkUTF8). The generated code
// copies what it keeps (bytes and strings), so the buffers go back to
// their pool.
func (c Codec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(message)
	if !ok {
		return c.fallback.Unmarshal(data, v)
	}
	buf := data.MaterializeToBuffer(c.pool)
	defer buf.Free()
	return unmarshal(buf.ReadOnlyData(), m)
}

// Name returns "proto".
func (Codec) Name() string { return Name }
