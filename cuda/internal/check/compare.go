package check

import "math"

// Diff is the comparison of a result with the reference (or with the CPU
// path's result) under both criteria: the per-element bound
// (tolerance.go) and the statistical criterion (stat.go). Errors and
// tolerances are in the measure |got-want|/(1+|want|).
type Diff struct {
	MaxAbsO, MaxRelO     float64 // worst |got-want| and |got-want|/(1+|want|) of O
	MaxAbsLSE, MaxRelLSE float64 // the same for the LSE and temperature LSE
	TolO, TolLSE         float64 // largest per-element bound applied
	MarginO, MarginLSE   float64 // smallest bound/error over the elements (+Inf: no error); below 1 fails
	BadO, BadLSE         int     // elements beyond the bound

	StatTolO, StatTolLSE       float64 // largest statistical max tolerance applied
	StatMarginO, StatMarginLSE float64 // smallest statistical tolerance/error (+Inf: no error); below 1 fails
	BadStatO, BadStatLSE       int     // elements beyond the statistical max tolerance
	RMSO, RMSLSE               float64 // root mean square error
	RMSTolO, RMSTolLSE         float64 // k_N times the model's expected RMS; RMS above it fails

	Masked    int // fully masked rows (no attended key: LSE -inf)
	BadMasked int // masked rows where the result has O != 0 or LSE != -inf
	NaN       int // NaN or +-Inf where the reference is finite
}

// OK reports whether every element is within both criteria and every
// masked row is O = 0, LSE = -inf.
func (d Diff) OK() bool {
	return d.BoundOK() && d.StatOK() && d.BadMasked == 0 && d.NaN == 0
}

// BoundOK reports whether every element is within its per-element bound.
func (d Diff) BoundOK() bool { return d.BadO == 0 && d.BadLSE == 0 }

// StatOK reports whether the statistical criterion holds: every element
// within its statistical max tolerance and the RMS errors within theirs.
func (d Diff) StatOK() bool {
	return d.BadStatO == 0 && d.BadStatLSE == 0 && d.RMSO <= d.RMSTolO && d.RMSLSE <= d.RMSTolLSE
}

// RMSMarginO is RMSTolO / RMSO (+Inf: no error); below 1 fails.
func (d Diff) RMSMarginO() float64 { return ratio(d.RMSTolO, d.RMSO) }

// RMSMarginLSE is RMSTolLSE / RMSLSE (+Inf: no error); below 1 fails.
func (d Diff) RMSMarginLSE() float64 { return ratio(d.RMSTolLSE, d.RMSLSE) }

func ratio(tol, err float64) float64 {
	if err == 0 {
		return math.Inf(1)
	}
	return tol / err
}

// Check compares got with the reference, element by element, each within
// its own tolerance.
func (r *Reference) Check(got Result) Diff {
	return r.compare(got, func(i int) float64 { return r.O[i] }, func(i int) float64 { return r.LSE[i] },
		func(i int) float64 { return r.TLSE[i] }, cmpOpts{k: 1})
}

// CheckPair compares got with cpu, the CPU path's result on the same
// inputs: both lie within the reference's tolerance of the exact result,
// so they may differ by twice the bound, by the width of the statistical
// max criterion's set of roundings, and in RMS by twice the expected RMS.
func (r *Reference) CheckPair(got, cpu Result) Diff {
	return r.compare(got, func(i int) float64 { return float64(cpu.O[i]) }, func(i int) float64 { return float64(cpu.LSE[i]) },
		func(i int) float64 { return float64(cpu.TLSE[i]) }, cmpOpts{k: 2})
}

// quantity accumulates the comparison of one quantity (O, or the LSEs).
type quantity struct {
	rd                     rounding
	z, k                   float64 // max criterion's z_N; 1 against the reference, 2 against the CPU path
	maxAbs, maxRel, tolRel float64
	margin                 float64
	bad                    int
	statTol, statMargin    float64
	badStat                int
	sumSq, sumExp          float64
	n                      int
	tols                   *[]float64 // when set, collects every element's statistical max tolerance
	roundingsOnly          bool       // cmpOpts.roundingsOnly
}

func newQuantity(rd rounding, n int, k float64) *quantity {
	return &quantity{rd: rd, z: zMax(n), k: k, margin: math.Inf(1), statMargin: math.Inf(1)}
}

