//go:build cuda

package comm

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

// The NCCL entry points used here, declared from NCCL's C ABI (nccl.h is
// not needed to build): results and data types are ints, communicators and
// streams pointers, the unique id a 128-byte struct passed by value.
typedef struct { char internal[128]; } msa_nccl_id;

static struct {
	int (*getVersion)(int*);
	int (*getUniqueId)(msa_nccl_id*);
	int (*commInitRank)(void**, int, msa_nccl_id, int);
	int (*commDestroy)(void*);
	int (*commAbort)(void*);
	int (*commGetAsyncError)(void*, int*);
	const char* (*getErrorString)(int);
	int (*allGather)(const void*, void*, size_t, int, void*, void*);
	int (*send)(const void*, size_t, int, int, void*, void*);
	int (*recv)(void*, size_t, int, int, void*, void*);
	int (*groupStart)(void);
	int (*groupEnd)(void);
} msa_nccl;

// msa_nccl_open loads the library; it returns NULL or what failed.
static const char* msa_nccl_open(const char* path) {
	void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) return dlerror();
#define SYM(f, name) if (!(*(void**)(&msa_nccl.f) = dlsym(h, name))) return name;
	SYM(getVersion, "ncclGetVersion")
	SYM(getUniqueId, "ncclGetUniqueId")
	SYM(commInitRank, "ncclCommInitRank")
	SYM(commDestroy, "ncclCommDestroy")
	SYM(commAbort, "ncclCommAbort")
	SYM(commGetAsyncError, "ncclCommGetAsyncError")
	SYM(getErrorString, "ncclGetErrorString")
	SYM(allGather, "ncclAllGather")
	SYM(send, "ncclSend")
	SYM(recv, "ncclRecv")
	SYM(groupStart, "ncclGroupStart")
	SYM(groupEnd, "ncclGroupEnd")
#undef SYM
	return NULL;
}

enum { msa_ncclUint8 = 1 };

static int msa_nccl_version(int* v) { return msa_nccl.getVersion(v); }
static int msa_nccl_unique_id(msa_nccl_id* id) { return msa_nccl.getUniqueId(id); }
static int msa_nccl_init(uintptr_t* c, int n, msa_nccl_id id, int r) {
	void* x = NULL;
	int e = msa_nccl.commInitRank(&x, n, id, r);
	*c = (uintptr_t)x;
	return e;
}
static int msa_nccl_destroy(uintptr_t c) { return msa_nccl.commDestroy((void*)c); }
static int msa_nccl_abort(uintptr_t c) { return msa_nccl.commAbort((void*)c); }
static int msa_nccl_async_error(uintptr_t c, int* e) { return msa_nccl.commGetAsyncError((void*)c, e); }
static const char* msa_nccl_error_string(int e) { return msa_nccl.getErrorString(e); }
// Collectives run on the legacy default stream (NULL): the synchronous
// device-to-host copy that follows waits for them.
static int msa_nccl_all_gather(uint64_t s, uint64_t r, size_t n, uintptr_t c) {
	return msa_nccl.allGather((const void*)(uintptr_t)s, (void*)(uintptr_t)r, n, msa_ncclUint8, (void*)c, NULL);
}
static int msa_nccl_group_start(void) { return msa_nccl.groupStart(); }
static int msa_nccl_group_end(void) { return msa_nccl.groupEnd(); }
static int msa_nccl_send(uint64_t b, size_t n, int peer, uintptr_t c) {
	return msa_nccl.send((const void*)(uintptr_t)b, n, msa_ncclUint8, peer, (void*)c, NULL);
}
static int msa_nccl_recv(uint64_t b, size_t n, int peer, uintptr_t c) {
	return msa_nccl.recv((void*)(uintptr_t)b, n, msa_ncclUint8, peer, (void*)c, NULL);
}
*/
import "C"

import (
	"fmt"
	"runtime"
	"sync"
	"time"
	"unsafe"

	"github.com/sparseattn/msa/cuda/driver"
)

