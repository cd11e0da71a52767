//go:build cuda

package graphtest

import (
	"fmt"
	"reflect"
	"runtime"
	"testing"
	"unsafe"

	"gorgonia.org/cu"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// deviceFloats copies a value the CUDA machine left in device memory to
// the host (synchronously, with the engine's context current) as float32.
func deviceFloats(m G.VM, v G.Value) ([]float32, error) {
	cm, ok := m.(G.CUDAMachine)
	if !ok || len(cm.Engines()) == 0 {
		return nil, fmt.Errorf("machine %T has no CUDA engine", m)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := cu.PushCurrentCtx(cm.Engines()[0].Context().CUDAContext()); err != nil {
		return nil, err
	}
	defer cu.PopCurrentCtx()
	n := v.Shape().TotalSize()
	h := tensor.New(tensor.WithShape(v.Shape().Clone()...), tensor.WithBacking(reflect.MakeSlice(reflect.SliceOf(v.Dtype().Type), n, n).Interface()))
	if size := int64(n) * int64(v.Dtype().Size()); size > 0 {
		if err := cu.MemcpyDtoH(unsafe.Pointer(&h.Header.Raw[0]), cu.DevicePtr(v.Uintptr()), size); err != nil {
			return nil, err
		}
	}
	return floats(h)
}

// TestCUDABlockMatchesCPU runs the block on Gorgonia's CUDA machine (the
// ops' CUDADo: GPU kernels for the attention nodes, the plans on the host)
// and compares every output with the CPU graph on the same inputs (the
// decode planned for the CPU there: the results must not depend on the
// split). Run twice: the second run reuses the nodes' device buffers.
func TestCUDABlockMatchesCPU(t *testing.T) {
	dev := cu.Device(0)
	sms, err := dev.Attribute(cu.MultiprocessorCount)
	must(t, err)
	name, _ := dev.Name()
	t.Logf("GPU %s, %d SMs", name, sms)
	in := newCBInputs(1)

	cpu := buildCUDABlock(t, in, 0)
	hv, err := runOnHost(cpu.g)
	must(t, err)

	gpu := buildCUDABlock(t, in, sms)
	m := G.NewTapeMachine(gpu.g)
	defer m.Close()
	for run := 0; run < 2; run++ {
		must(t, m.RunAll())
		for _, c := range []struct {
			what     string
			cpu, gpu *G.Node
			tol      float64
			lse      bool
		}{
			{"prefill O", cpu.out, gpu.out, gpuTolO, false}, {"prefill LSE", cpu.lse, gpu.lse, gpuTolLSE, true},
			{"decode O", cpu.dout, gpu.dout, gpuTolO, false}, {"decode LSE", cpu.dlse, gpu.dlse, gpuTolLSE, true},
			{"decode O float32", cpu.dout32, gpu.dout32, gpuTolO, false},
		} {
			want, err := floats(hv[c.cpu].(*tensor.Dense))
			must(t, err)
			got, err := deviceFloats(m, c.gpu.Value())
			must(t, err)
			check := closeO
			if c.lse {
				check = closeLSE
			}
			if err := check(want, got, c.tol); err != nil {
				t.Errorf("run %d, %s: GPU graph vs CPU graph: %v", run, c.what, err)
			}
		}
		m.Reset()
	}
}
