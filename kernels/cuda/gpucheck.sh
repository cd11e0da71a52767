#!/usr/bin/env bash
# kernels/cuda/gpucheck.sh - run the prebuilt GPU test binary on a machine with
# an NVIDIA GPU (sm_80 / sm_90 / sm_100) and its driver; no Go, no CUDA
# toolkit needed there. It compares every kernel (sparse prefill partials +
# combine, paged decode + split-KV combine) with the float64 CPU reference of
# cuda/ref_test.go and prints a timing table. Bounded to 5 minutes.
#
# Build the binary first, on any machine (no GPU needed):
#   kernels/cuda/tagged_build.sh --test-bin kernels/cuda/bin     # -> kernels/cuda/bin/cuda.test
# then, on the GPU machine, from the repository root:
#   kernels/cuda/gpucheck.sh [path/to/cuda.test]
set -uo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
BIN="${1:-${MSA_CUDA_TEST_BIN:-$HERE/bin/cuda.test}}"
LIMIT="${MSA_GPUCHECK_TIMEOUT:-280}"

if [[ ! -x "$BIN" ]]; then
    echo "gpucheck.sh: no test binary at $BIN (build it with kernels/cuda/tagged_build.sh --test-bin $HERE/bin)" >&2
    exit 2
fi
if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv,noheader || true
else
    echo "gpucheck.sh: nvidia-smi not found; trying anyway" >&2
fi
if ! ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1'; then
    echo "gpucheck.sh: warning: libcuda.so.1 not in the loader cache (LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-})" >&2
fi

# The test reads ../kernels/cuda/msa_params.h (layout check): run from cuda/.
cd "$ROOT/cuda"
start=$(date +%s)
timeout --kill-after=10 "$LIMIT" "$BIN" -test.v -test.count=1 -test.timeout="$((LIMIT - 10))s" \
    -test.run 'TestParamsLayout|TestReferenceSelfCheck|TestGPU'
rc=$?
echo "gpucheck.sh: exit $rc after $(( $(date +%s) - start )) s" >&2
exit $rc
