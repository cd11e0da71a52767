package gradimpl

import (
	"github.com/sparseattn/msa/kernels/attn"
	"github.com/sparseattn/msa/kernels/grad"
	"github.com/sparseattn/msa/op/internal/validate"
)

// Call is a validated float32 sparse attention call.
type Call struct {
	Problem grad.Problem // shapes, sequences, k2q CSR, masking and scale
	Q, K, V []float32    // the inputs in grad's layouts
	Workers int          // the worker count of the call's pool
	RetTLSE bool         // Forward also computes the temperature LSE
	InvT    float64      // 1/T of the temperature LSE; 0 when it equals the LSE
	// Prep is where Forward and Backward prepare Problem: Forward prepares
	// it once for the forward and the temperature LSE; a graph node passes
	// its own so that its runs reuse the buffers. nil: a new one.
	Prep *grad.Prepared
}

// prepare prepares the call's problem in Prep (a new one when nil); an
// error is reported on arg as the kernel's own errors are.
func (fc *Call) prepare(fn, arg, expected string) (*grad.Prepared, error) {
	pp := fc.Prep
	if pp == nil {
		pp = new(grad.Prepared)
	}
	if err := pp.Prepare(&fc.Problem); err != nil {
		return nil, &validate.ArgError{Func: fn, Arg: arg, Expected: expected, Got: err.Error()}
	}
	return pp, nil
}

// workspace returns ws (or a new workspace) running on a pool of the
// call's worker count (attn.AcquirePool); the caller releases the pool.
func (fc *Call) workspace(ws *grad.Workspace) (*grad.Workspace, *attn.Pool) {
	pool := attn.AcquirePool(fc.Workers)
	if ws == nil {
		return grad.NewWorkspace(pool), pool
	}
	ws.SetPool(pool)
	return ws, pool
}

// Forward runs the float32 forward: O [total_q, Hq, D] and the LSE
// [total_q, Hq] (always computed: the backward needs it); the temperature
// LSE when requested (else nil). ws may be nil.
func (fc *Call) Forward(fn string, ws *grad.Workspace) (o, lse, tlse []float32, err error) {
	pp, err := fc.prepare(fn, "q, k, v", "a consistent float32 call")
	if err != nil {
		return nil, nil, nil, err
	}
	ws, pool := fc.workspace(ws)
	defer attn.ReleasePool(pool)
	p := &fc.Problem
	o = make([]float32, p.TotalQ*p.HQ*p.D)
	lse = make([]float32, p.TotalQ*p.HQ)
	if err := ws.ForwardPrepared(pp, fc.Q, fc.K, fc.V, o, lse); err != nil {
		return nil, nil, nil, &validate.ArgError{Func: fn, Arg: "q, k, v", Expected: "a consistent float32 call", Got: err.Error()}
	}
	if fc.RetTLSE {
		tlse = make([]float32, len(lse))
		if fc.InvT == 0 {
			copy(tlse, lse)
		} else if err := ws.TemperatureLSEPrepared(pp, fc.Q, fc.K, fc.InvT, tlse); err != nil {
			return nil, nil, nil, &validate.ArgError{Func: fn, Arg: "q, k", Expected: "a consistent float32 call", Got: err.Error()}
		}
	}
	return o, lse, tlse, nil
}

// Backward runs the float32 backward of a validated call and returns new
// dQ, dK and dV slices. ws may be nil.
func (fc *Call) Backward(fn string, ws *grad.Workspace, o, lse, dO, dLSE []float32) (dq, dk, dv []float32, err error) {
	const arg, expected = "inputs", "a consistent float32 backward call"
	pp, err := fc.prepare(fn, arg, expected)
	if err != nil {
		return nil, nil, nil, err
	}
	ws, pool := fc.workspace(ws)
	defer attn.ReleasePool(pool)
	dq = make([]float32, len(fc.Q))
	dk, dv = make([]float32, len(fc.K)), make([]float32, len(fc.V))
	if err := ws.BackwardPrepared(pp, fc.Q, fc.K, fc.V, o, lse, dO, dLSE, dq, dk, dv); err != nil {
		return nil, nil, nil, &validate.ArgError{Func: fn, Arg: arg, Expected: expected, Got: err.Error()}
	}
	return dq, dk, dv, nil
}
