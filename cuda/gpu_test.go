//go:build cuda

package cuda

// GPU tests: every kernel against the float64 reference of ref_test.go, plus
// a timing table. The case lists (prefillCases, decodeCases) cover D = 64,
// 128 and 256 and sparse decode (q2k) with and without a KV split. They need an NVIDIA GPU (sm_80 / sm_90 / sm_100) and its
// driver; build with kernels/cuda/tagged_build.sh, run with
// kernels/cuda/gpucheck.sh.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sparseattn/msa/cuda/driver"
)

var (
	gpuOnce sync.Once
	gpuErr  error
	gpuK    *Kernels
	gpuCtx  *Device
	timings []string
	timMu   sync.Mutex
)

// gpu returns the shared device (its driver calls run on one locked OS
// thread) and the loaded kernels; without a driver the GPU tests skip.
func gpu(t *testing.T) (*Device, *Kernels) {
	t.Helper()
	gpuOnce.Do(func() {
		gpuCtx, gpuErr = OpenDevice(0)
		if gpuErr != nil {
			return
		}
		ver, _ := driver.DriverVersion()
		fmt.Printf("GPU: %s (sm_%d%d), driver CUDA %d\n", gpuCtx.Name, gpuCtx.Major, gpuCtx.Minor, ver)
		gpuK, gpuErr = Load(gpuCtx)
	})
	if errors.Is(gpuErr, driver.ErrNoDriver) {
		t.Skip(gpuErr)
	}
	if gpuErr != nil {
		t.Fatal(gpuErr)
	}
	return gpuCtx, gpuK
}

func TestMain(m *testing.M) {
	runtime.LockOSThread()
	code := m.Run()
	if len(timings) > 0 {
		sort.Strings(timings)
		fmt.Println("\ncase                                         kernel(s)                 GPU ms   ref(CPU) ms")
		fmt.Println(strings.Join(timings, "\n"))
	}
	os.Exit(code)
}

func record(name, kern string, gpuMS, cpuMS float64) {
	timMu.Lock()
	defer timMu.Unlock()
	timings = append(timings, fmt.Sprintf("%-44s %-24s %8.3f %12.1f", name, kern, gpuMS, cpuMS))
}

// devMem allocates device buffers and frees them all at the end.
type devMem struct {
	t    *testing.T
	ctx  *Device
	ptrs []uint64
}

func (m *devMem) alloc(n int) uint64 {
	m.t.Helper()
	p, err := m.ctx.Alloc(n) // 0xff garbage: unwritten outputs show up
	if err != nil {
		m.t.Fatal(err)
	}
	m.ptrs = append(m.ptrs, p)
	return p
}

func (m *devMem) put(b []byte) uint64 {
	m.t.Helper()
	p, err := m.ctx.Put(b)
	if err != nil {
		m.t.Fatal(err)
	}
	m.ptrs = append(m.ptrs, p)
	return p
}

func (m *devMem) putI32(v []int32) uint64 {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(x))
	}
	return m.put(b)
}

func (m *devMem) putF32(v ...float32) uint64 {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return m.put(b)
}

func (m *devMem) get(p uint64, n int) []byte {
	m.t.Helper()
	if err := Synchronize(m.ctx); err != nil {
		m.t.Fatal(err)
	}
	b, err := m.ctx.Get(p, n)
	if err != nil {
		m.t.Fatal(err)
	}
	return b
}

