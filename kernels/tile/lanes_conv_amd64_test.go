//go:build amd64 && !purego

package tile

import (
	"fmt"
	"math"
	"math/rand"
	"testing"
	"unsafe"

	"github.com/sparseattn/msa/kernels/lowp"
)

// TestLanesConvLayout checks the lanesConv and E4M3Tables offsets that
// asmgen/lanes/gen.go hard-codes.
func TestLanesConvLayout(t *testing.T) {
	var c lanesConv
	var tab E4M3Tables
	for _, f := range []struct {
		name      string
		got, want uintptr
	}{
		{"src", unsafe.Offsetof(c.src), 0}, {"dst", unsafe.Offsetof(c.dst), 8},
		{"units", unsafe.Offsetof(c.units), 16}, {"cd", unsafe.Offsetof(c.cd), 24},
		{"per", unsafe.Offsetof(c.per), 32}, {"tab", unsafe.Offsetof(c.tab), 40},
		{"kind", unsafe.Offsetof(c.kind), 48}, {"max", unsafe.Offsetof(c.max), 64},
		{"B3", unsafe.Offsetof(tab.B3), 128}, {"Perm", unsafe.Offsetof(tab.Perm), 256},
		{"Sign", unsafe.Offsetof(tab.Sign), 320},
	} {
		if f.got != f.want {
			t.Errorf("%s at offset %d, want %d", f.name, f.got, f.want)
		}
	}
}

// needConv skips a test where the lane kernels' side conversion cannot run.
func needConv(t *testing.T) {
	t.Helper()
	useTier(t, "avx512")
	if !lanesConvOK {
		t.Skip("CPU lacks AVX512_VBMI: no side conversion")
	}
}

// TestLanesConvRest widens every e4m3fn byte (NaNs, subnormals and zeros of
// both signs included, in shuffled order) with lanesConvRest512 and
// compares the bits with lowp.DecodeE4M3.
func TestLanesConvRest(t *testing.T) {
	needConv(t)
	rng := rand.New(rand.NewSource(1))
	src := make([]lowp.Float8E4M3FN, 4*256)
	for i := range src {
		src[i] = lowp.Float8E4M3FN(i % 256)
	}
	rng.Shuffle(len(src), func(i, j int) { src[i], src[j] = src[j], src[i] })
	got, want := make([]float32, len(src)+16), make([]float32, len(src))
	got[len(src)] = 7 // the conversion must stop at its last unit
	lowp.DecodeE4M3(want, src)
	cv := lanesConv{src: uintptr(unsafe.Pointer(&src[0])), dst: uintptr(unsafe.Pointer(&got[0])), units: len(src) / 64, tab: &E4M3Tab}
	lanesConvRest512(&cv)
	for i := range want {
		if g, w := math.Float32bits(got[i]), math.Float32bits(want[i]); g != w {
			t.Fatalf("byte %#02x: %#08x, want %#08x", uint8(src[i]), g, w)
		}
	}
	if cv.units != 0 || got[len(src)] != 7 {
		t.Errorf("units left %d, sentinel %g", cv.units, got[len(src)])
	}
}

