//go:build amd64 && !purego

package tile

import (
	"fmt"
	"math"
	"math/rand"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/sparseattn/msa/kernels/lowp"
)

// softmaxRows runs the softmax kernel of a tier on one row x (len BlockN)
// with scale 1, previous max 0, n visible keys and the given rounding, and
// returns the stored P row (for pack, the bf16 pairs widened to float32;
// tier "avx512bf16" packs with VCVTNE2PS2BF16, "avx512" with AVX-512F).
// It fails the test instead of running a kernel the CPU lacks (which would
// kill the test binary with SIGILL): callers must have skipped the tier
// with useTier first.
func softmaxRows(t testing.TB, tier string, x []float32, n int, round Round, pack bool) []float32 {
	t.Helper()
	if m, ok := tierMissing(tier); !ok || m != "" {
		t.Fatalf("softmaxRows(%s): the CPU lacks %q: skip the tier with useTier first", tier, m)
	}
	s := make([]float32, BlockN)
	copy(s, x)
	switch tier {
	case "avx512", "avx512bf16":
		valid := []int32{int32(n)}
		mx, sum, tsum, alpha := []float32{0}, []float32{0}, []float32{0}, []float32{0}
		f := softmax512
		switch {
		case pack && tier == "avx512bf16":
			f = softmax512p
		case pack:
			f = softmax512pe
		}
		f(&s[0], BlockN/16, &valid[0], 1, BlockN, 1, 0, int(round), &mx[0], &sum[0], &tsum[0], &alpha[0])
		if pack {
			words := unsafe.Slice((*uint16)(unsafe.Pointer(&s[0])), BlockN)
			p := make([]float32, BlockN)
			for i, w := range words {
				p[i] = lowp.BFloat16(w).Float32()
			}
			return p
		}
	case "avx2":
		valid := []int32{int32(n)}
		mx, sum, tsum, alpha := []float32{0}, []float32{0}, []float32{0}, []float32{0}
		softmax256(&s[0], BlockN/8, &valid[0], 1, BlockN, 1, 0, int(round), &mx[0], &sum[0], &tsum[0], &alpha[0])
	}
	return s
}

func ulpDiff(got float32, want float64) float64 {
	w32 := float32(want)
	ulp := float64(math.Nextafter32(w32, float32(math.Inf(1))) - w32)
	return math.Abs(float64(got)-want) / ulp
}

// TestExp2 checks the vectorised exp2 of the softmax kernels: within 2 ulp
// of the exact value for normal results (avx512: also for subnormal ones,
// within 1 ulp of 2^-149; avx2 flushes results below 2^-126 to zero); exact
// zero for -inf, masked keys and very large negative arguments.
func TestExp2(t *testing.T) {
	for _, tn := range []string{"avx512", "avx2"} {
		t.Run(tn, func(t *testing.T) {
			useTier(t, tn)
			rng := rand.New(rand.NewSource(4))
			for trial := 0; trial < 200; trial++ {
				x := make([]float32, BlockN)
				for i := range x {
					switch {
					case i == 0:
						x[i] = 0
					case trial < 100:
						x[i] = -float32(rng.Float64()) * 30
					default:
						x[i] = -float32(rng.Float64()) * 160
					}
				}
				x[5] = float32(math.Inf(-1))
				x[6] = -1e30
				x[7] = -149.5
				n := BlockN - trial%20
				p := softmaxRows(t, tn, x, n, RoundNone, false)
				for i := range x {
					want := math.Exp2(float64(x[i]))
					if i >= n {
						want = 0
					}
					var bad bool
					switch {
					case want >= 0x1p-126:
						bad = ulpDiff(p[i], want) > 2
					case tn == "avx2":
						bad = float64(p[i]) > 0x1p-126
					default:
						bad = math.Abs(float64(p[i])-want) > 0x1p-149
					}
					if bad {
						t.Fatalf("exp2(%g) = %g, want %g (n %d, i %d)", x[i], p[i], want, n, i)
					}
				}
			}
		})
	}
}

// TestRounding checks the vectorised P rounding bit for bit against lowp.
func TestRounding(t *testing.T) {
	for _, tn := range []string{"avx512", "avx512-pack", "avx512bf16-pack", "avx2"} {
		t.Run(tn, func(t *testing.T) {
			base, pack := strings.CutSuffix(tn, "-pack")
			useTier(t, base)
			rng := rand.New(rand.NewSource(5))
			for trial := 0; trial < 300; trial++ {
				x := make([]float32, BlockN)
				for i := 1; i < BlockN; i++ {
					x[i] = -float32(rng.Float64()) * float32(1+trial%20)
				}
				// The unrounded P of the same tier (useTier above skipped the
				// subtest unless this CPU has it; never run another tier here).
				p0 := softmaxRows(t, base, x, BlockN, RoundNone, false)
				for _, r := range []Round{RoundNone, RoundBF16, RoundE4M3} {
					p := softmaxRows(t, base, x, BlockN, r, pack)
					for i := range p {
						var want float32
						switch r {
						case RoundNone:
							want = p0[i]
						case RoundBF16:
							want = lowp.BF16(p0[i]).Float32()
						case RoundE4M3:
							want = lowp.E4M3Sat(p0[i]).Float32()
						}
						if pack {
							want = lowp.BF16(want).Float32()
						}
						if p[i] != want {
							t.Fatalf("round %d: p = %g rounds to %g, want %g", r, p0[i], p[i], want)
						}
					}
				}
			}
		})
	}
}

