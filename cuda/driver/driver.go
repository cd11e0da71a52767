//go:build cuda

// Package driver is a minimal binding of the CUDA driver API that opens
// libcuda.so.1 at run time (dlopen) instead of linking it. A binary built
// from it starts on any machine: without an NVIDIA driver, Open returns an
// error wrapping ErrNoDriver instead of the dynamic loader refusing to start
// the program (or gorgonia.org/cu calling os.Exit in its init).
//
// It covers what the launchers of package cuda and the GPU check need and
// what gorgonia.org/cu v0.9.6 lacks: module loading from memory, kernel
// lookup, the dynamic shared memory attribute, cuLaunchKernelEx with cluster
// dimensions and by-value parameters of any size, cuTensorMapEncodeTiled,
// plus device queries, memory, copies and events.
//
// Threading: the driver API's current context is per OS thread. Callers
// lock their goroutine to an OS thread (runtime.LockOSThread) and make a
// context current (SetCurrent, or gorgonia's cu.PushCurrentCtx: both bind
// the same libcuda, loaded once per process) before calling anything that
// needs one.
//
// Types come from cuda.h (12.x or 13.x); building needs the header only,
// never a libcuda (kernels/cuda/tagged_build.sh provides the include path).
package driver

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <cuda.h>

typedef struct {
	CUresult (*init)(unsigned int);
	CUresult (*driverGetVersion)(int*);
	CUresult (*getErrorName)(CUresult, const char**);
	CUresult (*getErrorString)(CUresult, const char**);
	CUresult (*deviceGetCount)(int*);
	CUresult (*deviceGet)(CUdevice*, int);
	CUresult (*deviceGetName)(char*, int, CUdevice);
	CUresult (*deviceGetAttribute)(int*, CUdevice_attribute, CUdevice);
	CUresult (*deviceTotalMem)(size_t*, CUdevice);
	CUresult (*primaryCtxRetain)(CUcontext*, CUdevice);
	CUresult (*primaryCtxRelease)(CUdevice);
	CUresult (*ctxSetCurrent)(CUcontext);
	CUresult (*ctxGetCurrent)(CUcontext*);
	CUresult (*ctxGetDevice)(CUdevice*);
	CUresult (*ctxGetId)(CUcontext, unsigned long long*);
	CUresult (*ctxSynchronize)(void);
	CUresult (*memAlloc)(CUdeviceptr*, size_t);
	CUresult (*memFree)(CUdeviceptr);
	CUresult (*memcpyHtoD)(CUdeviceptr, const void*, size_t);
	CUresult (*memcpyDtoH)(void*, CUdeviceptr, size_t);
	CUresult (*memcpyDtoD)(CUdeviceptr, CUdeviceptr, size_t);
	CUresult (*memsetD8)(CUdeviceptr, unsigned char, size_t);
	CUresult (*memHostAlloc)(void**, size_t, unsigned int);
	CUresult (*memHostGetDevicePointer)(CUdeviceptr*, void*, unsigned int);
	CUresult (*memFreeHost)(void*);
	CUresult (*moduleLoadData)(CUmodule*, const void*);
	CUresult (*moduleUnload)(CUmodule);
	CUresult (*moduleGetFunction)(CUfunction*, CUmodule, const char*);
	CUresult (*moduleGetGlobal)(CUdeviceptr*, size_t*, CUmodule, const char*);
	CUresult (*funcSetAttribute)(CUfunction, CUfunction_attribute, int);
	CUresult (*funcGetAttribute)(int*, CUfunction_attribute, CUfunction);
	CUresult (*occupancyMaxBlocks)(int*, CUfunction, int, size_t);
	CUresult (*launchKernelEx)(const CUlaunchConfig*, CUfunction, void**, void**);
	CUresult (*tensorMapEncodeTiled)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*, const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
	CUresult (*eventCreate)(CUevent*, unsigned int);
	CUresult (*eventRecord)(CUevent, CUstream);
	CUresult (*eventSynchronize)(CUevent);
	CUresult (*eventElapsedTime)(float*, CUevent, CUevent);
	CUresult (*eventDestroy)(CUevent);
} msa_drv;

static msa_drv msa_d;
static void* msa_lib;

// msa_open loads the driver. Returns 0, or 1 (library missing: *err holds
// dlerror), or 2 (a required entry point is missing: *err names it).
static int msa_open(const char* path, const char** err) {
	msa_lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!msa_lib) { *err = dlerror(); return 1; }
