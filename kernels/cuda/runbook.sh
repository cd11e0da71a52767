#!/usr/bin/env bash
# kernels/cuda/runbook.sh - one run on a GPU machine that has an NVIDIA driver and nothing
# else: the check's correctness matrix and probes, the A/B timings, the graph test, the bench's
# GPU mode (kernels/cuda/GPU_CHECK.md, "Runbook").
#
#   kernels/cuda/runbook.sh [BINDIR]              run it; BINDIR (default kernels/cuda/bin) holds
#                                                 gpucheck and kernels_comm.test (kernels/cuda/gpucheck.sh
#                                                 --build), when built graph_test.test with its shims/
#                                                 (kernels/cuda/tagged_build.sh --graph-bin BINDIR) and
#                                                 bench (eval "$(kernels/cuda/tagged_build.sh --env)";
#                                                 go build -tags cuda -o BINDIR/bench ./bench)
#   kernels/cuda/runbook.sh --plan [ARCH] [BINDIR] print the plan without a driver: every stage, case
#                                                 and timing row in run order with its limit and
#                                                 estimate, and the total (ARCH: sm90 by default,
#                                                 portable, sm80, sm100)
#
# The stages, their order, their limits and the cases each one runs are the plan of package
# cuda/gpucheck/plan (gpucheck -stages / -rows / -plan print it; its tests hold the sum of the
# limits, kill grace included, under 8 minutes less a margin). In order:
#   device       gpucheck -device-info: opens the GPU and loads the kernels (no usable GPU: one
#                line, exit 2)
#   correctness  the check matrix, every kernel and mode of each case; probes: the exact probes
#                (on sm100 the first-run order instead: decode BF16 D128, prefill BF16 D128, FP8,
#                converted, the rest with the probes)
#   t-*          the A/B timings in the order of what they decide: prefill BF16 8K kv / query / kv2,
#                decode b32 x 64K BF16 and FP8 old / new, prefill FP8 8K widened V / fp8pv, decode
#                b1/4/8 x 8K/32K/128K new, prefill 32K / 128K; every prefill row so far on the
#                correlated selection (op's BlockScores + TopKBlocks on token-correlated Q and K),
#                then the random and local selections at 8K
#   graph        BINDIR/graph_test.test -test.run '^TestCUDA' with BINDIR/shims first on
#                LD_LIBRARY_PATH (cuBLAS / cuDNN test shims: the Gorgonia engine creates their
#                handles; the graph's ops never call them); one line says when it is not there
#   t-rest       every other timing row
#   bench        BINDIR/bench -device cuda -quick (a tagged binary needs libcublas.so.12 and
#                libcudnn.so.8: when the loader cannot start it, one line says which is missing)
#   nccl         BINDIR/kernels_comm.test -test.run NCCL: the collectives on a one-rank group;
#                libnccl.so.2 is not carried (over 300 MB), the test then skips and the stage says
#                so; MSA_NCCL_LIB_DIR names a directory holding it where the machine has one
# Each stage is one process under timeout(1) at its limit; a gpucheck stage starts no new case
# after its budget and runs with -case-timeout, so a kernel that never finishes (an mbarrier wait
# that is never satisfied) costs seconds and a HUNG line, and the next stage still runs.
# gpucheck rewrites its report after every case, so each timing row is in its stage's timing.csv
# as soon as it is measured, and a killed stage leaves what it measured; the bench's measured
# cases go to bench/measured.csv from its per-case lines, also when it is killed.
#
# Everything goes under $OUT (default ./runbook-out): plan.txt, one directory per stage with
# gpucheck's report (gpucheck.md, gpucheck.csv, probes.csv, timing.csv), runbook.log, timing.csv
# (every stage's rows), rows.csv (each planned timing row: measured, error, skipped for time,
# covered by the old row (an SM100 "(new)" decode row whose schedule does not split KV), not
# reached) and summary.txt (the one-screen summary, also printed; per prefill case, its pattern's
# mean union of selected blocks per query tile and its fastest mode).
#
# Exit status: 0 every stage passed, 1 a stage failed or hung, 2 no usable GPU (or no binary).
set -uo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PLAN=""
if [[ "${1:-}" == --plan ]]; then
    PLAN="${2:-sm90}"
    shift $(( $# >= 2 ? 2 : 1 ))
fi
BINDIR="${1:-$HERE/bin}"
BIN="$BINDIR/gpucheck"

if [[ ! -x "$BIN" ]]; then
    echo "runbook: no gpucheck binary at $BIN (build it with kernels/cuda/gpucheck.sh --build)"
    exit 2
fi
if [[ -n "$PLAN" ]]; then
    exec "$BIN" -plan -arch "$PLAN"
fi

OUTDIR="${OUT:-$PWD/runbook-out}"
mkdir -p "$OUTDIR"
LOG="$OUTDIR/runbook.log"
: > "$LOG"
say() { echo "runbook: $*" | tee -a "$LOG"; }
start=$(date +%s)

# The device stage's limit is the same in every family's plan.
dev_limit="$("$BIN" -stages -arch portable | awk -F'\t' '$2 == "device" { print $3 }')"
info="$(timeout --kill-after=3 "${dev_limit:-30}" "$BIN" -device-info 2> "$OUTDIR/device.err")"
rc=$?
if (( rc != 0 )); then
    why="$(head -n 1 "$OUTDIR/device.err")"
    (( rc == 124 || rc == 137 )) && why="opening the GPU and loading the kernels took over ${dev_limit:-30} s"
    say "no usable GPU: ${why:-gpucheck -device-info exited $rc}"
    exit 2
fi
say "device: $info"
if command -v nvidia-smi > /dev/null; then
    nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv,noheader >> "$LOG" 2>&1 || true
fi
arch="$(sed -n 's/.*, plan \([a-z0-9]*\))$/\1/p' <<< "$info")"
arch="${arch:-portable}"
"$BIN" -plan -arch "$arch" > "$OUTDIR/plan.txt"
[[ "$arch" == sm100 ]] && say "Blackwell (sm_10x): first-run order"

declare -a SUMMARY STAGES
failed=0

# finish LINE: one summary line.
finish() {
    SUMMARY+=("$1")
    echo "$1" >> "$LOG"
}

# check NAME LIMIT BUDGET CASE_TIMEOUT: gpucheck -stage NAME into $OUTDIR/NAME.
check() {
    local name="$1" limit="$2" budget="$3" ct="$4"
    local dir="$OUTDIR/$name" t0 rc line
    mkdir -p "$dir"
    STAGES+=("$name")
    t0=$(date +%s)
    timeout --kill-after=3 "$limit" "$BIN" -stage "$name" -out "$dir" -budget "${budget}s" -case-timeout "${ct}s" \
        > "$dir/stdout.txt" 2> "$dir/stderr.txt"
    rc=$?
    line="$(printf '%-18s exit %-3s %4ss  %s' "$name" "$rc" "$(($(date +%s) - t0))" "$(tally "$dir")")"
    (( rc == 124 || rc == 137 )) && line+="  KILLED after ${limit}s"
    grep -h "HUNG" "$dir/stdout.txt" | head -n 1 | sed 's/^/    /' > "$dir/hung.txt"
    [[ -s "$dir/hung.txt" ]] && line+=$'\n'"$(cat "$dir/hung.txt")"
    (( rc != 0 )) && failed=1
    finish "$line"
}

# tally DIR: counts of a gpucheck report's rows by status, and the smallest margins.
tally() {
    local dir="$1" f files=()
    [[ -f "$dir/gpucheck.csv" ]] || { echo "no report"; return; }
    for f in gpucheck.csv probes.csv timing.csv; do [[ -f "$dir/$f" ]] && files+=("$dir/$f"); done
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
            if (ok + bad) printf "compare %d ok %d failed; ", ok, bad
            if (pok + pbad) printf "probes %d ok %d failed; ", pok, pbad
            if (tok + tbad) printf "timing %d ok %d failed; ", tok, tbad
            printf "%d skipped", skip
            if (mn[1] != "") printf "; min margin O %.3g LSE %.3g (bound)", mn[1], mn[2]
            if (mn[3] != "") printf ", O %.3g LSE %.3g (statistical max)", mn[3], mn[4]
            if (mn[5] != "") printf ", O %.3g LSE %.3g (RMS)", mn[5], mn[6]
        }' "${files[@]}"
}

# graph LIMIT: the tagged graph test.
graph() {
    local limit="$1" graph="$BINDIR/graph_test.test" t0 rc
    if [[ ! -x "$graph" ]]; then
        finish "$(printf '%-18s not run: no tagged graph_test binary at %s (kernels/cuda/tagged_build.sh --graph-bin builds it)' graph "$graph")"
        return
    fi
    mkdir -p "$OUTDIR/graph"
    t0=$(date +%s)
    LD_LIBRARY_PATH="$BINDIR/shims${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" timeout --kill-after=3 "$limit" \
        "$graph" -test.run '^TestCUDA' -test.v -test.timeout "$((limit - 5))s" > "$OUTDIR/graph/stdout.txt" 2>&1
    rc=$?
    (( rc != 0 )) && failed=1
    finish "$(printf '%-18s exit %-3s %4ss  %s passed, %s failed' graph "$rc" "$(($(date +%s) - t0))" \
        "$(grep -c -- '^--- PASS' "$OUTDIR/graph/stdout.txt")" "$(grep -c -- '^--- FAIL' "$OUTDIR/graph/stdout.txt")")"
}

# bench LIMIT: the bench's GPU mode.
bench() {
    local limit="$1" bench="$BINDIR/bench" t0 rc
    if [[ ! -x "$bench" ]]; then
        finish "$(printf '%-18s not run: no tagged bench binary at %s (go build -tags cuda -o %s ./bench)' bench "$bench" "$bench")"
        return
    fi
    mkdir -p "$OUTDIR/bench"
    t0=$(date +%s)
    timeout --kill-after=3 "$limit" "$bench" -device cuda -quick -out "$OUTDIR/bench" > "$OUTDIR/bench/stdout.txt" 2>&1
    rc=$?
    if (( rc == 127 )); then
        finish "$(printf '%-18s not run: %s' bench "$(grep -m 1 'error while loading' "$OUTDIR/bench/stdout.txt")")"
        return
    fi
    # the bench writes its CSV at the end; its per-case lines are on disk as each case ends,
    # so a killed bench still leaves its measured cases here
    { echo "case,ms_median,reps,tflops"
      sed -n 's/^\(.*\): \([0-9.]*\) ms median of \([0-9]*\), \([0-9.]*\) TFLOP\/s$/"\1",\2,\3,\4/p' "$OUTDIR/bench/stdout.txt"
    } > "$OUTDIR/bench/measured.csv"
    (( rc != 0 )) && failed=1
    finish "$(printf '%-18s exit %-3s %4ss  %s cases timed' bench "$rc" "$(($(date +%s) - t0))" "$(grep -c ' ms median' "$OUTDIR/bench/stdout.txt")")"
}

# nccl LIMIT: the one-rank NCCL run.
nccl() {
    local limit="$1" bin="$BINDIR/kernels_comm.test" t0 rc line
    if [[ ! -x "$bin" ]]; then
        finish "$(printf '%-18s not run: no tagged kernels_comm.test at %s (kernels/cuda/gpucheck.sh --build builds it)' nccl "$bin")"
        return
    fi
    mkdir -p "$OUTDIR/nccl"
    t0=$(date +%s)
    LD_LIBRARY_PATH="${MSA_NCCL_LIB_DIR:+$MSA_NCCL_LIB_DIR:}${LD_LIBRARY_PATH:-}" timeout --kill-after=3 "$limit" \
        "$bin" -test.run 'NCCL' -test.v -test.timeout "$((limit - 5))s" > "$OUTDIR/nccl/stdout.txt" 2>&1
    rc=$?
    if (( rc == 0 )) && grep -q -- '^--- SKIP: TestNCCLOneRank' "$OUTDIR/nccl/stdout.txt"; then
        finish "$(printf '%-18s not run: %s' nccl "$(grep -m 1 -o 'no NCCL here: .*' "$OUTDIR/nccl/stdout.txt")")"
        return
    fi
    line="$(printf '%-18s exit %-3s %4ss  %s passed, %s failed' nccl "$rc" "$(($(date +%s) - t0))" \
        "$(grep -c -- '^--- PASS' "$OUTDIR/nccl/stdout.txt")" "$(grep -c -- '^--- FAIL' "$OUTDIR/nccl/stdout.txt")")"
    (( rc == 124 || rc == 137 )) && line+="  KILLED after ${limit}s"
    (( rc != 0 )) && failed=1
    finish "$line"
}

mapfile -t PLANNED < <("$BIN" -stages -arch "$arch")
for l in "${PLANNED[@]}"; do
    IFS=$'\t' read -r name kind limit budget ct _ <<< "$l"
    case "$kind" in
    device) ;;
    check) check "$name" "$limit" "$budget" "$ct" ;;
    graph) graph "$limit" ;;
    bench) bench "$limit" ;;
    nccl) nccl "$limit" ;;
    *) say "plan: stage $name has an unknown kind $kind"; failed=1 ;;
    esac
