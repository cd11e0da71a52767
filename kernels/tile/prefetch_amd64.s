//go:build amd64 && !purego

#include "textflag.h"

// func prefetchLines(p uintptr, lines int)
// PREFETCHT1 (into L2) of each 64-byte line of [p, p+64*lines), lines >= 1.
TEXT ·prefetchLines(SB), NOSPLIT, $0-16
	MOVQ p+0(FP), AX
	MOVQ lines+8(FP), CX
loop:
	PREFETCHT1 (AX)
	ADDQ $64, AX
	DECQ CX
	JNZ  loop
	RET
