//go:build cuda

package cuda

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/sparseattn/msa/cuda/driver"
	"github.com/sparseattn/msa/kernels/cuda/fatbin"
)

// Runner runs driver calls with a CUDA context current (gorgonia's cu.Ctx,
// cu.BatchedContext and every cu.Context have this method). A nil Runner
// runs them on the calling goroutine, which must then be locked to an OS
// thread with the context current.
type Runner interface {
	Do(fn func() error) error
}

// Path selects which kernels a Kernels launches.
type Path int

// Kernel paths.
const (
	PathAuto     Path = iota // tensor-core kernels where they exist and apply, else portable
	PathPortable             // the portable kernels only (the on-GPU reference)
)

// Kernels is the loaded fatbin module plus the device scratch buffers that
// carry parameter blocks and plan arrays to the kernels, and the tensor-map
// cache of the tensor-core kernels.
//
// All driver calls go through libcuda.so.1, opened at run time (package
// driver): a binary that uses only this package starts on a machine without
// a driver and gets an error wrapping driver.ErrNoDriver from Load.
//
// Methods are safe for concurrent use (one mutex serialises them: the
// scratch buffers are shared). Every launch goes to the legacy default
// stream; the synchronous host-to-device copies of the next call are ordered
// after the previous kernels, so the scratch buffers can be reused.
type Kernels struct {
	mu      sync.Mutex
	mod     driver.Module
	arch    Arch
	major   int
	minor   int
	devName string
	smemOpt int // opt-in dynamic shared memory per block
	sms     int // streaming multiprocessors (SplitForOccupancy)
	l2      int // L2 cache bytes (KV2Window)
	waves   int // prefill CTAs per SM and window (SplitForOccupancy)
	fns     map[string]driver.Function
	tc      map[string]tcKernel
	bufs    map[string]*devBuf
	tmaps   map[string]driver.TensorMap
	path    Path
	prefill PrefillPath  // MSA_CUDA_PREFILL (SetPrefillPath)
	chooser TileChooser  // the auto path's override of the model (SetPrefillChooser); nil: the model
	decode  DecodeKernel // MSA_CUDA_DECODE (SetDecodeKernel)
	fp8pv   FP8PV        // MSA_CUDA_FP8PV (SetFP8PV)
	gen     uint64       // bumped by every scratch upload: a Prepared is valid while it is unchanged
	last    []string     // kernels of the last call (for the GPU check's report)
	prev    []string     // kernels of the call before (a trap surfaces one call late)
	// waitWord is the host-mapped word the SM100 kernels' timed-out waits
	// write their site code to (sm100_wait.go); zero off SM100.
	waitWord driver.HostMapped
	closed   bool
	fallback map[string]string            // tensor-core kernel -> why it did not run (last time)
	memFree  func(driver.DevicePtr) error // driver.MemFree; replaced by tests
	drv      driverCalls                  // the other driver calls of a launch; replaced by tests
	argv     [2][]byte                    // kernel arguments of the launch in progress (launchSteps)
	dec      decodeState                  // Decode's parameter blocks, steps and launch choices (decode_launch.go)
	pre      prefillState                 // the sparse prefill's (prefill_launch.go)
}

// driverCalls are the driver calls the launch path makes per call; a nil
// field is the driver's function. Tests replace them with recording fakes
// so that the launch path runs without a GPU.
type driverCalls struct {
	memAlloc func(n int64) (driver.DevicePtr, error)
	htod     func(dst driver.DevicePtr, src unsafe.Pointer, n int64) error
	memset   func(p driver.DevicePtr, v byte, n int64) error
	launch   func(f driver.Function, cfg driver.LaunchConfig, args [][]byte) error
	encode   func(s *TensorMapSpec) (driver.TensorMap, error) // a tensor map's encoding (cuTensorMapEncodeTiled)
}

func (k *Kernels) memAlloc(n int64) (driver.DevicePtr, error) {
	if k.drv.memAlloc != nil {
		return k.drv.memAlloc(n)
	}
	return driver.MemAlloc(n)
}