func (m *devMem) getF32(p uint64, n int) []float32 {
	b := m.get(p, 4*n)
	out := make([]float32, n)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

func (m *devMem) free() {
	if err := m.ctx.Free(m.ptrs...); err != nil {
		m.t.Error(err)
	}
}

func timeIt(ctx *Device, reps int, f func() error) (float64, error) { return ctx.Time(reps, f) }

func TestGPUSparsePrefill(t *testing.T) {
	ctx, k := gpu(t)
	for i, c := range prefillCases() {
		t.Run(c.name, func(t *testing.T) {
			genPrefill(t, c, uint64(i+1))
			m := &devMem{t: t, ctx: ctx}
			defer m.free()
			B := len(c.cuQ) - 1
			a := &FwdArgs{
				Q: m.put(c.q.enc), K: m.put(c.k.enc), V: m.put(c.v.enc),
				CuSeqlensQ: m.putI32(c.cuQ), CuSeqlensK: m.putI32(c.cuK),
				TotalQ: c.totalQ, Hq: c.hq, Hkv: c.hkv, D: c.d, BlkKV: c.blk, TopK: c.topK, NumBatch: B,
				QDtype: c.qd, KVDtype: c.kvd, PartialDtype: c.pd, PVRound: c.round, Causal: c.causal, KVRows: int(c.cuK[B]),
			}
			if c.kvd == NVFP4 {
				a.KScale, a.VScale, a.KGlobalScale = m.put(c.k.scales), m.put(c.v.scales), m.putF32(c.k.gscale)
			}
			if c.paged {
				seq := make([]int32, B)
				for b := range seq {
					seq[b] = int32(c.seqK(b))
				}
				a.PageTable, a.SequsedK, a.PageSize, a.PageTableStride = m.putI32(c.pageTable), m.putI32(seq), c.pageSize, c.maxPages
				a.KVRows = c.numPages
			}
			nPart := c.topK * c.totalQ * c.hq
			a.OPartial = m.alloc(nPart * c.d * partialSize(c.pd))
			a.LSEPartial = m.alloc(nPart * 4)
			if c.temp > 0 {
				a.TLSEPartial, a.Temperature = m.alloc(nPart*4), c.temp
			}
			ca := &CombineArgs{OPartial: a.OPartial, LSEPartial: a.LSEPartial, TLSEPartial: a.TLSEPartial,
				Out: m.alloc(c.totalQ * c.hq * c.d * 2), LSE: m.alloc(c.totalQ * c.hq * 4),
				TotalQ: c.totalQ, Hq: c.hq, Hkv: c.hkv, D: c.d, TopK: c.topK, PartialDtype: c.pd}
			if c.temp > 0 {
				ca.TLSE = m.alloc(c.totalQ * c.hq * 4)
			}
			if c.kvd == NVFP4 {
				ca.OutputScale = m.putF32(c.v.gscale)
			}
			run := func() error {
				if err := k.SparseForward(ctx, a, c.csr, c.sched); err != nil {
					return err
				}
				return k.Combine(ctx, ca, c.sched)
			}
			gms, err := timeIt(ctx, 10, run)
			if err != nil {
				t.Fatal(err)
			}
			t0 := time.Now()
			wantO, wantLSE, wantT := c.refPrefill()
			cms := float64(time.Since(t0).Microseconds()) / 1000
			// the reference decodes V with its global scale; the GPU applies it as output_scale
			gotO := bf16Floats(m.get(ca.Out, c.totalQ*c.hq*c.d*2))
			eO := compare(t, "O", gotO, wantO, c.tolO)
			eL := compare(t, "LSE", m.getF32(ca.LSE, c.totalQ*c.hq), wantLSE, c.tolLSE)
			if c.temp > 0 {
				compare(t, "TLSE", m.getF32(ca.TLSE, c.totalQ*c.hq), wantT, c.tolLSE)
			}
			t.Logf("%s: work items %d, max err O %.3g, LSE %.3g", c.name, c.sched.WorkCount, eO, eL)
			record("prefill "+c.name, "sparse_fwd+combine", gms, cms)
		})
	}
}

func TestGPUDecode(t *testing.T) {
	ctx, k := gpu(t)
	for i, c := range decodeCases() {
		t.Run(c.name, func(t *testing.T) {
			genDecode(t, c, uint64(i+1))
			m := &devMem{t: t, ctx: ctx}
			defer m.free()
			rows := c.batch * c.seqlenQ
			a := &DecodeArgs{
				Q: m.put(c.q.enc), K: m.put(c.k.enc), V: m.put(c.v.enc),
				SequsedK: m.putI32(c.seqused), PageTable: m.putI32(c.pageTable),
				Out: m.alloc(rows * c.hq * c.d * 2), LSE: m.alloc(rows * c.hq * 4),
				Batch: c.batch, SeqlenQ: c.seqlenQ, Hq: c.hq, Hkv: c.hkv, D: c.d, PageSize: c.pageSize,
				PageTableStride: c.maxPages, QDtype: c.qd, KVDtype: c.kvd, PVRound: c.round, NumPages: c.numPages,
			}
			if c.kvd == NVFP4 {
				a.KScale, a.VScale = m.put(c.k.scales), m.put(c.v.scales)
				a.KGlobalScale, a.OutputScale = m.putF32(c.k.gscale), m.putF32(c.v.gscale)
			}
			if c.q2k != nil { // sparse decode: rows attend only their selected blocks
				a.Q2K, a.TopK, a.BlkKV = m.putI32(c.q2k), c.topK, c.blk
			}
			if c.sched.SplitKV {
				a.OPartial = m.alloc(c.sched.PartialRows * c.hq * c.d * 4)
				a.LSEPartial = m.alloc(c.sched.PartialRows * c.hq * 4)
			}
			gms, err := timeIt(ctx, 10, func() error { return k.Decode(ctx, a, c.sched) })
			if err != nil {
				t.Fatal(err)
			}
			t0 := time.Now()
			wantO, wantLSE := c.refDecode()
			cms := float64(time.Since(t0).Microseconds()) / 1000
			eO := compare(t, "O", bf16Floats(m.get(a.Out, rows*c.hq*c.d*2)), wantO, c.tolO)
			eL := compare(t, "LSE", m.getF32(a.LSE, rows*c.hq), wantLSE, c.tolLSE)
			t.Logf("%s: split %v, chunk %d pages, items %d, max err O %.3g, LSE %.3g",
				c.name, c.sched.SplitKV, c.sched.ChunkPages, c.sched.WorkCount, eO, eL)
			kern := "decode"
			if c.q2k != nil {
				kern = "sparse decode"
			}
			if c.sched.SplitKV {
				kern += "+combine"
			}
			record("decode "+c.name, kern, gms, cms)
		})
	}
}
