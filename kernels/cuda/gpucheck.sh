#!/usr/bin/env bash
# kernels/cuda/gpucheck.sh - the GPU check of a bare machine (kernels/cuda/GPU_CHECK.md).
#
#   kernels/cuda/gpucheck.sh --build [DIR]   build DIR/gpucheck and DIR/kernels_comm.test (the
#                                            runbook's NCCL stage; default kernels/cuda/bin) on any
#                                            machine with Go and gcc; no GPU, no CUDA library
#   kernels/cuda/gpucheck.sh [DIR [FLAGS]]   run DIR/gpucheck on the GPU machine: needs an NVIDIA
#                                            driver and nothing else (no Go, toolkit, cuBLAS,
#                                            cuDNN or network); report in $OUT (else ./gpucheck-out);
#                                            FLAGS go to gpucheck (-only RE, -skip RE, -quick,
#                                            -case-timeout D)
#   kernels/cuda/gpucheck.sh --ci            build into a temp dir, check that the binary needs no
#                                            CUDA library at load time (readelf NEEDED) and that
#                                            DIR is under 64 MiB, then run it: with no driver it
#                                            must exit 2 with one "no NVIDIA driver" line, and so
#                                            must kernels/cuda/runbook.sh; then the runbook runs on
#                                            a fake device (fake_device) and must account for every
#                                            planned timing row; with a GPU it must pass
#
# The binary (cuda/gpucheck, build tag cuda) opens libcuda.so.1 at run time
# (dlopen) and links only libc: on a machine without a driver it starts and
# says so. It compares every kernel family with the CPU path (kernels/attn)
# over a shape matrix, checks masked rows and determinism, times the
# kernels at the benchmark's shapes and writes gpucheck.md, gpucheck.csv and
# timing.csv. Bounded to 5 minutes (MSA_GPUCHECK_TIMEOUT, default 290 s).
set -uo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
LIMIT="${MSA_GPUCHECK_TIMEOUT:-290}"
MAX_DIR_BYTES=$((64 * 1024 * 1024))

build() {  # DIR
    local dir="$1"
    set -e
    mkdir -p "$dir"
    # cuda.h (types and enums only; nothing is linked) from the pinned toolkit
    # of build.sh, which CI installs anyway.
    local cuda_home
    cuda_home="$("$HERE/build.sh" --toolkit)"
    [[ -f "$cuda_home/include/cuda.h" ]] || { echo "gpucheck.sh: no cuda.h under $cuda_home/include" >&2; exit 1; }
    (cd "$ROOT" && CGO_ENABLED=1 CGO_CFLAGS="-I$cuda_home/include" CGO_LDFLAGS="" \
        go build -tags cuda -trimpath -ldflags=-s -o "$dir/gpucheck" ./cuda/gpucheck)
    # The runbook's one-rank NCCL stage: kernels/comm's tests, which open libcuda.so.1 and
    # libnccl.so.2 at run time like gpucheck.
    (cd "$ROOT" && CGO_ENABLED=1 CGO_CFLAGS="-I$cuda_home/include" CGO_LDFLAGS="" \
        go test -c -tags cuda -trimpath -ldflags=-s -o "$dir/kernels_comm.test" ./kernels/comm)
    local needed b
    for b in gpucheck kernels_comm.test; do
        needed="$(readelf -d "$dir/$b" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | xargs)"
        echo "gpucheck.sh: built $dir/$b ($(stat -c %s "$dir/$b") bytes; NEEDED: $needed)" >&2
        if grep -Eq 'libcuda|libcudart|libcublas|libcudnn|libnvrtc|libnccl' <<<"$needed"; then
            echo "gpucheck.sh: FAIL: $b links a CUDA library at load time ($needed)" >&2; exit 1
        fi
    done
    local size
    size=$(du -sb "$dir" | cut -f1)
    if (( size >= MAX_DIR_BYTES )); then
        echo "gpucheck.sh: FAIL: $dir holds $size bytes (limit 64 MiB)" >&2; exit 1
    fi
    set +e
}

