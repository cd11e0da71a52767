//go:build cuda

// Package initcheck turns gorgonia.org/cu's failure at start-up into one
// clear line. gorgonia.org/cu calls cuInit in its package init and, when it
// fails, prints a generic message and calls os.Exit(1): a -tags cuda binary
// cannot recover from that, not even to fall back to the CPU.
//
// Go initialises packages in import-path order among those whose imports
// are done (the Go 1.21 rule), and this package's path
// (github.com/sparseattn/msa/...) sorts before gorgonia.org/cu while it
// imports only the standard library and package driver: so its init runs
// first. It opens libcuda.so.1 the way package driver does; when that or
// cuInit fails it prints what is missing on one line to standard error and
// exits with status 2 (gorgonia.org/cu would have exited the process right
// after with status 1 and a less useful message).
//
// Import it (blank) only from packages that also link gorgonia.org/cu (op
// under the cuda tag does): the driver-only packages (cuda, cuda/gpucheck)
// never exit, they return driver.ErrNoDriver.
//
// What no Go code can control: a binary linked against libcuda.so.1 (as
// every binary importing gorgonia.org/cu is) does not start at all when the
// dynamic loader finds no libcuda.so.1; the loader itself prints "error
// while loading shared libraries: libcuda.so.1" and exits with status 127
// before any init runs.
package initcheck

import (
	"fmt"
	"os"

	"github.com/sparseattn/msa/cuda/driver"
)

func init() {
	if err := driver.Open(); err != nil {
		fmt.Fprintf(os.Stderr, "msa: cannot use the GPU: %v (a -tags cuda binary needs an NVIDIA driver for CUDA 13.0 or newer; build without -tags cuda for the CPU path)\n", err)
		os.Exit(2)
	}
}
