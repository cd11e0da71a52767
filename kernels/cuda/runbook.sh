#!/usr/bin/env bash
# kernels/cuda/runbook.sh - one run on a GPU machine that has an NVIDIA driver and nothing
# else: the check's correctness matrix and probes, the graph test, the timing (kernels/cuda/GPU_CHECK.md,
# "Runbook").
#
#   kernels/cuda/runbook.sh [BINDIR]   BINDIR (default kernels/cuda/bin) holds gpucheck
#                                      (kernels/cuda/gpucheck.sh --build) and, when built,
#                                      graph_test.test with its shims/ (kernels/cuda/tagged_build.sh
#                                      --graph-bin BINDIR)
#                                      and bench (eval "$(kernels/cuda/tagged_build.sh --env)";
#                                      go build -tags cuda -o BINDIR/bench ./bench)
#
# Stages, each a separate process under its own timeout; gpucheck runs with -case-timeout, so a kernel
# that never finishes (an mbarrier wait that is never satisfied) costs seconds and a HUNG line, and the
# next stage still runs:
#   device     gpucheck -device-info: opens the GPU and loads the kernels (no usable GPU: one line, exit 2)
#   on sm_10x (Blackwell), the first-run order, each stage only what the earlier ones did not run:
#     decode-bf16-d128, prefill-bf16-d128, fp8, converted (BF16 Q with FP8 or NVFP4 K/V, FP8 Q with
#     NVFP4 K/V), full (the rest of the matrix and the probes)
#   elsewhere: correctness (the whole matrix and the probes)
#   graph      BINDIR/graph_test.test -test.run '^TestCUDA' when it exists (else one line says it is not
#              there), with BINDIR/shims first on LD_LIBRARY_PATH (cuBLAS / cuDNN test shims: the
#              Gorgonia engine creates their handles; the graph's ops never call them)
#   timing     gpucheck -only '^timing'
#   bench      BINDIR/bench -device cuda -quick when it exists (else one line says so; a tagged binary
#              needs libcublas.so.12 and libcudnn.so.8 too: when the loader cannot start it, one line
#              says which library is missing)
# Everything goes under $OUT (default ./runbook-out): one directory per stage with gpucheck's report,
# runbook.log, and summary.txt (the one-screen summary, also printed). The stage limits add up to
# 440 s at most (467 s if every stage ignored its signal and were killed 3 s later), so a whole run
# takes less than 8 minutes.
#
# Exit status: 0 every stage passed, 1 a stage failed or hung, 2 no usable GPU (or no binary).
set -uo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
BINDIR="${1:-$HERE/bin}"
OUTDIR="${OUT:-$PWD/runbook-out}"
CASE_TIMEOUT="${MSA_RUNBOOK_CASE_TIMEOUT:-20s}"
BIN="$BINDIR/gpucheck"

mkdir -p "$OUTDIR"
LOG="$OUTDIR/runbook.log"
: > "$LOG"
say() { echo "runbook: $*" | tee -a "$LOG"; }

if [[ ! -x "$BIN" ]]; then
    say "no gpucheck binary at $BIN (build it with kernels/cuda/gpucheck.sh --build)"
    exit 2
fi

info="$(timeout --kill-after=3 60 "$BIN" -device-info 2> "$OUTDIR/device.err")"
rc=$?
if (( rc != 0 )); then
    why="$(head -n 1 "$OUTDIR/device.err")"
    (( rc == 124 || rc == 137 )) && why="opening the GPU and loading the kernels took over 60 s"
    say "no usable GPU: ${why:-gpucheck -device-info exited $rc}"
    exit 2
fi
say "device: $info"
if command -v nvidia-smi > /dev/null; then
    nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv,noheader >> "$LOG" 2>&1 || true
fi

declare -a SUMMARY STAGES
failed=0
start=$(date +%s)

