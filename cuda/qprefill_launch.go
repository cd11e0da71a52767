//go:build cuda

package cuda

import (
	"unsafe"

	"github.com/sparseattn/msa/cuda/driver"
	"github.com/sparseattn/msa/kernels/cuda/fatbin"
	"github.com/sparseattn/msa/kernels/plan"
)

// prepQueryPrefill returns the query-major launch of a sparse prefill on
// the query-major kernel of family arch (QFwdPlan): one kernel over the
// QPlan's tiles writing ca.Out, ca.LSE and ca.TLSE (the
// partial buffers and the window are not used). why is the reason when the
// query-major kernel cannot run (the caller then runs the KV-major path);
// err is a bad input, refused with the KV-major path's errors.
func (k *Kernels) prepQueryPrefill(fa *FwdArgs, ca *CombineArgs, csr *plan.CSR, s *plan.FwdSchedule, cuQ []int32, arch Arch) (steps []step, why string, err error) {
	if _, err := newFwdKernelParams(fa, csr, s, FwdPlanPtrs{}); err != nil {
		return nil, "", err
	}
	if k.path != PathAuto {
		return nil, "the portable path is selected (SetPath)", nil
	}
	qp, err := BuildQPlan(csr, s, cuQ, fa.Hkv, fa.Hq/fa.Hkv)
	if err != nil {
		return nil, "", err
	}
	if err := qp.Validate(cuQ, nil, fa.Hkv, fa.Hq/fa.Hkv, fa.BlkKV); err != nil {
		return nil, "", err
	}
	tp, why := QFwdPlan(arch, fa, qp.NumTiles())
	if why != "" {
		return nil, why, nil
	}
	if _, sm90 := fatbin.SM90QFwdTilesPerCTA[tp.Name]; sm90 && !aligned(ca.Out, 16) {
		// the sm90 kernel stores O 16 bytes at a time; the sm80 one 4
		tp, _ = QFwdPlan(ArchSM80, fa, qp.NumTiles())
	}
	if name := qfwdKernelFor(tp.Name, k.fp8pv); name != tp.Name {
		// same grid, parameters and tensor maps; the launch table's geometry
		if _, ok := k.tc[name]; ok {
			tp.Name = name
		} else {
			k.fallback[name] = "not in the fatbin (" + FP8PVEnv + "=fp8 runs the widened-V kernel)"
		}
	}
	var dev QPlanPtrs
	for _, u := range []struct {
		role string
		dst  *uint64
		v    []int32
	}{{"qfwd.tiles", &dev.Tiles, qp.Tiles}, {"qfwd.tile_ptr", &dev.TilePtr, qp.TilePtr}, {"qfwd.blocks", &dev.Blocks, qp.Blocks}} {
		if *u.dst, err = k.uploadInt32(u.role, u.v); err != nil {
			return nil, "", err
		}
	}
	var mp unsafe.Pointer
	if len(qp.Masks) > 0 {
		mp = unsafe.Pointer(&qp.Masks[0])
	}
	if dev.Masks, err = k.upload("qfwd.masks", mp, int64(len(qp.Masks))*8); err != nil {
		return nil, "", err
	}
	p, err := newQFwdKernelParams(fa, ca, csr, s, qp, dev)
	if err != nil {
		return nil, "", err
	}
	if qp.NumTiles() == 0 {
		return nil, "", nil // no query rows: nothing to launch
	}
	st, ok, why := k.tcStep(&tp, driver.Bytes(&p))
	if !ok {
		return nil, why, nil
	}
	return []step{st}, "", nil
}

// SetFP8PV selects how the sm_90a query-major fp8 kernel runs P.V in later
// sparse prefills (Load sets it from MSA_CUDA_FP8PV, default widen).
// FP8PVFP8 falls back to the widened-V kernel, recording why in Fallbacks,
// where the fp8pv kernel is missing from the fatbin.
func (k *Kernels) SetFP8PV(m FP8PV) {
	k.mu.Lock()
	k.fp8pv = m
	k.mu.Unlock()
}

// FP8PV is the FP8 P.V mode of later calls.
func (k *Kernels) FP8PV() FP8PV {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.fp8pv
}
