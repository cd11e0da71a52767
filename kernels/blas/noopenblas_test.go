//go:build !openblas || !cgo

package blas

import (
	"errors"
	"strings"
	"testing"
)

// Without the tag, OpenBLAS says how to get it instead of returning a nil
// BLAS silently.
func TestOpenBLASAbsent(t *testing.T) {
	b, err := OpenBLAS()
	if b != nil || !errors.Is(err, ErrNoOpenBLAS) || !strings.Contains(err.Error(), "-tags openblas") {
		t.Fatalf("OpenBLAS() = %v, %v; want nil and ErrNoOpenBLAS naming -tags openblas", b, err)
	}
}
