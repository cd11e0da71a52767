//go:build cuda

package cuda

import (
	"unsafe"

	"github.com/sparseattn/msa/cuda/driver"
	"github.com/sparseattn/msa/kernels/cuda/fatbin"
)

// Test scaffolding: a Kernels whose driver calls are recorded instead of
// made, so that the launch path (and the graph ops above it) can be run and
// measured on a machine without a GPU or a driver. It launches nothing and
// computes nothing; never use it outside tests.

// FakeDriver records the driver calls of a Kernels made by FakeKernels:
// device memory is a counter, copies count bytes, tensor maps are zero
// maps (counted), launches record the kernel. It allocates nothing per call, so that testing.AllocsPerRun
// measures the launch path alone.
type FakeDriver struct {
	Next     driver.DevicePtr // the next address MemAlloc returns
	Allocs   int              // device allocations made
	Copied   int64            // bytes copied host to device
	Encoded  int              // tensor maps encoded
	Launches int              // kernel launches
	Last     driver.Function  // the last kernel launched
	LastArgs int              // its argument count
}

func (f *FakeDriver) install(k *Kernels) {
	k.memFree = func(driver.DevicePtr) error { return nil }
	k.drv = driverCalls{
		memAlloc: func(n int64) (driver.DevicePtr, error) {
			f.Allocs++
			p := f.Next
			f.Next += driver.DevicePtr((n + 255) &^ 255)
			return p, nil
		},
		htod: func(_ driver.DevicePtr, _ unsafe.Pointer, n int64) error {
			f.Copied += n
			return nil
		},
		memset: func(driver.DevicePtr, byte, int64) error { return nil },
		encode: func(*TensorMapSpec) (driver.TensorMap, error) {
			f.Encoded++
			return driver.TensorMap{}, nil
		},
		launch: func(fn driver.Function, _ driver.LaunchConfig, args [][]byte) error {
			f.Launches++
			f.Last, f.LastArgs = fn, len(args)
			return nil
		},
	}
}

// FakeKernels is test scaffolding: a Kernels of family arch as Load would
// leave it, every kernel a distinct fake function with its attributes
// already raised (no SetAttribute call reaches the missing driver), its
// driver calls recorded by f; tensor maps are "encoded" as zero maps.
func FakeKernels(arch Arch, f *FakeDriver) *Kernels {
	// An H100's SM count and L2 size (prefill windows and occupancy splits).
	k := &Kernels{arch: arch, smemOpt: 232448, sms: 132, l2: 50 << 20, waves: DefaultItemWaves, fns: map[string]driver.Function{},
		tc: map[string]tcKernel{}, bufs: map[string]*devBuf{}, tmaps: map[string]driver.TensorMap{}, fallback: map[string]string{}}
	f.Next = 0x1000000
	f.install(k)
	fn := driver.Function(1)
	for _, n := range portableNames {
		k.fns[n] = fn
		fn++
	}
	for _, n := range append(append(append(TCNames(arch), QFwdNames(arch)...), PipeNames(arch)...), KV2Names(arch)...) {
		threads := 128
		if g, ok := sm100Table[n]; ok {
			threads = g.Threads
		}
		if g, ok := fatbin.HopperAmpereLaunch[n]; ok {
			threads = g.Threads
		}
		if g, ok := fatbin.DecodePipeLaunch[n]; ok {
			threads = g.Threads
		}
		if g, ok := fatbin.Fwd2Launch[n]; ok {
			threads = g.Threads
		}
		k.tc[n] = tcKernel{fn: fn, threads: threads, smemSet: k.smemOpt}
		fn++
	}
	return k
}

// SetDecodeKernel is test scaffolding: it selects the decode kernel of a
// Kernels made by FakeKernels, as MSA_CUDA_DECODE does for Load.
func SetDecodeKernel(k *Kernels, d DecodeKernel) { k.decode = d }