func (k *Kernels) free(p driver.DevicePtr) error {
	if k.memFree != nil {
		return k.memFree(p)
	}
	return driver.MemFree(p)
}

func (k *Kernels) htod(dst driver.DevicePtr, src unsafe.Pointer, n int64) error {
	if k.drv.htod != nil {
		return k.drv.htod(dst, src, n)
	}
	return driver.MemcpyHtoD(dst, src, n)
}

func (k *Kernels) memset(p driver.DevicePtr, v byte, n int64) error {
	if k.drv.memset != nil {
		return k.drv.memset(p, v, n)
	}
	return driver.MemsetD8(p, v, n)
}

// launchArgs launches f with the argument blocks args (a slice of k.argv:
// storage the Kernels owns, so that a launch allocates nothing).
func (k *Kernels) launchArgs(f driver.Function, cfg driver.LaunchConfig, args [][]byte) error {
	if k.drv.launch != nil {
		return k.drv.launch(f, cfg, args)
	}
	return driver.Launch(f, cfg, args...)
}

type tcKernel struct {
	fn      driver.Function
	threads int
	smemSet int // dynamic shared memory the attribute allows (0 = default 48 KB)
}

type devBuf struct {
	ptr  driver.DevicePtr
	size int64
}

// sm100Table is the SM100 launch data of kernels/cuda/fatbin/names_sm100.go by
// kernel name.
var sm100Table = func() map[string]fatbin.SM100Kernel {
	m := map[string]fatbin.SM100Kernel{}
	for _, g := range fatbin.SM100Kernels {
		m[g.Name] = g
	}
	return m
}()

// MinDriverCUDA is the driver API version the fatbin needs (1000*major +
// 10*minor): its cubins and PTX come from CUDA 13.0.
const MinDriverCUDA = 13000

// maxTensorMaps bounds the tensor-map cache (maps are keyed by pointer,
// shape and box; the cache is cleared when full).
const maxTensorMaps = 1024

func run(ctx Runner, f func() error) error {
	if ctx == nil {
		return f()
	}
	return ctx.Do(f)
}

var portableNames = []string{
	fatbin.SparseFwdD256, fatbin.SparseFwdD128, fatbin.SparseFwdD64,
	fatbin.DecodeD256, fatbin.DecodeD128, fatbin.DecodeD64,
	fatbin.CombineD256, fatbin.CombineD128, fatbin.CombineD64,
}

