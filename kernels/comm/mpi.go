//go:build mpi

package comm

/*
#cgo pkg-config: ompi-c
#include <mpi.h>
#include <stdlib.h>

// The MPI handles of OpenMPI are macros over its own symbols: the Go side
// sees only these wrappers and the opaque MPI_Comm / MPI_Request.
static int msa_init(int *provided) {
	int done = 0;
	MPI_Initialized(&done);
	if (done) {
		return MPI_Query_thread(provided);
	}
	return MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, provided);
}
static int msa_world(MPI_Comm *c, int *rank, int *size) {
	int e = MPI_Comm_dup(MPI_COMM_WORLD, c);
	if (e != MPI_SUCCESS) return e;
	e = MPI_Comm_set_errhandler(*c, MPI_ERRORS_RETURN);
	if (e != MPI_SUCCESS) return e;
	e = MPI_Comm_rank(*c, rank);
	if (e != MPI_SUCCESS) return e;
	return MPI_Comm_size(*c, size);
}
static int msa_iallgather(void *s, int n, void *r, MPI_Comm c, MPI_Request *q) {
	return MPI_Iallgather(s, n, MPI_BYTE, r, n, MPI_BYTE, c, q);
}
static int msa_isend(void *b, int n, int to, MPI_Comm c, MPI_Request *q) {
	return MPI_Isend(b, n, MPI_BYTE, to, 53, c, q);
}
static int msa_irecv(void *b, int n, int from, MPI_Comm c, MPI_Request *q) {
	return MPI_Irecv(b, n, MPI_BYTE, from, 53, c, q);
}
// msa_testall tests n requests; when all are complete, counts[i] is the
// number of bytes request i received (meaningful for receives).
static int msa_testall(int n, MPI_Request *q, int *flag, int *counts) {
	MPI_Status *st = malloc(sizeof(MPI_Status) * (n > 0 ? n : 1));
	if (!st) return MPI_ERR_NO_MEM;
	int e = MPI_Testall(n, q, flag, st);
	if (e == MPI_SUCCESS && *flag) {
		for (int i = 0; i < n; i++) MPI_Get_count(&st[i], MPI_BYTE, &counts[i]);
	}
	free(st);
	return e;
}
static void msa_free(MPI_Comm *c) { MPI_Comm_free(c); }
static int msa_finalize(void) {
	int f = 0;
	MPI_Finalized(&f);
	return f ? MPI_SUCCESS : MPI_Finalize();
}
static void msa_error_string(int e, char *buf, int *n) { MPI_Error_string(e, buf, n); }
static int msa_max_error_string(void) { return MPI_MAX_ERROR_STRING; }
static int msa_serialized(void) { return MPI_THREAD_SERIALIZED; }
*/
import "C"

import (
	"fmt"
	"math"
	"runtime"
	"sync"
	"time"
	"unsafe"
)

// mpiComm is a rank of an MPI job (a duplicate of MPI_COMM_WORLD, errors
// returned, not fatal). Collectives are non-blocking MPI calls polled until
// they complete or the timeout passes, so a peer that died or never joins
// gives ErrTimeout instead of a hang. Buffers are pinned while MPI holds
// them; after a timeout they stay pinned (MPI may still write them) and the
// Comm is unusable.
type mpiComm struct {
	mu      sync.Mutex
	c       C.MPI_Comm
	rank    int
	size    int
	timeout time.Duration
	failed  error
	pin     runtime.Pinner
	reqs    []C.MPI_Request
	counts  []C.int
	want    []int
	pending bool // a collective timed out with its requests still active
}

// closeWait is how long Close waits for the requests of a collective that
// timed out (a late peer may still complete them) before giving up on
// finalising MPI.
const closeWait = 10 * time.Second

var mpiOnce struct {
	sync.Mutex
	world *mpiComm
}

