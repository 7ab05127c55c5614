//go:build !sink_stockcodec

package vtcodec

// stock makes the codec marshal every message with grpc-go's proto codec
// (build tag sink_stockcodec): the benchmarks' comparison with the
// stock codec builds Sink and the null server with it.
const stock = false
