package tile

import (
	"fmt"
	"os"
)

// A tier is one implementation of the block kernel.
type tier struct {
	name string
	// missing names the CPU feature that is absent, "" when the tier runs here.
	missing func() string
	// bf16 is true when Block.Load packs the bf16 layout (kb, vb) instead of
	// the fp32 one (kt, v).
	bf16   bool
	load   func(b *Block, n int, k, v []float32)
	update func(a *Acc, b *Block, valid []int32)
	// peak runs the calibration loop for iters iterations and returns the
	// flops it performed; nil for tiers without one.
	peak func(iters int) float64
	// isa is the vector instruction set of the tier's float32 helper
	// kernels (VectorISA).
	isa ISA
	// amxLanes: decode's Lanes run their products on AMX tiles (the AMX
	// lane path, lanes_amx_amd64.go) for head dimensions that are a
	// multiple of 32.
	amxLanes bool
	// bf16Lanes: Lanes that ask for bf16 products (SetBF16Products) run
	// them on VDPBF16PS (lanes_bf16_amd64.go) for head dimensions that are
	// a multiple of 32.
	bf16Lanes bool
}

// ISA names a vector instruction set of amd64 that a tier's kernels use.
type ISA uint8

const (
	// ISAPortable: no SIMD kernels (the generic tier; every tier on other
	// platforms and under the purego build tag).
	ISAPortable ISA = iota
	// ISAAVX2: 256-bit AVX2 + FMA kernels (the avx2 tier).
	ISAAVX2
	// ISAAVX512: 512-bit AVX-512 kernels (avx512 and the bf16 tiers
	// avx512bf16, avx512bf16-emulated and amxbf16, whose float32 helper
	// kernels, Lanes among them, are the avx512 tier's).
	ISAAVX512
)

// String returns "portable", "avx2" or "avx512".
func (i ISA) String() string {
	switch i {
	case ISAAVX2:
		return "avx2"
	case ISAAVX512:
		return "avx512"
	}
	return "portable"
}

// VectorISA returns the vector instruction set of the active tier's
// float32 helper kernels. The CPU has it while the tier is active (SetTier
// checks the tier's features), so a package that pairs SIMD code of its
// own with tile's kernels (attn's epilogues, grad's row operations)
// follows the tier through VectorISA instead of naming tiers: a tier
// forced below what the CPU has (MSA_CPU_TIER=avx2 on an AVX-512 CPU)
// then runs AVX2 code everywhere, and a new tier states its ISA in one
// place.
func VectorISA() ISA { return active.isa }

// allTiers lists every tier in order of preference; tiers_*.go fill in the
// SIMD entries at init. The generic tier is always last and always runs.
var allTiers []*tier

var genericTier = &tier{
	name:    "generic",
	missing: func() string { return "" },
	load:    func(b *Block, n int, k, v []float32) { loadBlockGeneric(b, n, k, v) },
	update:  updateGeneric,
	peak:    peakGeneric,
}

// active is the tier used by Block.Load and Acc.Update. It is chosen once at
// start-up (init below) and changed only by SetTier.
var active = genericTier

// EnvTier is the environment variable that overrides the automatic choice:
// MSA_CPU_TIER=generic|avx2|avx512|avx512bf16|amxbf16.
const EnvTier = "MSA_CPU_TIER"

func init() {
	allTiers = append(simdTiers(), genericTier)
	// Automatic choice: the first supported tier that is not opt-in.
	for _, t := range allTiers {
		if !t.optIn() && t.missing() == "" {
			active = t
			break
		}
	}
	if name := os.Getenv(EnvTier); name != "" {
		if err := SetTier(name); err != nil {
			fmt.Fprintf(os.Stderr, "tile: %s=%s ignored: %v; using %s\n", EnvTier, name, err, active.name)
		}
	}
}

// optIn reports whether t changes the numerics and therefore is never
// chosen automatically: the bf16 fast modes (avx512bf16, its emulated twin,
// amxbf16), the tiers whose products take bf16-rounded operands.
func (t *tier) optIn() bool { return t.bf16 }

func findTier(name string) *tier {
	for _, t := range allTiers {
		if t.name == name {
			return t
		}
	}
	return nil
}

// SetTier selects the kernel tier by name: "generic", "avx2", "avx512",
// "avx512bf16" or "amxbf16" (and "avx512bf16-emulated", the bf16 data path with VDPBF16PS
// replaced by AVX-512F instructions, for testing on CPUs without
// AVX512_BF16). It fails when the tier is unknown or the CPU lacks a feature
// it needs. It is meant for start-up, tests and benchmarks: it must not run
// concurrently with Block.Load or Acc.Update, and blocks loaded under one
// tier must be reloaded before a tier with another layout updates from them
// (avx512bf16 and amxbf16 pack bf16, the others fp32).
func SetTier(name string) error {
	t := findTier(name)
	if t == nil {
		return fmt.Errorf("tile: unknown tier %q", name)
	}
	if m := t.missing(); m != "" {
		return fmt.Errorf("tile: tier %s needs %s, which this CPU lacks", name, m)
	}
	active = t
	return nil
}

// Tier returns the name of the active tier.
func Tier() string { return active.name }

// BF16Products reports whether the active tier is one of the opt-in bf16
// fast modes (avx512bf16, its emulated twin, amxbf16): Q, K, V and P are
// rounded to bf16 before their products, so results carry bf16's error
// (about 2^-8 relative) instead of float32's.
func BF16Products() bool { return active.bf16 }

// Tiers returns the tiers this CPU supports, fastest first ("generic" last).
// The opt-in amxbf16 and avx512bf16 tiers are listed when supported; the
// emulated bf16 tier is not.
func Tiers() []string {
	var s []string
	for _, t := range allTiers {
		if t.missing() == "" && t.name != "avx512bf16-emulated" {
			s = append(s, t.name)
		}
	}
	return s
}

// tierMissing returns the missing CPU feature of a named tier ("" when it
// runs here); ok is false for a tier unknown to this build.
func tierMissing(name string) (missing string, ok bool) {
	t := findTier(name)
	if t == nil {
		return "", false
	}
	return t.missing(), true
}