#define SYM(field, ...) do { \
		const char* names[] = {__VA_ARGS__, NULL}; \
		void* p = NULL; \
		for (int i = 0; names[i] && !p; i++) p = dlsym(msa_lib, names[i]); \
		if (!p) { *err = names[0]; return 2; } \
		memcpy(&msa_d.field, &p, sizeof p); \
	} while (0)
	SYM(init, "cuInit");
	SYM(driverGetVersion, "cuDriverGetVersion");
	SYM(getErrorName, "cuGetErrorName");
	SYM(getErrorString, "cuGetErrorString");
	SYM(deviceGetCount, "cuDeviceGetCount");
	SYM(deviceGet, "cuDeviceGet");
	SYM(deviceGetName, "cuDeviceGetName");
	SYM(deviceGetAttribute, "cuDeviceGetAttribute");
	SYM(deviceTotalMem, "cuDeviceTotalMem_v2");
	SYM(primaryCtxRetain, "cuDevicePrimaryCtxRetain");
	SYM(primaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease");
	SYM(ctxSetCurrent, "cuCtxSetCurrent");
	SYM(ctxGetCurrent, "cuCtxGetCurrent");
	SYM(ctxGetDevice, "cuCtxGetDevice");
	SYM(ctxGetId, "cuCtxGetId");
	SYM(ctxSynchronize, "cuCtxSynchronize");
	SYM(memAlloc, "cuMemAlloc_v2");
	SYM(memFree, "cuMemFree_v2");
	SYM(memcpyHtoD, "cuMemcpyHtoD_v2");
	SYM(memcpyDtoH, "cuMemcpyDtoH_v2");
	SYM(memcpyDtoD, "cuMemcpyDtoD_v2");
	SYM(memsetD8, "cuMemsetD8_v2");
	SYM(memHostAlloc, "cuMemHostAlloc");
	SYM(memHostGetDevicePointer, "cuMemHostGetDevicePointer_v2");
	SYM(memFreeHost, "cuMemFreeHost");
	SYM(moduleLoadData, "cuModuleLoadData");
	SYM(moduleUnload, "cuModuleUnload");
	SYM(moduleGetFunction, "cuModuleGetFunction");
	SYM(moduleGetGlobal, "cuModuleGetGlobal_v2");
	SYM(funcSetAttribute, "cuFuncSetAttribute");
	SYM(funcGetAttribute, "cuFuncGetAttribute");
	SYM(occupancyMaxBlocks, "cuOccupancyMaxActiveBlocksPerMultiprocessor");
	SYM(launchKernelEx, "cuLaunchKernelEx");
	SYM(tensorMapEncodeTiled, "cuTensorMapEncodeTiled");
	SYM(eventCreate, "cuEventCreate");
	SYM(eventRecord, "cuEventRecord");
	SYM(eventSynchronize, "cuEventSynchronize");
	SYM(eventElapsedTime, "cuEventElapsedTime_v2", "cuEventElapsedTime");
	SYM(eventDestroy, "cuEventDestroy_v2", "cuEventDestroy");
#undef SYM
	return 0;
}

// Calls through a NULL entry point (the driver not opened) return
// CUDA_ERROR_NOT_INITIALIZED instead of crashing.
#define MSA_CALL(f, ...) ((f) ? (f)(__VA_ARGS__) : CUDA_ERROR_NOT_INITIALIZED)
#define MSA_CALL0(f) ((f) ? (f)() : CUDA_ERROR_NOT_INITIALIZED)