// Load opens the driver, loads the embedded fatbin in the current context,
// looks up every portable kernel and the tensor-core kernels of the
// device's family (ArchFor; a name missing from the fatbin leaves that
// variant on the portable kernel). MSA_CUDA_ARCH (portable, sm80, sm90,
// sm100) overrides the family: with CUDA_FORCE_PTX_JIT=1 on an H200,
// MSA_CUDA_ARCH=sm80 runs the sm_80 kernels from their compute_80 PTX.
// MSA_CUDA_ITEM_WAVES (1 to 64, default DefaultItemWaves) sets how many
// CTAs per SM each prefill window's work items are cut into.
// MSA_CUDA_PREFILL (kv, kv2, query, query80, auto) sets the prefill path and
// MSA_CUDA_DECODE (old, new; DecodeEnv) the sm_90a decode kernel and
// whether the SM100 decode fuses its combine,
// MSA_CUDA_FP8PV (widen, fp8; FP8PVEnv) the sm_90a query-major fp8
// kernel's P.V; a bad value is an error.
func Load(ctx Runner) (*Kernels, error) {
	if err := driver.Open(); err != nil {
		return nil, err
	}
	k := &Kernels{fns: map[string]driver.Function{}, tc: map[string]tcKernel{}, bufs: map[string]*devBuf{},
		tmaps: map[string]driver.TensorMap{}, fallback: map[string]string{}}
	err := run(ctx, func() error {
		dev, err := driver.CurrentDevice()
		if err != nil {
			return fmt.Errorf("cuda: no current CUDA context: %w", err)
		}
		if k.major, k.minor, err = dev.ComputeCapability(); err != nil {
			return err
		}
		k.devName, _ = dev.Name()
		if k.smemOpt, err = dev.Attribute(driver.AttrMaxSharedPerBlockOpt); err != nil {
			return err
		}
		if k.sms, err = dev.Attribute(driver.AttrMultiprocessorCount); err != nil {
			return err
		}
		if k.l2, err = dev.Attribute(driver.AttrL2CacheSizeBytes); err != nil {
			return err
		}
		k.waves = DefaultItemWaves
		if v := os.Getenv("MSA_CUDA_ITEM_WAVES"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > 64 {
				return fmt.Errorf("cuda: MSA_CUDA_ITEM_WAVES=%q: want an integer in [1, 64]", v)
			}
			k.waves = n
		}
		if k.prefill, err = prefillPathFromEnv(); err != nil {
			return err
		}
		if k.decode, err = decodeKernelFromEnv(); err != nil {
			return err
		}
		if k.fp8pv, err = fp8pvFromEnv(); err != nil {
			return err
		}
		k.arch = ArchFor(k.major, k.minor)
		if v := os.Getenv("MSA_CUDA_ARCH"); v != "" {
			a, ok := ParseArch(v)
			if !ok {
				return fmt.Errorf("cuda: MSA_CUDA_ARCH=%q: want portable, sm80, sm90 or sm100", v)
			}
			k.arch = a
		}
		mod, err := driver.LoadData(fatbin.Image)
		if err != nil {
			if v, verr := driver.DriverVersion(); verr == nil && v < MinDriverCUDA {
				return fmt.Errorf("cuda: loading the kernel fatbin: the driver supports CUDA %d.%d, the fatbin (CUDA 13.0) needs a driver for CUDA 13.0 or newer (r580+): %w", v/1000, v%1000/10, err)
			}
			return fmt.Errorf("cuda: loading the kernel fatbin on sm_%d%d (SASS for sm_80, sm_90a, sm_100f; PTX for compute_80): %w", k.major, k.minor, err)
		}
		k.mod = mod
		if k.arch == ArchSM100 {
			if err := k.setWaitWord(mod); err != nil {
				return err
			}
		}
		for _, name := range portableNames {
			fn, err := mod.Function(name)
			if err != nil {
				return fmt.Errorf("cuda: kernel %s: %w", name, err)
			}
			k.fns[name] = fn
		}
		for _, name := range append(append(append(TCNames(k.arch), QFwdNames(k.arch)...), PipeNames(k.arch)...), KV2Names(k.arch)...) {
			fn, err := mod.Function(name)
			if driver.IsNotFound(err) {
				continue
			}
			if err != nil {
				return fmt.Errorf("cuda: kernel %s: %w", name, err)
			}
			threads, err := fn.Attribute(driver.FuncAttrMaxThreadsPerBlock)
			if err != nil {
				return err
			}
			if threads < 32 || threads%32 != 0 {
				continue // not a launch-bounded tensor-core kernel: leave the variant on the portable one
			}
			k.tc[name] = tcKernel{fn: fn, threads: threads}
		}
		return nil
	})
	if err != nil {
		if k.mod != 0 {
			err = errors.Join(err, run(ctx, k.mod.Unload))
		}
		return nil, errors.Join(err, run(ctx, func() error { return driver.FreeHostMapped(k.waitWord) }))
	}
	return k, nil
}

// setWaitWord gives the SM100 kernels of mod a host-mapped word for the
// site code of a timed-out mbarrier wait (sm100_wait.go): it stores the
// word's device address in their SM100WaitSymbol once. A module without
// the symbol (a fatbin built before it) leaves the word unset: a timeout
// then reports the driver's error alone.
func (k *Kernels) setWaitWord(mod driver.Module) error {
	g, size, err := mod.Global(SM100WaitSymbol)
	if driver.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("cuda: %w", err)
	}
	if size != 8 {
		return fmt.Errorf("cuda: %s is %d bytes in the fatbin, want a device pointer (8)", SM100WaitSymbol, size)
	}
	w, err := driver.AllocHostMapped(4)
	if err != nil {
		return fmt.Errorf("cuda: the SM100 wait word: %w", err)
	}
	k.waitWord = w
	dev := uint64(w.Device)
	if err := driver.MemcpyHtoD(g, unsafe.Pointer(&dev), 8); err != nil {
		return fmt.Errorf("cuda: setting %s: %w", SM100WaitSymbol, err)
	}
	return nil
}

