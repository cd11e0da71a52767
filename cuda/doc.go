// Package cuda launches the GPU kernels of kernels/cuda (sparse prefill
// partials, combine, paged decode; portable and tensor-core kernels) through
// package cuda/driver, which opens libcuda.so.1 at run time: nothing here
// links a CUDA library, and without a driver Load returns an error wrapping
// driver.ErrNoDriver.
//
// The parameter mirrors and their builders (params.go), the tensor-map
// geometry and validation (tensormap.go), the dispatch by compute capability
// (dispatch.go), the query windows of the prefill partials and the Go model
// of the SM100 layouts are plain Go, built and tested everywhere. The driver
// calls (launch.go, device.go) need the build tag "cuda" and a cuda.h at
// compile time (kernels/cuda/tagged_build.sh or kernels/cuda/gpucheck.sh
// set the include path); no GPU is needed to build.
package cuda
