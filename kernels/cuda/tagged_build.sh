#!/usr/bin/env bash
# kernels/cuda/tagged_build.sh - compile the "cuda" build tag on a machine
# without a GPU or a CUDA driver.
#
#   kernels/cuda/tagged_build.sh            go build -tags cuda ./... + go vet -tags cuda ./cuda ./op
#                                           + go test -c -tags cuda ./cuda
#   kernels/cuda/tagged_build.sh --all      go build + go vet -tags cuda ./... and go test -c -tags cuda
#                                           of EVERY package with tests (binaries in a temp dir,
#                                           or in $MSA_TEST_BIN_DIR when set), then runs the
#                                           launch-layer tests of cuda.test that need no driver
#                                           and the graph nodes' driverless tests of op.test
#                                           (against the init shim below)
#   kernels/cuda/tagged_build.sh --env      only print the environment (eval-able)
#   kernels/cuda/tagged_build.sh --test-bin DIR   the default mode, leaving cuda.test in DIR
#   kernels/cuda/tagged_build.sh --all-bin DIR    --all, leaving every <pkg>.test in DIR
#                                           (e.g. op.test, graph_test.test for the GPU check)
#   kernels/cuda/tagged_build.sh --graph-bin DIR  DIR/graph_test.test (-tags cuda) and DIR/shims/
#                                           (the cuBLAS / cuDNN test shims below) for the runbook's
#                                           graph stage on a machine with only a driver; then runs
#                                           the binary here against the libcuda link stub and
#                                           fails unless it stops with one "cannot use the GPU" line
#
# Test shims (--graph-bin, DIR/shims: libcublas.so.12, libcudnn.so.8): test scaffolding for the
# runbook's graph stage, never a runtime for users. Gorgonia's CUDA engine (gorgonia.org/gorgonia
# v0.9.18 cuda/external.go) calls cudnnCreate when it starts, cublasCreate_v2 on its worker
# thread and cudnnDestroy / cublasDestroy_v2 when it closes; the shims make those four succeed
# (a dummy handle). Every other symbol of the two headers is exported too (so the loader
# resolves the binary) and, if ever called, prints one line naming itself and returns
# CUBLAS_STATUS_NOT_SUPPORTED (15) / CUDNN_STATUS_NOT_SUPPORTED (9). The graph ops' CUDADo never
# call cuBLAS or cuDNN; Gorgonia's own G.Mul on the CUDA machine does (linAlgBinOp.CUDADo ->
# Engine.MatMul -> cublasSgemm_v2), so a graph with Gorgonia matmuls needs the real libraries
# (libcublas.so.12 with libcublasLt.so.12, several hundred MB: more than a device run carries).
#
# Init shim (--all, BIN_DIR/initshim/libcuda.so.1): test scaffolding, never a driver. A binary
# linking gorgonia.org/cu (op.test under the tag) exits in cu's package init when cuInit
# fails, as it does against the link stub, before any test runs. The shim is the link stub with
# cuInit returning CUDA_SUCCESS; every other function still returns 999. op.test's tests
# that run the nodes' CUDA paths on fakes (op/graph_decode_cuda_test.go and its siblings) make
# no driver call and run against it.
#
# What it installs into ${MSA_CUDA_CACHE:-$HOME/.cache/msa-cuda}/tagged-v1:
#   - headers only, unpacked from pinned PyPI wheels (no library is used):
#       nvidia-cuda-runtime-cu12==12.9.79  include/cuda.h (CUDA 12.9 driver API;
#                                          gorgonia.org/cu v0.9.6 does not compile
#                                          against the CUDA 13 cuda.h)
#       nvidia-cuda-nvcc-cu12==12.9.86     include/crt/*.h only (driver_types.h needs
#                                          crt/host_defines.h; the runtime wheel lacks it)
#       nvidia-cuda-cccl-cu12==12.9.27     include/nv/target (cuda_fp16.h, via cublas)
#       nvidia-cublas-cu12==12.9.1.4       include/cublas_v2.h (gorgonia.org/cu/blas)
#       nvidia-cudnn-cu12==8.9.7.29        include/cudnn*.h, cuDNN 8 API (gorgonia.org/cu/dnn)
#   Package cuda and cuda/gpucheck link no CUDA library (cuda/driver opens
#   libcuda.so.1 at run time); the stubs below serve gorgonia.org/cu and its
#   blas/dnn packages (package op and everything importing it).
#   - link stubs generated from those headers and built with gcc: every
#     function the header declares, returning an error code; sonames
#     libcuda.so.1, libcublas.so.12, libcudnn.so.8, so the binaries load the
#     real libraries on a GPU machine.
#   - only while the repository's go.mod does not require gorgonia.org/cu
#     v0.9.6: a private go.mod copy (-modfile) that does. Once go.mod requires
#     it (it does now), the repository's go.mod is used as is (-mod=readonly).
#
# Needs: python3 with pip (wheels are downloaded with `pip download`), gcc, go.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
CACHE="${MSA_CUDA_CACHE:-$HOME/.cache/msa-cuda}"
T="$CACHE/tagged-v1"
CU_VERSION=v0.9.6