// waitCode is the site code a timed-out SM100 wait left in the
// host-mapped word (0: none, or no word).
func (k *Kernels) waitCode() uint32 {
	if k.waitWord.Host == nil {
		return 0
	}
	return atomic.LoadUint32((*uint32)(k.waitWord.Host))
}

// Explain returns err as an *SM100WaitTimeout (naming the kernel, the
// barrier and the parity, and wrapping err) when an SM100 kernel's bounded
// mbarrier wait timed out, else err unchanged. The trap of such a wait
// fails the launch sequence asynchronously, so a caller that sees a driver
// error at a later synchronising call (a copy, an event, cuCtxSynchronize)
// passes it here; the launches of k do it themselves.
func (k *Kernels) Explain(err error) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return sm100WaitError(k.waitCode(), k.recent(), err)
}

// recent lists the kernels of the last two calls, oldest first.
func (k *Kernels) recent() []string { return append(append([]string(nil), k.prev...), k.last...) }

// Arch is the kernel family Load chose for the device.
func (k *Kernels) Arch() Arch { return k.arch }

// Device describes the device the module was loaded on.
func (k *Kernels) Device() (name string, major, minor int) { return k.devName, k.major, k.minor }

// TensorCoreKernels lists the tensor-core kernels found in the fatbin for
// this device's family.
func (k *Kernels) TensorCoreKernels() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []string
	for _, n := range TCNames(k.arch) {
		if _, ok := k.tc[n]; ok {
			out = append(out, n)
		}
	}
	return out
}

// SetPath selects the kernels of later calls (PathAuto by default).
func (k *Kernels) SetPath(p Path) {
	k.mu.Lock()
	k.path = p
	k.mu.Unlock()
}

// SetPrefillPath selects the sparse prefill's path for later
// SparsePrefill / PrepareSparsePrefill calls (Load sets it from
// MSA_CUDA_PREFILL, default kv). The query path falls back to the KV path,
// recording why in Fallbacks, where its kernel cannot run; the auto paths
// choose per query tile (PrefillAuto, PrefillAutoKV2 with its KV tiles on
// kv2; PrefillChoice).
func (k *Kernels) SetPrefillPath(p PrefillPath) {
	k.mu.Lock()
	k.prefill = p
	k.mu.Unlock()
}

// PrefillPath is the sparse prefill path of later calls.
func (k *Kernels) PrefillPath() PrefillPath {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.prefill
}

// SetDecodeKernel selects the sm_90a decode kernel of later Decode /
// PrepareDecode calls (Load sets it from MSA_CUDA_DECODE, default old). The
// new kernel falls back to the old one, recording why in Fallbacks, where
// it does not apply (other families, dtypes without a variant, a kernel
// missing from the fatbin).
func (k *Kernels) SetDecodeKernel(d DecodeKernel) {
	k.mu.Lock()
	k.decode = d
	k.mu.Unlock()
}

// DecodeKernel is the sm_90a decode kernel of later calls.
func (k *Kernels) DecodeKernel() DecodeKernel {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.decode
}