// TestLanesConvRestBF16 widens every bf16 bit pattern (shuffled) with
// lanesConvRest512, without and with the finite-maximum scan, compares the
// bits with lowp.DecodeBF16 and the scan's maximum with a plain loop over
// each 64-value unit's neighbourhood (Inf and NaN skipped).
func TestLanesConvRestBF16(t *testing.T) {
	useTier(t, "avx512")
	rng := rand.New(rand.NewSource(2))
	src := make([]lowp.BFloat16, 1<<16)
	for i := range src {
		src[i] = lowp.BFloat16(i)
	}
	rng.Shuffle(len(src), func(i, j int) { src[i], src[j] = src[j], src[i] })
	want := make([]float32, len(src))
	lowp.DecodeBF16(want, src)
	for _, kind := range []int{convBF16, convBF16Max} {
		// a few units at a time, so that the maximum also takes small
		// inputs without the largest finite values
		for i0 := 0; i0 < len(src); {
			units := 1 + rng.Intn(8)
			i1 := min(len(src), i0+64*units)
			got := make([]float32, i1-i0+16)
			got[i1-i0] = 7 // the conversion must stop at its last unit
			cv := lanesConv{src: uintptr(unsafe.Pointer(&src[i0])), dst: uintptr(unsafe.Pointer(&got[0])), units: (i1 - i0) / 64, tab: &E4M3Tab, kind: kind}
			lanesConvRest512(&cv)
			var wm uint32
			for i := i0; i < i1; i++ {
				g, w := math.Float32bits(got[i-i0]), math.Float32bits(want[i])
				if g != w {
					t.Fatalf("kind %d: bf16 %#04x: %#08x, want %#08x", kind, uint16(src[i]), g, w)
				}
				if b := w &^ (1 << 31); b < 0x7f800000 {
					wm = max(wm, b)
				}
			}
			var gm uint32
			for _, x := range cv.max {
				gm = max(gm, x)
			}
			if kind == convBF16 {
				wm = 0
			}
			if gm != wm {
				t.Fatalf("kind %d, values %d-%d: maximum %#08x, want %#08x", kind, i0, i1, gm, wm)
			}
			if cv.units != 0 || got[i1-i0] != 7 {
				t.Fatalf("units left %d, sentinel %g", cv.units, got[i1-i0])
			}
			i0 = i1
		}
	}
}

// TestLanesConvIters checks qkIters and pvIters against the kernels: with a
// job of one unit per iteration and more units than iterations, the units
// a call consumes are its loop iterations.
func TestLanesConvIters(t *testing.T) {
	needConv(t)
	src := make([]byte, 64*4096)
	dst := make([]float32, 64*4096) // room for every unit of the job: 64 floats each
	for _, d := range []int{8, 16, 24, 32, 40, 56, 64, 128, 256} {
		l := NewLanes(d)
		k := make([]float32, BlockN*d)
		for _, n := range []int{1, 2, 3, 5, 7, 11, 12, 13, 27, 48, 64, 100, 128} {
			l.prefetchIdle()
			job := func() *lanesConv {
				l.cv = lanesConv{src: uintptr(unsafe.Pointer(&src[0])), dst: uintptr(unsafe.Pointer(&dst[0])), units: 4096, cd: 1, per: 1, tab: &E4M3Tab}
				return &l.cv
			}
			lanesQKT512(&l.qT[0], &k[0], uintptr(4*d), d, &l.s[0], n, &l.pfK, job())
			if got, want := 4096-l.cv.units, qkIters(n, d); got != want {
				t.Errorf("Q.K d=%d n=%d: %d iterations, qkIters says %d", d, n, got, want)
			}
			lanesPVT512(&l.s[0], &k[0], uintptr(4*d), n, &l.oT[0], nil, d, &l.pfV, job())
			if got, want := 4096-l.cv.units, pvIters(n, d); got != want {
				t.Errorf("P.V d=%d n=%d: %d iterations, pvIters says %d", d, n, got, want)
			}
		}
	}
}

// rawStager stages e4m3fn or bf16 rows k and v ([n][d] values, their
// bytes) like attn's K/V stager and also offers the bytes
// (WideningStager), except for the chunks whose first row is in noRaw
// (those take the StageK / StageV path). With scan its V chunks go through
// a power-of-two overflow guard like attn's (shift e, the accumulation in l
// rescaled when e rises); guards logs the maxima the guard was handed.
type rawStager struct {
	f      RawFormat
	k, v   []byte
	d      int
	kb, vb []float32
	noRaw  map[int]bool
	calls  int // StageK and StageV calls
	scan   bool
	e      int
	l      *Lanes
	guards []uint32
	hide   bool // offer no bytes at all (RawK and RawV return nil)
}

// widen decodes rows [i0, i1) of the raw rows x into dst.
func (s *rawStager) widen(dst []float32, x []byte, i0, i1 int) []float32 {
	n := (i1 - i0) * s.d
	dst = dst[:n]
	if s.f.e4m3() {
		lowp.DecodeE4M3(dst, unsafe.Slice((*lowp.Float8E4M3FN)(unsafe.Pointer(&x[i0*s.d])), n))
		if s.f == RawE4M3Div256 {
			for i := range dst {
				dst[i] /= 256 // exact: attn's folded AVX2 staging
			}
		}
		return dst
	}
	lowp.DecodeBF16(dst, unsafe.Slice((*lowp.BFloat16)(unsafe.Pointer(&x[2*i0*s.d])), n))
	return dst
}