static CUresult msa_init(void) { return MSA_CALL(msa_d.init, 0); }
static CUresult msa_driver_version(int* v) { return MSA_CALL(msa_d.driverGetVersion, v); }
static const char* msa_error_name(CUresult r) {
	const char* s = NULL;
	if (msa_d.getErrorName == NULL || msa_d.getErrorName(r, &s) != CUDA_SUCCESS) return NULL;
	return s;
}
static const char* msa_error_string(CUresult r) {
	const char* s = NULL;
	if (msa_d.getErrorString == NULL || msa_d.getErrorString(r, &s) != CUDA_SUCCESS) return NULL;
	return s;
}
static CUresult msa_device_count(int* n) { return MSA_CALL(msa_d.deviceGetCount, n); }
static CUresult msa_device_get(CUdevice* d, int i) { return MSA_CALL(msa_d.deviceGet, d, i); }
static CUresult msa_device_name(char* s, int n, CUdevice d) { return MSA_CALL(msa_d.deviceGetName, s, n, d); }
static CUresult msa_device_attr(int* v, int a, CUdevice d) { return MSA_CALL(msa_d.deviceGetAttribute, v, (CUdevice_attribute)a, d); }
static CUresult msa_device_total_mem(size_t* v, CUdevice d) { return MSA_CALL(msa_d.deviceTotalMem, v, d); }
static CUresult msa_primary_retain(uintptr_t* c, CUdevice d) { CUcontext x = NULL; CUresult r = MSA_CALL(msa_d.primaryCtxRetain, &x, d); *c = (uintptr_t)x; return r; }
static CUresult msa_primary_release(CUdevice d) { return MSA_CALL(msa_d.primaryCtxRelease, d); }
static CUresult msa_ctx_set_current(uintptr_t c) { return MSA_CALL(msa_d.ctxSetCurrent, (CUcontext)c); }
static CUresult msa_ctx_get_current(uintptr_t* c) { CUcontext x = NULL; CUresult r = MSA_CALL(msa_d.ctxGetCurrent, &x); *c = (uintptr_t)x; return r; }
static CUresult msa_ctx_get_device(CUdevice* d) { return MSA_CALL(msa_d.ctxGetDevice, d); }
static CUresult msa_ctx_get_id(uintptr_t c, unsigned long long* id) { return MSA_CALL(msa_d.ctxGetId, (CUcontext)c, id); }
static CUresult msa_ctx_sync(void) { return MSA_CALL0(msa_d.ctxSynchronize); }
static CUresult msa_mem_alloc(CUdeviceptr* p, size_t n) { return MSA_CALL(msa_d.memAlloc, p, n); }
static CUresult msa_mem_free(CUdeviceptr p) { return MSA_CALL(msa_d.memFree, p); }
static CUresult msa_htod(CUdeviceptr d, const void* s, size_t n) { return MSA_CALL(msa_d.memcpyHtoD, d, s, n); }
static CUresult msa_dtoh(void* d, CUdeviceptr s, size_t n) { return MSA_CALL(msa_d.memcpyDtoH, d, s, n); }
static CUresult msa_dtod(CUdeviceptr d, CUdeviceptr s, size_t n) { return MSA_CALL(msa_d.memcpyDtoD, d, s, n); }
static CUresult msa_memset8(CUdeviceptr d, unsigned char v, size_t n) { return MSA_CALL(msa_d.memsetD8, d, v, n); }
static CUresult msa_host_alloc_mapped(void** p, size_t n) { return MSA_CALL(msa_d.memHostAlloc, p, n, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE); }
static CUresult msa_host_device_ptr(CUdeviceptr* d, void* p) { return MSA_CALL(msa_d.memHostGetDevicePointer, d, p, 0); }
static CUresult msa_free_host(void* p) { return MSA_CALL(msa_d.memFreeHost, p); }
static CUresult msa_module_global(CUdeviceptr* d, size_t* n, uintptr_t m, const char* name) { return MSA_CALL(msa_d.moduleGetGlobal, d, n, (CUmodule)m, name); }
static CUresult msa_module_load(uintptr_t* m, const void* img) { CUmodule x = NULL; CUresult r = MSA_CALL(msa_d.moduleLoadData, &x, img); *m = (uintptr_t)x; return r; }
static CUresult msa_module_unload(uintptr_t m) { return MSA_CALL(msa_d.moduleUnload, (CUmodule)m); }
static CUresult msa_module_function(uintptr_t* f, uintptr_t m, const char* name) { CUfunction x = NULL; CUresult r = MSA_CALL(msa_d.moduleGetFunction, &x, (CUmodule)m, name); *f = (uintptr_t)x; return r; }
static CUresult msa_func_set_attr(uintptr_t f, int a, int v) { return MSA_CALL(msa_d.funcSetAttribute, (CUfunction)f, (CUfunction_attribute)a, v); }
static CUresult msa_func_get_attr(int* v, int a, uintptr_t f) { return MSA_CALL(msa_d.funcGetAttribute, v, (CUfunction_attribute)a, (CUfunction)f); }
static CUresult msa_occupancy(int* n, uintptr_t f, int threads, size_t smem) { return MSA_CALL(msa_d.occupancyMaxBlocks, n, (CUfunction)f, threads, smem); }

// msa_launch launches f with cuLaunchKernelEx; cluster dims of 0 mean no
// cluster attribute. params holds nparams pointers to the argument values.
static CUresult msa_launch(uintptr_t f, unsigned gx, unsigned gy, unsigned gz,
		unsigned bx, unsigned by, unsigned bz, unsigned smem,
		unsigned cx, unsigned cy, unsigned cz, void** params) {
	CUlaunchConfig cfg;
	CUlaunchAttribute attr[1];
	memset(&cfg, 0, sizeof cfg);
	memset(attr, 0, sizeof attr);
	cfg.gridDimX = gx; cfg.gridDimY = gy; cfg.gridDimZ = gz;
	cfg.blockDimX = bx; cfg.blockDimY = by; cfg.blockDimZ = bz;
	cfg.sharedMemBytes = smem;
	cfg.hStream = NULL;
	if (cx > 0) {
		attr[0].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
		attr[0].value.clusterDim.x = cx;
		attr[0].value.clusterDim.y = cy;
		attr[0].value.clusterDim.z = cz;
		cfg.attrs = attr;
		cfg.numAttrs = 1;
	}
	return MSA_CALL(msa_d.launchKernelEx, &cfg, (CUfunction)f, params, NULL);
}

