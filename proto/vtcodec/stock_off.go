//go:build !sink_stockcodec

package vtcodec

// The codec's marshalling: vtprotobuf's generated code. Built with the
// tag sink_stockcodec (the benchmarks' comparison only), protobuf's
// runtime does it instead, with the same buffers (stock_on.go).

func sizeOf(m message) int { return m.SizeVT() }

// marshalTo marshals m into buf, of exactly sizeOf(m) bytes.
func marshalTo(m message, buf []byte) error {
	_, err := m.MarshalToSizedBufferVT(buf)
	return err
}

// unmarshal unmarshals b into m; what m keeps is copied out of b.
func unmarshal(b []byte, m message) error {
	if err := checkUTF8(b, infoOf(m.ProtoReflect().Descriptor()), 0); err != nil {
		return err
	}
	return m.UnmarshalVT(b)
}