func (s *rawStager) StageK(i0, i1 int) []float32 {
	s.calls++
	return s.widen(s.kb, s.k, i0, i1)
}

func (s *rawStager) StageV(i0, i1 int) []float32 {
	s.calls++
	v := s.widen(s.vb, s.v, i0, i1)
	if s.scan {
		var m uint32
		for _, x := range v {
			if b := math.Float32bits(x) &^ (1 << 31); b < 0x7f800000 {
				m = max(m, b)
			}
		}
		s.GuardV(v, m)
	}
	return v
}

// e4m3 reports whether f stores one e4m3fn byte per value.
func (f RawFormat) e4m3() bool { return f == RawE4M3 || f == RawE4M3Div256 }

func (s *rawStager) raw(x []byte, i0 int) unsafe.Pointer {
	if s.f.e4m3() {
		return unsafe.Pointer(&x[i0*s.d])
	}
	return unsafe.Pointer(&x[2*i0*s.d])
}

func (s *rawStager) RawK(i0, i1 int) (unsafe.Pointer, RawFormat) {
	if s.hide || s.noRaw[i0] {
		return nil, RawNone
	}
	return s.raw(s.k, i0), s.f
}

func (s *rawStager) RawV(i0, i1 int) (unsafe.Pointer, RawFormat, bool) {
	if s.hide || s.noRaw[-1-i0] {
		return nil, RawNone, false
	}
	return s.raw(s.v, i0), s.f, s.scan
}

// GuardV keeps |v| <= 2^96 (attn's vScale with its limit).
func (s *rawStager) GuardV(v []float32, m uint32) {
	s.guards = append(s.guards, m)
	if m > (127+96)<<23 {
		e := int(m>>23) - (127 + 96)
		if m&(1<<23-1) != 0 {
			e++
		}
		if e > s.e {
			s.l.ScaleO(float32(math.Ldexp(1, s.e-e)))
			s.e = e
		}
	}
	if s.e != 0 {
		f := float32(math.Ldexp(1, -s.e))
		for i := range v {
			v[i] *= f
		}
	}
}

// withConv sets lanesConvOK to conv and returns the function that
// restores it.
func withConv(conv bool) func() {
	old := lanesConvOK
	lanesConvOK = conv
	return func() { lanesConvOK = old }
}

// newLanes returns a Lanes of head dimension d reset for p, its queries
// set.
func (p *problem) newLanes(d int) *Lanes {
	l := NewLanes(d)
	l.Reset(p.m, p.scale, p.round, p.invT)
	for r := 0; r < p.m; r++ {
		l.SetQ(r, p.q[r*d:(r+1)*d])
	}
	return l
}

// TestLanesUpdatePipelined compares UpdateStaged with a WideningStager
// (the kernels widen each next chunk) with the staged path (lanesConvOK
// off), bit for bit: the widened values and every product's order are the
// same, and a guarded V sees the same maxima at the same points. Shapes
// cover one and several K and V chunks, partial last chunks, d from 64 to
// 256, chunks that must be staged instead (noRaw: the first, a middle and
// the last K / V chunk), rows with no visible key, e4m3fn and bf16 rows
// (random e4m3 bytes: subnormals, zeros and, in one case, NaNs; bf16 V
// with magnitudes up to 2^127 that raise the guard's shift, and in one
// case Inf and NaN, which it must skip), the guard on and off. Both
// formats run on both routes of lanesInPlace512: widened ahead (e4m3fn
// with VBMI, where the CPU has it), and read in place (lanesQKT512E4M3,
// lanesPVT512E4M3 through the table; lanesQKT512BF16, lanesPVT512BF16),
// where every chunk offered must be read in place but the guarded bf16
// value chunks above the guard's limit and the guarded ones after them,
// d not a multiple of 64 (8, 24, 40) included.
func TestLanesUpdatePipelined(t *testing.T) {
	useTier(t, "avx512")
	rng := rand.New(rand.NewSource(3))
	ch := lanesChunks[lanesAVX512]
	for _, route := range []struct {
		f       RawFormat
		inPlace bool
	}{{RawE4M3, false}, {RawE4M3, true}, {RawBF16, false}, {RawBF16, true}} {
		f := route.f
		if f == RawE4M3 && !route.inPlace && !haveVBMI {
			t.Log("CPU lacks AVX512_VBMI: e4m3fn rows off the in-place route are staged, not compared")
			continue
		}
		ds := []int{64, 128, 256}
		if route.inPlace {
			ds = append(ds, 8, 24, 40)
		}
		restore := withInPlace512(route.inPlace)
		for _, d := range ds {
			for _, n := range []int{1, 12, 47, 48, 49, 64, 100, 127, 128} {
				for _, noRaw := range []map[int]bool{nil, {0: true}, {ch.k: true, -1: true}, {2 * ch.k: true, -1 - ch.v: true}} {
					for _, nan := range []bool{false, true} {
						if nan && noRaw != nil {
							continue
						}
						pipelinedCase(t, rng, "avx512", f, d, n, noRaw, nan, f == RawBF16 && rng.Intn(4) != 0, rng.Intn(5), 200)
					}
				}
			}
		}
		restore()
	}
}

