//go:build amd64 && !purego

package tile

import (
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/cpu"

	"github.com/sparseattn/msa/kernels/lowp"
)

// lanesConvOK reports whether the lane kernels may take the rows a
// WideningStager offers in their narrow format: the AVX-512 ones widen
// chunks between their multiply-adds (bf16 needs AVX-512F only, e4m3fn
// also haveVBMI) or read them in place (lanesInPlace512), the AVX2 ones
// read bf16 and RawE4M3Div256 rows in place. Tests switch it off to
// compare with the staged path.
var lanesConvOK = true

// haveVBMI reports whether the CPU runs the AVX512_VBMI e4m3 conversion.
var haveVBMI = cpu.X86.HasAVX512VBMI && cpu.X86.HasAVX512BW

// lanesInPlace512 selects how the AVX-512 lane kernels take the e4m3fn and
// bf16 rows a WideningStager offers. True: read in place
// (lanesQKT512E4M3 and lanesPVT512E4M3 through a float32 table, a byte
// load and the entry's embedded broadcast per multiply-add, no VBMI
// needed; lanesQKT512BF16 and lanesPVT512BF16, a dword broadcast widened
// by a shift or a mask per multiply-add). False: widened chunk by chunk
// between the float32 kernels' multiply-adds (lanesUpdatePipelined; e4m3fn
// with AVX512_VBMI, staged by the caller where VBMI is missing). Both give
// the same bits.
//
// The in-place route spends a second load (e4m3fn) or a vector logic
// operation (bf16) per multiply-add. AMD cores (Zen 4: one 512-bit
// multiply-add per cycle, three load pipes, four vector pipes of which
// two do the multiply-adds) have those to spare, and there it beat the
// widening route: FP8 decode block in cache 91.2% of the FMA peak against
// 85.6-86.5%, FP8 decode end to end 81.0-85.9% of roof on one worker
// against 77.6-81.9%; BF16 block in cache 86.4-86.6% against 84.1-86.1%,
// BF16 decode end to end 0-3% faster, within the noise on some shapes.
// Intel cores run two 512-bit multiply-adds per cycle on the ports that
// also take the vector logic operations, against two or three load
// ports, which would bound the in-place route at 50-75% of their peak;
// they keep the widening route (measured on Emerald Rapids: e4m3fn 62.6%
// staged, its VBMI conversion on port 5). EnvInPlace512 overrides the
// choice; tests set it both ways.
var lanesInPlace512 = inPlaceRoute(os.Getenv(EnvInPlace512))

// inPlaceRoute returns lanesInPlace512's value for the environment
// variable's value env: "1" true, "0" false, "" the vendor's choice
// (isAMD); anything else is reported on stderr and ignored.
func inPlaceRoute(env string) bool {
	switch env {
	case "1":
		return true
	case "0":
		return false
	case "":
	default:
		fmt.Fprintf(os.Stderr, "tile: %s=%s ignored: want 0 or 1\n", EnvInPlace512, env)
	}
	return isAMD()
}

// isAMD reports whether CPUID names the vendor AuthenticAMD.
func isAMD() bool {
	b, d, c := cpuVendor()
	return b == 0x68747541 && d == 0x69746e65 && c == 0x444d4163 // "Auth" "enti" "cAMD"
}

// cpuVendor returns CPUID leaf 0's vendor string registers.
//
//go:noescape
func cpuVendor() (ebx, edx, ecx uint32)

// conv returns the job of the next kernel call: l.cv while a conversion is
// set up (lanesUpdatePipelined), else an idle job.
func (l *Lanes) conv() *lanesConv {
	if l.cv.tab == nil || l.cv.units == 0 {
		l.cv = lanesConv{cd: 1 << 62, per: 1 << 62, tab: &E4M3Tab}
	}
	return &l.cv
}

// qkIters is the number of loop iterations of lanesQKT512 over n keys:
// key groups of 12, then at most one of 8, 4, 2 and 1, times d/4 column
// quads.
func qkIters(n, d int) int {
	g, r := n/12, n%12
	for _, s := range []int{8, 4, 2, 1} {
		if r >= s {
			g, r = g+1, r-s
		}
	}
	return g * (d / 4)
}

// pvIters is the number of loop iterations of lanesPVT512 over n keys: one
// per key and column group (24 while at least 40 or exactly 24 columns are
// left, then 16, then 8).
func pvIters(n, d int) int {
	g := 0
	for c := d; c > 0; g++ {
		switch {
		case c == 24 || c >= 40:
			c -= 24
		case c >= 16:
			c -= 16
		default:
			c -= 8
		}
	}
	return g * n
}