// TestBF16Encoding disassembles this test binary with GNU objdump (skipped
// when absent) and checks that every VDPBF16PS and VCVTNE2PS2BF16 emitted as
// BYTE directives decodes to the registers named in its comment in the
// generated assembly (the Acc kernels and the bf16-product lane kernels)
// and in the AMX lane path's; a broadcast form (comment VDPBF16PS.BCST)
// also to its memory operand.
func TestBF16Encoding(t *testing.T) {
	objdump, err := exec.LookPath("objdump")
	if err != nil {
		t.Skip("objdump not found")
	}
	out, err := exec.Command(objdump, "-d", "--no-show-raw-insn", os.Args[0]).Output()
	if err != nil {
		t.Skipf("objdump: %v", err)
	}
	var got []string
	for _, l := range strings.Split(string(out), "\n") {
		for _, mn := range []string{"vdpbf16ps ", "vcvtne2ps2bf16 "} {
			if i := strings.Index(l, mn); i >= 0 {
				f := strings.Fields(l[i:])
				got = append(got, f[0]+" "+strings.ReplaceAll(f[1], "%zmm", "")) // AT&T: src2,src1,dst
			}
		}
	}
	var src []byte
	for _, f := range []string{"kernels_avx512_amd64.s", "lanes_amx_amd64.s", "lanes_bf16_amd64.s"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		src = append(src, b...)
	}
	var want []string
	for _, l := range strings.Split(string(src), "\n") {
		for _, mn := range []string{"VDPBF16PS", "VCVTNE2PS2BF16"} {
			if i := strings.Index(l, "// "+mn+" Z"); i >= 0 {
				f := strings.Fields(strings.NewReplacer("Z", "", ",", " ").Replace(l[i+len(mn)+4:]))
				// Comments give Intel-like order reversed as in Go: src2, src1, dst.
				want = append(want, strings.ToLower(mn)+" "+f[0]+","+f[1]+","+f[2])
			}
		}
		// The broadcast form: "// VDPBF16PS.BCST 8(R11)(BX*2), Z31, Z2".
		if i := strings.Index(l, "// VDPBF16PS.BCST "); i >= 0 {
			f := strings.Fields(strings.NewReplacer("Z", "", ",", " ").Replace(l[i+18:]))
			want = append(want, "vdpbf16ps "+attMem(t, f[0])+"{1to16},"+f[1]+","+f[2])
		}
	}
	sort.Strings(got)
	sort.Strings(want)
	if len(want) == 0 || strings.Join(got, " ") != strings.Join(want, " ") {
		for i := range min(len(got), len(want)) {
			if got[i] != want[i] {
				t.Logf("first difference: decoded %q, source %q", got[i], want[i])
				break
			}
		}
		t.Fatalf("VDPBF16PS encodings: %d decoded, %d in the source, or operands differ", len(got), len(want))
	}
}

// attMem writes the Go assembler memory operand m ("8(R11)(BX*2)") as
// objdump's AT&T syntax does ("0x8(%r11,%rbx,2)").
func attMem(t *testing.T, m string) string {
	i := strings.Index(m, "(")
	if i < 0 {
		t.Fatalf("memory operand %q", m)
	}
	disp := ""
	if i > 0 {
		d, err := strconv.Atoi(m[:i])
		if err != nil {
			t.Fatalf("memory operand %q: %v", m, err)
		}
		disp = fmt.Sprintf("%#x", d)
	}
	regs := strings.FieldsFunc(strings.ToLower(m[i:]), func(r rune) bool { return r == '(' || r == ')' || r == '*' })
	for j, r := range regs {
		if r[0] != 'r' && (r[0] < '0' || r[0] > '9') {
			regs[j] = "r" + r // BX is %rbx
		}
	}
	switch len(regs) {
	case 1:
		return disp + "(%" + regs[0] + ")"
	case 3:
		return disp + "(%" + regs[0] + ",%" + regs[1] + "," + regs[2] + ")"
	}
	t.Fatalf("memory operand %q", m)
	return ""
}