// pipelinedCase runs one TestLanesUpdatePipelined (tier avx512) or
// TestLanesAMXRaw (tier amxbf16) case: UpdateStaged with the rows offered
// as bytes against UpdateStaged with every chunk staged (lanesConvOK off
// and no bytes offered). ahead selects the
// WidenNext hint given before each update for the next one's keys: 0 none,
// 1 all n rows, 2 one K chunk, 3 one row (too few: the next update must
// widen its first chunk itself unless it needs one row), 4 rows starting
// one row late (another storage: not to be used).
//
// hugeV is the odds (one value in hugeV; 0: none) of a bf16 value of any
// finite magnitude, which raises the guard's shift.
func pipelinedCase(t *testing.T, rng *rand.Rand, tn string, f RawFormat, d, n int, noRaw map[int]bool, nan, scan bool, ahead, hugeV int) {
	t.Helper()
	m := 1 + rng.Intn(16)
	updates := 1 + rng.Intn(3)
	p := newProblem(rng, d, n, m, updates, []Round{RoundNone, RoundBF16, RoundE4M3}[rng.Intn(3)], rng.Intn(2) == 0, 1)
	size := 1
	if f == RawBF16 {
		size = 2
	}
	ch := lanesChunks[lanesAVX512]
	if tn == "avx2" {
		ch = lanesChunks[lanesAVX2]
	}
	ks, vs := make([][]byte, updates), make([][]byte, updates)
	for u := range ks {
		ks[u], vs[u] = make([]byte, size*n*d), make([]byte, size*n*d)
		for i := 0; i < n*d; i++ {
			if f.e4m3() {
				// magnitudes up to 2^-2 (scores stay finite), subnormals
				// included; in the nan case V has NaNs, and K rarely, in
				// the second key chunk of the first update and the first
				// of the second (which WidenNext may offer ahead), so that
				// the other chunks are still widened
				ks[u][i] = byte(rng.Intn(0x28) | rng.Intn(2)<<7)
				if c := i / (ch.k * d); nan && (u == 0 && c == 1 || u == 1 && c == 0) && rng.Intn(500) == 0 {
					ks[u][i] = 0x7f | byte(rng.Intn(2))<<7
				}
				vs[u][i] = byte(rng.Intn(256))
				if !nan && vs[u][i]&0x7f == 0x7f {
					vs[u][i] = 0x7e
				}
				continue
			}
			// K: |k| < 2^-2 and bf16 subnormals; V: any finite bf16 in a
			// few rows (the guard's shift rises mid-block), ordinary ones
			// elsewhere, Inf and NaN in the nan case.
			kb := uint16(rng.Intn(0x3e80)) | uint16(rng.Intn(2))<<15
			vb := uint16(lowp.BF16(float32(rng.NormFloat64())))
			if hugeV > 0 && rng.Intn(hugeV) == 0 {
				vb = uint16(rng.Intn(0x7f80)) | uint16(rng.Intn(2))<<15
			}
			if nan && rng.Intn(100) == 0 {
				vb = 0x7f80 | uint16(rng.Intn(2))<<15 | uint16(rng.Intn(2))<<6
			}
			ks[u][2*i], ks[u][2*i+1] = byte(kb), byte(kb>>8)
			vs[u][2*i], vs[u][2*i+1] = byte(vb), byte(vb>>8)
		}
	}
	run := func(conv bool) (result, int, []uint32) {
		defer withConv(conv)()
		l := p.newLanes(d)
		if tn == "avx512bf16" {
			// The bf16-product kernels (SetBF16Products) from the next
			// Reset on: the Q rows are set again after it.
			l.SetBF16Products(true)
			l.Reset(p.m, p.scale, p.round, p.invT)
			for r := 0; r < p.m; r++ {
				l.SetQ(r, p.q[r*d:(r+1)*d])
			}
		}
		calls := 0
		st := &rawStager{f: f, d: d, kb: make([]float32, BlockN*d), vb: make([]float32, BlockN*d), noRaw: noRaw, scan: scan, l: l, hide: !conv}
		for u := range ks {
			st.k, st.v = ks[u], vs[u]
			st.calls = 0
			if ahead > 0 && u+1 < len(ks) {
				next := ks[u+1]
				switch ahead {
				case 1:
					l.WidenNext(unsafe.Pointer(&next[0]), f, n)
				case 2:
					l.WidenNext(unsafe.Pointer(&next[0]), f, min(n, ch.k))
				case 3:
					l.WidenNext(unsafe.Pointer(&next[0]), f, 1)
				case 4:
					if n > 1 {
						l.WidenNext(unsafe.Pointer(&next[size*d]), f, n-1)
					}
				}
			}
			l.UpdateStaged(n, p.valid[u], st)
			calls += st.calls
		}
		return p.lanesResult(l), calls, st.guards
	}
	want, _, wantG := run(false)
	got, calls, gotG := run(true)
	name := fmt.Sprintf("%s/%v/d%d/n%d/m%d/noRaw%v/nan%v/scan%v/ahead%d", tn, f, d, n, m, noRaw, nan, scan, ahead)
	if msg, ok := sameResult(got, want); !ok {
		t.Errorf("%s: %s", name, msg)
	}
	if fmt.Sprint(gotG) != fmt.Sprint(wantG) {
		t.Errorf("%s: guard maxima %x, want %x", name, gotG, wantG)
	}
	// The AMX path stages bf16 rows; the AVX2 path and the AVX-512 one on
	// the in-place route stage the guarded bf16 value chunks above the
	// guard's limit and every guarded chunk after them; the AVX2 path
	// stages plain e4m3fn rows (it reads RawE4M3Div256 ones in place, NaN
	// bytes and any d included).
	inPlace := tn == "avx2" || tn == "avx512" && lanesInPlace512
	// The bf16-product kernels (avx512bf16 here) read bf16 keys in place
	// and interleave bf16 value chunks as the AMX path does; they stage
	// e4m3fn rows.
	bf16Lanes := tn == "avx512bf16"
	staged := tn == "amxbf16" && f == RawBF16 || tn == "avx2" && f == RawE4M3 || (inPlace || bf16Lanes) && f == RawBF16 && scan && hugeV > 0 || bf16Lanes && f == RawE4M3
	if noRaw == nil && calls != 0 && !staged {
		t.Errorf("%s: %d StageK/StageV calls with every chunk offered as bytes", name, calls)
	}
}