// PipeOccupancy returns, per pipelined decode kernel found in the fatbin,
// how many of its CTAs the driver can keep resident on one SM at its
// launch geometry (the design needs fatbin.PipeCTAsPerSM). It raises each
// kernel's shared-memory attributes first, as a launch would.
func (k *Kernels) PipeOccupancy(ctx Runner) (map[string]int, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.check(); err != nil {
		return nil, err
	}
	out := map[string]int{}
	err := run(ctx, func() error {
		for _, name := range PipeNames(k.arch) {
			kern, ok := k.tc[name]
			l, known := fatbin.DecodePipeLaunch[name]
			if !ok || !known {
				continue
			}
			if err := kern.fn.SetAttribute(driver.FuncAttrMaxDynamicSharedBytes, l.DynSmem); err != nil {
				return fmt.Errorf("cuda: %s: %w", name, err)
			}
			if err := kern.fn.SetAttribute(driver.FuncAttrPreferredSharedCarveout, 100); err != nil {
				return fmt.Errorf("cuda: %s: %w", name, err)
			}
			kern.smemSet = l.DynSmem
			k.tc[name] = kern
			n, err := kern.fn.ActiveBlocksPerSM(l.Threads, l.DynSmem)
			if err != nil {
				return fmt.Errorf("cuda: %s: %w", name, err)
			}
			out[name] = n
		}
		return nil
	})
	return out, err
}

// LastKernels lists the kernels the last SparseForward / SparsePrefill /
// Combine / Decode call launched, in order.
func (k *Kernels) LastKernels() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]string(nil), k.last...)
}

// Fallbacks reports, per tensor-core kernel that applied to a call's dtypes
// but did not run, the reason (the portable kernel ran instead).
func (k *Kernels) Fallbacks() map[string]string {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := map[string]string{}
	for n, w := range k.fallback {
		out[n] = w
	}
	return out
}

// Close frees every scratch buffer and unloads the module. It attempts
// every step and returns all failures joined; afterwards k must not be
// used (a second Close returns nil).
func (k *Kernels) Close(ctx Runner) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return nil
	}
	k.closed = true
	return run(ctx, func() error {
		var errs []error
		for role, b := range k.bufs {
			if err := k.free(b.ptr); err != nil {
				errs = append(errs, fmt.Errorf("cuda: freeing %s: %w", role, err))
			}
		}
		k.bufs = map[string]*devBuf{}
		k.tmaps = map[string]driver.TensorMap{}
		k.dec.choices = launchCache[decodeKey, decodeChoice]{}
		k.pre.choices = launchCache[prefillKey, prefillChoice]{}
		if k.mod != 0 {
			if err := k.mod.Unload(); err != nil {
				errs = append(errs, fmt.Errorf("cuda: unloading the module: %w", err))
			}
			k.mod = 0
		}
		if err := driver.FreeHostMapped(k.waitWord); err != nil {
			errs = append(errs, fmt.Errorf("cuda: freeing the SM100 wait word: %w", err))
		}
		k.waitWord = driver.HostMapped{}
		return errors.Join(errs...)
	})
}

// upload copies n bytes at src into the scratch buffer named role (grown as
// needed) and returns its device address.
func (k *Kernels) upload(role string, src unsafe.Pointer, n int64) (uint64, error) {
	b := k.bufs[role]
	need := max(n, 16)
	if b == nil || b.size < need {
		if b != nil {
			delete(k.bufs, role)
			if err := k.free(b.ptr); err != nil {
				return 0, err
			}
		}
		ptr, err := k.memAlloc(need)
		if err != nil {
			return 0, fmt.Errorf("cuda: allocating %d bytes for %s: %w", need, role, err)
		}
		b = &devBuf{ptr: ptr, size: need}
		k.bufs[role] = b
	}
	k.gen++
	if n > 0 {
		if err := k.htod(b.ptr, src, n); err != nil {
			return 0, fmt.Errorf("cuda: uploading %s: %w", role, err)
		}
	}
	return uint64(b.ptr), nil
}

func (k *Kernels) uploadInt32(role string, v []int32) (uint64, error) {
	if len(v) == 0 {
		return k.upload(role, nil, 0)
	}
	return k.upload(role, unsafe.Pointer(&v[0]), int64(len(v))*4)
}

func (k *Kernels) check() error {
	if k.closed {
		return errors.New("cuda: Kernels used after Close")
	}
	return nil
}

