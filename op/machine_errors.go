package op

import "errors"

// MachineError returns the error an op of this package reported inside an
// error returned by a Gorgonia machine's RunAll, so that errors.As finds
// *ArgError, *NotImplementedError, *ForwardOnlyError and *CommError:
//
//	if err := m.RunAll(); err != nil {
//		var ae *op.ArgError
//		if errors.As(op.MachineError(err), &ae) { ... ae.Arg ... }
//	}
//
// Gorgonia's machines wrap an op's error in a type of their own that carries
// the failing node and instruction but does not implement Unwrap (its Err
// method returns the wrapped error), so errors.As on the machine's error
// alone does not see ours. MachineError follows both Err and Unwrap chains
// and returns the first error of this package's types; when there is none
// it returns err unchanged (nil for nil).
func MachineError(err error) error {
	for e := err; e != nil; {
		switch e.(type) {
		case *ArgError, *NotImplementedError, *ForwardOnlyError, *CommError:
			return e
		}
		if w, ok := e.(interface{ Err() error }); ok && w.Err() != nil && w.Err() != e {
			e = w.Err()
			continue
		}
		e = errors.Unwrap(e)
	}
	return err
}
