package tile

import (
	"fmt"
	"os"
	"slices"
	"strings"
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
	// slowTwin, when set, reports that the tier, though it runs here, is
	// not chosen automatically as the bf16 twin because its products are
	// slower on this core than the float32 tier's (nil: never).
	slowTwin func() bool
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

// active is the tier of float32 work: Block.Load and Acc.Update of
// blocks and accumulators that do not ask for bf16 products, decode's
// Lanes, the float32 helper kernels (VectorISA). twin is active's bf16
// twin, the tier of the blocks, accumulators and Lanes that ask for bf16
// products (SetBF16Products): calls whose Q, K and V are values bf16 holds
// exactly. twin is active itself where no bf16 tier runs the twin (a
// float32 tier named by MSA_CPU_TIER or SetTier, a CPU without
// AVX512_BF16, or one whose VDPBF16PS is slower than its float32
// multiply-adds and that has no AMX). Both are chosen once at start-up (init below) and changed
// only by SetTier.
var active, twin = genericTier, genericTier

// EnvTier is the environment variable that overrides the automatic choice:
// MSA_CPU_TIER=generic|avx2|avx512|avx512bf16|amxbf16 (or auto).
const EnvTier = "MSA_CPU_TIER"

// AutoTier is the name SetTier takes for the automatic choice.
const AutoTier = "auto"

func init() {
	allTiers = append(simdTiers(), genericTier)
	setAuto()
	name := os.Getenv(EnvTier)
	if why := amxRefused(); why != "" && (name == "" || name == AutoTier) {
		fmt.Fprintf(os.Stderr, "tile: amxbf16 not used (it needs %s); low-precision prefill runs on %s\n", why, twin.name)
	}
	if name != "" {
		if err := SetTier(name); err != nil {
			fmt.Fprintf(os.Stderr, "tile: %s=%s ignored: %v; using %s\n", EnvTier, name, err, active.name)
		}
	}
}

// setAuto makes the automatic choice the active tier and its twin.
func setAuto() {
	f, b, _ := resolveTiers(AutoTier, tierNames(), missingOf, slowTwinOf)
	active, twin = findTier(f), findTier(b)
}

// tierNames lists the names of allTiers in order.
func tierNames() []string {
	names := make([]string, len(allTiers))
	for i, t := range allTiers {
		names[i] = t.name
	}
	return names
}

// missingOf is tierMissing for resolveTiers, which asks only about tiers
// of this build.
func missingOf(name string) string {
	m, _ := tierMissing(name)
	return m
}

// slowTwinOf reports whether the named tier of allTiers is too slow here
// to be the automatic bf16 twin (tier.slowTwin).
func slowTwinOf(name string) bool {
	t := findTier(name)
	return t.slowTwin != nil && t.slowTwin()
}

// bf16Tiers lists the tiers that round Q, K, V and P to bf16, in order of
// preference for the automatic twin: AMX tiles, then VDPBF16PS. The
// emulated tier (avx512bf16-emulated) is never chosen automatically.
var bf16Tiers = []string{"amxbf16", "avx512bf16"}

// resolveTiers is the tier choice as a function of the request name
// (AutoTier, or a tier name from MSA_CPU_TIER or SetTier), the tiers of
// this build in order of preference (generic last), each tier's missing
// CPU feature (missing(name) == "" where it runs) and whether a bf16 tier
// is slower here than the float32 one (slow, tier.slowTwin). It returns
// the float32 tier and its bf16 twin:
//
//   - AutoTier: the first tier that runs and does not round to bf16;
//     the twin is the first of bf16Tiers that runs and is not slow
//     (amxbf16 where the CPU has AMX and Linux grants the tile state, else
//     avx512bf16 where the CPU has AVX512_BF16 at the rate of AMD Zen 4),
//     else the float32 tier itself;
//   - a float32 tier (generic, avx2, avx512): that tier for both, so that
//     every call keeps float32 products;
//   - a bf16 tier (avx512bf16, amxbf16, avx512bf16-emulated): that tier
//     for both, every call rounding to bf16.
//
// An unknown tier, or one whose feature the CPU lacks, is an error. It
// runs no kernel: the table test drives it with made-up feature sets.
func resolveTiers(name string, tiers []string, missing func(string) string, slow func(string) bool) (float, bf16 string, err error) {
	if name == AutoTier {
		for _, t := range tiers {
			if !isBF16Tier(t) && missing(t) == "" {
				float = t
				break
			}
		}
		bf16 = float
		for _, t := range bf16Tiers {
			if slices.Contains(tiers, t) && missing(t) == "" && !slow(t) {
				bf16 = t
				break
			}
		}
		return float, bf16, nil
	}
	if !slices.Contains(tiers, name) {
		return "", "", fmt.Errorf("tile: unknown tier %q (want %s or one of %s)", name, AutoTier, strings.Join(tiers, ", "))
	}
	if m := missing(name); m != "" {
		return "", "", fmt.Errorf("tile: tier %s needs %s, which this CPU lacks", name, m)
	}
	return name, name, nil
}

// isBF16Tier reports whether the named tier rounds Q, K, V and P to bf16
// (the bf16 tiers and the emulated one).
func isBF16Tier(name string) bool {
	return slices.Contains(bf16Tiers, name) || name == "avx512bf16-emulated"
}

func findTier(name string) *tier {
	for _, t := range allTiers {
		if t.name == name {
			return t
		}
	}
	return nil
}

// SetTier selects the kernel tiers by name, as MSA_CPU_TIER does:
// "generic", "avx2" or "avx512" for every call (float32 products, also
// for low-precision inputs), "avx512bf16" or "amxbf16" for every call
// (bf16 products, also for float32 work; "avx512bf16-emulated" is the bf16
// data path with VDPBF16PS replaced by AVX-512F instructions, for testing
// on CPUs without AVX512_BF16), or AutoTier ("auto") for the automatic
// choice: the best float32 tier, and the best bf16 tier the CPU runs at
// speed for the calls that ask for bf16 products (BF16InputTier). It fails when the
// tier is unknown or the CPU lacks a feature it needs. It is meant for
// start-up, tests and benchmarks: it must not run concurrently with
// Block.Load, Acc.Update or Lanes.Reset. Blocks and accumulators keep the
// tier they were loaded and reset under; a block must be reloaded before
// an accumulator of another layout updates from it.
func SetTier(name string) error {
	if name == AutoTier {
		setAuto()
		return nil
	}
	f, b, err := resolveTiers(name, tierNames(), missingOf, slowTwinOf)
	if err != nil {
		return err
	}
	active, twin = findTier(f), findTier(b)
	return nil
}

// TierSetting returns the SetTier argument that restores the current
// choice: AutoTier where the active tier has a bf16 twin of its own (only
// the automatic choice pairs two tiers), else the active tier's name. Tests
// and benchmarks that change the tier put it back with it.
func TierSetting() string {
	if active != twin {
		return AutoTier
	}
	return active.name
}

// Tier returns the name of the active tier, the one of float32 work.
func Tier() string { return active.name }

// BF16InputTier returns the name of the tier that blocks, accumulators and
// lane groups asking for bf16 products (SetBF16Products) run on: the bf16
// twin of the active tier (amxbf16 or avx512bf16 under the automatic
// choice where the CPU has them), or the active tier itself where it has
// none.
func BF16InputTier() string { return twin.name }

// BF16InputProducts reports whether BF16InputTier rounds Q, K, V and P to
// bf16 before their products, so that a low-precision call carries bf16's
// error (about 2^-8 relative) instead of float32's.
func BF16InputProducts() bool { return twin.bf16 }

// BF16Products reports whether the active tier itself is one of the bf16
// tiers (avx512bf16, its emulated twin, amxbf16), chosen by MSA_CPU_TIER
// or SetTier: then every block and accumulator, float32 work included,
// rounds Q, K, V and P to bf16 before their products.
func BF16Products() bool { return active.bf16 }

// Tiers returns the tiers this CPU supports, fastest first ("generic" last).
// The bf16 tiers amxbf16 and avx512bf16 are listed when supported; the
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
