package cuda

import (
	"fmt"
	"strings"
)

// The SM100 kernels bound every mbarrier wait (kernels/cuda/sm100/
// sm100_ptx.cuh, WaitClock): a wait that has not completed after 10 s
// stores a site code and traps. The trap kills the context, so no device
// global can be read afterwards; the kernels also store the code in a
// host-mapped word the launch layer sets per module
// (msa_sm100_wait_word), which the host reads after the launch (or the
// next synchronising call) fails. The code is family << 16 | site << 8 |
// parity (sm100_ptx.cuh wait_code); the sites are the barrier indices of
// the kernels' layouts (sm100_layout.cuh FwdLayout / DecLayout, checked by
// TestSM100WaitSites).

// SM100WaitSymbol is the device global (a pointer) through which an SM100
// kernel finds the host-mapped word its timed-out wait writes.
const SM100WaitSymbol = "msa_sm100_wait_word"

// sm100WaitTimeoutS is kWaitTimeoutNs of sm100_ptx.cuh, in seconds.
const sm100WaitTimeoutS = 10

// waitSite is one barrier of an SM100 kernel family: its index in the
// layout (bar, the .cuh constant; slots consecutive indices from index)
// and what completing it means.
type waitSite struct {
	family  uint32 // 1 fwd, 2 decode, 3 qfwd (sm100_ptx.cuh WaitKernel)
	bar     string // the layout's constant (expression) giving its index
	index   uint32
	slots   uint32
	meaning string
}

// sm100WaitFamilies names the kernel families of WaitKernel.
var sm100WaitFamilies = map[uint32]string{1: "fwd", 2: "decode", 3: "qfwd"}

// sm100WaitSites lists every wait site of the SM100 kernels.
var sm100WaitSites = []waitSite{
	{1, "bar_k", 0, 1, "K ready: the TMA load (or conversion) of the item's K block"},
	{1, "bar_v", 1, 1, "V ready: the TMA load (or conversion) of the item's V block"},
	{1, "bar_q", 2, 2, "Q ready: the softmax warpgroup's gather of a row tile's Q"},
	{1, "bar_s", 4, 2, "S done: the tcgen05 Q K^T product of a row tile"},
	{1, "bar_p", 6, 2, "P ready: the softmax warpgroup's store of a row tile's P"},
	{1, "bar_o", 8, 2, "O done: the tcgen05 P V product of a row tile"},
	{1, "num_bars", 10, 1, "the MMA issuer's poll: neither Q ready nor P ready completed"},
	{2, "bar_k", 0, 1, "K ready: the TMA load of a visit's K block (stage 0)"},
	{2, "bar_v", 1, 1, "V ready: the TMA load of a visit's V block (stage 0)"},
	{2, "bar_mma", 2, 1, "MMA done: the tcgen05 S^T or O^T product of a visit"},
	{2, "num_bars", 3, 1, "K ready: the TMA load of a visit's K block (stage 1)"},
	{2, "num_bars + 1", 4, 1, "V ready: the TMA load of a visit's V block (stage 1)"},
	{3, "bar_k", 0, 3, "K full: the TMA load of a walk block's K into a ring slot"},
	{3, "bar_v", 3, 3, "V full: the TMA load of a walk block's V into a ring slot"},
	{3, "bar_ke", 6, 3, "K empty: the tcgen05 S = Q K^T that read a ring slot's previous K"},
	{3, "bar_ve", 9, 3, "V empty: the tcgen05 O += P V that read a ring slot's previous V"},
	{3, "bar_q", 12, 1, "Q ready: the softmax warpgroup's gather of a pass's Q"},
	{3, "bar_s", 13, 2, "S full: the tcgen05 Q K^T product of a block into an S buffer"},
	{3, "bar_p", 15, 2, "P ready: the softmax warpgroup's P and row record over an S buffer"},
	{3, "bar_o", 17, 1, "O done: the tcgen05 P V product of a block"},
	{3, "bar_rk", 18, 1, "raw K full: the TMA load of a walk block's raw K (converted K/V)"},
	{3, "bar_rv", 19, 1, "raw V full: the TMA load of a walk block's raw V (converted K/V)"},
	{3, "bar_rke", 20, 1, "raw K empty: the converter warpgroup's widening of the previous raw K"},
	{3, "bar_rve", 21, 1, "raw V empty: the converter warpgroup's widening of the previous raw V"},
	{3, "bar_c", 22, 1, "O corrected: the correction warpgroup's O rescale (or a pass's epilogue) before a block's P V"},
}

// SM100WaitTimeout is the error of a launch sequence in which an SM100
// kernel's bounded mbarrier wait timed out: the kernel (the last SM100
// kernel of that family the sequence launched), the site code and what it
// means, wrapping the driver's error. The context is unusable afterwards.
type SM100WaitTimeout struct {
	Kernel string // e.g. msa_sm100_decode_bf16_d128; "" when none was launched
	Code   uint32 // family << 16 | site << 8 | parity
	Err    error  // the driver's error of the failed call
}

// Error names the kernel, the code, the barrier and the parity.
func (e *SM100WaitTimeout) Error() string {
	fam, site, parity := e.Code>>16, e.Code>>8&0xff, e.Code&0xff
	kern := e.Kernel
	if kern == "" {
		kern = "an SM100 kernel"
	}
	what := "an unknown site"
	if name, ok := sm100WaitFamilies[fam]; ok {
		what = fmt.Sprintf("a %s kernel site %d not in the table", name, site)
		for _, s := range sm100WaitSites {
			if s.family == fam && site >= s.index && site < s.index+s.slots {
				what = s.meaning
				if s.slots > 1 {
					what += fmt.Sprintf(" (slot %d)", site-s.index)
				}
				what = fmt.Sprintf("%s [%s]", what, s.bar)
				break
			}
		}
	}
	msg := fmt.Sprintf("cuda: %s: an mbarrier wait did not complete within %d s and trapped (site code %#06x: %s, phase parity %d): "+
		"the kernel's barrier protocol is wrong on this GPU; the CUDA context is unusable", kern, sm100WaitTimeoutS, e.Code, what, parity)
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns the driver's error.
func (e *SM100WaitTimeout) Unwrap() error { return e.Err }

// sm100WaitError returns err unchanged when code is 0 (no wait timed out)
// or err is nil, else the SM100WaitTimeout naming the last kernel of
// launched that the code's family ran.
func sm100WaitError(code uint32, launched []string, err error) error {
	if code == 0 || err == nil {
		return err
	}
	e := &SM100WaitTimeout{Code: code, Err: err}
	if fam, ok := sm100WaitFamilies[code>>16]; ok {
		for i := len(launched) - 1; i >= 0; i-- {
			if strings.HasPrefix(launched[i], "msa_sm100_"+fam+"_") {
				e.Kernel = launched[i]
				break
			}
		}
	}
	return e
}