typedef struct {
	cuuint64_t dims[5];
	cuuint64_t strides[5];
	cuuint32_t box[5];
	cuuint32_t estrides[5];
} msa_tmap_args;

// msa_tmap_encode encodes into 128-byte aligned C memory and copies the map
// to out (128 bytes).
static CUresult msa_tmap_encode(unsigned char* out, int dtype, unsigned rank, uint64_t addr,
		msa_tmap_args a, int swizzle, int l2, int oob) {
	CUtensorMap* m = (CUtensorMap*)aligned_alloc(128, sizeof(CUtensorMap));
	if (!m) return CUDA_ERROR_OUT_OF_MEMORY;
	CUresult r = MSA_CALL(msa_d.tensorMapEncodeTiled, m, (CUtensorMapDataType)dtype, rank, (void*)(uintptr_t)addr,
		a.dims, a.strides, a.box, a.estrides, CU_TENSOR_MAP_INTERLEAVE_NONE,
		(CUtensorMapSwizzle)swizzle, (CUtensorMapL2promotion)l2, (CUtensorMapFloatOOBfill)oob);
	memcpy(out, m, sizeof(CUtensorMap));
	free(m);
	return r;
}

static CUresult msa_event_create(uintptr_t* e) { CUevent x = NULL; CUresult r = MSA_CALL(msa_d.eventCreate, &x, CU_EVENT_DEFAULT); *e = (uintptr_t)x; return r; }
static CUresult msa_event_record(uintptr_t e) { return MSA_CALL(msa_d.eventRecord, (CUevent)e, NULL); }
static CUresult msa_event_sync(uintptr_t e) { return MSA_CALL(msa_d.eventSynchronize, (CUevent)e); }
static CUresult msa_event_elapsed(float* ms, uintptr_t a, uintptr_t b) { return MSA_CALL(msa_d.eventElapsedTime, ms, (CUevent)a, (CUevent)b); }
static CUresult msa_event_destroy(uintptr_t e) { return MSA_CALL(msa_d.eventDestroy, (CUevent)e); }

static int msa_tensor_map_size(void) { return (int)sizeof(CUtensorMap); }
static int msa_tensor_map_align(void) { return (int)_Alignof(CUtensorMap); }
*/
import "C"

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"
)

// Library is the file name Open loads (the NVIDIA driver's soname).
const Library = "libcuda.so.1"

// ErrNoDriver is wrapped by every error of Open that means the machine has
// no usable NVIDIA driver (library missing, incomplete or cuInit failing).
var ErrNoDriver = errors.New("no NVIDIA driver")

// Result is a CUresult code.
type Result int

// Error is a failed driver call.
type Error struct {
	Call string // the driver function, e.g. "cuMemAlloc"
	Code Result // the CUresult it returned
}

// Error formats the call, the code and the driver's name and description.
func (e *Error) Error() string {
	name, desc := "", ""
	if loaded() {
		if s := C.msa_error_name(C.CUresult(e.Code)); s != nil {
			name = C.GoString(s)
		}
		if s := C.msa_error_string(C.CUresult(e.Code)); s != nil {
			desc = C.GoString(s)
		}
	}
	switch {
	case name != "" && desc != "":
		return fmt.Sprintf("%s: %s (%d): %s", e.Call, name, int(e.Code), desc)
	case name != "":
		return fmt.Sprintf("%s: %s (%d)", e.Call, name, int(e.Code))
	}
	return fmt.Sprintf("%s: CUDA error %d", e.Call, int(e.Code))
}

// Result codes the callers test for.
const (
	Success  Result = 0
	NotFound Result = 500 // CUDA_ERROR_NOT_FOUND (cuModuleGetFunction)
)

// IsNotFound reports whether err is a driver CUDA_ERROR_NOT_FOUND.
func IsNotFound(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == NotFound
}

func check(call string, r C.CUresult) error {
	if r == C.CUDA_SUCCESS {
		return nil
	}
	return &Error{Call: call, Code: Result(r)}
}

var (
	openOnce sync.Once
	openErr  error
	openOK   bool
	openMu   sync.Mutex
)

func loaded() bool {
	openMu.Lock()
	defer openMu.Unlock()
	return openOK
}