// NCCLLibrary is the shared library NewNCCL loads at run time.
const NCCLLibrary = "libnccl.so.2"

var ncclOnce struct {
	sync.Once
	err error
}

// ncclOpen loads NCCL and the CUDA driver once per process; the error
// names the missing library and how to install it.
func ncclOpen() error {
	ncclOnce.Do(func() {
		if err := driver.Open(); err != nil {
			ncclOnce.err = fmt.Errorf("comm: NCCL needs the CUDA driver: %w", err)
			return
		}
		lib := C.CString(NCCLLibrary)
		defer C.free(unsafe.Pointer(lib))
		if msg := C.msa_nccl_open(lib); msg != nil {
			ncclOnce.err = fmt.Errorf("comm: cannot load %s (%s): install NCCL 2.7 or newer (pip install nvidia-nccl-cu12, then add its nvidia/nccl/lib to LD_LIBRARY_PATH; or the libnccl2 package)",
				NCCLLibrary, C.GoString(msg))
		}
	})
	return ncclOnce.err
}

func ncclError(call string, e C.int) error {
	return fmt.Errorf("%s: NCCL error %d: %s", call, int(e), C.GoString(C.msa_nccl_error_string(e)))
}

// NCCLUniqueID loads NCCL and returns a new group id. One rank creates it
// and hands it to the others out of band (over an MPI world's AllGather, a
// shared file, the job launcher's environment) before they call NewNCCL.
func NCCLUniqueID() ([128]byte, error) {
	var id [128]byte
	if err := ncclOpen(); err != nil {
		return id, err
	}
	var cid C.msa_nccl_id
	if e := C.msa_nccl_unique_id(&cid); e != 0 {
		return id, ncclError("ncclGetUniqueId", e)
	}
	copy(id[:], C.GoBytes(unsafe.Pointer(&cid.internal[0]), 128))
	return id, nil
}

// ncclComm is one GPU's rank of an NCCL group. Its CUDA and NCCL calls run
// on one goroutine locked to an OS thread with the device's primary
// context current; a collective copies the host buffers to device staging
// buffers, runs NCCL and copies the result back. A collective that does
// not finish within the timeout aborts the NCCL communicator
// (ncclCommAbort) and returns ErrTimeout.
type ncclComm struct {
	rank, size int
	timeout    time.Duration
	comm       C.uintptr_t
	ctx        driver.Context
	dev        driver.Device
	jobs       chan func() error
	done       chan error
	failed     error
	aborted    bool // ncclCommAbort was called: the communicator is gone
	// device staging buffers (owned by the worker goroutine)
	dsend, drecv driver.DevicePtr
	nsend, nrecv int64
}

// NewNCCL joins rank rank of an NCCL group of nranks, bootstrapped by id
// (NCCLUniqueID), on CUDA device device: one rank per GPU. timeout bounds
// each collective (0: DefaultTimeout). A missing libnccl.so.2 or CUDA
// driver is an error naming it.
func NewNCCL(id [128]byte, nranks, rank, device int, timeout time.Duration) (Comm, error) {
	if nranks < 1 || rank < 0 || rank >= nranks {
		return nil, fmt.Errorf("comm.NewNCCL: rank: expected 0 <= rank < nranks = %d, got %d", nranks, rank)
	}
	if timeout < 0 {
		return nil, fmt.Errorf("comm.NewNCCL: timeout: expected >= 0 (0: %v), got %v", DefaultTimeout, timeout)
	}
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	if err := ncclOpen(); err != nil {
		return nil, err
	}
	c := &ncclComm{rank: rank, size: nranks, timeout: timeout, jobs: make(chan func() error), done: make(chan error, 1)}
	started := make(chan error, 1)
	go c.worker(id, device, started)
	if err := <-started; err != nil {
		return nil, err
	}
	return c, nil
}