// MPIWorld initialises MPI (once per process, thread level
// MPI_THREAD_SERIALIZED) and returns this process's rank of the job
// mpirun started; every later call returns the same Comm until it is
// closed. timeout bounds each collective (0: DefaultTimeout). Close
// finalises MPI: a process can use one world only.
func MPIWorld(timeout time.Duration) (Comm, error) {
	mpiOnce.Lock()
	defer mpiOnce.Unlock()
	if timeout < 0 {
		return nil, fmt.Errorf("comm.MPIWorld: timeout: expected >= 0 (0: %v), got %v", DefaultTimeout, timeout)
	}
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	if mpiOnce.world != nil {
		mpiOnce.world.timeout = timeout
		return mpiOnce.world, nil
	}
	var provided C.int
	if e := C.msa_init(&provided); e != C.MPI_SUCCESS {
		return nil, fmt.Errorf("comm.MPIWorld: MPI_Init_thread: %s", mpiError(e))
	}
	if provided < C.msa_serialized() {
		return nil, fmt.Errorf("comm.MPIWorld: the MPI library provides thread level %d, MPI_THREAD_SERIALIZED (%d) is needed: goroutines move between OS threads", provided, C.msa_serialized())
	}
	w := &mpiComm{timeout: timeout}
	var rank, size C.int
	if e := C.msa_world(&w.c, &rank, &size); e != C.MPI_SUCCESS {
		return nil, fmt.Errorf("comm.MPIWorld: duplicating MPI_COMM_WORLD: %s", mpiError(e))
	}
	w.rank, w.size = int(rank), int(size)
	mpiOnce.world = w
	return w, nil
}

func mpiError(e C.int) string {
	buf := make([]byte, int(C.msa_max_error_string())+1)
	var n C.int
	C.msa_error_string(e, (*C.char)(unsafe.Pointer(&buf[0])), &n)
	return fmt.Sprintf("MPI error %d: %s", int(e), string(buf[:n]))
}

func (c *mpiComm) Rank() int { return c.rank }
func (c *mpiComm) Size() int { return c.size }

// intLen checks that a buffer length fits MPI's int count.
func intLen(arg string, n int) error {
	if n > math.MaxInt32 {
		return argError(arg, fmt.Sprintf("at most %d bytes (MPI counts are int)", math.MaxInt32), n)
	}
	return nil
}

// ptr returns a pointer to b's first byte, pinned until the collective
// completes (nil for an empty buffer).
func (c *mpiComm) ptr(b []byte) unsafe.Pointer {
	if len(b) == 0 {
		return nil
	}
	c.pin.Pin(&b[0])
	return unsafe.Pointer(&b[0])
}

func (c *mpiComm) AllGather(send, recv []byte) error {
	const op = "AllGather"
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failed != nil {
		return &Error{op, c.rank, c.failed}
	}
	if err := checkAllGather(send, recv, c.size); err != nil {
		return c.fail(op, err)
	}
	if err := intLen("send", len(send)); err != nil {
		return c.fail(op, err)
	}
	if len(send) == 0 {
		return nil
	}
	c.reqs = append(c.reqs[:0], nil)
	if e := C.msa_iallgather(c.ptr(send), C.int(len(send)), c.ptr(recv), c.c, &c.reqs[0]); e != C.MPI_SUCCESS {
		c.pin.Unpin()
		return c.fail(op, fmt.Errorf("MPI_Iallgather: %s", mpiError(e)))
	}
	c.want = append(c.want[:0], -1)
	return c.wait(op)
}

func (c *mpiComm) AllToAllV(send, recv [][]byte) error {
	const op = "AllToAllV"
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failed != nil {
		return &Error{op, c.rank, c.failed}
	}
	if err := checkAllToAllV(send, recv, c.size, c.rank); err != nil {
		return c.fail(op, err)
	}
	for j := range send {
		if err := intLen(fmt.Sprintf("send[%d]", j), len(send[j])); err != nil {
			return c.fail(op, err)
		}
		if err := intLen(fmt.Sprintf("recv[%d]", j), len(recv[j])); err != nil {
			return c.fail(op, err)
		}
	}
	copy(recv[c.rank], send[c.rank])
	c.reqs, c.want = c.reqs[:0], c.want[:0]
	// Every peer pair exchanges a message, empty or not, so a length
	// mismatch is seen by the receiver.
	for j := 0; j < c.size; j++ {
		if j == c.rank {
			continue
		}
		c.reqs = append(c.reqs, nil)
		if e := C.msa_irecv(c.ptr(recv[j]), C.int(len(recv[j])), C.int(j), c.c, &c.reqs[len(c.reqs)-1]); e != C.MPI_SUCCESS {
			return c.fail(op, fmt.Errorf("MPI_Irecv from rank %d: %s", j, mpiError(e)))
		}
		c.want = append(c.want, len(recv[j]))
	}
	for j := 0; j < c.size; j++ {
		if j == c.rank {
			continue
		}
		c.reqs = append(c.reqs, nil)
		if e := C.msa_isend(c.ptr(send[j]), C.int(len(send[j])), C.int(j), c.c, &c.reqs[len(c.reqs)-1]); e != C.MPI_SUCCESS {
			return c.fail(op, fmt.Errorf("MPI_Isend to rank %d: %s", j, mpiError(e)))
		}
		c.want = append(c.want, -1)
	}
	return c.wait(op)
}

