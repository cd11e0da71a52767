#!/usr/bin/env bash
# kernels/cuda/ci.sh - the CUDA checks of CI (called by .ci/run when executable).
# Needs no GPU and no CUDA installation:
#
#   1. build.sh --check   rebuild the fatbin from kernels/cuda/*.cu with the pinned
#                         CUDA 13.0.2 wheels; fail on spills / local memory / LDL/STL /
#                         missing SASS / arch-specific PTX; the rebuild must match the
#                         committed msa_kernels.fatbin (bytes, else normalised SASS).
#   2. SASS inspection    of the committed fatbin: exactly the expected kernels
#                         (sparse_fwd, decode, combine x D 64/128/256), in embed.go
#                         and for every architecture; every kernel has a
#                         real body (not a printf stub) for sm_80, sm_90a and
#                         sm_100a, does floating point work (FFMA) and has no
#                         local-memory instructions.
#   3. tagged_build.sh --all   go build + go vet -tags cuda ./... and go test -c
#                         -tags cuda of every package (binaries in a temp dir).
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

# ---- 2. SASS inspection of the committed fatbin ---------------------------------------
t=$(now)
CUDA_HOME="$("$HERE/build.sh" --toolkit)"
CUOBJDUMP="$CUDA_HOME/bin/cuobjdump"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/msa-ci.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
"$CUOBJDUMP" -sass "$HERE/msa_kernels.fatbin" > "$WORK/sass.txt"
kernels=$(sed -nE 's/^[[:space:]]*[A-Za-z0-9]+[[:space:]]*=[[:space:]]*"(msa_[a-z0-9_]+)"$/\1/p' "$HERE/embed.go")
[[ -n "$kernels" ]] || { echo "ci.sh: no kernel names found in embed.go" >&2; exit 1; }
# The expected kernel set: three algorithms x head dims 64, 128, 256. embed.go
# and the fatbin must both hold exactly these (no missing, no extra entry).
EXPECTED_KERNELS="msa_combine_d128 msa_combine_d256 msa_combine_d64 msa_decode_d128 msa_decode_d256 msa_decode_d64 msa_sparse_fwd_d128 msa_sparse_fwd_d256 msa_sparse_fwd_d64"
got_kernels=$(printf '%s\n' $kernels | sort | xargs)
if [[ "$got_kernels" != "$EXPECTED_KERNELS" ]]; then
    echo "ci.sh: FAIL: embed.go names [$got_kernels], expected [$EXPECTED_KERNELS]" >&2; exit 1
fi
for arch in sm_80 sm_90a sm_100a; do
    fat_kernels=$(awk -v a="$arch" '/code for sm_/ { match($0, /sm_[0-9a-z]+/); cur = substr($0, RSTART, RLENGTH) }
                                   /Function : / && cur == a { print $NF }' "$WORK/sass.txt" | sort -u | xargs)
    if [[ "$fat_kernels" != "$EXPECTED_KERNELS" ]]; then
        echo "ci.sh: FAIL: the fatbin's $arch kernels are [$fat_kernels], expected [$EXPECTED_KERNELS]" >&2; exit 1
    fi
done
# Per (arch, function): instruction count, FFMA count, stub / local-memory markers.
awk '
    /code for sm_/ { match($0, /sm_[0-9a-z]+/); arch = substr($0, RSTART, RLENGTH) }
    /Function : / { fn = $NF; key = arch " " fn; seen[key] = 1; next }
    /^[[:space:]]*\/\*[0-9a-f][0-9a-f][0-9a-f][0-9a-f]+\*\// {
        if (key == "") next
        n[key]++
        if ($0 ~ /FFMA|HFMA2|HMMA|UTCHMMA|UTCQMMA/) f[key]++
        if ($0 ~ /vprintf/) stub[key]++
        if ($0 ~ /[[:space:]](LDL|STL)[[:space:].]/) lmem[key]++
    }
    END { for (k in seen) printf "%s %d %d %d %d\n", k, n[k], f[k], stub[k], lmem[k] }
' "$WORK/sass.txt" | sort > "$WORK/stats.txt"
fail=0
printf '%-8s %-22s %6s %6s\n' arch kernel instrs fma >&2
for arch in sm_80 sm_90a sm_100a; do
    for k in $kernels; do
        line=$(awk -v a="$arch" -v k="$k" '$1 == a && $2 == k' "$WORK/stats.txt")
        if [[ -z "$line" ]]; then
            echo "ci.sh: FAIL: no SASS for $k on $arch" >&2; fail=1; continue
        fi
        read -r _ _ ni nf ns nl <<< "$line"
        printf '%-8s %-22s %6d %6d\n' "$arch" "$k" "$ni" "$nf" >&2
        if (( ni < 100 )); then echo "ci.sh: FAIL: $k on $arch has only $ni instructions (a stub?)" >&2; fail=1; fi
        if (( nf == 0 )); then echo "ci.sh: FAIL: $k on $arch does no FMA work" >&2; fail=1; fi
        if (( ns > 0 )); then echo "ci.sh: FAIL: $k on $arch calls vprintf (a printf stub kernel)" >&2; fail=1; fi
        if (( nl > 0 )); then echo "ci.sh: FAIL: $k on $arch uses local memory (LDL/STL)" >&2; fail=1; fi
    done
done
[[ $fail == 0 ]] || exit 1
mark "SASS inspection" "$t"

# ---- 3. tagged build / vet / test -c of every package ----------------------------------
t=$(now)
"$HERE/tagged_build.sh" --all
mark "tagged build --all" "$t"

echo >&2
echo "ci.sh: timings" >&2
printf '  %s\n' "${TIMES[@]}" >&2
echo "ci.sh: all CUDA checks passed in $(( $(now) - T0 )) s" >&2