// Open loads libcuda.so.1, resolves every entry point this package uses and
// calls cuInit(0). It runs once per process; later calls return the first
// result. Its errors wrap ErrNoDriver and fit on one line.
func Open() error {
	openOnce.Do(func() {
		if !headerOK() {
			openErr = fmt.Errorf("driver: CUtensorMap is %d bytes, %d-byte aligned in the cuda.h of this build: expected %d bytes, alignment dividing %d",
				int(C.msa_tensor_map_size()), int(C.msa_tensor_map_align()), TensorMapBytes, argAlign)
			return
		}
		lib := C.CString(Library)
		defer C.free(unsafe.Pointer(lib))
		var msg *C.char
		switch C.msa_open(lib, &msg) {
		case 1:
			openErr = fmt.Errorf("%w: %s not found (dlopen: %s)", ErrNoDriver, Library, C.GoString(msg))
			return
		case 2:
			openErr = fmt.Errorf("%w: %s lacks %s (driver older than CUDA 12.0)", ErrNoDriver, Library, C.GoString(msg))
			return
		}
		openMu.Lock()
		openOK = true
		openMu.Unlock()
		if err := check("cuInit", C.msa_init()); err != nil {
			openErr = fmt.Errorf("%w: %v", ErrNoDriver, err)
		}
	})
	return openErr
}

// DriverVersion is the CUDA version the driver supports, 1000*major +
// 10*minor (13000 for CUDA 13.0).
func DriverVersion() (int, error) {
	var v C.int
	err := check("cuDriverGetVersion", C.msa_driver_version(&v))
	return int(v), err
}

// Device is a CUdevice ordinal.
type Device int

// DeviceCount is the number of CUDA devices.
func DeviceCount() (int, error) {
	var n C.int
	err := check("cuDeviceGetCount", C.msa_device_count(&n))
	return int(n), err
}

// GetDevice returns device i.
func GetDevice(i int) (Device, error) {
	var d C.CUdevice
	err := check("cuDeviceGet", C.msa_device_get(&d, C.int(i)))
	return Device(d), err
}

// Name is the device's marketing name.
func (d Device) Name() (string, error) {
	buf := make([]byte, 256)
	if err := check("cuDeviceGetName", C.msa_device_name((*C.char)(unsafe.Pointer(&buf[0])), C.int(len(buf)), C.CUdevice(d))); err != nil {
		return "", err
	}
	n := 0
	for n < len(buf) && buf[n] != 0 {
		n++
	}
	return string(buf[:n]), nil
}

// Attr is a CUdevice_attribute.
type Attr int

// Device attributes used by this module.
const (
	AttrClockRateKHz         Attr = C.CU_DEVICE_ATTRIBUTE_CLOCK_RATE
	AttrMultiprocessorCount  Attr = C.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
	AttrMemoryClockRateKHz   Attr = C.CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE
	AttrMemoryBusWidthBits   Attr = C.CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH
	AttrComputeCapMajor      Attr = C.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
	AttrComputeCapMinor      Attr = C.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR
	AttrMaxSharedPerBlockOpt Attr = C.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
	AttrL2CacheSizeBytes     Attr = C.CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE
)

// Attribute returns the value of attribute a.
func (d Device) Attribute(a Attr) (int, error) {
	var v C.int
	err := check("cuDeviceGetAttribute", C.msa_device_attr(&v, C.int(a), C.CUdevice(d)))
	return int(v), err
}

// ComputeCapability returns the major and minor compute capability.
func (d Device) ComputeCapability() (major, minor int, err error) {
	if major, err = d.Attribute(AttrComputeCapMajor); err != nil {
		return 0, 0, err
	}
	minor, err = d.Attribute(AttrComputeCapMinor)
	return major, minor, err
}

// TotalMem is the device memory in bytes.
func (d Device) TotalMem() (int64, error) {
	var v C.size_t
	err := check("cuDeviceTotalMem", C.msa_device_total_mem(&v, C.CUdevice(d)))
	return int64(v), err
}

// Context is a CUcontext handle.
type Context uintptr

// RetainPrimaryContext retains the device's primary context.
func (d Device) RetainPrimaryContext() (Context, error) {
	var c C.uintptr_t
	err := check("cuDevicePrimaryCtxRetain", C.msa_primary_retain(&c, C.CUdevice(d)))
	return Context(c), err
}

// ReleasePrimaryContext releases the reference RetainPrimaryContext took.
func (d Device) ReleasePrimaryContext() error {
	return check("cuDevicePrimaryCtxRelease", C.msa_primary_release(C.CUdevice(d)))
}

// SetCurrent binds c to the calling OS thread.
func SetCurrent(c Context) error {
	return check("cuCtxSetCurrent", C.msa_ctx_set_current(C.uintptr_t(c)))
}

// CurrentContext is the context bound to the calling OS thread (0 if none).
func CurrentContext() (Context, error) {
	var c C.uintptr_t
	err := check("cuCtxGetCurrent", C.msa_ctx_get_current(&c))
	return Context(c), err
}

