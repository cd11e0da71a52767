#!/usr/bin/env bash
# kernels/cuda/build.sh - build the CUDA kernels into ONE compressed fatbin:
# SASS for sm_80, sm_90a and sm_100f (the SM100 family: B200 sm_100 and B300
# sm_103), plus compute_80 PTX (portable, JIT-compilable by newer GPUs),
# from PyPI wheels of a pinned CUDA 13.0 toolkit.
#
#   kernels/cuda/build.sh            rebuild kernels/cuda/fatbin/msa_kernels.fatbin
#   kernels/cuda/build.sh --check    rebuild into a temp file, verify, compare with the committed fatbin
#   kernels/cuda/build.sh --toolkit  only install the toolkit (prints CUDA_HOME)
#   kernels/cuda/build.sh --cutlass  only install the toolkit (prints the CUTLASS/CuTe include dir)
#
# The sources are the .cu files of the family folders (portable/, sm80/,
# sm90/, sm100/) with the headers of shared/. Every build fails when a .cu
# lies outside those folders or a folder includes another family's header
# (shared/ includes only shared/, a family only shared/ and itself), on
# register spills, stack frames / local memory (ptxas -v),
# on LDL/STL instructions in the SASS (cuobjdump -sass) and on PTX of an
# architecture- or family-specific target; it prints the per-kernel,
# per-architecture register counts. The per-kernel gates (gates/*.tsv) and
# the committed SASS table are ci.sh's (gates/check_gates.py).
#
# Environment: MSA_CUDA_CACHE (default $HOME/.cache/msa-cuda) holds the
# toolkit, outside the repository, reused when present. MSA_NVCC_THREADS
# (default 2) is nvcc --threads.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE="${MSA_CUDA_CACHE:-$HOME/.cache/msa-cuda}"

# ---- pinned toolkit --------------------------------------------------------
# cuda-toolkit 13.0.2 pins nvcc/nvvm/crt 13.0.88, cudart 13.0.96, cccl 13.0.85
# (one release; skewed versions fail with "Unsupported .version").
# cuobjdump and nvdisasm (cuobjdump -sass runs nvdisasm) have no 13.0 wheel
# on PyPI (the first is 13.2.51); they only read the finished fatbin, so they
# are pinned on their own, in the same pip call.
TOOLKIT_VERSION=13.0.2
CUOBJDUMP_VERSION=13.2.51
# CUTLASS/CuTe C++ headers (BSD-3-Clause) for the tensor-core kernels, into the
# same cache directory. A second pip call with --no-deps: the wheel declares
# Python dependencies (cuda-python, scipy, networkx, ...) that the C++ headers
# do not need, and --no-deps cannot be given per requirement.
CUTLASS_VERSION=4.2.0.0
TK="$CACHE/toolkit-$TOOLKIT_VERSION-sasstools-$CUOBJDUMP_VERSION-cutlass-$CUTLASS_VERSION"
CUDA_HOME="$TK/nvidia/cu13"
CUTLASS_INCLUDE="$TK/cutlass_library/source/include"

install_toolkit() {
    if [[ -x "$CUDA_HOME/bin/nvcc" && -x "$CUDA_HOME/bin/cuobjdump" && -x "$CUDA_HOME/bin/nvdisasm" && -d "$CUTLASS_INCLUDE/cute" && -f "$TK/.complete" ]]; then
        return
    fi
    echo "build.sh: installing CUDA $TOOLKIT_VERSION wheels into $TK" >&2
    rm -rf "$TK.tmp"
    mkdir -p "$CACHE"
    python3 -m pip install --quiet --disable-pip-version-check --no-warn-script-location --root-user-action=ignore \
        --target "$TK.tmp" \
        "cuda-toolkit[nvcc,nvvm,crt,cudart,cccl]==$TOOLKIT_VERSION" \
        "nvidia-cuda-cuobjdump==$CUOBJDUMP_VERSION" \
        "nvidia-cuda-nvdisasm==$CUOBJDUMP_VERSION"
    python3 -m pip install --quiet --disable-pip-version-check --no-warn-script-location --root-user-action=ignore \
        --no-deps --target "$TK.tmp" "nvidia-cutlass==$CUTLASS_VERSION"
    rm -rf "$TK"
    mv "$TK.tmp" "$TK"
    touch "$TK/.complete"
}

install_toolkit
export CUDA_HOME CUTLASS_INCLUDE
export PATH="$CUDA_HOME/bin:$PATH"
if [[ "${1:-}" == "--toolkit" ]]; then
    echo "$CUDA_HOME"
    exit 0
fi
if [[ "${1:-}" == "--cutlass" ]]; then
    echo "$CUTLASS_INCLUDE"
    exit 0
fi

MODE=build
[[ "${1:-}" == "--check" ]] && MODE=check