// TestLanesAVX2Raw is TestLanesUpdatePipelined on the avx2 tier: bf16
// chunks offered in place go to the BF16 kernels (lanesQKTBF16,
// lanesPVTBF16, the guard's scan lanesBF16MaxAVX2), RawE4M3Div256 chunks
// to the E4M3 kernels (lanesQKTE4M3, lanesPVTE4M3: each byte looked up as
// value / 256, NaN bytes as NaN), whatever WidenNext hints (which this
// tier ignores); the rest is staged. The results and guard maxima must equal the staged
// path's bit for bit. V magnitudes are ordinary (every chunk read in place
// or widened, also when guarded: no StageK / StageV call may happen), or
// include rare huge ones that raise the guard's shift mid-block (those
// chunks and the later guarded ones staged), and Inf and NaN, which the
// scan must skip (e4m3fn: NaN in V and in the second K chunk); d from 8
// (two column groups of 4) to 256, n covering the 6-, 5-, 4-, 2- and
// 1-key groups and partial chunks; plain e4m3fn rows, which this path
// stages.
func TestLanesAVX2Raw(t *testing.T) {
	useTier(t, "avx2")
	rng := rand.New(rand.NewSource(5))
	ch := lanesChunks[lanesAVX2]
	for _, f := range []RawFormat{RawBF16, RawE4M3, RawE4M3Div256} {
		for _, d := range []int{8, 16, 24, 40, 64, 128, 256} {
			for _, n := range []int{1, 3, 5, 6, 7, 12, 47, 48, 49, 64, 65, 100, 127, 128} {
				for _, noRaw := range []map[int]bool{nil, {0: true}, {ch.k: true, -1: true}, {2 * ch.k: true, -1 - ch.v: true}} {
					for _, hugeV := range []int{0, 200} {
						nan := hugeV > 0 && noRaw == nil && rng.Intn(2) == 0
						ahead := 0
						if f == RawE4M3Div256 {
							ahead = rng.Intn(5)
						}
						pipelinedCase(t, rng, "avx2", f, d, n, noRaw, nan, f == RawBF16 && rng.Intn(4) != 0, ahead, hugeV)
					}
				}
			}
		}
	}
}

