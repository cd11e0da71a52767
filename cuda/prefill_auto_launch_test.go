//go:build cuda

package cuda

import (
	"strings"
	"testing"
)

// TestAutoPrefillRefusals: the auto path refuses what the kv path refuses,
// with the same error; what only the query-major kernel refuses (the
// combine arguments it checks against the forward's, the output's
// alignment) the kv path accepts, and so does auto, running every tile
// KV-major with the reason in its choice.
func TestAutoPrefillRefusals(t *testing.T) {
	r := prefillRoutes()[2] // sm90 kv
	for name, mut := range map[string]func(c *prefillLaunchCase){
		"head dim":        func(c *prefillLaunchCase) { c.fa.D, c.ca.D = 96, 96 },
		"blk_kv":          func(c *prefillLaunchCase) { c.fa.BlkKV = 129 },
		"Hq not multiple": func(c *prefillLaunchCase) { c.fa.Hq = 7 },
		"q dtype":         func(c *prefillLaunchCase) { c.fa.QDtype = F16 },
		"misaligned k":    func(c *prefillLaunchCase) { c.fa.K += 2 },
		"partial dtype":   func(c *prefillLaunchCase) { c.fa.PartialDtype = 9 },
		"split counts":    func(c *prefillLaunchCase) { c.pc.sched.SplitCounts = c.pc.sched.SplitCounts[1:] },
		"cu_seqlens_q":    func(c *prefillLaunchCase) { c.pc.cuQ = c.pc.cuQ[:2] },
		"window":          func(c *prefillLaunchCase) { c.window = 0 },
		"item row":        func(c *prefillLaunchCase) { c.pc.sched.Metadata[1] = int32(c.pc.csr.TotalRows) },
		"combine Hq":      func(c *prefillLaunchCase) { c.ca.Hq = 2 * c.fa.Hq },
		"misaligned out":  func(c *prefillLaunchCase) { c.ca.Out += 2 },
	} {
		queryOnly := name == "Hq not multiple" || name == "combine Hq" || name == "misaligned out"
		var errs [2]error
		var limit string
		for i, prefill := range []PrefillPath{PrefillKV, PrefillAuto} {
			var f FakeDriver
			k := FakeKernels(ArchSM90, &f)
			k.prefill, k.devName, k.chooser = prefill, "NVIDIA H200", AlternateTiles
			c := newPrefillLaunchCase(t, r)
			mut(c)
			errs[i] = k.SparsePrefill(nil, &c.fa, &c.ca, c.pc.csr, c.pc.sched, c.pc.cuQ, c.window)
			limit = k.PrefillChoice().Limit
		}
		if queryOnly {
			if errs[0] != nil || errs[1] != nil || !strings.Contains(limit, "the query-major kernel does not take these arguments") {
				t.Errorf("%s: kv error %v, auto error %v, auto's limit %q: want both accepted, auto all KV-major", name, errs[0], errs[1], limit)
			}
			continue
		}
		if errs[0] == nil || errs[1] == nil || errs[0].Error() != errs[1].Error() {
			t.Errorf("%s: kv error %v, auto error %v: want the same error", name, errs[0], errs[1])
		}
	}
}

// TestAutoPrefillChoice: the debug string says how many tiles took each
// path and what decided (the model's factors, the chooser, or the limit
// that kept every tile KV-major), and the model's own choice on the
// bench-like case launches the kernels it counted.
func TestAutoPrefillChoice(t *testing.T) {
	r := prefillRoutes()[2]
	for _, tc := range []struct {
		name, device string
		path         Path
		choose       TileChooser
		want         string
	}{
		{"model", "NVIDIA H200", PathAuto, nil, "decided by lanes"},
		{"alternate", "NVIDIA H200", PathAuto, AlternateTiles, "forced by the tile chooser"},
		{"unknown GPU", "NVIDIA GeForce RTX 4090", PathAuto, nil, "every tile kv: GPU \"NVIDIA GeForce RTX 4090\" is not in the table"},
		{"portable", "NVIDIA H200", PathPortable, AlternateTiles, "every tile kv: the portable path is selected"},
	} {
		var f FakeDriver
		k := FakeKernels(ArchSM90, &f)
		k.prefill, k.devName, k.path, k.chooser = PrefillAuto, tc.device, tc.path, tc.choose
		c := newPrefillLaunchCase(t, r)
		c.run(t, k)()
		ch := k.PrefillChoice()
		s := ch.String()
		if !strings.Contains(s, tc.want) {
			t.Errorf("%s: %q, want %q in it", tc.name, s, tc.want)
		}
		q := 0
		for _, n := range k.LastKernels() {
			if n == QFwdName(ArchSM90, VarBF16, 128) {
				q++
			}
		}
		if (ch.QueryTiles > 0) != (q == 1) || q > 1 {
			t.Errorf("%s: %v: the query-major kernel launched %d times", tc.name, ch, q)
		}
		if tc.choose == nil && ch.Limit == "" && ch.QueryTiles+ch.KVTiles != ch.ByLanes+ch.ByRate {
			t.Errorf("%s: %v: the factors' counts do not cover the tiles", tc.name, ch)
		}
	}
}