// worker owns the OS thread, the context and the communicator.
func (c *ncclComm) worker(id [128]byte, device int, started chan<- error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	err := func() error {
		dev, err := driver.GetDevice(device)
		if err != nil {
			return fmt.Errorf("comm.NewNCCL: device %d: %w", device, err)
		}
		ctx, err := dev.RetainPrimaryContext()
		if err != nil {
			return fmt.Errorf("comm.NewNCCL: %w", err)
		}
		if err := driver.SetCurrent(ctx); err != nil {
			return fmt.Errorf("comm.NewNCCL: %w", err)
		}
		c.dev, c.ctx = dev, ctx
		var cid C.msa_nccl_id
		C.memcpy(unsafe.Pointer(&cid.internal[0]), unsafe.Pointer(&id[0]), 128)
		if e := C.msa_nccl_init(&c.comm, C.int(c.size), cid, C.int(c.rank)); e != 0 {
			return ncclError("ncclCommInitRank", e)
		}
		return nil
	}()
	started <- err
	if err != nil {
		return
	}
	for job := range c.jobs {
		c.done <- job()
	}
}

// run hands a job to the worker and waits for it within the timeout.
func (c *ncclComm) run(op string, job func() error) error {
	if c.failed != nil {
		return &Error{op, c.rank, c.failed}
	}
	t := time.NewTimer(c.timeout)
	defer t.Stop()
	select {
	case c.jobs <- job:
	case <-t.C:
		return c.fail(op, ErrTimeout)
	}
	select {
	case err := <-c.done:
		if err != nil {
			return c.fail(op, err)
		}
		return nil
	case <-t.C:
		// Unblocks the worker's pending NCCL kernel; the communicator is
		// unusable afterwards.
		c.abortComm()
		return c.fail(op, fmt.Errorf("%w (%v; NCCL communicator aborted)", ErrTimeout, c.timeout))
	}
}

func (c *ncclComm) fail(op string, err error) error {
	c.failed = err
	return &Error{op, c.rank, err}
}

// reserve grows the device staging buffers (worker goroutine only).
func (c *ncclComm) reserve(nsend, nrecv int64) error {
	grow := func(p *driver.DevicePtr, have *int64, n int64) error {
		if n <= *have {
			return nil
		}
		if *have > 0 {
			if err := driver.MemFree(*p); err != nil {
				return err
			}
			*have = 0
		}
		q, err := driver.MemAlloc(n)
		if err != nil {
			return err
		}
		*p, *have = q, n
		return nil
	}
	if err := grow(&c.dsend, &c.nsend, max(nsend, 1)); err != nil {
		return err
	}
	return grow(&c.drecv, &c.nrecv, max(nrecv, 1))
}

// asyncError reports an error NCCL found while running a collective.
func (c *ncclComm) asyncError() error {
	var e C.int
	if r := C.msa_nccl_async_error(c.comm, &e); r != 0 {
		return ncclError("ncclCommGetAsyncError", r)
	}
	if e != 0 {
		return ncclError("NCCL collective", e)
	}
	return nil
}

func (c *ncclComm) Rank() int { return c.rank }
func (c *ncclComm) Size() int { return c.size }

func (c *ncclComm) AllGather(send, recv []byte) error {
	const op = "AllGather"
	if err := checkAllGather(send, recv, c.size); err != nil {
		return c.fail(op, err)
	}
	if len(send) == 0 {
		return nil
	}
	return c.run(op, func() error {
		n := int64(len(send))
		if err := c.reserve(n, n*int64(c.size)); err != nil {
			return err
		}
		if err := driver.MemcpyHtoD(c.dsend, unsafe.Pointer(&send[0]), n); err != nil {
			return err
		}
		if e := C.msa_nccl_all_gather(C.uint64_t(c.dsend), C.uint64_t(c.drecv), C.size_t(n), c.comm); e != 0 {
			return ncclError("ncclAllGather", e)
		}
		if err := driver.MemcpyDtoH(unsafe.Pointer(&recv[0]), c.drecv, int64(len(recv))); err != nil {
			return err
		}
		return c.asyncError()
	})
}

