//go:build !purego

package domain

// plainPrefix returns the length of a leading run of plain JSON string
// bytes of b (printable ASCII other than '"' and '\\'): b[:k] are all
// plain, and k is the offset of b's first byte that is not plain or less
// than 16 bytes before it (or before len(b): blocks of 16 bytes are
// scanned whole, and the bytes after the last whole block are not looked
// at). The caller goes on byte by byte from k. In plain_amd64.s (SSE2).
//
//go:noescape
func plainPrefix(b []byte) int

// plainBlock is how far before the first byte that is not plain (or the
// end) plainPrefix may stop: less than this many bytes.
const plainBlock = 16