# fake_device DIR: the runbook's plumbing on a fake device. DIR/fake/gpucheck answers the plan
# flags with DIR/gpucheck's answers, -device-info with an sm90 line, and -stage with the stage's
# planned timing rows as measured (t-rest: the first measured, the rest skipped for time, as a
# stage that ran out of its budget), and DIR/fake/bench prints two timed cases; the runbook must
# exit 0, account for every planned row in rows.csv and timing.csv, say how many were measured
# and skipped, give each measured prefill case its line (union per tile, fastest mode) in the
# summary, and put the bench's two cases in bench/measured.csv.
fake_device() {
    local dir="$1" fake="$1/fake" out="$1/fakeout" rc planned rest
    mkdir -p "$fake"
    {
        echo '#!/usr/bin/env bash'
        echo "real='$dir/gpucheck'"
        cat <<'FAKE'
case " $* " in
*" -device-info "*) echo "sm_90 fake GPU (kernel family sm90, plan sm90)"; exit 0 ;;
*" -stage "*)
    while (( $# )); do case "$1" in -stage) name="$2"; shift ;; -out) out="$2"; shift ;; esac; shift; done
    mkdir -p "$out"
    echo "case,kernels,max_rel_o" > "$out/gpucheck.csv"
    { echo "case,kernels,ms,tflops,pct_peak_flops,gbs,pct_hbm,union_per_tile,status"
      "$real" -rows -arch sm90 | awk -F'\t' -v s="$name" '$1 == s {
          n++; skip = s == "t-rest" && n > 1
          if (skip) printf "%s,,,,,,,,skipped (time budget)\n", $2
          else printf "%s,fake,1.0,1,1,1,1,%s,ok\n", $2, ($2 ~ /^prefill/) ? "16.00" : "" }'
    } > "$out/timing.csv"
    exit 0 ;;
*) exec "$real" "$@" ;;
esac
FAKE
    } > "$fake/gpucheck"
    printf '%s\n' '#!/usr/bin/env bash' 'echo "prefill 8K: 1.5 ms median of 20, 400.0 TFLOP/s"' \
        'echo "decode b32 64K: 0.9 ms median of 20, 1.0 TFLOP/s"' > "$fake/bench"
    chmod +x "$fake/gpucheck" "$fake/bench"
    OUT="$out" "$HERE/runbook.sh" "$fake" > "$dir/fake.txt" 2>&1
    rc=$?
    planned=$("$dir/gpucheck" -rows -arch sm90 | wc -l)
    rest=$("$dir/gpucheck" -rows -arch sm90 | grep -c $'^t-rest\t')
    # prefill cases the fake measures a row of (every stage's rows but t-rest's after its first):
    # each must have its line in the summary's prefill block
    pcases=$("$dir/gpucheck" -rows -arch sm90 | awk -F'\t' '$1 != "t-rest" || !r++ { if ($2 ~ /^prefill/) { sub(/ \([^)]*\)$/, "", $2); print $2 } }' | sort -u | wc -l)
    if (( rc == 0 )) && [[ $(($(wc -l < "$out/rows.csv") - 1)) -eq $planned && $(($(wc -l < "$out/timing.csv") - 1)) -eq $planned ]] &&
        [[ $(grep -c ',measured$' "$out/rows.csv") -eq $((planned - rest + 1)) ]] &&
        [[ $(grep -c ',skipped for time$' "$out/rows.csv") -eq $((rest - 1)) ]] &&
        grep -q "^timing rows: $planned planned:.* $((planned - rest + 1)) measured;" "$out/summary.txt" &&
        grep -q "^  skipped for time: t-rest: " "$out/summary.txt" &&
        grep -q "^prefill cases: mean union" "$out/summary.txt" && [[ $(grep -c ' 16.00 blocks/tile  *1.000 ms' "$out/summary.txt") -eq $pcases ]] &&
        [[ $(grep -c ',[0-9.]*,20,' "$out/bench/measured.csv") -eq 2 ]] && grep -q "^bench .* 2 cases timed" "$out/summary.txt"; then
        echo "gpucheck.sh: the runbook on a fake device ran every stage and accounted for its $planned planned timing rows and $pcases prefill cases" >&2
        return 0
    fi
    cat "$dir/fake.txt" >&2
    echo "gpucheck.sh: FAIL: the runbook on a fake device (exit $rc): rows.csv / timing.csv / summary do not account for the $planned planned rows or the $pcases measured prefill cases, or bench/measured.csv for the bench's 2 cases" >&2
    return 1
}

case "${1:-}" in
--build)
    build "${2:-$HERE/bin}"
    exit 0
    ;;
--ci)
    dir="$(mktemp -d "${TMPDIR:-/tmp}/msa-gpucheck.XXXXXX")"
    trap 'rm -rf "$dir"' EXIT
    build "$dir"
    out="$dir/out"
    timeout --kill-after=10 "$LIMIT" "$dir/gpucheck" -out "$out" 2> "$dir/stderr"
    rc=$?
    cat "$dir/stderr" >&2
    if (( rc == 2 )) && grep -q "no NVIDIA driver" "$dir/stderr" && [[ $(wc -l < "$dir/stderr") -eq 1 ]]; then
        echo "gpucheck.sh: no NVIDIA driver here: the check stopped cleanly (exit 2, one line), as it must" >&2
        # The runbook must stop the same way: exit 2, one "no NVIDIA driver" line.
        OUT="$dir/runbook" "$HERE/runbook.sh" "$dir" > "$dir/runbook.txt" 2>&1
        rc=$?
        cat "$dir/runbook.txt" >&2
        if (( rc == 2 )) && grep -q "no NVIDIA driver" "$dir/runbook.txt" && [[ $(wc -l < "$dir/runbook.txt") -eq 1 ]]; then
            echo "gpucheck.sh: the runbook stopped cleanly too (exit 2, one line)" >&2
            fake_device "$dir"
            exit $?
        fi
        echo "gpucheck.sh: FAIL: runbook.sh exited $rc without a GPU (want 2 and one \"no NVIDIA driver\" line)" >&2
        exit 1
    fi
    [[ -f "$out/gpucheck.md" ]] && cat "$out/gpucheck.md"
    echo "gpucheck.sh: gpucheck exited $rc" >&2
    exit $rc
    ;;
esac

BIN="${1:-$HERE/bin}/gpucheck"
shift || true
if [[ ! -x "$BIN" ]]; then
    echo "gpucheck.sh: no binary at $BIN (build it with kernels/cuda/gpucheck.sh --build)" >&2
    exit 2
fi
if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv,noheader || true
fi
OUTDIR="${OUT:-$PWD/gpucheck-out}"
start=$(date +%s)
timeout --kill-after=10 "$LIMIT" "$BIN" -out "$OUTDIR" -budget "$((LIMIT - 40))s" "$@"
rc=$?
if [[ -f "$OUTDIR/gpucheck.md" ]]; then
    echo "gpucheck.sh: exit $rc after $(( $(date +%s) - start )) s; report in $OUTDIR" >&2
else
    echo "gpucheck.sh: exit $rc after $(( $(date +%s) - start )) s; no report" >&2
fi
exit $rc
