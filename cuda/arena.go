//go:build cuda

package cuda

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Arena collects the device buffers of one call or test case, so that
// setting up many arguments needs one error check and one release: each
// allocation or upload is recorded, the first error sticks (later calls do
// nothing and return 0), and Free releases every buffer recorded.
type Arena struct {
	dev  *Device
	ptrs []uint64
	err  error
}

// NewArena returns an empty arena on dev.
func NewArena(dev *Device) *Arena { return &Arena{dev: dev} }

// Device is the device the arena allocates on.
func (a *Arena) Device() *Device { return a.dev }

// Err is the first error an allocation or upload returned, or nil.
func (a *Arena) Err() error { return a.err }

// Alloc allocates n bytes of device memory (contents unspecified).
func (a *Arena) Alloc(n int) uint64 {
	if a.err != nil {
		return 0
	}
	return a.keep(a.dev.Alloc(n))
}

// keep records a new buffer p and the error of its allocation.
func (a *Arena) keep(p uint64, err error) uint64 {
	a.err = err
	a.ptrs = append(a.ptrs, p)
	return p
}

// Put uploads b to a new device buffer.
func (a *Arena) Put(b []byte) uint64 {
	if a.err != nil {
		return 0
	}
	return a.keep(a.dev.Put(b))
}

// PutI32 uploads v as little-endian int32 values.
func (a *Arena) PutI32(v []int32) uint64 {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(x))
	}
	return a.Put(b)
}

// PutF32 uploads one float32 (a scale read by a kernel).
func (a *Arena) PutF32(f float32) uint64 {
	return a.Put(binary.LittleEndian.AppendUint32(nil, math.Float32bits(f)))
}

// Free releases every buffer the arena recorded.
func (a *Arena) Free() error { return a.dev.Free(a.ptrs...) }

// CheckFiniteBF16 waits for dev's work and reads n BF16 values back from
// out: a timed run whose kernels wrote NaN or Inf (or nothing, where the
// buffer started as 0xff bytes, a NaN pattern) is an error, not a speed.
func CheckFiniteBF16(dev *Device, out uint64, n int) error {
	if err := Synchronize(dev); err != nil {
		return err
	}
	b, err := dev.Get(out, 2*n)
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		if binary.LittleEndian.Uint16(b[2*i:])&0x7f80 == 0x7f80 {
			return fmt.Errorf("output element %d is not finite after the timed runs", i)
		}
	}
	return nil
}