// ContextID is the driver's unique ID of context c (cuCtxGetId): unlike the
// handle, which a later context may reuse, an ID is never reused within a
// process.
func ContextID(c Context) (uint64, error) {
	var id C.ulonglong
	err := check("cuCtxGetId", C.msa_ctx_get_id(C.uintptr_t(c), &id))
	return uint64(id), err
}

// CurrentContextID is the ID of the context current on the calling thread
// (an error when none is).
func CurrentContextID() (uint64, error) {
	c, err := CurrentContext()
	if err != nil {
		return 0, err
	}
	if c == 0 {
		return 0, errors.New("cuCtxGetCurrent: no current CUDA context")
	}
	return ContextID(c)
}

// CurrentDevice is the device of the current context.
func CurrentDevice() (Device, error) {
	var d C.CUdevice
	err := check("cuCtxGetDevice", C.msa_ctx_get_device(&d))
	return Device(d), err
}

// Synchronize waits for all work of the current context (cuCtxSynchronize).
func Synchronize() error { return check("cuCtxSynchronize", C.msa_ctx_sync()) }

// DevicePtr is a CUdeviceptr.
type DevicePtr uint64

// MemAlloc allocates n bytes of device memory.
func MemAlloc(n int64) (DevicePtr, error) {
	var p C.CUdeviceptr
	err := check("cuMemAlloc", C.msa_mem_alloc(&p, C.size_t(n)))
	return DevicePtr(p), err
}

// MemFree frees device memory from MemAlloc.
func MemFree(p DevicePtr) error { return check("cuMemFree", C.msa_mem_free(C.CUdeviceptr(p))) }

// MemcpyHtoD copies n bytes from host memory src to dst.
func MemcpyHtoD(dst DevicePtr, src unsafe.Pointer, n int64) error {
	return check("cuMemcpyHtoD", C.msa_htod(C.CUdeviceptr(dst), src, C.size_t(n)))
}

// MemcpyDtoH copies n bytes from device memory src to host memory dst.
func MemcpyDtoH(dst unsafe.Pointer, src DevicePtr, n int64) error {
	return check("cuMemcpyDtoH", C.msa_dtoh(dst, C.CUdeviceptr(src), C.size_t(n)))
}

// MemcpyDtoD copies n bytes between device buffers.
func MemcpyDtoD(dst, src DevicePtr, n int64) error {
	return check("cuMemcpyDtoD", C.msa_dtod(C.CUdeviceptr(dst), C.CUdeviceptr(src), C.size_t(n)))
}

// MemsetD8 sets n bytes at p to v.
func MemsetD8(p DevicePtr, v byte, n int64) error {
	return check("cuMemsetD8", C.msa_memset8(C.CUdeviceptr(p), C.uchar(v), C.size_t(n)))
}

// Module is a CUmodule.
type Module uintptr

// LoadData loads a module (cubin, fatbin or PTX) from memory.
func LoadData(image []byte) (Module, error) {
	if len(image) == 0 {
		return 0, fmt.Errorf("cuModuleLoadData: empty image")
	}
	// The driver reads the image during the call only; a C copy keeps the
	// Go slice out of cgo's pointer rules and gives it C alignment.
	buf := C.CBytes(image)
	defer C.free(buf)
	var m C.uintptr_t
	err := check("cuModuleLoadData", C.msa_module_load(&m, buf))
	return Module(m), err
}

// Unload unloads the module.
func (m Module) Unload() error {
	return check("cuModuleUnload", C.msa_module_unload(C.uintptr_t(m)))
}

// Function is a CUfunction.
type Function uintptr

// Function looks up kernel name; a missing kernel gives an error for which
// IsNotFound is true.
func (m Module) Function(name string) (Function, error) {
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	var f C.uintptr_t
	err := check("cuModuleGetFunction("+name+")", C.msa_module_function(&f, C.uintptr_t(m), cs))
	return Function(f), err
}

// Global is the device address and size of the module's __device__
// variable name; a missing symbol gives an error for which IsNotFound is
// true.
func (m Module) Global(name string) (DevicePtr, int64, error) {
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	var d C.CUdeviceptr
	var n C.size_t
	err := check("cuModuleGetGlobal("+name+")", C.msa_module_global(&d, &n, C.uintptr_t(m), cs))
	return DevicePtr(d), int64(n), err
}

// HostMapped is page-locked host memory mapped into the device's address
// space (cuMemHostAlloc with DEVICEMAP | PORTABLE): the host reads and
// writes it at Host, kernels at Device. It stays readable by the host when
// the context has failed (a kernel trapped), which device memory does not.
type HostMapped struct {
	Host   unsafe.Pointer // C memory: never moved by the Go runtime
	Device DevicePtr
	Size   int
}