// lanesUpdatePipelined is lanesUpdateStagedSIMD for a stager whose chunks
// can be read in their narrow format: the kernels of each chunk widen the
// next chunk (the next K chunk, the first V chunk after the last K chunk,
// the next V chunk) into the other half of a double buffer between their
// multiply-adds, where the conversion runs on vector pipes the FMAs leave
// free; AVX-512 only.
// A chunk whose rows are not one run of a format the kernels widen is
// staged by src as usual. A guarded V chunk (RawV's scan) has its finite
// maximum found by the same conversion and goes through src.GuardV at the
// point where StageV would have run. The values and the order of every
// product are those of the staged path: bit-identical results.
func lanesUpdatePipelined(l *Lanes, src WideningStager, n, ck, cv int, ahead, pre lanesAhead) {
	d := l.d
	if len(l.kst[0]) < ck*d {
		for i := range l.kst {
			l.kst[i] = make([]float32, ck*d)
			l.vst[i] = make([]float32, cv*d)
		}
	}
	nk, nv := (n+ck-1)/ck, (n+cv-1)/cv
	// chunk t < nk is K rows [t*ck, ...), else V rows [(t-nk)*cv, ...);
	// buf is its half of the double buffer.
	rows := func(t int) (v bool, i0, i1 int, buf []float32) {
		if t < nk {
			i0 = t * ck
			return false, i0, min(n, i0+ck), l.kst[t%2]
		}
		i0 = (t - nk) * cv
		return true, i0, min(n, i0+cv), l.vst[(t-nk)%2]
	}
	// raw returns chunk t's storage and conversion kind, nil when the
	// kernels cannot widen it.
	raw := func(t int) (unsafe.Pointer, int) {
		v, i0, i1, _ := rows(t)
		var p unsafe.Pointer
		var f RawFormat
		scan := false
		if v {
			p, f, scan = src.RawV(i0, i1)
		} else {
			p, f = src.RawK(i0, i1)
		}
		if kind, ok := l.convKind(f, scan); ok && p != nil {
			return p, kind
		}
		return nil, 0
	}
	stage := func(t int) []float32 {
		v, i0, i1, _ := rows(t)
		return stageRows(src, v, i0, i1, d)
	}
	// setJob points l.cv at chunk t's storage and buffer, spread over
	// iters kernel iterations.
	setJob := func(t int, p unsafe.Pointer, kind, iters int) []float32 {
		_, i0, i1, buf := rows(t)
		l.cv = convJob(uintptr(p), buf, (i1-i0)*d/64, iters, kind)
		return buf[:(i1-i0)*d]
	}
	// done finishes the job of chunk buf: its last units, then the guard.
	done := func(buf []float32) {
		if l.cv.units > 0 {
			lanesConvRest512(&l.cv)
		}
		l.cv.units = 0
		if l.cv.kind == convBF16Max {
			var m uint32
			for _, x := range l.cv.max {
				m = max(m, x)
			}
			src.GuardV(buf, m)
		}
	}
	var cur []float32
	_, _, r0, _ := rows(0)
	switch p, kind := raw(0); {
	case p != nil && pre.src == uintptr(p) && pre.kind == kind && pre.rows >= r0:
		cur = l.kst[0][:r0*d] // widened ahead by the previous update
	case p != nil:
		cur = setJob(0, p, kind, 1)
		done(cur)
	default:
		cur = stage(0)
	}
	for t := 0; t < nk+nv; t++ {
		v, i0, i1, _ := rows(t)
		iters := qkIters(i1-i0, d)
		if v {
			iters = pvIters(i1-i0, d)
		}
		var next []float32
		var p unsafe.Pointer
		var widened lanesAhead
		switch {
		case t+1 < nk+nv:
			var kind int
			if p, kind = raw(t + 1); p != nil {
				next = setJob(t+1, p, kind, iters)
			}
		case ahead.rows > 0:
			// The last chunk: widen the next update's first key rows
			// (WidenNext) into kst[0], free since the last Q.K.
			widened = ahead
			widened.rows = min(ahead.rows, ck)
			l.cv = convJob(ahead.src, l.kst[0], widened.rows*d/64, iters, ahead.kind)
		}
		if v {
			lanesPVRange(l, cur, i0, i1, i0 == 0)
		} else {
			lanesQKRange(l, cur, i0, i1)
			if t == nk-1 {
				lanesSoftmaxRange(l, n)
			}
		}
		switch {
		case p != nil:
			done(next)
			cur = next
		case t+1 < nk+nv:
			cur = stage(t + 1)
		case widened.rows > 0:
			done(nil)
			l.kPre = widened
		}
	}
}

// widenE4M3VBMI is WidenE4M3x64 with the AVX512_VBMI conversion
// (lanesConvRest512) on len(src) > 0 values.
func widenE4M3VBMI(dst []float32, src []lowp.Float8E4M3FN) {
	cv := convJob(uintptr(unsafe.Pointer(&src[0])), dst, len(src)/64, 1, convE4M3)
	lanesConvRest512(&cv)
}

// convJob is a side conversion of units 64-value blocks at src of kind
// into dst, one block every iters/units kernel iterations (at least one),
// the first in the next iteration.
func convJob(src uintptr, dst []float32, units, iters, kind int) lanesConv {
	return lanesConv{src: src, dst: uintptr(unsafe.Pointer(&dst[0])), units: units, cd: 1, per: max(1, iters/max(1, units)), tab: &E4M3Tab, kind: kind}
}