# sm_100f: family-specific SASS, runs on every SM100-family GPU (sm_100,
# sm_103); the tcgen05 kernels (sm100_*.cu) have real bodies only in this
# image and trap in the others. compute_80 PTX carries only code that any
# GPU >= sm_80 can JIT (the check below rejects "a"/"f" PTX).
GENCODE=(
    -gencode arch=compute_80,code=[sm_80,compute_80]
    -gencode arch=compute_90a,code=sm_90a
    -gencode arch=compute_100f,code=sm_100f
)
ARCHS=(sm_80 sm_90a sm_100f)

WORK="$(mktemp -d "${TMPDIR:-/tmp}/msa-cuda-build.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

# One translation unit including every .cu of the family folders, so that a
# single module (one cubin per architecture) holds every kernel. The unit
# lives in a directory of its own with a fixed name; sources are found
# through -I kernels/cuda (every #include names its folder: "shared/...",
# "sm100/..."), so no absolute path of this machine can reach the output.
# The sources are included in the order of their file names, whatever their
# folder, so the kernels' order in the module (and the bytes of the fatbin)
# does not depend on which folder a file lives in.
FAMILIES=(portable sm80 sm90 sm100)

# Layout rules, checked before compiling: every kernel source (.cu outside a
# hosttest/ folder) is in a family folder, so none is left out of the unit;
# shared/ includes only shared/, and a family only shared/ and itself.
layout_ok=1
while IFS= read -r f; do
    rel="${f#"$HERE"/}"
    [[ " ${FAMILIES[*]} " == *" ${rel%%/*} "* && "$rel" == */*.cu && "$rel" != */*/* ]] || {
        echo "build.sh: FAIL: $rel is a .cu outside the family folders (${FAMILIES[*]})" >&2; layout_ok=0; }
done < <(find "$HERE" -name '*.cu' -not -path '*/hosttest/*' | LC_ALL=C sort)
for dir in shared "${FAMILIES[@]}"; do
    while IFS= read -r line; do
        inc="${line#*\"}"; inc="${inc%%\"*}"
        [[ "$inc" == shared/* || "$inc" == "$dir"/* ]] || {
            echo "build.sh: FAIL: ${line%%:*}: #include \"$inc\": $dir/ may include only shared/ and $dir/" >&2; layout_ok=0; }
    done < <(cd "$HERE" && grep -H '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$dir"/*.cu "$dir"/*.cuh "$dir"/*.h 2>/dev/null)
done
[[ $layout_ok == 1 ]] || exit 1

mkdir -p "$WORK/tu"
UNIT="$WORK/tu/msa_kernels.cu"
: > "$UNIT"
for fam in "${FAMILIES[@]}"; do
    for f in "$HERE/$fam"/*.cu; do echo "$(basename "$f") $fam/$(basename "$f")"; done
done | LC_ALL=C sort | while read -r _ rel; do
    echo "#include \"$rel\"" >> "$UNIT"
done

OUT_FATBIN="$HERE/fatbin/msa_kernels.fatbin"
[[ "$MODE" == check ]] && OUT_FATBIN="$WORK/msa_kernels.fatbin"

start=$(date +%s)
( cd "$WORK/tu" && nvcc -fatbin -std=c++17 -O3 "${GENCODE[@]}" -Xptxas -v -Xfatbin=-compress-all \
      --threads "${MSA_NVCC_THREADS:-2}" -I "$HERE" -I "$CUTLASS_INCLUDE" -o "$WORK/out.fatbin" msa_kernels.cu ) \
      > "$WORK/ptxas.log" 2>&1 || { cat "$WORK/ptxas.log" >&2; echo "build.sh: nvcc failed" >&2; exit 1; }
echo "build.sh: nvcc took $(( $(date +%s) - start )) s" >&2

# ---- ptxas resource check: no spills, no stack frame (local memory) ----------
fail=0
if ! awk '
    /Compiling entry function/ { match($0, /'"'"'[^'"'"']+'"'"'/); fn = substr($0, RSTART+1, RLENGTH-2);
                                 match($0, /for '"'"'sm_[0-9a-z]+'"'"'/); arch = substr($0, RSTART+5, RLENGTH-6); n++ }
    /bytes stack frame/ { if ($1 != 0 || $5 != 0 || $9 != 0) { printf "SPILL/STACK %s %s: %s\n", fn, arch, $0; bad = 1 } }
    /bytes lmem/ { if (match($0, /[1-9][0-9]* bytes lmem/)) { printf "LMEM %s %s: %s\n", fn, arch, $0; bad = 1 } }
    END { if (n == 0) { print "no ptxas -v output"; bad = 1 } exit bad }
' "$WORK/ptxas.log" >&2; then
    echo "build.sh: FAIL: register spills or local memory (ptxas -v):" >&2
    grep -E "Compiling entry|stack frame|registers" "$WORK/ptxas.log" >&2
    fail=1
fi

# ---- SASS inspection ---------------------------------------------------------
cuobjdump -res-usage "$WORK/out.fatbin" > "$WORK/res.txt"
echo "kernel                   arch     regs  shared  stack  local" >&2
awk '
    /arch = sm_/ { match($0, /sm_[0-9a-z]+/); arch = substr($0, RSTART, RLENGTH) }
    /Function [A-Za-z0-9_]+:/ { fn = $2; sub(":", "", fn) }
    /REG:/ { for (i = 1; i <= NF; i++) { split($i, kv, ":"); v[kv[1]] = kv[2] }
             printf "%-24s %-8s %4s  %6s  %5s  %5s\n", fn, arch, v["REG"], v["SHARED"], v["STACK"], v["LOCAL"]
             if (v["STACK"] != 0 || v["LOCAL"] != 0) bad = 1 }
    END { exit bad }
' "$WORK/res.txt" >&2 || { echo "build.sh: FAIL: stack or local memory in the SASS resource usage" >&2; fail=1; }

cuobjdump -sass "$WORK/out.fatbin" > "$WORK/sass.txt"
# (listings go to files first: `cuobjdump | grep -q` under pipefail fails at
# random when grep exits early and cuobjdump dies of SIGPIPE)
cuobjdump -lelf "$WORK/out.fatbin" > "$WORK/elf.txt"
cuobjdump -lptx "$WORK/out.fatbin" > "$WORK/ptx.txt" 2>/dev/null || true
# cuobjdump -lelf names the family image sm_100f "...sm_100.cubin" and
# -lptx names the compute_80 PTX "...sm_80.ptx".
for a in "${ARCHS[@]}"; do
    grep -q "\.${a%f}\.cubin" "$WORK/elf.txt" || { echo "build.sh: FAIL: no SASS for $a" >&2; fail=1; }
done
grep -q "\.sm_80\.ptx" "$WORK/ptx.txt" || { echo "build.sh: FAIL: no compute_80 PTX" >&2; fail=1; }
if [[ $(grep -c "PTX file" "$WORK/ptx.txt") != 1 ]] || grep -Eq "(sm|compute)_[0-9]+[af]\b" "$WORK/ptx.txt"; then
    echo "build.sh: FAIL: PTX embedded for a target other than compute_80 (an arch- or family-specific PTX cannot be JIT-compiled elsewhere):" >&2
    cat "$WORK/ptx.txt" >&2
    fail=1
fi
if grep -Eq "\b(LDL|STL)(\.[A-Z0-9.]+)?\b" "$WORK/sass.txt"; then
    echo "build.sh: FAIL: local memory instructions in the SASS:" >&2
    grep -En -m 20 "\b(LDL|STL)" "$WORK/sass.txt" >&2 || true
    fail=1
fi
nk=$(grep -c "Function : " "$WORK/sass.txt" || true)
echo "build.sh: SASS: $nk kernel images, no LDL/STL" >&2
[[ $fail == 0 ]] || exit 1

# Normalised SASS: instruction text only (addresses, encodings and comments
# dropped), per arch and function.
normalise_sass() {
    cuobjdump -sass "$1" | sed -E -e 's@/\*[0-9a-f]{4,}\*/@@g' -e 's@/\* 0x[0-9a-f]+ \*/@@g' \
        -e 's/[[:space:]]+/ /g' -e 's/ ;/;/' | grep -vE '^ ?$|^ ?Fatbin|code for sm_' 
}

if [[ "$MODE" == check ]]; then
    COMMITTED="$HERE/fatbin/msa_kernels.fatbin"
    [[ -f "$COMMITTED" ]] || { echo "build.sh: --check: $COMMITTED is missing" >&2; exit 1; }
    if cmp -s "$WORK/out.fatbin" "$COMMITTED"; then
        echo "build.sh: --check OK: bit-identical to the committed fatbin ($(stat -c %s "$COMMITTED") bytes)" >&2
        exit 0
    fi
    # Fallback: two builds of the same sources differ in bytes, since nvcc
    # names the internal-linkage symbols of the compute_80 PTX with a hash
    # that changes from build to build; compare the normalised SASS, which
    # is what the GPU runs.
    if diff <(normalise_sass "$WORK/out.fatbin") <(normalise_sass "$COMMITTED") > "$WORK/sass.diff"; then
        echo "build.sh: --check OK: bytes differ but the SASS is identical" >&2
        exit 0
    fi
    echo "build.sh: --check FAILED: the committed fatbin is stale (SASS differs):" >&2
    head -40 "$WORK/sass.diff" >&2
    exit 1
fi

cp "$WORK/out.fatbin" "$OUT_FATBIN"
echo "build.sh: wrote $OUT_FATBIN ($(stat -c %s "$OUT_FATBIN") bytes) in $(( $(date +%s) - start )) s" >&2