fetch_headers() {  # wheel==version, path inside the wheel, destination
    local spec="$1" inner="$2" dest="$3"
    [[ -d "$dest" ]] && return
    local tmp
    tmp="$(mktemp -d "${TMPDIR:-/tmp}/msa-wheel.XXXXXX")"
    python3 -m pip download --quiet --disable-pip-version-check --no-deps -d "$tmp" "$spec" >&2
    python3 - "$tmp"/*.whl "$inner" "$tmp/x" <<'PY'
import sys, zipfile
whl, inner, out = sys.argv[1], sys.argv[2], sys.argv[3]
with zipfile.ZipFile(whl) as z:
    for n in z.namelist():
        if n.startswith(inner + "/"):
            z.extract(n, out)
PY
    mkdir -p "$(dirname "$dest")"
    mv "$tmp/x/$inner" "$dest"
    rm -rf "$tmp"
}

# make_stub NAME SONAME HEADER INCLUDE_DIRS... : a shared library defining
# every function HEADER declares (after preprocessing, so *_v2 aliases are
# the names really referenced).
# header_functions HEADER INCLUDE_DIRS... : the function names HEADER declares
# (after preprocessing), one a line.
header_functions() {
    local header="$1"; shift
    local incs=()
    for d in "$@"; do incs+=(-I "$d"); done
    echo "#include <$header>" | gcc -E -P "${incs[@]}" -x c - \
        | tr '\n' ' ' | tr ';' '\n' \
        | grep -oE '^[^{}]*\b(cu|cublas|cudnn)[A-Za-z0-9_]*[[:space:]]*\(' \
        | grep -oE '\b(cu|cublas|cudnn)[A-Za-z0-9_]*[[:space:]]*\($' | tr -d ' (' | sort -u
}

make_stub() {
    local name="$1" soname="$2" header="$3"; shift 3
    local out="$T/stubs/lib$name.so"
    [[ -f "$out" ]] && return
    mkdir -p "$T/stubs"
    header_functions "$header" "$@" \
        | awk '{ printf "int %s(void) { return 999; }\n", $1 }' > "$T/stubs/$name.c"
    gcc -shared -fPIC -w -Wl,-soname,"$soname" -o "$T/stubs/$soname" "$T/stubs/$name.c"
    ln -sf "$soname" "$out"
    echo "tagged_build.sh: stub $soname: $(wc -l < "$T/stubs/$name.c") symbols" >&2
}

# make_shim DIR SONAME STATUS HEADER INCLUDE_DIRS... : a test shim (see the
# header of this file) in DIR: create/destroy succeed, the error-string
# functions return a constant string, every other function prints its name
# once per call and returns STATUS.
make_shim() {
    local dir="$1" soname="$2" status="$3" header="$4"; shift 4
    local c="$dir/${soname%%.so*}.c"
    {
        echo '#include <stdio.h>'
        echo 'static int handle;'
        echo 'static int shim_called(const char *f, int status) {'
        echo '    fprintf(stderr, "msa test shim: %s called: this library is test scaffolding (kernels/cuda/tagged_build.sh --graph-bin), not the real one\n", f);'
        echo '    return status;'
        echo '}'
        echo 'int cublasCreate_v2(void **h) { *h = &handle; return 0; }'
        echo 'int cublasDestroy_v2(void *h) { (void)h; return 0; }'
        echo 'int cudnnCreate(void **h) { *h = &handle; return 0; }'
        echo 'int cudnnDestroy(void *h) { (void)h; return 0; }'
        echo 'const char *cudnnGetErrorString(int s) { (void)s; return "msa test shim: cuDNN is not provided"; }'
        echo 'const char *cublasGetStatusName(int s) { (void)s; return "msa test shim: cuBLAS is not provided"; }'
        echo 'const char *cublasGetStatusString(int s) { (void)s; return "msa test shim: cuBLAS is not provided"; }'
        header_functions "$header" "$@" \
            | grep -vxE 'cublasCreate_v2|cublasDestroy_v2|cudnnCreate|cudnnDestroy|cudnnGetErrorString|cublasGetStatusName|cublasGetStatusString' \
            | awk -v st="$status" '{ printf "int %s(void) { return shim_called(\"%s\", %s); }\n", $1, $1, st }'
    } > "$c"
    gcc -shared -fPIC -w -Wl,-soname,"$soname" -o "$dir/$soname" "$c"
    rm -f "$c"
}

# make_init_shim DIR : the init shim (see the header of this file) in DIR.
make_init_shim() {
    local dir="$1"
    mkdir -p "$dir"
    sed 's/^int cuInit(void) { return 999; }$/int cuInit(void) { return 0; }/' "$T/stubs/cuda.c" > "$dir/cuda.c"
    if ! grep -qx 'int cuInit(void) { return 0; }' "$dir/cuda.c"; then
        echo "tagged_build.sh: FAIL: no cuInit in the libcuda link stub's source" >&2
        exit 1
    fi
    gcc -shared -fPIC -w -Wl,-soname,libcuda.so.1 -o "$dir/libcuda.so.1" "$dir/cuda.c"
    rm -f "$dir/cuda.c"
}

setup() {
    mkdir -p "$T"
    fetch_headers "nvidia-cuda-runtime-cu12==12.9.79" "nvidia/cuda_runtime/include" "$T/cuda12/include"
    fetch_headers "nvidia-cuda-nvcc-cu12==12.9.86" "nvidia/cuda_nvcc/include/crt" "$T/crt12/include/crt"
    fetch_headers "nvidia-cuda-cccl-cu12==12.9.27" "nvidia/cuda_cccl/include" "$T/cccl12/include"
    fetch_headers "nvidia-cublas-cu12==12.9.1.4" "nvidia/cublas/include" "$T/cublas12/include"
    fetch_headers "nvidia-cudnn-cu12==8.9.7.29" "nvidia/cudnn/include" "$T/cudnn8/include"
    make_stub cuda libcuda.so.1 cuda.h "$T/cuda12/include"
    make_stub cublas libcublas.so.12 cublas_v2.h "$T/cublas12/include" "$T/cuda12/include" "$T/crt12/include" "$T/cccl12/include"
    make_stub cudnn libcudnn.so.8 cudnn.h "$T/cudnn8/include" "$T/cuda12/include" "$T/crt12/include" "$T/cccl12/include"

    if grep -Eq "^[[:space:]]*gorgonia.org/cu $CU_VERSION\b" "$ROOT/go.mod"; then
        MODFLAGS=()
        return
    fi
    # private module file with gorgonia.org/cu v0.9.6
    mkdir -p "$T/mod"
    cp "$ROOT/go.mod" "$T/mod/go.mod"
    cp "$ROOT/go.sum" "$T/mod/go.sum"
    (cd "$ROOT" && go mod edit -modfile="$T/mod/go.mod" -require=gorgonia.org/cu@$CU_VERSION \
        && GOFLAGS=-mod=mod go mod download -modfile="$T/mod/go.mod" gorgonia.org/cu >/dev/null 2>&1 || true)
    MODFLAGS=(-modfile="$T/mod/go.mod" -mod=mod)
}

MODFLAGS=()
setup
export CGO_ENABLED=1
export CGO_CFLAGS="-I$T/cuda12/include -I$T/crt12/include -I$T/cccl12/include -I$T/cublas12/include -I$T/cudnn8/include -Wno-deprecated-declarations"
export CGO_LDFLAGS="-L$T/stubs"

MODE="${1:-}"
if [[ "$MODE" == "--env" ]]; then
    echo "export CGO_ENABLED=1"
    echo "export CGO_CFLAGS='$CGO_CFLAGS'"
    echo "export CGO_LDFLAGS='$CGO_LDFLAGS'"
    echo "# go flags: ${MODFLAGS[*]} -tags cuda"
    exit 0
fi

cd "$ROOT"
now() { date +%s; }
start=$(now)
t=$(now)
go build "${MODFLAGS[@]}" -tags cuda ./...
echo "tagged_build.sh: go build -tags cuda ./... OK ($(( $(now) - t )) s)" >&2

case "$MODE" in
--graph-bin)
    BIN_DIR="${2:?--graph-bin needs a directory}"
    mkdir -p "$BIN_DIR/shims"
    make_shim "$BIN_DIR/shims" libcublas.so.12 15 cublas_v2.h "$T/cublas12/include" "$T/cuda12/include" "$T/crt12/include" "$T/cccl12/include"
    make_shim "$BIN_DIR/shims" libcudnn.so.8 9 cudnn.h "$T/cudnn8/include" "$T/cuda12/include" "$T/crt12/include" "$T/cccl12/include"
    # The shims do what Gorgonia's engine needs and nothing else.
    python3 - "$BIN_DIR/shims" <<'PY'
import ctypes, sys
d = sys.argv[1]
for lib, create, other, status in (("libcublas.so.12", "cublasCreate_v2", "cublasSgemm_v2", 15),
                                   ("libcudnn.so.8", "cudnnCreate", "cudnnConvolutionForward", 9)):
    so = ctypes.CDLL(f"{d}/{lib}")
    h = ctypes.c_void_p()
    if getattr(so, create)(ctypes.byref(h)) != 0 or not h.value:
        sys.exit(f"tagged_build.sh: FAIL: shim {lib}: {create} did not succeed with a handle")
    if getattr(so, other)() != status:
        sys.exit(f"tagged_build.sh: FAIL: shim {lib}: {other} did not return {status}")
PY
    go test "${MODFLAGS[@]}" -tags cuda -c -o "$BIN_DIR/graph_test.test" ./graph_test
    size=$(du -cb "$BIN_DIR/graph_test.test" "$BIN_DIR/shims"/*.so.* | tail -n 1 | cut -f 1)
    echo "tagged_build.sh: $BIN_DIR/graph_test.test + shims/: $((size / 1048576)) MiB" >&2
    if (( size > 48 * 1048576 )); then
        echo "tagged_build.sh: FAIL: the graph binary and its shims take $size bytes (a device run carries 64 MiB with the rest)" >&2
        exit 1
    fi
    # Here (no GPU): against the libcuda link stub the binary must stop
    # before any test with one line from cuda/driver/initcheck.
    rc=0
    LD_LIBRARY_PATH="$BIN_DIR/shims:$T/stubs" "$BIN_DIR/graph_test.test" -test.run '^TestCUDA' > "$BIN_DIR/nodriver.txt" 2>&1 || rc=$?
    if (( rc == 2 )) && [[ $(wc -l < "$BIN_DIR/nodriver.txt") -eq 1 ]] && grep -q "cannot use the GPU" "$BIN_DIR/nodriver.txt"; then
        echo "tagged_build.sh: without a driver graph_test.test stops cleanly: $(cat "$BIN_DIR/nodriver.txt")" >&2
        rm -f "$BIN_DIR/nodriver.txt"
    else
        echo "tagged_build.sh: FAIL: graph_test.test without a driver exited $rc (want 2 and one \"cannot use the GPU\" line):" >&2
        cat "$BIN_DIR/nodriver.txt" >&2
        exit 1
    fi
    ;;
--all | --all-bin)
    t=$(now)
    go vet "${MODFLAGS[@]}" -tags cuda ./...
    echo "tagged_build.sh: go vet -tags cuda ./... OK ($(( $(now) - t )) s)" >&2
    if [[ "$MODE" == --all-bin ]]; then
        BIN_DIR="${2:?--all-bin needs a directory}"
    elif [[ -n "${MSA_TEST_BIN_DIR:-}" ]]; then
        BIN_DIR="$MSA_TEST_BIN_DIR"
    else
        BIN_DIR="$(mktemp -d "${TMPDIR:-/tmp}/msa-tagged-bin.XXXXXX")"
        trap 'rm -rf "$BIN_DIR"' EXIT
    fi
    mkdir -p "$BIN_DIR"
    t=$(now)
    # One binary per package with tests, named from the whole import path
    # (`go test -c -o dir/` names it from the last element only, which two
    # packages may share).
    mod="$(go list "${MODFLAGS[@]}" -m)"
    n=0
    for pkg in $(go list "${MODFLAGS[@]}" -tags cuda -f '{{if or .TestGoFiles .XTestGoFiles}}{{.ImportPath}}{{end}}' ./...); do
        rel="${pkg#"$mod"}"; rel="${rel#/}"; [[ -z "$rel" ]] && rel=root
        name="${rel//\//_}.test"
        go test "${MODFLAGS[@]}" -tags cuda -c -o "$BIN_DIR/$name" "$pkg"
        echo "tagged_build.sh:   go test -c -tags cuda $pkg -> $name" >&2
        n=$((n + 1))
    done
    echo "tagged_build.sh: $n test binaries compiled with -tags cuda ($(( $(now) - t )) s) in $BIN_DIR" >&2
    # The launch layer's tests that need no driver (a recording fake of the
    # driver calls): 0 allocations per decode and prefill call, Close,
    # no-driver errors.
    t=$(now)
    "$BIN_DIR/cuda.test" -test.count=1 \
        -test.run '^(TestDecodeRunAllocatesNothing|TestPrepareDecodeOwnsItsSteps|TestSparsePrefillRunAllocatesNothing|TestAutoPrefillRefusals|TestAutoPrefillChoice|TestCloseFreesAll|TestKernelsClosedConcurrent|TestNoDriver)$'
    echo "tagged_build.sh: driverless launch tests of cuda.test OK ($(( $(now) - t )) s)" >&2
    # The graph nodes' CUDA paths on fakes (decode, sparse prefill, the host
    # nodes): 0 allocations per warm run, the CPU path's refusals (op.test
    # starts only with cuInit succeeding).
    t=$(now)
    make_init_shim "$BIN_DIR/initshim"
    LD_LIBRARY_PATH="$BIN_DIR/initshim:$T/stubs" "$BIN_DIR/op.test" -test.count=1 \
        -test.run '^(TestDecodeCUDARunAllocatesNothing|TestDecodeCUDARefusals|TestSparseCUDARunAllocatesNothing|TestSparseCUDARefusals|TestHostNodesCUDARunAllocateNothing|TestHostNodesCUDARefusals|TestCastCUDALargeAllocations)$'
    echo "tagged_build.sh: driverless graph node tests of op.test OK ($(( $(now) - t )) s)" >&2
    ;;
*)
    t=$(now)
    go vet "${MODFLAGS[@]}" -tags cuda ./cuda ./op
    echo "tagged_build.sh: go vet -tags cuda ./cuda ./op OK ($(( $(now) - t )) s)" >&2
    BIN_DIR="${MSA_TEST_BIN_DIR:-$T/bin}"
    [[ "$MODE" == "--test-bin" ]] && BIN_DIR="${2:?--test-bin needs a directory}"
    mkdir -p "$BIN_DIR"
    go test "${MODFLAGS[@]}" -tags cuda -c -o "$BIN_DIR/cuda.test" ./cuda
    echo "tagged_build.sh: test binary $BIN_DIR/cuda.test (opens libcuda.so.1 at run time; its GPU tests skip without a driver)" >&2
    ;;
esac
echo "tagged_build.sh: all OK in $(( $(now) - start )) s" >&2