// wait polls the pending requests until all complete (then unpins the
// buffers and checks the received lengths) or the timeout passes. It
// yields between polls, sleeping from the first millisecond on, so a
// waiting rank does not hold a core its peers on the same machine need.
func (c *mpiComm) wait(op string) error {
	n := len(c.reqs)
	if n == 0 {
		return nil
	}
	if cap(c.counts) < n {
		c.counts = make([]C.int, n)
	}
	c.counts = c.counts[:n]
	start := time.Now()
	for {
		var flag C.int
		if e := C.msa_testall(C.int(n), &c.reqs[0], &flag, &c.counts[0]); e != C.MPI_SUCCESS {
			return c.fail(op, fmt.Errorf("MPI_Testall: %s", mpiError(e)))
		}
		if flag != 0 {
			break
		}
		el := time.Since(start)
		if el > c.timeout {
			c.pending = true // the requests and pins stay for Close
			return c.fail(op, fmt.Errorf("%w (%v)", ErrTimeout, c.timeout))
		}
		if el < time.Millisecond {
			runtime.Gosched()
		} else {
			time.Sleep(100 * time.Microsecond)
		}
	}
	c.pin.Unpin()
	for i, w := range c.want {
		if w >= 0 && int(c.counts[i]) != w {
			return c.fail(op, fmt.Errorf("a peer sent %d bytes, this rank expected %d", int(c.counts[i]), w))
		}
	}
	return nil
}

// fail marks the Comm unusable. Peers blocked in the same collective
// return ErrTimeout after their timeout (MPI cannot interrupt them).
func (c *mpiComm) fail(op string, err error) error {
	c.failed = err
	return &Error{op, c.rank, err}
}

// Abort marks this rank's Comm failed. It does not call MPI_Abort (which
// ends every process of the job): the other ranks' collectives return
// ErrTimeout after their timeout, and the program decides how to exit.
func (c *mpiComm) Abort(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil {
		err = fmt.Errorf("rank %d aborted", c.rank)
	}
	if c.failed == nil {
		c.failed = fmt.Errorf("%w: %v", ErrAborted, err)
	}
}

// Close frees the duplicated communicator and finalises MPI. After a
// timed-out collective it first waits up to closeWait for that
// collective's requests (MPI forbids finalising with active ones); if they
// do not complete it returns an error and leaves MPI unfinalised: the job
// has lost a rank, and the program should exit with an error.
func (c *mpiComm) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failed == ErrClosed {
		return nil
	}
	c.failed = ErrClosed
	mpiOnce.Lock()
	mpiOnce.world = nil
	mpiOnce.Unlock()
	if c.pending {
		deadline := time.Now().Add(closeWait)
		for {
			var flag C.int
			if e := C.msa_testall(C.int(len(c.reqs)), &c.reqs[0], &flag, &c.counts[0]); e != C.MPI_SUCCESS || flag != 0 {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("comm: Close: a timed-out collective is still pending after %v; MPI is not finalised", closeWait)
			}
			time.Sleep(time.Millisecond)
		}
		c.pin.Unpin()
		c.pending = false
	}
	C.msa_free(&c.c)
	if e := C.msa_finalize(); e != C.MPI_SUCCESS {
		return fmt.Errorf("comm: MPI_Finalize: %s", mpiError(e))
	}
	return nil
}