// TestLanesE4M3Table checks the E4M3 kernels' tables against lowp: entry
// b of lanesE4M3F32 (AVX-512) is e4m3fn byte b's value, that of
// lanesE4M3Div256 (AVX2) the value / 256, exactly, and NaN for the two NaN
// bytes, with the sign and payload bits of lowp's NaN (the bits a staged
// row holds, also after decodeE4M3Fold's multiply by 1/256).
func TestLanesE4M3Table(t *testing.T) {
	for b := range 256 {
		x := lowp.Float8E4M3FN(b).Float32()
		want := math.Float32bits(x / 256)
		if math.IsNaN(float64(x)) {
			want = math.Float32bits(x)
		}
		if g := math.Float32bits(lanesE4M3Div256[b]); g != want {
			t.Errorf("lanesE4M3Div256[%#02x] = %#08x, want %#08x", b, g, want)
		}
		if g, w := math.Float32bits(lanesE4M3F32[b]), math.Float32bits(x); g != w {
			t.Errorf("lanesE4M3F32[%#02x] = %#08x, want %#08x", b, g, w)
		}
	}
}

// TestLanesPipelinedNoVBMI runs e4m3fn rows offered raw, with WidenNext
// hints, as on an AVX-512 CPU without AVX512_VBMI (haveVBMI off): every
// chunk must be staged by the stager instead (no VBMI instruction runs)
// and the results must equal the staged path's.
func TestLanesPipelinedNoVBMI(t *testing.T) {
	useTier(t, "avx512")
	defer func(v bool) { haveVBMI = v }(haveVBMI)
	haveVBMI = false
	defer withInPlace512(false)()
	ch := lanesChunks[lanesAVX512]
	rng := rand.New(rand.NewSource(5))
	const d, n = 128, 100
	p := newProblem(rng, d, n, 16, 2, RoundE4M3, false, 1)
	ks, vs := make([][]byte, 2), make([][]byte, 2)
	for u := range ks {
		ks[u], vs[u] = make([]byte, n*d), make([]byte, n*d)
		for i := range ks[u] {
			ks[u][i] = byte(rng.Intn(0x28) | rng.Intn(2)<<7)
			vs[u][i] = byte(rng.Intn(0x7f) | rng.Intn(2)<<7)
		}
	}
	run := func(conv bool) (result, int) {
		defer withConv(conv)()
		l := p.newLanes(d)
		st := &rawStager{f: RawE4M3, d: d, kb: make([]float32, BlockN*d), vb: make([]float32, BlockN*d), l: l}
		calls := 0
		for u := range ks {
			st.k, st.v, st.calls = ks[u], vs[u], 0
			if u+1 < len(ks) {
				l.WidenNext(unsafe.Pointer(&ks[u+1][0]), RawE4M3, n)
			}
			l.UpdateStaged(n, p.valid[u], st)
			calls += st.calls
		}
		return p.lanesResult(l), calls
	}
	want, _ := run(false)
	got, calls := run(true)
	if msg, ok := sameResult(got, want); !ok {
		t.Error(msg)
	}
	wantCalls := 0
	for u := range ks {
		nmax := 0
		for _, x := range p.valid[u][:p.m] {
			nmax = max(nmax, int(x))
		}
		wantCalls += (nmax+ch.k-1)/ch.k + (nmax+ch.v-1)/ch.v
	}
	if calls != wantCalls {
		t.Errorf("%d StageK/StageV calls without VBMI, want %d (every chunk staged)", calls, wantCalls)
	}
}

