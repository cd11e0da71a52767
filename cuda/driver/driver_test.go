//go:build cuda

package driver

import (
	"errors"
	"strings"
	"testing"
)

// TestWithoutDriver: on a machine without an NVIDIA driver Open fails with
// one line wrapping ErrNoDriver, and every entry point then returns an
// error instead of calling through a null pointer.
func TestWithoutDriver(t *testing.T) {
	if !headerOK() {
		t.Fatal("CUtensorMap of this cuda.h is not 128 bytes with an alignment dividing 128")
	}
	err := Open()
	if err == nil {
		t.Skip("an NVIDIA driver is present")
	}
	if !errors.Is(err, ErrNoDriver) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("Open: %q", err)
	}
	if err2 := Open(); err2 != err {
		t.Errorf("second Open: %v, want the first result", err2)
	}
	if _, err := DeviceCount(); err == nil {
		t.Error("DeviceCount without a driver")
	}
	if _, err := MemAlloc(16); err == nil {
		t.Error("MemAlloc without a driver")
	}
	if err := Synchronize(); err == nil {
		t.Error("Synchronize without a driver")
	}
	if _, err := CurrentContextID(); err == nil {
		t.Error("CurrentContextID without a driver")
	}
	if _, err := EncodeTiled(TMapBFloat16, 256, []uint64{64, 1}, []uint64{128}, []uint32{64, 1}, []uint32{1, 1}, Swizzle128B, L2Promotion128B, OOBFillNone); err == nil {
		t.Error("EncodeTiled without a driver")
	}
	if err := Launch(0, LaunchConfig{Grid: Dim3{1, 1, 1}, Block: Dim3{32, 1, 1}}, make([]byte, 232), make([]byte, 384)); err == nil {
		t.Error("Launch without a driver")
	}
	if h, err := AllocHostMapped(4); err == nil || h.Host != nil {
		t.Error("AllocHostMapped without a driver")
	}
	if _, err := AllocHostMapped(0); err == nil || !strings.Contains(err.Error(), "size 0") {
		t.Errorf("AllocHostMapped(0): %v", err)
	}
	if err := FreeHostMapped(HostMapped{}); err != nil {
		t.Errorf("FreeHostMapped of nothing: %v", err)
	}
	if _, _, err := Module(0).Global("msa_sm100_wait_word"); err == nil {
		t.Error("Module.Global without a driver")
	}
	var e *Error
	if _, err := DeviceCount(); !errors.As(err, &e) || e.Call != "cuDeviceGetCount" {
		t.Errorf("error %v is not a *driver.Error of cuDeviceGetCount", err)
	}
}