// AllToAllV runs grouped ncclSend / ncclRecv pairs. NCCL cannot see a
// length mismatch (a receive takes what it asks for): callers agree on the
// sizes first, as context-parallel prefill does.
func (c *ncclComm) AllToAllV(send, recv [][]byte) error {
	const op = "AllToAllV"
	if err := checkAllToAllV(send, recv, c.size, c.rank); err != nil {
		return c.fail(op, err)
	}
	copy(recv[c.rank], send[c.rank])
	return c.run(op, func() error {
		var ns, nr int64
		for j := range send {
			if j != c.rank {
				ns += int64(len(send[j]))
				nr += int64(len(recv[j]))
			}
		}
		if err := c.reserve(ns, nr); err != nil {
			return err
		}
		off := int64(0)
		for j, b := range send {
			if j != c.rank && len(b) > 0 {
				if err := driver.MemcpyHtoD(c.dsend+driver.DevicePtr(off), unsafe.Pointer(&b[0]), int64(len(b))); err != nil {
					return err
				}
				off += int64(len(b))
			}
		}
		if e := C.msa_nccl_group_start(); e != 0 {
			return ncclError("ncclGroupStart", e)
		}
		so, ro := int64(0), int64(0)
		for j := 0; j < c.size; j++ {
			if j == c.rank {
				continue
			}
			if e := C.msa_nccl_send(C.uint64_t(c.dsend)+C.uint64_t(so), C.size_t(len(send[j])), C.int(j), c.comm); e != 0 {
				C.msa_nccl_group_end()
				return ncclError("ncclSend", e)
			}
			if e := C.msa_nccl_recv(C.uint64_t(c.drecv)+C.uint64_t(ro), C.size_t(len(recv[j])), C.int(j), c.comm); e != 0 {
				C.msa_nccl_group_end()
				return ncclError("ncclRecv", e)
			}
			so += int64(len(send[j]))
			ro += int64(len(recv[j]))
		}
		if e := C.msa_nccl_group_end(); e != 0 {
			return ncclError("ncclGroupEnd", e)
		}
		ro = 0
		for j, b := range recv {
			if j != c.rank && len(b) > 0 {
				if err := driver.MemcpyDtoH(unsafe.Pointer(&b[0]), c.drecv+driver.DevicePtr(ro), int64(len(b))); err != nil {
					return err
				}
				ro += int64(len(b))
			}
		}
		return c.asyncError()
	})
}

// Abort aborts the NCCL communicator: the other ranks' pending collectives
// fail (NCCL reports the broken group) or time out.
func (c *ncclComm) Abort(err error) {
	if err == nil {
		err = fmt.Errorf("rank %d aborted", c.rank)
	}
	if c.failed == nil {
		c.failed = fmt.Errorf("%w: %v", ErrAborted, err)
	}
	c.abortComm()
}

// abortComm calls ncclCommAbort once.
func (c *ncclComm) abortComm() {
	if !c.aborted {
		c.aborted = true
		C.msa_nccl_abort(c.comm)
	}
}

// Close destroys the communicator and frees the staging buffers.
func (c *ncclComm) Close() error {
	if c.failed == ErrClosed {
		return nil
	}
	aborted := c.aborted
	c.failed = ErrClosed
	var err error
	job := func() error {
		for _, p := range []struct {
			ptr driver.DevicePtr
			n   int64
		}{{c.dsend, c.nsend}, {c.drecv, c.nrecv}} {
			if p.n > 0 {
				if e := driver.MemFree(p.ptr); e != nil && err == nil {
					err = e
				}
			}
		}
		if !aborted {
			if e := C.msa_nccl_destroy(c.comm); e != 0 && err == nil {
				err = ncclError("ncclCommDestroy", e)
			}
		}
		return err
	}
	select {
	case c.jobs <- job:
		if e := <-c.done; e != nil {
			err = e
		}
	case <-time.After(c.timeout):
		err = fmt.Errorf("comm: Close: the NCCL worker did not finish its last collective within %v", c.timeout)
	}
	close(c.jobs)
	return err
}
