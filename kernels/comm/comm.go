// Package comm is the transport of context-parallel attention: a group of
// ranks (processes, GPUs, or goroutines in tests) that exchange fixed-size
// byte buffers. The attention and merge arithmetic stay in package op;
// a Comm only moves bytes.
//
// Implementations:
//
//   - NewLocal: goroutine ranks in one process over channels (tests, and
//     single-process runs of context-parallel code); always built.
//   - MPIWorld: the ranks of an MPI job (OpenMPI or any MPI-3 library),
//     through cgo, built with -tags mpi and started with mpirun.
//   - NCCL: one rank per GPU, libnccl.so.2 loaded at run time, built with
//     -tags cuda (nccl_cuda.go).
//
// Every failure is a Go error, never a process exit: bad arguments, a
// transport error, a peer that does not take part within the timeout
// (ErrTimeout), or a group that a rank has aborted (ErrAborted). After an
// error the Comm is unusable (a collective cannot be resumed half way):
// every later call returns an error too.
package comm

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"time"
	"unsafe"
)

// Comm is one rank's handle of a group of Size() ranks. Every rank calls
// the collectives in the same order with matching sizes; a Comm is not
// safe for concurrent use by several goroutines.
type Comm interface {
	// Rank is this rank's number in [0, Size()).
	Rank() int
	// Size is the number of ranks.
	Size() int
	// AllGather writes every rank's send, in rank order, to recv:
	// len(recv) must be Size()*len(send), and every rank passes the same
	// len(send).
	AllGather(send, recv []byte) error
	// AllToAllV sends send[j] to rank j and receives rank j's buffer for
	// this rank into recv[j] (len(send) == len(recv) == Size()); the
	// length of recv[j] must equal the length rank j sends (empty buffers
	// are allowed and move nothing). send[Rank()] is copied to recv[Rank()].
	AllToAllV(send, recv [][]byte) error
	// Abort marks the group failed with err: this rank's later calls, and
	// wherever the transport can reach them the other ranks' pending and
	// later calls, return an error wrapping ErrAborted and naming err.
	Abort(err error)
	// Close releases the rank's resources; later calls return an error.
	Close() error
}

// ErrTimeout is wrapped by the error of a collective that did not complete
// within the Comm's timeout (a peer failed or never called it).
var ErrTimeout = errors.New("comm: timed out waiting for the other ranks")

// ErrAborted is wrapped by the error of a call on a group that a rank has
// aborted.
var ErrAborted = errors.New("comm: group aborted")

// ErrClosed is wrapped by the error of a call on a closed Comm.
var ErrClosed = errors.New("comm: closed")

// DefaultTimeout bounds how long a collective waits for the other ranks.
const DefaultTimeout = 60 * time.Second

// Error is the error of a collective on one rank.
type Error struct {
	Op   string // the collective, e.g. "AllGather"
	Rank int    // the rank that reports it
	Err  error  // the cause (ErrTimeout, ErrAborted, an argument error, a transport error)
}

// Error formats "comm: Op on rank R: cause".
func (e *Error) Error() string { return fmt.Sprintf("comm: %s on rank %d: %v", e.Op, e.Rank, e.Err) }

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// argError reports a bad argument of a collective.
func argError(arg, expected string, got any) error {
	return fmt.Errorf("%s: expected %s, got %v", arg, expected, got)
}

// checkAllGather validates AllGather's buffers for a group of size n.
func checkAllGather(send, recv []byte, n int) error {
	if len(recv) != n*len(send) {
		return argError("recv", fmt.Sprintf("%d bytes (Size() = %d times len(send) = %d)", n*len(send), n, len(send)), len(recv))
	}
	return nil
}

// checkAllToAllV validates AllToAllV's buffer lists for a group of size n.
func checkAllToAllV(send, recv [][]byte, n, rank int) error {
	if len(send) != n {
		return argError("send", fmt.Sprintf("one buffer per rank (%d)", n), len(send))
	}
	if len(recv) != n {
		return argError("recv", fmt.Sprintf("one buffer per rank (%d)", n), len(recv))
	}
	if len(recv[rank]) != len(send[rank]) {
		return argError(fmt.Sprintf("recv[%d]", rank), fmt.Sprintf("len(send[%d]) = %d bytes", rank, len(send[rank])), len(recv[rank]))
	}
	return nil
}

// Bytes views a slice of fixed-size values (float32, int32, uint16-backed
// BF16, ...) as its bytes, without copying.
func Bytes[T any](x []T) []byte {
	if len(x) == 0 {
		return nil
	}
	var z T
	return unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), len(x)*int(unsafe.Sizeof(z)))
}

// MismatchError reports ranks that disagree on metadata: Groups lists the
// ranks sharing each distinct value, the group of rank 0 first. Every rank
// of the group builds the same error.
type MismatchError struct {
	What   string  // what was compared, e.g. "decode plan (B, Hq, Hkv, D, page size)"
	Groups [][]int // ranks per distinct digest
}

// Error names what differs and which ranks agree with which.
func (e *MismatchError) Error() string {
	parts := make([]string, len(e.Groups))
	for i, g := range e.Groups {
		parts[i] = fmt.Sprint(g)
	}
	return fmt.Sprintf("comm: ranks disagree on %s: ranks with equal values: %s", e.What, strings.Join(parts, ", "))
}

// Agree checks collectively that every rank passed the same data (hashed
// with SHA-256; only the 32-byte digests move). It returns nil on every
// rank when all agree and the same *MismatchError on every rank when they
// do not, so no rank runs on metadata the others do not share; a transport
// failure is returned as is.
func Agree(c Comm, what string, data []byte) error {
	d := sha256.Sum256(data)
	all := make([]byte, c.Size()*len(d))
	if err := c.AllGather(d[:], all); err != nil {
		return err
	}
	var groups [][]int
	var keys []string
	for r := 0; r < c.Size(); r++ {
		k := string(all[r*len(d) : (r+1)*len(d)])
		found := false
		for i := range keys {
			if keys[i] == k {
				groups[i] = append(groups[i], r)
				found = true
			}
		}
		if !found {
			keys, groups = append(keys, k), append(groups, []int{r})
		}
	}
	if len(groups) == 1 {
		return nil
	}
	return &MismatchError{What: what, Groups: groups}
}
