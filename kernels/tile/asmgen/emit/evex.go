package emit

import "fmt"

// AVX512_BF16 instructions are unknown to the Go assembler: the generators
// emit them as BYTE directives with these encodings.

// DPBF16Bytes encodes VDPBF16PS zmm(dst), zmm(src1), zmm(src2) (EVEX.512.F3.0F38.W0 52 /r).
func DPBF16Bytes(dst, src1, src2 int) string { return evex0F38(0x2, 0x52, dst, src1, src2) }

// CvtNE2PS2BF16Bytes encodes VCVTNE2PS2BF16 zmm(dst), zmm(src1), zmm(src2)
// (EVEX.512.F2.0F38.W0 72 /r): words 0-15 of dst are src2 rounded to bf16
// (nearest even), words 16-31 are src1.
func CvtNE2PS2BF16Bytes(dst, src1, src2 int) string { return evex0F38(0x3, 0x72, dst, src1, src2) }

// evex0F38 encodes a register-only EVEX.512.W0 instruction of map 0F38 with
// prefix pp (2 = F3, 3 = F2), no masking: zmm(dst) = op(zmm(src1), zmm(src2)).
func evex0F38(pp, opcode, dst, src1, src2 int) string {
	p0 := 0x02 // mm = 0F38
	if dst&8 == 0 {
		p0 |= 0x80 // R~
	}
	if src2&16 == 0 {
		p0 |= 0x40 // X~ (bit 4 of rm in register form)
	}
	if src2&8 == 0 {
		p0 |= 0x20 // B~
	}
	if dst&16 == 0 {
		p0 |= 0x10 // R'~
	}
	p1 := (^src1&15)<<3 | 0x04 | pp // W0, vvvv~, 1, pp
	p2 := 0x40                      // z=0, L'L = 512, b = 0, aaa = 0
	if src1&16 == 0 {
		p2 |= 0x08 // V'~
	}
	modrm := 0xC0 | (dst&7)<<3 | src2&7
	return fmt.Sprintf("BYTE $0x62; BYTE $0x%02X; BYTE $0x%02X; BYTE $0x%02X; BYTE $0x%02X; BYTE $0x%02X", p0, p1, p2, opcode, modrm)
}