// AllocHostMapped allocates n zeroed bytes of host-mapped memory; free it
// with FreeHostMapped.
func AllocHostMapped(n int) (HostMapped, error) {
	if n <= 0 {
		return HostMapped{}, fmt.Errorf("cuMemHostAlloc: size %d, want > 0", n)
	}
	var p unsafe.Pointer
	if err := check("cuMemHostAlloc", C.msa_host_alloc_mapped(&p, C.size_t(n))); err != nil {
		return HostMapped{}, err
	}
	C.memset(p, 0, C.size_t(n))
	var d C.CUdeviceptr
	if err := check("cuMemHostGetDevicePointer", C.msa_host_device_ptr(&d, p)); err != nil {
		return HostMapped{}, errors.Join(err, check("cuMemFreeHost", C.msa_free_host(p)))
	}
	return HostMapped{Host: p, Device: DevicePtr(d), Size: n}, nil
}

// FreeHostMapped frees memory of AllocHostMapped (a zero HostMapped is a
// no-op).
func FreeHostMapped(h HostMapped) error {
	if h.Host == nil {
		return nil
	}
	return check("cuMemFreeHost", C.msa_free_host(h.Host))
}

// Function attributes used by this module.
const (
	FuncAttrMaxThreadsPerBlock    = C.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK
	FuncAttrSharedSizeBytes       = C.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES
	FuncAttrNumRegs               = C.CU_FUNC_ATTRIBUTE_NUM_REGS
	FuncAttrMaxDynamicSharedBytes = C.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
	// FuncAttrPreferredSharedCarveout is the percentage of the unified L1 /
	// shared storage a kernel prefers as shared memory (a hint).
	FuncAttrPreferredSharedCarveout = C.CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT
)

// SetAttribute sets a CUfunction_attribute.
func (f Function) SetAttribute(attr, v int) error {
	return check("cuFuncSetAttribute", C.msa_func_set_attr(C.uintptr_t(f), C.int(attr), C.int(v)))
}

// Attribute reads a CUfunction_attribute.
func (f Function) Attribute(attr int) (int, error) {
	var v C.int
	err := check("cuFuncGetAttribute", C.msa_func_get_attr(&v, C.int(attr), C.uintptr_t(f)))
	return int(v), err
}

// ActiveBlocksPerSM is how many CTAs of f with threads threads and smem
// bytes of dynamic shared memory can be resident on one SM
// (cuOccupancyMaxActiveBlocksPerMultiprocessor).
func (f Function) ActiveBlocksPerSM(threads, smem int) (int, error) {
	var n C.int
	err := check("cuOccupancyMaxActiveBlocksPerMultiprocessor", C.msa_occupancy(&n, C.uintptr_t(f), C.int(threads), C.size_t(smem)))
	return int(n), err
}

// Dim3 is a grid, block or cluster shape.
type Dim3 struct {
	X uint32 // innermost extent
	Y uint32 // second extent
	Z uint32 // outermost extent
}

// LaunchConfig is the shape of one launch; Cluster.X == 0 means no cluster.
type LaunchConfig struct {
	Grid        Dim3   // CTAs per grid dimension
	Block       Dim3   // threads per CTA dimension
	Cluster     Dim3   // CTAs per cluster dimension (SM90+); X == 0: no cluster
	SharedBytes uint32 // dynamic shared memory per CTA, bytes
}

// Launch starts f on the legacy default stream with cuLaunchKernelEx.
// args[i] holds the bytes of kernel parameter i, of any size (a parameter
// block or a CUtensorMap set passed by value); each is copied into C memory
// at a 128-byte aligned address for the call.
func Launch(f Function, cfg LaunchConfig, args ...[]byte) error {
	n := len(args)
	total := 0
	offs := make([]int, n)
	for i, a := range args {
		offs[i] = total
		total += (len(a) + argAlign - 1) &^ (argAlign - 1)
	}
	total = max(total, argAlign)
	size := total + 8*max(n, 1)
	mem := C.aligned_alloc(argAlign, C.size_t((size+argAlign-1)&^(argAlign-1)))
	if mem == nil {
		return fmt.Errorf("cuLaunchKernelEx: out of host memory for %d parameter bytes", total)
	}
	defer C.free(mem)
	buf := unsafe.Slice((*byte)(mem), size)
	ptrs := unsafe.Slice((**C.void)(unsafe.Pointer(&buf[total])), max(n, 1))
	for i, a := range args {
		copy(buf[offs[i]:], a)
		ptrs[i] = (*C.void)(unsafe.Pointer(&buf[offs[i]]))
	}
	g, b, c := cfg.Grid, cfg.Block, cfg.Cluster
	r := C.msa_launch(C.uintptr_t(f), C.uint(g.X), C.uint(g.Y), C.uint(g.Z),
		C.uint(b.X), C.uint(b.Y), C.uint(b.Z), C.uint(cfg.SharedBytes),
		C.uint(c.X), C.uint(c.Y), C.uint(c.Z), (*unsafe.Pointer)(unsafe.Pointer(&ptrs[0])))
	return check("cuLaunchKernelEx", r)
}

