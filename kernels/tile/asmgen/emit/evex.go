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

// Mem is a memory operand in Go assembler terms: Base + Index*Scale + Disp,
// registers by their Go names ("R10", "BX"); Index "" for none.
type Mem struct {
	Base, Index string
	Scale, Disp int
}

// String returns m as the Go assembler writes it, "8(R11)(BX*2)".
func (m Mem) String() string {
	s := fmt.Sprintf("(%s)", m.Base)
	if m.Disp != 0 {
		s = fmt.Sprint(m.Disp) + s
	}
	if m.Index != "" {
		s += fmt.Sprintf("(%s*%d)", m.Index, m.Scale)
	}
	return s
}

// gpr returns the encoding number of the general-purpose register named r.
func gpr(r string) int {
	for i, n := range [...]string{"AX", "CX", "DX", "BX", "SP", "BP", "SI", "DI",
		"R8", "R9", "R10", "R11", "R12", "R13", "R14", "R15"} {
		if n == r {
			return i
		}
	}
	panic("emit: unknown register " + r)
}

// DPBF16BcstBytes encodes VDPBF16PS zmm(dst), zmm(src1), m32bcst (EVEX.512.F3.0F38.W0
// 52 /r with EVEX.b): the dword at m (a bf16 pair) broadcast to all 16
// lanes as src2. The broadcast then needs no instruction of its own: one
// micro-op fewer per product than VPBROADCASTD and the register form. A
// displacement is a multiple of 4 that fits the compressed 8-bit form
// (disp8*4) or takes 32 bits.
func DPBF16BcstBytes(dst, src1 int, m Mem) string {
	base, index := gpr(m.Base), -1
	if m.Index != "" {
		index = gpr(m.Index)
		if index == 4 {
			panic("emit: SP cannot be an index")
		}
	}
	p0 := 0x02 // mm = 0F38
	if dst&8 == 0 {
		p0 |= 0x80 // R~
	}
	if index < 0 || index&8 == 0 {
		p0 |= 0x40 // X~
	}
	if base&8 == 0 {
		p0 |= 0x20 // B~
	}
	if dst&16 == 0 {
		p0 |= 0x10 // R'~
	}
	p1 := (^src1&15)<<3 | 0x04 | 0x2 // W0, vvvv~, 1, pp = F3
	p2 := 0x50                       // z=0, L'L = 512, b = 1 (broadcast), aaa = 0
	if src1&16 == 0 {
		p2 |= 0x08 // V'~
	}
	var mod int
	var disp []int
	switch d := m.Disp; {
	case d == 0 && base&7 != 5: // RBP/R13 with mod 00 would mean RIP/disp32
	case d%4 == 0 && d/4 >= -128 && d/4 <= 127:
		mod, disp = 1, []int{d / 4 & 0xff}
	default:
		mod, disp = 2, []int{d & 0xff, d >> 8 & 0xff, d >> 16 & 0xff, d >> 24 & 0xff}
	}
	b := []int{0x62, p0, p1, p2, 0x52}
	if index < 0 && base&7 != 4 {
		b = append(b, mod<<6|(dst&7)<<3|base&7)
	} else {
		sib := 4<<3 | base&7 // no index
		if index >= 0 {
			ss := map[int]int{1: 0, 2: 1, 4: 2, 8: 3}[m.Scale]
			if m.Scale != 1<<ss {
				panic(fmt.Sprintf("emit: scale %d", m.Scale))
			}
			sib = ss<<6 | (index&7)<<3 | base&7
		}
		b = append(b, mod<<6|(dst&7)<<3|4, sib)
	}
	b = append(b, disp...)
	s := ""
	for i, x := range b {
		if i > 0 {
			s += "; "
		}
		s += fmt.Sprintf("BYTE $0x%02X", x)
	}
	return s
}