// step is one kernel launch of a prepared sequence: a portable kernel with
// the device address of its parameter block, or a tensor-core kernel with
// its parameter block and tensor maps by value.
type step struct {
	name   string
	grid   int
	params uint64 // portable
	tc     bool
	kern   tcKernel
	smem   int
	value  []byte
	maps   [3]driver.TensorMap
	nomaps bool // the kernel takes its parameter block only (no tensor maps)
}

// Prepared is a launch sequence whose inputs (plan arrays, parameter
// blocks, tensor maps) are already in device memory or encoded: Launch runs
// its kernels and nothing else. It stays valid until the next call of its
// Kernels that uploads (any Prepare*, SparseForward, Combine,
// SparsePrefill, Decode); Launch refuses a stale one.
type Prepared struct {
	k     *Kernels
	gen   uint64
	steps []step
	fn    func() error // launches steps: made once, so that Launch allocates nothing
}

// newPrepared returns a Prepared of k for the steps Prepare* will fill in.
func newPrepared(k *Kernels) *Prepared {
	pl := &Prepared{k: k}
	pl.fn = func() error { return k.launchSteps(pl.steps) }
	return pl
}

// Kernels lists the kernels Launch starts, in order.
func (pl *Prepared) Kernels() []string {
	var out []string
	for _, s := range pl.steps {
		out = append(out, s.name)
	}
	return out
}

// Launch starts the prepared kernels (no host-to-device copy).
func (pl *Prepared) Launch(ctx Runner) error {
	k := pl.k
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.check(); err != nil {
		return err
	}
	if pl.gen != k.gen {
		return errors.New("cuda: stale prepared launch: its scratch buffers were reused by a later call")
	}
	return run(ctx, pl.fn)
}

func (k *Kernels) launchSteps(steps []step) error {
	k.prev = append(k.prev[:0], k.last...)
	k.last = k.last[:0]
	for i := range steps {
		st := &steps[i]
		var err error
		if st.tc {
			cfg := driver.LaunchConfig{Grid: driver.Dim3{X: uint32(st.grid), Y: 1, Z: 1},
				Block: driver.Dim3{X: uint32(st.kern.threads), Y: 1, Z: 1}, SharedBytes: uint32(st.smem)}
			k.argv[0] = st.value
			if st.nomaps {
				err = k.launchArgs(st.kern.fn, cfg, k.argv[:1])
			} else {
				k.argv[1] = driver.Bytes(&st.maps)
				err = k.launchArgs(st.kern.fn, cfg, k.argv[:2])
			}
		} else {
			fn, ok := k.fns[st.name]
			if !ok {
				return fmt.Errorf("cuda: kernel %s not loaded", st.name)
			}
			cfg := driver.LaunchConfig{Grid: driver.Dim3{X: uint32(st.grid), Y: 1, Z: 1}, Block: driver.Dim3{X: Threads, Y: 1, Z: 1}}
			k.argv[0] = driver.Bytes(&st.params)
			err = k.launchArgs(fn, cfg, k.argv[:1])
		}
		k.argv = [2][]byte{}
		if err != nil {
			return sm100WaitError(k.waitCode(), k.recent(), fmt.Errorf("cuda: launching %s on %d CTAs: %w", st.name, st.grid, err))
		}
		k.last = append(k.last, st.name)
	}
	return nil
}

// tensorMap encodes s (validated) or returns the cached encoding.
func (k *Kernels) tensorMap(s TensorMapSpec) (driver.TensorMap, error) {
	if err := s.Validate(); err != nil {
		return driver.TensorMap{}, err
	}
	key := s.Key()
	if m, ok := k.tmaps[key]; ok {
		return m, nil
	}
	m, err := k.encode(&s)
	if err != nil {
		return driver.TensorMap{}, fmt.Errorf("cuda: tensor map %s: %w", s.Name, err)
	}
	if len(k.tmaps) >= maxTensorMaps {
		clear(k.tmaps)
	}
	k.tmaps[key] = m
	return m, nil
}

