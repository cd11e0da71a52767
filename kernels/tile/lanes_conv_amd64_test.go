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

// TestLanesConvIters checks qkIters and pvIters against the kernels: with a
// job of one unit per iteration and more units than iterations, the units
// a call consumes are its loop iterations.
func TestLanesConvIters(t *testing.T) {
	needConv(t)
	src := make([]byte, 64*4096)
	dst := make([]float32, 16*4096)
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

// e4m3Stager stages e4m3fn rows k and v ([n][d]) like attn's K/V stager and
// also offers their bytes (E4M3Stager), except for the chunks whose first
// row is in noRaw (those take the StageK / StageV path).
type e4m3Stager struct {
	k, v   []lowp.Float8E4M3FN
	d      int
	kb, vb []float32
	noRaw  map[int]bool
	calls  int // StageK and StageV calls
}

func (s *e4m3Stager) StageK(i0, i1 int) []float32 {
	s.calls++
	lowp.DecodeE4M3(s.kb[:(i1-i0)*s.d], s.k[i0*s.d:i1*s.d])
	return s.kb[:(i1-i0)*s.d]
}

func (s *e4m3Stager) StageV(i0, i1 int) []float32 {
	s.calls++
	lowp.DecodeE4M3(s.vb[:(i1-i0)*s.d], s.v[i0*s.d:i1*s.d])
	return s.vb[:(i1-i0)*s.d]
}

func (s *e4m3Stager) E4M3K(i0, i1 int) unsafe.Pointer {
	if s.noRaw[i0] {
		return nil
	}
	return unsafe.Pointer(&s.k[i0*s.d])
}

func (s *e4m3Stager) E4M3V(i0, i1 int) unsafe.Pointer {
	if s.noRaw[-1-i0] {
		return nil
	}
	return unsafe.Pointer(&s.v[i0*s.d])
}

// TestLanesUpdatePipelined compares UpdateStaged with an E4M3Stager (the
// kernels widen each next chunk) with the staged path (lanesConvOK off),
// bit for bit: the widened values and every product's order are the same.
// Shapes cover one and several K and V chunks, partial last chunks, d from
// 64 to 256, chunks that must be staged instead (noRaw: the first, a middle
// and the last K / V chunk), rows with no visible key and random e4m3 bytes
// (subnormals, zeros and, in one case, NaNs included).
func TestLanesUpdatePipelined(t *testing.T) {
	needConv(t)
	rng := rand.New(rand.NewSource(3))
	ch := lanesChunks[lanesAVX512]
	for _, d := range []int{64, 128, 256} {
		for _, n := range []int{1, 12, 47, 48, 49, 64, 100, 127, 128} {
			for _, noRaw := range []map[int]bool{nil, {0: true}, {ch.k: true, -1: true}, {2 * ch.k: true, -1 - ch.v: true}} {
				for _, nan := range []bool{false, true} {
					if nan && noRaw != nil {
						continue
					}
					m := 1 + rng.Intn(16)
					updates := 1 + rng.Intn(3)
					p := newProblem(rng, d, n, m, updates, []Round{RoundNone, RoundBF16, RoundE4M3}[rng.Intn(3)], rng.Intn(2) == 0, 1)
					ks, vs := make([][]lowp.Float8E4M3FN, updates), make([][]lowp.Float8E4M3FN, updates)
					for u := range ks {
						ks[u], vs[u] = make([]lowp.Float8E4M3FN, n*d), make([]lowp.Float8E4M3FN, n*d)
						for i := range ks[u] {
							// magnitudes up to 2^-2 (scores stay finite), subnormals included
							ks[u][i] = lowp.Float8E4M3FN(rng.Intn(0x28) | rng.Intn(2)<<7)
							vs[u][i] = lowp.Float8E4M3FN(rng.Intn(256))
							if !nan && vs[u][i]&0x7f == 0x7f {
								vs[u][i] = 0x7e
							}
						}
					}
					run := func(conv bool) (result, int) {
						old := lanesConvOK
						lanesConvOK = conv
						defer func() { lanesConvOK = old }()
						l := NewLanes(d)
						l.Reset(p.m, p.scale, p.round, p.invT)
						for r := 0; r < p.m; r++ {
							l.SetQ(r, p.q[r*d:(r+1)*d])
						}
						calls := 0
						for u := range ks {
							st := &e4m3Stager{k: ks[u], v: vs[u], d: d, kb: make([]float32, BlockN*d), vb: make([]float32, BlockN*d), noRaw: noRaw}
							l.UpdateStaged(n, p.valid[u], st)
							calls += st.calls
						}
						return p.lanesResult(l), calls
					}
					want, _ := run(false)
					got, calls := run(true)
					name := fmt.Sprintf("d%d/n%d/m%d/noRaw%v/nan%v", d, n, m, noRaw, nan)
					if msg, ok := sameResult(got, want); !ok {
						t.Errorf("%s: %s", name, msg)
					}
					if noRaw == nil && calls != 0 {
						t.Errorf("%s: %d StageK/StageV calls with every chunk offered as bytes", name, calls)
					}
				}
			}
		}
	}
}
