package check

import "math"

// Diff is the comparison of a result with the reference (or with the CPU
// path's result).
type Diff struct {
	MaxAbsO, MaxRelO     float64 // worst |got-want| and |got-want|/(1+|want|) of O
	MaxAbsLSE, MaxRelLSE float64 // the same for the LSE and temperature LSE
	TolO, TolLSE         float64 // largest tolerance applied, in the same relative measure
	MarginO, MarginLSE   float64 // smallest tolerance/error over the elements (+Inf: no error); below 1 fails
	BadO, BadLSE         int     // elements beyond tolerance
	Masked               int     // fully masked rows (no attended key: LSE -inf)
	BadMasked            int     // masked rows where the result has O != 0 or LSE != -inf
	NaN                  int     // NaN or +-Inf where the reference is finite
}

// OK reports whether every element is within tolerance and every masked
// row is O = 0, LSE = -inf.
func (d Diff) OK() bool { return d.BadO == 0 && d.BadLSE == 0 && d.BadMasked == 0 && d.NaN == 0 }

// Check compares got with the reference, element by element, each within
// its own tolerance.
func (r *Reference) Check(got Result) Diff {
	return r.compare(got, func(i int) float64 { return r.O[i] }, func(i int) float64 { return r.LSE[i] },
		func(i int) float64 { return r.TLSE[i] }, 1)
}

// CheckPair compares got with cpu, the CPU path's result on the same
// inputs: both lie within the reference's tolerance of the exact result,
// so they may differ by twice that.
func (r *Reference) CheckPair(got, cpu Result) Diff {
	return r.compare(got, func(i int) float64 { return float64(cpu.O[i]) }, func(i int) float64 { return float64(cpu.LSE[i]) },
		func(i int) float64 { return float64(cpu.TLSE[i]) }, 2)
}

func (r *Reference) compare(got Result, wantO, wantLSE, wantTLSE func(int) float64, k float64) Diff {
	d := Diff{MarginO: math.Inf(1), MarginLSE: math.Inf(1)}
	if len(got.O) != len(r.O) || len(got.LSE) != len(r.LSE) || (r.TLSE != nil && len(got.TLSE) != len(r.TLSE)) {
		d.NaN = len(r.LSE) // a result of the wrong shape fails every row
		return d
	}
	elem := func(g, w, tol float64, maxAbs, maxRel, tolRel, margin *float64, bad *int) {
		if math.IsNaN(g) || math.IsInf(g, 0) || math.IsNaN(w) || math.IsInf(w, 0) {
			d.NaN++
			return
		}
		e := math.Abs(g - w)
		*maxAbs, *maxRel = math.Max(*maxAbs, e), math.Max(*maxRel, e/(1+math.Abs(w)))
		*tolRel = math.Max(*tolRel, tol/(1+math.Abs(w)))
		if e > 0 {
			*margin = math.Min(*margin, tol/e)
		}
		if e > tol {
			*bad++
		}
	}
	for row := range r.LSE {
		o := got.O[row*r.D : (row+1)*r.D]
		if math.IsInf(r.LSE[row], -1) {
			d.Masked++
			bad := !math.IsInf(float64(got.LSE[row]), -1) || (r.TLSE != nil && !math.IsInf(float64(got.TLSE[row]), -1))
			for _, x := range o {
				bad = bad || x != 0
			}
			if bad {
				d.BadMasked++
			}
			continue
		}
		elem(float64(got.LSE[row]), wantLSE(row), k*r.TolLSE[row], &d.MaxAbsLSE, &d.MaxRelLSE, &d.TolLSE, &d.MarginLSE, &d.BadLSE)
		if r.TLSE != nil {
			elem(float64(got.TLSE[row]), wantTLSE(row), k*r.TolTLS[row], &d.MaxAbsLSE, &d.MaxRelLSE, &d.TolLSE, &d.MarginLSE, &d.BadLSE)
		}
		for e, x := range o {
			i := row*r.D + e
			elem(float64(x), wantO(i), k*r.TolO[i], &d.MaxAbsO, &d.MaxRelO, &d.TolO, &d.MarginO, &d.BadO)
		}
	}
	return d
}