// encode encodes the tiled tensor map of s (validated).
func (k *Kernels) encode(s *TensorMapSpec) (driver.TensorMap, error) {
	if k.drv.encode != nil {
		return k.drv.encode(s)
	}
	dt := driver.TMapUint8
	if s.ElemBytes() == 2 {
		dt = driver.TMapBFloat16
	}
	es := make([]uint32, len(s.Dims))
	for i := range es {
		es[i] = 1
	}
	swz := map[int]int{0: driver.SwizzleNone, 32: driver.Swizzle32B, 64: driver.Swizzle64B, 128: driver.Swizzle128B}[s.Swizzle]
	return driver.EncodeTiled(dt, driver.DevicePtr(s.Base), s.Dims, s.Strides, s.Box, es, swz, driver.L2Promotion128B, driver.OOBFillNone)
}

// tcLaunch returns the launch of p's tensor-core kernel on grid CTAs
// with the parameter block value (storage the caller keeps until the
// launch) and p's encoded tensor maps, or why it cannot run (the caller
// runs the portable kernel). The dynamic shared memory attribute is raised
// as needed.
func (k *Kernels) tcLaunch(p *TCPlan, grid int, value []byte, maps *[3]driver.TensorMap) (step, string) {
	kern, smem, why := k.tcKernel(p.Name, p.SmemBytes)
	if why != "" {
		return step{}, why
	}
	return step{name: p.Name, grid: grid, tc: true, kern: kern, smem: smem, value: value, maps: *maps}, ""
}

// encodeMaps encodes the Q, K and V maps of p into maps when p applies
// (why == "") and returns why it does not (an encoding failure included).
func (k *Kernels) encodeMaps(p *TCPlan, maps *[3]driver.TensorMap, why string) string {
	for i, s := range []*TensorMapSpec{&p.Q, &p.K, &p.V} {
		if why != "" {
			break
		}
		m, err := k.tensorMap(*s)
		if err != nil {
			why = err.Error()
		}
		maps[i] = m
	}
	return why
}

// tcKernel returns the loaded tensor-core kernel name and the dynamic
// shared memory it launches with (smem from the Go model, overridden by the
// kernel tables), raising its attribute as needed, or why it cannot run.
func (k *Kernels) tcKernel(name string, smem int) (kern tcKernel, dyn int, why string) {
	kern, found := k.tc[name]
	if !found {
		return kern, 0, "not in the fatbin"
	}
	// The kernel engineers' launch data (names_sm100.go,
	// names_hopper_ampere.go) wins over the Go model.
	threads, tdyn, known := 0, 0, false
	if g, ok := sm100Table[name]; ok {
		threads, tdyn, known = g.Threads, g.DynSmem, true
	} else if g, ok := fatbin.HopperAmpereLaunch[name]; ok {
		threads, tdyn, known = g.Threads, g.DynSmem, true
	} else if g, ok := fatbin.Fwd2Launch[name]; ok {
		threads, tdyn, known = g.Threads, g.DynSmem, true
	}
	if known {
		if threads != kern.threads {
			return kern, 0, fmt.Sprintf("launch table says %d threads, the kernel's launch bound %d", threads, kern.threads)
		}
		smem = tdyn
	}
	if smem == 0 {
		smem = k.smemOpt // geometry not known here: the device's opt-in maximum always suffices
	}
	if smem > k.smemOpt {
		return kern, 0, fmt.Sprintf("needs %d B of shared memory, the device allows %d", smem, k.smemOpt)
	}
	if smem > 48<<10 && kern.smemSet < smem {
		if err := kern.fn.SetAttribute(driver.FuncAttrMaxDynamicSharedBytes, smem); err != nil {
			return kern, 0, err.Error()
		}
		kern.smemSet = smem
		k.tc[name] = kern
	}
	return kern, smem, ""
}

// pick returns the kernel for head dim d (validated by the params builders).
func pick(d int, d256, d128, d64 string) string {
	switch d {
	case 64:
		return d64
	case 256:
		return d256
	}
	return d128
}

// Synchronize waits for every launched kernel (cuCtxSynchronize).
func Synchronize(ctx Runner) error {
	if err := driver.Open(); err != nil {
		return err
	}
	return run(ctx, driver.Synchronize)
}