// add compares got g with want w for an element of exact value o, bound
// tol (pre-rounding part pre) and model (sig, bias, rnd); it reports false
// for a non-finite value.
func (q *quantity) add(g, w, o, tol, pre, sig, bias float64, rnd lseRounding) bool {
	if math.IsNaN(g) || math.IsInf(g, 0) || math.IsNaN(w) || math.IsInf(w, 0) {
		return false
	}
	if q.roundingsOnly {
		sig, bias = 0, 0
	}
	e, den := math.Abs(g-w), 1+math.Abs(w)
	tol *= q.k
	// The allowed pre-rounding deviation: z_N standard deviations of the
	// independent part, the roundings' part at most their hard bound (each
	// part within its own allowance but for alphaMax), plus the coherent
	// part; never beyond the per-element bound's.
	all := math.Hypot(sig, rnd.sd)
	dev := math.Min(math.Min(q.z*all, q.z*sig+math.Min(q.z*rnd.sd, rnd.bound))+bias, pre)
	// The statistical max tolerance: against the reference, the largest
	// |rnd(x) - o| over x in [o - dev, o + dev]; against the CPU path, whose
	// result is also the rounding of a value in that interval, the width
	// rnd(o + dev) - rnd(o - dev) of the set both lie in (rounding is
	// monotone), at most twice the former.
	st := q.rd.maxErr(o, dev)
	if q.k != 1 {
		st = q.rd.width(o, dev)
	}
	if q.tols != nil {
		*q.tols = append(*q.tols, st/den)
	}
	q.maxAbs, q.maxRel = math.Max(q.maxAbs, e), math.Max(q.maxRel, e/den)
	q.tolRel, q.statTol = math.Max(q.tolRel, tol/den), math.Max(q.statTol, st/den)
	if e > 0 {
		q.margin = math.Min(q.margin, tol/e)
	}
	// Against the reference, the margin is in deviations: the allowed one
	// over the one the result needs (0 for o's own rounding, which has no
	// error to measure); against the CPU path, in errors.
	if q.k == 1 {
		if nd := q.rd.need(o, g); nd > 0 {
			q.statMargin = math.Min(q.statMargin, dev/nd)
		}
	} else if e > 0 {
		q.statMargin = math.Min(q.statMargin, st/e)
	}
	if e > tol {
		q.bad++
	}
	// Against the reference: the result must be the rounding of a value
	// within dev of o (rounding is monotone: between rnd(o - dev) and
	// rnd(o + dev)); against the CPU path, within the width of that set.
	if (q.k == 1 && (g < q.rd.round(o-dev) || g > q.rd.round(o+dev))) || (q.k != 1 && e > st) {
		q.badStat++
	}
	q.sumSq += e * e / (den * den)
	q.sumExp += q.k * q.k * q.rd.meanSq(o, all, bias) / (den * den)
	q.n++
	return true
}

// rms is the RMS error and its tolerance.
func (q *quantity) rms() (err, tol float64) {
	if q.n == 0 {
		return 0, 0
	}
	return math.Sqrt(q.sumSq / float64(q.n)), kRMS(q.n) * math.Sqrt(q.sumExp/float64(q.n))
}

// cmpOpts are compare's options: k = 1 against the reference, 2 against
// the CPU path; only rows that attend at least minKeys keys (and the fully
// masked rows) are compared, z_N counting every attended row; tolsO and
// tolsLSE, when set, collect every element's statistical max tolerance;
// roundingsOnly leaves out every deviation but the LSE's own float32
// roundings (what a kernel that computes exactly up to its output format's
// roundings may err: the noise floor of the comparison).
type cmpOpts struct {
	roundingsOnly  bool
	k              float64
	minKeys        int32
	tolsO, tolsLSE *[]float64
}

// compare compares got with want under opt.
func (r *Reference) compare(got Result, wantO, wantLSE, wantTLSE func(int) float64, opt cmpOpts) Diff {
	k, minKeys := opt.k, opt.minKeys
	d := Diff{MarginO: math.Inf(1), MarginLSE: math.Inf(1), StatMarginO: math.Inf(1), StatMarginLSE: math.Inf(1)}
	if len(got.O) != len(r.O) || len(got.LSE) != len(r.LSE) || (r.TLSE != nil && len(got.TLSE) != len(r.TLSE)) {
		d.NaN = len(r.LSE) // a result of the wrong shape fails every row
		return d
	}
	rows := 0
	for _, l := range r.LSE {
		if !math.IsInf(l, -1) {
			rows++
		}
	}
	nL := rows
	if r.TLSE != nil {
		nL *= 2
	}
	qo, ql := newQuantity(roundO, rows*r.D, k), newQuantity(roundLSE, nL, k)
	qo.tols, ql.tols = opt.tolsO, opt.tolsLSE
	qo.roundingsOnly, ql.roundingsOnly = opt.roundingsOnly, opt.roundingsOnly
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
		if r.keys[row] < minKeys {
			continue
		}
		if !ql.add(float64(got.LSE[row]), wantLSE(row), r.LSE[row], r.TolLSE[row], r.TolLSE[row], r.sigLSE[row], r.biasLSE[row], r.rndLSE[row]) {
			d.NaN++
		}
		if r.TLSE != nil && !ql.add(float64(got.TLSE[row]), wantTLSE(row), r.TLSE[row], r.TolTLS[row], r.TolTLS[row], r.sigTLS[row], r.biasTLS[row], r.rndTLS[row]) {
			d.NaN++
		}
		for e, x := range o {
			i := row*r.D + e
			if !qo.add(float64(x), wantO(i), r.O[i], r.TolO[i], r.preO[i], r.sigO[i], r.biasO[i], lseRounding{}) {
				d.NaN++
			}
		}
	}
	d.MaxAbsO, d.MaxRelO, d.TolO, d.MarginO, d.BadO = qo.maxAbs, qo.maxRel, qo.tolRel, qo.margin, qo.bad
	d.MaxAbsLSE, d.MaxRelLSE, d.TolLSE, d.MarginLSE, d.BadLSE = ql.maxAbs, ql.maxRel, ql.tolRel, ql.margin, ql.bad
	d.StatTolO, d.StatMarginO, d.BadStatO = qo.statTol, qo.statMargin, qo.badStat
	d.StatTolLSE, d.StatMarginLSE, d.BadStatLSE = ql.statTol, ql.statMargin, ql.badStat
	d.RMSO, d.RMSTolO = qo.rms()
	d.RMSLSE, d.RMSTolLSE = ql.rms()
	return d
}
