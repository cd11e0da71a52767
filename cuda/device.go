//go:build cuda

package cuda

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"github.com/sparseattn/msa/cuda/driver"
)

// Device serves one GPU's primary context on a dedicated OS thread: Do runs
// a function there with the context current. It is the Runner of programs
// that use package cuda without Gorgonia (the GPU check); it needs only
// libcuda.so.1.
type Device struct {
	Ordinal int    // the CUDA device index given to OpenDevice
	Name    string // the driver's device name
	Major   int    // compute capability, major (9 for sm_90)
	Minor   int    // compute capability, minor
	Memory  int64  // total device memory, bytes
	SMs     int    // streaming multiprocessors
	work    chan func()
	done    chan struct{}
	closed  bool
}

// OpenDevice opens the driver and retains device i's primary context on a
// new locked OS thread. Its errors wrap driver.ErrNoDriver when the machine
// has no usable driver.
func OpenDevice(i int) (*Device, error) {
	if err := driver.Open(); err != nil {
		return nil, err
	}
	n, err := driver.DeviceCount()
	if err != nil {
		return nil, err
	}
	if i < 0 || i >= n {
		return nil, fmt.Errorf("cuda: device %d: the driver reports %d CUDA devices", i, n)
	}
	d := &Device{Ordinal: i, work: make(chan func()), done: make(chan struct{})}
	ready := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer close(d.done)
		dev, err := driver.GetDevice(i)
		var ctx driver.Context
		if err == nil {
			ctx, err = dev.RetainPrimaryContext()
		}
		if err == nil {
			if err = driver.SetCurrent(ctx); err != nil {
				err = errors.Join(err, dev.ReleasePrimaryContext())
			}
		}
		if err == nil {
			d.Name, _ = dev.Name()
			d.Major, d.Minor, err = dev.ComputeCapability()
			d.Memory, _ = dev.TotalMem()
			d.SMs, _ = dev.Attribute(driver.AttrMultiprocessorCount)
		}
		ready <- err
		if err != nil {
			return
		}
		for f := range d.work {
			f()
		}
		_ = driver.Synchronize()
		_ = dev.ReleasePrimaryContext()
	}()
	if err := <-ready; err != nil {
		return nil, err
	}
	return d, nil
}

// Do runs fn on the device's thread with its context current; a panic in
// fn becomes an error.
func (d *Device) Do(fn func() error) error {
	if d.closed {
		return errors.New("cuda: Device used after Close")
	}
	errc := make(chan error, 1)
	d.work <- func() {
		defer func() {
			if r := recover(); r != nil {
				errc <- fmt.Errorf("cuda: panic on the device thread: %v", r)
			}
		}()
		errc <- fn()
	}
	return <-errc
}

// Close releases the primary context and ends the thread.
func (d *Device) Close() {
	if d.closed {
		return
	}
	d.closed = true
	close(d.work)
	<-d.done
}

// Alloc allocates n bytes (at least 16) of device memory, filled with 0xff
// so that unwritten output shows up as NaN.
func (d *Device) Alloc(n int) (uint64, error) {
	var p driver.DevicePtr
	err := d.Do(func() error {
		var err error
		if p, err = driver.MemAlloc(int64(max(n, 16))); err != nil {
			return err
		}
		return driver.MemsetD8(p, 0xff, int64(max(n, 16)))
	})
	return uint64(p), err
}

// Put allocates len(b) bytes and copies b there.
func (d *Device) Put(b []byte) (uint64, error) {
	p, err := d.Alloc(len(b))
	if err != nil || len(b) == 0 {
		return p, err
	}
	return p, d.Do(func() error { return driver.MemcpyHtoD(driver.DevicePtr(p), unsafe.Pointer(&b[0]), int64(len(b))) })
}

// Get copies n bytes at p to the host.
func (d *Device) Get(p uint64, n int) ([]byte, error) {
	b := make([]byte, n)
	if n == 0 {
		return b, nil
	}
	return b, d.Do(func() error { return driver.MemcpyDtoH(unsafe.Pointer(&b[0]), driver.DevicePtr(p), int64(n)) })
}

// Free frees device memory from Alloc / Put (0 is ignored).
func (d *Device) Free(ptrs ...uint64) error {
	return d.Do(func() error {
		var errs []error
		for _, p := range ptrs {
			if p != 0 {
				errs = append(errs, driver.MemFree(driver.DevicePtr(p)))
			}
		}
		return errors.Join(errs...)
	})
}

// Time runs f once to warm up, then reps times between two events, and
// returns the mean milliseconds per run.
func (d *Device) Time(reps int, f func() error) (float64, error) {
	if err := f(); err != nil {
		return 0, err
	}
	var ms float32
	if err := d.Do(driver.Synchronize); err != nil {
		return 0, err
	}
	// Events are recorded on the device thread around the runs (the runs
	// themselves go through Do too, on the same thread and stream).
	var start, end driver.Event
	if err := d.Do(func() error {
		var err error
		if start, err = driver.NewEvent(); err != nil {
			return err
		}
		if end, err = driver.NewEvent(); err != nil {
			return err
		}
		return start.Record()
	}); err != nil {
		return 0, err
	}
	defer d.Do(func() error { return errors.Join(start.Destroy(), end.Destroy()) })
	for i := 0; i < reps; i++ {
		if err := f(); err != nil {
			return 0, err
		}
	}
	err := d.Do(func() error {
		if err := end.Record(); err != nil {
			return err
		}
		if err := end.Synchronize(); err != nil {
			return err
		}
		var err error
		ms, err = driver.ElapsedMS(start, end)
		return err
	})
	return float64(ms) / float64(reps), err
}
