package attn

// The e4m3sub table in epilogue_amd64.s (bfloat16 bits of the e4m3fn
// subnormals m * 2^-9, m = 0..7) was generated with:
//
//	import struct
//	for m in range(8):
//	    f = struct.unpack('<I', struct.pack('<f', m * 2**-9))[0]
//	    assert f & 0xffff == 0  # exact in bfloat16
//	    print(f"DATA e4m3sub<>+{2*m}(SB)/2, $0x{f >> 16:04x}")
//
// TestEpilogueKernels checks every e4m3 pattern against lowp bit for bit.
