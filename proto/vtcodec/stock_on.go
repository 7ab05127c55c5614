//go:build sink_stockcodec

package vtcodec

// stock: see stock_off.go. Built with the tag sink_stockcodec, for the
// benchmarks only.
const stock = true
