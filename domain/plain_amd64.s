//go:build !purego

#include "textflag.h"

// func plainPrefix(b []byte) int
//
// Skips b's plain JSON string bytes (0x20 to 0x7f but '"' and '\\') with
// SSE2, which every amd64 processor has: per block of 16 bytes, one signed
// compare finds both the control characters (below 0x20) and the bytes of
// multi-byte UTF-8 sequences (0x80 and above: negative as signed bytes),
// and two equality compares find '"' and '\\'. Four blocks at a time
// (their verdicts or-ed and tested once), then one at a time from the
// first group that has a byte that is not plain (or when fewer than 64
// bytes are left). Returns the offset of the first byte that is not plain,
// or, when the blocks read hold none, their length (len(b) rounded down to
// 16): it never reads past len(b).
TEXT ·plainPrefix(SB), NOSPLIT, $0-32
	MOVQ b_base+0(FP), SI
	MOVQ b_len+8(FP), CX
	XORQ AX, AX
	MOVQ $0x2222222222222222, DX
	MOVQ DX, X1
	PUNPCKLQDQ X1, X1 // '"' in every byte
	MOVQ $0x5c5c5c5c5c5c5c5c, DX
	MOVQ DX, X2
	PUNPCKLQDQ X2, X2 // '\\'
	MOVQ $0x2020202020202020, DX
	MOVQ DX, X3
	PUNPCKLQDQ X3, X3 // ' '

groups:
	LEAQ 64(AX), DX
	CMPQ DX, CX
	JA   blocks
	MOVOU (SI)(AX*1), X0
	MOVOU 16(SI)(AX*1), X7
	MOVOU 32(SI)(AX*1), X8
	MOVOU 48(SI)(AX*1), X9
	MOVO  X3, X4
	PCMPGTB X0, X4
	MOVO  X3, X5
	PCMPGTB X7, X5
	POR   X5, X4
	MOVO  X3, X5
	PCMPGTB X8, X5
	POR   X5, X4
	MOVO  X3, X5
	PCMPGTB X9, X5
	POR   X5, X4
	MOVO  X0, X5
	PCMPEQB X1, X5
	POR   X5, X4
	PCMPEQB X2, X0
	POR   X0, X4
	MOVO  X7, X5
	PCMPEQB X1, X5
	POR   X5, X4
	PCMPEQB X2, X7
	POR   X7, X4
	MOVO  X8, X5
	PCMPEQB X1, X5
	POR   X5, X4
	PCMPEQB X2, X8
	POR   X8, X4
	MOVO  X9, X5
	PCMPEQB X1, X5
	POR   X5, X4
	PCMPEQB X2, X9
	POR   X9, X4
	PMOVMSKB X4, DX
	TESTL DX, DX
	JNZ   blocks
	ADDQ  $64, AX
	JMP   groups

blocks:
	LEAQ 16(AX), DX
	CMPQ DX, CX
	JA   done
	MOVOU (SI)(AX*1), X0
	MOVO  X0, X4
	PCMPEQB X1, X4
	MOVO  X0, X5
	PCMPEQB X2, X5
	MOVO  X3, X6
	PCMPGTB X0, X6
	POR   X5, X4
	POR   X6, X4
	PMOVMSKB X4, DX
	TESTL DX, DX
	JNZ   found
	ADDQ  $16, AX
	JMP   blocks

found:
	BSFL DX, DX
	ADDQ DX, AX

done:
	MOVQ AX, ret+24(FP)
	RET