# stage NAME LIMIT_S ARGS...: gpucheck ARGS into $OUTDIR/NAME, bounded by LIMIT_S.
stage() {
    local name="$1" limit="$2"
    shift 2
    local dir="$OUTDIR/$name" t0 rc
    mkdir -p "$dir"
    STAGES+=("$name")
    t0=$(date +%s)
    timeout --kill-after=3 "$limit" "$BIN" -out "$dir" -budget "$((limit - 15))s" -case-timeout "$CASE_TIMEOUT" "$@" \
        > "$dir/stdout.txt" 2> "$dir/stderr.txt"
    rc=$?
    local took=$(($(date +%s) - t0)) line
    line="$(printf '%-18s exit %-3s %4ss  %s' "$name" "$rc" "$took" "$(tally "$dir")")"
    (( rc == 124 || rc == 137 )) && line+="  KILLED after ${limit}s"
    grep -h "HUNG" "$dir/stdout.txt" | head -n 1 | sed 's/^/    /' >> "$dir/hung.txt"
    [[ -s "$dir/hung.txt" ]] && line+=$'\n'"$(cat "$dir/hung.txt")"
    (( rc != 0 )) && failed=1
    SUMMARY+=("$line")
    echo "$line" >> "$LOG"
}

# tally DIR: counts of a gpucheck report's rows by status, and the smallest margins.
tally() {
    local dir="$1"
    [[ -f "$dir/gpucheck.csv" ]] || { echo "no report"; return; }
    awk -F, '
        BEGIN { split("5 8 12 17 15 20", col, " ") }
        FNR == 1 { next }
        FILENAME ~ /gpucheck.csv$/ {
            if ($NF == "ok") ok++; else if ($NF ~ /^skipped/) skip++; else bad++
            # margins (tolerance / error): the per-element bound (columns 5, 8),
            # the statistical max (12, 17) and the RMS criterion (15, 20)
            for (k = 1; k <= 6; k++) {
                c = col[k]
                if ($c != "" && $c != "exact" && (mn[k] == "" || $c + 0 < mn[k])) mn[k] = $c + 0
            }
        }
        FILENAME ~ /probes.csv$/ { if ($8 == "ok") pok++; else pbad++ }
        FILENAME ~ /timing.csv$/ { if ($NF == "ok") tok++; else if ($NF ~ /^skipped/) skip++; else tbad++ }
        END {
            printf "compare %d ok %d failed; probes %d ok %d failed; timing %d ok %d failed; %d skipped", ok, bad, pok, pbad, tok, tbad, skip
            if (mn[1] != "") printf "; min margin O %.3g LSE %.3g (bound)", mn[1], mn[2]
            if (mn[3] != "") printf ", O %.3g LSE %.3g (statistical max)", mn[3], mn[4]
            if (mn[5] != "") printf ", O %.3g LSE %.3g (RMS)", mn[5], mn[6]
        }' "$dir/gpucheck.csv" "$dir/probes.csv" "$dir/timing.csv" 2> /dev/null
}

NOTIME='^timing'
if [[ "$info" == sm_10* ]]; then
    say "Blackwell (sm_10x): first-run order"
    DEC='^decode/bf16/d128/'
    PRE='^prefill/bf16/d128/'
    FP8='^(prefill|decode)/fp8/'
    CONV='^(prefill|decode)/(bf16q-fp8kv|bf16q-nvfp4kv|fp8q-nvfp4kv)/'
    stage decode-bf16-d128 40 -only "$DEC"
    stage prefill-bf16-d128 40 -only "$PRE"
    stage fp8 50 -only "$FP8"
    stage converted 50 -only "$CONV"
    stage full 70 -skip "$DEC|$PRE|$FP8|$CONV|$NOTIME"
else
    stage correctness 240 -skip "$NOTIME"
fi

graph="$BINDIR/graph_test.test"
if [[ -x "$graph" ]]; then
    mkdir -p "$OUTDIR/graph"
    t0=$(date +%s)
    LD_LIBRARY_PATH="$BINDIR/shims${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" timeout --kill-after=3 45 \
        "$graph" -test.run '^TestCUDA' -test.v -test.timeout 40s > "$OUTDIR/graph/stdout.txt" 2>&1
    rc=$?
    line="$(printf '%-18s exit %-3s %4ss  %s passed, %s failed' graph "$rc" "$(($(date +%s) - t0))" \
        "$(grep -c -- '^--- PASS' "$OUTDIR/graph/stdout.txt")" "$(grep -c -- '^--- FAIL' "$OUTDIR/graph/stdout.txt")")"
    (( rc != 0 )) && failed=1
else
    line="$(printf '%-18s not run: no tagged graph_test binary at %s (kernels/cuda/tagged_build.sh --graph-bin builds it)' graph "$graph")"
fi
SUMMARY+=("$line")
echo "$line" >> "$LOG"

stage timing 40 -only "$NOTIME"

