// Package cuda launches the GPU kernels of kernels/cuda (sparse prefill
// partials, combine, paged decode) through gorgonia.org/cu.
//
// The parameter mirrors and their builders (params.go) are plain Go, built
// and tested everywhere. Everything that touches the driver (launch.go) needs
// the build tag "cuda", CUDA 12.x headers and a libcuda (a link stub is
// enough to compile: kernels/cuda/tagged_build.sh).
package cuda