done

# Every stage's timing rows in one file, and each planned row's fate.
{
    echo "stage,case,kernels,ms,tflops,pct_peak_flops,gbs,pct_hbm,union_per_tile,status"
    for d in "${STAGES[@]}"; do
        [[ -f "$OUTDIR/$d/timing.csv" ]] && awk -v d="$d" 'FNR > 1 && NF { print d "," $0 }' "$OUTDIR/$d/timing.csv"
    done
} > "$OUTDIR/timing.csv"
"$BIN" -rows -arch "$arch" | awk -F'\t' -v out="$OUTDIR" '
    BEGIN { print "stage,row,result" }
    {
        f = out "/" $1 "/timing.csv"; st = "not reached"
        while ((getline line < f) > 0) {
            n = split(line, c, ",")
            if (c[1] == $2) st = (c[n] == "ok") ? "measured" : (c[n] ~ /^skipped/) ? "skipped for time" : (c[n] ~ /^same launches/) ? "covered by the old row" : "error"
        }
        close(f)
        printf "%s,%s,%s\n", $1, $2, st
    }' > "$OUTDIR/rows.csv"

{
    echo "== GPU runbook: $info, $(date -u '+%Y-%m-%d %H:%M UTC'), $(($(date +%s) - start)) s"
    printf '%s\n' "${SUMMARY[@]}"
    awk -F, 'FNR > 1 { n[$3]++; t++ } END { printf "timing rows: %d planned:", t; for (s in n) printf " %d %s;", n[s], s; print "" }' "$OUTDIR/rows.csv"
    awk -F, 'FNR > 1 && $3 != "measured" && ++n <= 8 { printf "  %s: %s: %s\n", $3, $1, $2 }
        END { if (n > 8) printf "  ... %d more not measured (rows.csv)\n", n - 8 }' "$OUTDIR/rows.csv"
    # per prefill case (its selection pattern in the name): the mean union of selected blocks per
    # 64-row query tile and the fastest measured mode
    awk -F, 'FNR > 1 && $9 != "" {
            c = $2; m = ""
            if (match(c, / \([^)]*\)$/)) { m = substr(c, RSTART + 2, RLENGTH - 3); c = substr(c, 1, RSTART - 1) }
            if (!(c in u)) { order[++n] = c; u[c] = $9 }
            if ($10 == "ok" && (!(c in ms) || $4 + 0 < ms[c])) { ms[c] = $4 + 0; mode[c] = m; tf[c] = $5; pct[c] = $6 }
        }
        END {
            if (n) print "prefill cases: mean union of selected blocks per 64-row query tile; fastest mode"
            for (i = 1; i <= n && i <= 10; i++) {
                c = order[i]
                if (c in ms) printf "  %-32s %6s blocks/tile  %9.3f ms (%s) %7s TFLOP/s %5s%% of peak\n", c, u[c], ms[c], mode[c] == "" ? "default" : mode[c], tf[c], pct[c]
                else printf "  %-32s %6s blocks/tile  not measured\n", c, u[c]
            }
            if (n > 10) printf "  ... %d more prefill cases (timing.csv)\n", n - 10
        }' "$OUTDIR/timing.csv"
    for d in "${STAGES[@]}"; do
        [[ -f "$OUTDIR/$d/gpucheck.csv" ]] || continue
        awk -F, -v d="$d" 'FNR > 1 && $NF != "ok" && $NF !~ /^skipped/ { printf "  %s: %s %s: %s\n", d, $1, $2, $NF }' "$OUTDIR/$d/gpucheck.csv"
    done | head -n 8
    for d in "${STAGES[@]}"; do
        [[ -f "$OUTDIR/$d/probes.csv" ]] || continue
        awk -F, -v d="$d" 'FNR > 1 && $8 != "ok" { printf "  %s: %s %s: %s %s\n", d, $1, $2, $8, $9 }' "$OUTDIR/$d/probes.csv"
    done | head -n 4
    if (( failed )); then echo "== FAILED (reports under $OUTDIR)"; else echo "== all stages passed (reports under $OUTDIR)"; fi
} | tee "$OUTDIR/summary.txt"
exit $failed