bench="$BINDIR/bench"
if [[ -x "$bench" ]]; then
    mkdir -p "$OUTDIR/bench"
    t0=$(date +%s)
    timeout --kill-after=3 45 "$bench" -device cuda -quick -out "$OUTDIR/bench" > "$OUTDIR/bench/stdout.txt" 2>&1
    rc=$?
    took=$(($(date +%s) - t0))
    if (( rc == 127 )); then
        line="$(printf '%-18s not run: %s' bench "$(grep -m 1 'error while loading' "$OUTDIR/bench/stdout.txt")")"
    else
        line="$(printf '%-18s exit %-3s %4ss  %s' bench "$rc" "$took" "$(grep -c ' ms median' "$OUTDIR/bench/stdout.txt") cases timed")"
        (( rc != 0 )) && failed=1
    fi
else
    line="$(printf '%-18s not run: no tagged bench binary at %s (go build -tags cuda -o %s ./bench)' bench "$bench" "$bench")"
fi
SUMMARY+=("$line")
echo "$line" >> "$LOG"

# Stage nccl, after the stages above (its 30 s limit, 33 s if killed, comes on top of their
# total): the one-rank NCCL run, BINDIR/kernels_comm.test -test.run NCCL, the collectives on a
# one-rank group on GPU 0 (gpucheck.sh --build builds the binary; it opens libcuda.so.1 and
# libnccl.so.2 at run time). libnccl.so.2 is not carried (the nvidia-nccl-cu12 wheel is over
# 300 MB against a 64 MiB carry): the test then checks the one-line error naming the library and
# skips, and the stage says so; MSA_NCCL_LIB_DIR names a directory holding libnccl.so.2 where the
# machine has one.
ncclbin="$BINDIR/kernels_comm.test"
if [[ -x "$ncclbin" ]]; then
    mkdir -p "$OUTDIR/nccl"
    t0=$(date +%s)
    LD_LIBRARY_PATH="${MSA_NCCL_LIB_DIR:+$MSA_NCCL_LIB_DIR:}${LD_LIBRARY_PATH:-}" timeout --kill-after=3 30 \
        "$ncclbin" -test.run 'NCCL' -test.v -test.timeout 25s > "$OUTDIR/nccl/stdout.txt" 2>&1
    rc=$?
    took=$(($(date +%s) - t0))
    if (( rc == 0 )) && grep -q -- '^--- SKIP: TestNCCLOneRank' "$OUTDIR/nccl/stdout.txt"; then
        line="$(printf '%-18s not run: %s' nccl "$(grep -m 1 -o 'no NCCL here: .*' "$OUTDIR/nccl/stdout.txt")")"
    else
        line="$(printf '%-18s exit %-3s %4ss  %s passed, %s failed' nccl "$rc" "$took" \
            "$(grep -c -- '^--- PASS' "$OUTDIR/nccl/stdout.txt")" "$(grep -c -- '^--- FAIL' "$OUTDIR/nccl/stdout.txt")")"
        (( rc == 124 || rc == 137 )) && line+="  KILLED after 30s"
        (( rc != 0 )) && failed=1
    fi
else
    line="$(printf '%-18s not run: no tagged kernels_comm.test at %s (kernels/cuda/gpucheck.sh --build builds it)' nccl "$ncclbin")"
fi
SUMMARY+=("$line")
echo "$line" >> "$LOG"

{
    echo "== GPU runbook: $info, $(date -u '+%Y-%m-%d %H:%M UTC'), $(($(date +%s) - start)) s"
    printf '%s\n' "${SUMMARY[@]}"
    for d in "${STAGES[@]}"; do
        [[ -f "$OUTDIR/$d/gpucheck.csv" ]] || continue
        awk -F, -v d="$d" 'FNR > 1 && $NF != "ok" && $NF !~ /^skipped/ { printf "  %s: %s %s: %s\n", d, $1, $2, $NF }' "$OUTDIR/$d/gpucheck.csv"
    done | head -n 12
    for d in "${STAGES[@]}"; do
        [[ -f "$OUTDIR/$d/probes.csv" ]] || continue
        awk -F, -v d="$d" 'FNR > 1 && $8 != "ok" { printf "  %s: %s %s: %s %s\n", d, $1, $2, $8, $9 }' "$OUTDIR/$d/probes.csv"
    done | head -n 6
    if (( failed )); then echo "== FAILED (reports under $OUTDIR)"; else echo "== all stages passed (reports under $OUTDIR)"; fi
} | tee "$OUTDIR/summary.txt"
exit $failed
