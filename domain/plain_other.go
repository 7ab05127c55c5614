//go:build !amd64 || purego

package domain

import "encoding/binary"

// plainBlock is how far before the first byte that is not plain (or the
// end) plainPrefix may stop: less than this many bytes.
const plainBlock = 8

// plainPrefix returns the length of a leading run of plain JSON string
// bytes of b (printable ASCII other than '"' and '\\'): b[:k] are all
// plain, and k is the offset of b's first byte that is not plain or less
// than eight bytes before it (or before len(b)). The caller goes on byte
// by byte from k. Words of eight bytes, and after a plain word 32 bytes
// at a time (four words' masks or-ed and tested once), up to the first
// word with anything else.
func plainPrefix(b []byte) int {
	i, n := 0, len(b)
	for i+8 <= n && specialJSONStringBits(binary.LittleEndian.Uint64(b[i:])) == 0 {
		for i += 8; i+32 <= n; i += 32 {
			w := b[i : i+32 : i+32]
			if specialJSONStringBits(binary.LittleEndian.Uint64(w))|
				specialJSONStringBits(binary.LittleEndian.Uint64(w[8:]))|
				specialJSONStringBits(binary.LittleEndian.Uint64(w[16:]))|
				specialJSONStringBits(binary.LittleEndian.Uint64(w[24:])) != 0 {
				break
			}
		}
	}
	return i
}