// Bytes returns the memory of *v as a byte slice (for Launch arguments:
// parameter structs without Go pointers).
func Bytes[T any](v *T) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(v)), unsafe.Sizeof(*v))
}

// TensorMapBytes is sizeof(CUtensorMap). Its alignment is 64 bytes in the
// CUDA 12 cuda.h and 128 in CUDA 13's; Launch copies every argument to a
// 128-byte aligned address, which satisfies both.
const TensorMapBytes = 128

// argAlign is the alignment of each kernel argument's host copy in Launch.
const argAlign = 128

// headerOK reports whether the cuda.h this package was compiled against
// has the CUtensorMap this package assumes (checked by the tests and by
// Open, which fails instead of encoding into a wrong-sized map).
func headerOK() bool {
	return C.msa_tensor_map_size() == TensorMapBytes && argAlign%int(C.msa_tensor_map_align()) == 0
}

// TensorMap is an encoded CUtensorMap (opaque bytes).
type TensorMap [TensorMapBytes]byte

// Tensor map enums (cuda.h values).
const (
	TMapUint8    = C.CU_TENSOR_MAP_DATA_TYPE_UINT8
	TMapBFloat16 = C.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16

	SwizzleNone = C.CU_TENSOR_MAP_SWIZZLE_NONE
	Swizzle32B  = C.CU_TENSOR_MAP_SWIZZLE_32B
	Swizzle64B  = C.CU_TENSOR_MAP_SWIZZLE_64B
	Swizzle128B = C.CU_TENSOR_MAP_SWIZZLE_128B

	L2Promotion128B = C.CU_TENSOR_MAP_L2_PROMOTION_L2_128B
	OOBFillNone     = C.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE
)

// EncodeTiled encodes a tiled tensor map (interleave none) with
// cuTensorMapEncodeTiled. dims and box are innermost first; strides are the
// byte strides of dims[1:]. Arguments are passed as given: validate them
// first (package cuda's TensorMapSpec.Validate).
func EncodeTiled(dtype int, addr DevicePtr, dims, strides []uint64, box, elemStrides []uint32, swizzle, l2, oob int) (TensorMap, error) {
	var out TensorMap
	rank := len(dims)
	if rank < 1 || rank > 5 || len(strides) != rank-1 || len(box) != rank || len(elemStrides) != rank {
		return out, fmt.Errorf("cuTensorMapEncodeTiled: rank %d with %d strides, %d box dims, %d element strides", rank, len(strides), len(box), len(elemStrides))
	}
	var a C.msa_tmap_args
	for i := 0; i < rank; i++ {
		a.dims[i] = C.cuuint64_t(dims[i])
		a.box[i] = C.cuuint32_t(box[i])
		a.estrides[i] = C.cuuint32_t(elemStrides[i])
		if i < rank-1 {
			a.strides[i] = C.cuuint64_t(strides[i])
		}
	}
	r := C.msa_tmap_encode((*C.uchar)(unsafe.Pointer(&out[0])), C.int(dtype), C.uint(rank), C.uint64_t(addr), a, C.int(swizzle), C.int(l2), C.int(oob))
	if err := check("cuTensorMapEncodeTiled", r); err != nil {
		return TensorMap{}, err
	}
	return out, nil
}

// Event is a CUevent.
type Event uintptr

// NewEvent creates an event.
func NewEvent() (Event, error) {
	var e C.uintptr_t
	err := check("cuEventCreate", C.msa_event_create(&e))
	return Event(e), err
}

// Record records e on the legacy default stream.
func (e Event) Record() error { return check("cuEventRecord", C.msa_event_record(C.uintptr_t(e))) }

// Synchronize waits for e.
func (e Event) Synchronize() error {
	return check("cuEventSynchronize", C.msa_event_sync(C.uintptr_t(e)))
}

// Destroy destroys e.
func (e Event) Destroy() error { return check("cuEventDestroy", C.msa_event_destroy(C.uintptr_t(e))) }

// ElapsedMS is the time in milliseconds between two recorded events.
func ElapsedMS(start, end Event) (float32, error) {
	var ms C.float
	err := check("cuEventElapsedTime", C.msa_event_elapsed(&ms, C.uintptr_t(start), C.uintptr_t(end)))
	return float32(ms), err
}
