//go:build cuda

package cuda

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/sparseattn/msa/cuda/driver"
)

// TestNoDriver: on a machine without an NVIDIA driver, Load and OpenDevice
// return an error wrapping driver.ErrNoDriver on one line (no exit, no
// panic); with a driver they succeed.
func TestNoDriver(t *testing.T) {
	err := driver.Open()
	if err == nil {
		t.Skip("an NVIDIA driver is present")
	}
	if !errors.Is(err, driver.ErrNoDriver) {
		t.Fatalf("Open: %v does not wrap ErrNoDriver", err)
	}
	for _, f := range []func() error{
		func() error { _, err := Load(nil); return err },
		func() error { _, err := OpenDevice(0); return err },
		func() error { return Synchronize(nil) },
	} {
		err := f()
		if !errors.Is(err, driver.ErrNoDriver) {
			t.Errorf("got %v, want ErrNoDriver", err)
		}
		for _, r := range err.Error() {
			if r == '\n' {
				t.Errorf("multi-line error %q", err)
			}
		}
	}
}

// TestKernelsClosedConcurrent: the methods of a Kernels are safe for
// concurrent use with a nil Runner (one mutex; run with -race), Close is
// idempotent, and a closed Kernels refuses work instead of touching freed
// device memory.
func TestKernelsClosedConcurrent(t *testing.T) {
	k := &Kernels{closed: true}
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 50; j++ {
				if err := k.SparseForward(nil, &FwdArgs{}, nil, nil); err == nil {
					t.Error("SparseForward on a closed Kernels")
				}
				if err := k.Decode(nil, &DecodeArgs{}, nil); err == nil {
					t.Error("Decode on a closed Kernels")
				}
				k.SetPath(PathPortable)
				_ = k.LastKernels()
				_ = k.Fallbacks()
				_ = k.TensorCoreKernels()
				if err := k.Close(nil); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
}

// TestCloseFreesAll: Close tries every buffer even when some frees fail,
// returns all failures joined, forgets the buffers and the tensor maps,
// and a second Close does nothing.
func TestCloseFreesAll(t *testing.T) {
	var freed []driver.DevicePtr
	k := &Kernels{
		bufs:  map[string]*devBuf{"a": {ptr: 0x100, size: 16}, "b": {ptr: 0x200, size: 16}, "c": {ptr: 0x300, size: 16}},
		tmaps: map[string]driver.TensorMap{"m": {}},
		memFree: func(p driver.DevicePtr) error {
			freed = append(freed, p)
			if p != 0x200 {
				return fmt.Errorf("free %#x failed", uint64(p))
			}
			return nil
		},
	}
	err := k.Close(nil)
	if len(freed) != 3 {
		t.Fatalf("freed %d of 3 buffers", len(freed))
	}
	if err == nil || !strings.Contains(err.Error(), "0x100") || !strings.Contains(err.Error(), "0x300") {
		t.Fatalf("Close: %v, want both failures", err)
	}
	if len(k.bufs) != 0 || len(k.tmaps) != 0 {
		t.Error("buffers or tensor maps kept after Close")
	}
	if err := k.Close(nil); err != nil || len(freed) != 3 {
		t.Errorf("second Close: %v, %d frees", err, len(freed))
	}
}