// TestInPlaceRoute checks MSA_AVX512_IN_PLACE's parsing: 1 and 0 force
// the AVX-512 route, unset or any other value leaves the vendor's choice.
func TestInPlaceRoute(t *testing.T) {
	amd := isAMD()
	for env, want := range map[string]bool{"1": true, "0": false, "": amd, "yes": amd} {
		if got := inPlaceRoute(env); got != want {
			t.Errorf("inPlaceRoute(%q) = %v, want %v", env, got, want)
		}
	}
}

// withInPlace512 sets lanesInPlace512 (the AVX-512 lane kernels' route
// for e4m3fn and bf16 rows) to on and returns the function that restores
// it.
func withInPlace512(on bool) func() {
	old := lanesInPlace512
	lanesInPlace512 = on
	return func() { lanesInPlace512 = old }
}

// TestBF16FiniteMax checks the guard's scan of bf16 values read in place
// (lanesBF16MaxAVX2) against a plain loop: the float32 bits of the largest
// finite magnitude, 0 when there is none. Lengths cover the 32-,
// 16- and 8-value steps; the values are random patterns (NaN and Inf
// included), finite ones of one sign or of both, zeros of either sign,
// subnormals, the largest finite value, and chunks holding no finite value
// at all.
func TestBF16FiniteMax(t *testing.T) {
	rng := rand.New(rand.NewSource(9))
	want := func(x []uint16) uint32 {
		var m uint16
		for _, v := range x {
			if a := v & 0x7fff; a < 0x7f80 {
				m = max(m, a)
			}
		}
		return uint32(m) << 16
	}
	gens := map[string]func() uint16{
		"random":    func() uint16 { return uint16(rng.Intn(1 << 16)) },
		"finite":    func() uint16 { return uint16(rng.Intn(0x7f80)) | uint16(rng.Intn(2))<<15 },
		"positive":  func() uint16 { return uint16(rng.Intn(0x7f80)) },
		"negative":  func() uint16 { return 0x8000 | uint16(rng.Intn(0x7f80)) },
		"zeros":     func() uint16 { return uint16(rng.Intn(2)) << 15 },
		"subnormal": func() uint16 { return uint16(rng.Intn(0x80)) | uint16(rng.Intn(2))<<15 },
		"nonfinite": func() uint16 { return 0x7f80 | uint16(rng.Intn(0x80)) | uint16(rng.Intn(2))<<15 },
		"rare-nan": func() uint16 {
			if rng.Intn(1000) == 0 {
				return 0x7fc0 | uint16(rng.Intn(2))<<15
			}
			return uint16(rng.Intn(0x4000)) | uint16(rng.Intn(2))<<15
		},
	}
	for name, gen := range gens {
		for _, n := range []int{8, 16, 24, 32, 40, 48, 56, 64, 8192, 8200} {
			for rep := 0; rep < 20; rep++ {
				x := make([]uint16, n)
				for i := range x {
					x[i] = gen()
				}
				if rep == 1 && name == "finite" {
					x[rng.Intn(n)] = 0x7f7f | uint16(rng.Intn(2))<<15 // the largest finite
				}
				if got, w := bf16FiniteMax(unsafe.Pointer(&x[0]), n), want(x); got != w {
					t.Fatalf("%s n=%d: bf16FiniteMax = %#08x, want %#08x", name, n, got, w)
				}
			}
		}
	}
}
