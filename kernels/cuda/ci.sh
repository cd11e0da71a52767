#!/usr/bin/env bash
# kernels/cuda/ci.sh - the CUDA checks of CI (called by .ci/run when executable).
# Needs no GPU and no CUDA installation:
#
#   1. build.sh --check   rebuild the fatbin from the family folders' .cu with the pinned
#                         CUDA 13.0.2 wheels; fail on spills / local memory / LDL/STL /
#                         missing SASS / arch-specific PTX; the rebuild must match the
#                         committed fatbin/msa_kernels.fatbin (bytes, else normalised SASS).
#   2. gates/check_gates.py   static gates of the committed fatbin: exactly the
#                         kernels named in kernels/cuda/fatbin/*.go in every SASS image
#                         (sm_80, sm_90a, sm_100f); per kernel x image the rows of
#                         gates/*.tsv (required / forbidden instructions, e.g.
#                         UTCHMMA / UTCQMMA, UTMALDG, LDTM on sm_100f and no
#                         LDL/STL anywhere; minimum instruction count; registers;
#                         stack; dynamic shared memory and TMEM columns equal to
#                         the Go kernel table); prints the SASS table and fails
#                         when gates/sass_table.md is stale.
#   3. tagged_build.sh --all   go build + go vet -tags cuda ./... and go test -c
#                         -tags cuda of every package (binaries in a temp dir).
#   4. tagged_build.sh --graph-bin   the runbook's graph test binary and its cuBLAS / cuDNN
#                         test shims (checked, under 48 MiB together); the binary must stop
#                         with one "cannot use the GPU" line here, where there is no driver.
#
# Tools are installed on first use into ${MSA_CUDA_CACHE:-$HOME/.cache/msa-cuda}
# (pip wheels); python3 + pip and gcc come from Debian packages when missing
# (apt-get, needs root). Timings of each step are printed at the end.
#
# Environment: MSA_CI_SKIP_FATBIN=1 skips step 1 (e.g. on a host where pip
# cannot reach PyPI); MSA_NVCC_THREADS as in build.sh.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
cd "$ROOT"

now() { date +%s; }
T0=$(now)
TIMES=()
mark() { TIMES+=("$(printf '%-28s %4d s' "$1" "$(( $(now) - $2 ))")"); }

# ---- prerequisites (fresh machine) -------------------------------------------------
t=$(now)
need_pkgs=()
command -v python3 >/dev/null || need_pkgs+=(python3)
python3 -m pip --version >/dev/null 2>&1 || need_pkgs+=(python3-pip)
command -v gcc >/dev/null || need_pkgs+=(gcc libc6-dev)
if ((${#need_pkgs[@]})); then
    echo "ci.sh: installing Debian packages: ${need_pkgs[*]}" >&2
    SUDO=""
    [[ $(id -u) -ne 0 ]] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >/dev/null
fi
# Debian's python3 marks its site-packages externally managed; the scripts
# install with `pip install --target` / `pip download`, which that does not
# block, but allow it anyway for older pips.
export PIP_BREAK_SYSTEM_PACKAGES=1
mark "prerequisites" "$t"

# ---- 1. fatbin rebuild check ---------------------------------------------------------
if [[ "${MSA_CI_SKIP_FATBIN:-0}" != 1 ]]; then
    t=$(now)
    "$HERE/build.sh" --check
    mark "build.sh --check" "$t"
else
    echo "ci.sh: MSA_CI_SKIP_FATBIN=1: fatbin rebuild check skipped" >&2
fi

# ---- 2. static gates of the committed fatbin (gates/check_gates.py) --------------------
t=$(now)
CUDA_HOME="$("$HERE/build.sh" --toolkit)"
python3 "$HERE/gates/check_gates.py" --cuobjdump "$CUDA_HOME/bin/cuobjdump" \
    --fatbin "$HERE/fatbin/msa_kernels.fatbin" --dir "$HERE"
mark "static gates (SASS table)" "$t"

# ---- 3. tagged build / vet / test -c of every package ----------------------------------
t=$(now)
"$HERE/tagged_build.sh" --all
mark "tagged build --all" "$t"

# ---- 4. the runbook's graph test binary with its test shims ------------------------------
t=$(now)
GRAPH_BIN="$(mktemp -d "${TMPDIR:-/tmp}/msa-graph-bin.XXXXXX")"
"$HERE/tagged_build.sh" --graph-bin "$GRAPH_BIN"
rm -rf "$GRAPH_BIN"
mark "graph test binary + shims" "$t"

echo >&2
echo "ci.sh: timings" >&2
printf '  %s\n' "${TIMES[@]}" >&2
echo "ci.sh: all CUDA checks passed in $(( $(now) - T0 )) s" >&2
