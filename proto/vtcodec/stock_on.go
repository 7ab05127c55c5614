//go:build sink_stockcodec

package vtcodec

import (
	"fmt"

	"google.golang.org/protobuf/proto"
)

// Built with the tag sink_stockcodec, for the benchmarks only: the codec
// marshals with protobuf's runtime (what grpc-go's proto codec calls),
// with the same buffers as with the generated code (stock_off.go), so
// that a comparison measures the marshalling code alone.

func sizeOf(m message) int { return proto.Size(m) }

func marshalTo(m message, buf []byte) error {
	out, err := proto.MarshalOptions{UseCachedSize: true}.MarshalAppend(buf[:0], m)
	if err == nil && len(out) != len(buf) {
		err = fmt.Errorf("vtcodec: %T marshalled to %d bytes, sized %d", m, len(out), len(buf))
	}
	return err
}

func unmarshal(b []byte, m message) error { return proto.Unmarshal(b, m) }
