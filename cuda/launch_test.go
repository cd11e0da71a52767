//go:build cuda

package cuda

import (
	"errors"
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
