#!/usr/bin/env bash
# Distributed check: the context-parallel tests on the ranks of real MPI
# jobs (OpenMPI, one machine, mpirun -np 2 and -np 4). Installs OpenMPI
# from the Debian packages when it is missing, vets the mpi build, builds
# the test binaries with -tags mpi and runs each under mpirun. The
# in-process versions of the same tests run in `go test ./...`.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS

if ! command -v mpirun >/dev/null || ! pkg-config --exists ompi-c 2>/dev/null; then
  echo "--- installing OpenMPI (libopenmpi-dev openmpi-bin pkg-config)"
  sudo=""
  if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
  if ! command -v apt-get >/dev/null; then
    echo "dist: FAIL: OpenMPI is missing and this is not a Debian/Ubuntu machine: install libopenmpi-dev, openmpi-bin and pkg-config (or your MPI's development files and mpirun)"
    exit 1
  fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq libopenmpi-dev openmpi-bin pkg-config >/dev/null
fi
version=$(mpirun --version 2>/dev/null | head -1)
echo "--- $version"

echo "--- go vet -tags mpi ./kernels/comm/... ./op/"
go vet -tags mpi ./kernels/comm/... ./op/

# The op context-parallel tests run under -race in .ci/run's race step.
echo "--- go test -race ./kernels/comm (in-process ranks)"
go test -race -count=1 ./kernels/comm

bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go test -c -tags mpi -o "$bin/comm.test" ./kernels/comm
go test -c -tags mpi -o "$bin/op.test" ./op

# mpirun refuses root unless told; --oversubscribe lets 4 ranks share fewer cores.
flags=(--oversubscribe)
if [ "$(id -u)" = 0 ]; then flags+=(--allow-run-as-root); fi
for np in 2 4; do
  for t in comm op; do
    echo "--- mpirun -np $np $t.test -test.run MPI"
    out=$(timeout 180 mpirun "${flags[@]}" -np "$np" "$bin/$t.test" -test.run MPI -test.v 2>&1) || {
      echo "$out"
      echo "dist: FAIL: $t tests under mpirun -np $np"
      exit 1
    }
    passed=$(grep -c -- '^--- PASS' <<<"$out" || true)
    if grep -q -- '--- SKIP' <<<"$out" || [ "$passed" -lt "$np" ]; then
      echo "$out"
      echo "dist: FAIL: $t tests under mpirun -np $np: $passed ranks passed (a skip means the binary did not see mpirun)"
      exit 1
    fi
    grep -E 'rank [0-9]+ of' <<<"$out" | sed 's/^ *//' | sort -u
  done
done
# The bench's distributed mode (bench/cp.go) on tiny shapes: it runs under
# mpirun and writes one CSV row per case (decode, prefill x 3 strategies).
go build -tags mpi -o "$bin/bench" ./bench
echo "--- mpirun -np 2 bench -cp -tiny -cp-reps 1"
out=$(timeout 120 mpirun "${flags[@]}" -np 2 "$bin/bench" -cp -tiny -cp-reps 1 2>&1) || {
  echo "$out"
  echo "dist: FAIL: bench -cp under mpirun -np 2"
  exit 1
}
rows=$(grep -c ',mpi,cp-' <<<"$out" || true)
if [ "$rows" != 4 ]; then
  echo "$out"
  echo "dist: FAIL: bench -cp under mpirun -np 2 wrote $rows rows, want 4"
  exit 1
fi
# NCCL (-tags cuda): vet, and its test, which on a machine without a GPU
# checks the one-line error naming the missing library. The cuda tag needs
# the CUDA headers kernels/cuda/tagged_build.sh fetches; it is checked here
# when they are already fetched (kernels/cuda/ci.sh, earlier in .ci/run,
# fetches them and builds -tags cuda ./..., nccl.go included).
nccl="NCCL not checked (CUDA headers not fetched)"
if [ -d "${MSA_CUDA_CACHE:-$HOME/.cache/msa-cuda}/tagged-v1/stubs" ]; then
  echo "--- go vet -tags cuda ./kernels/comm; go test -tags cuda ./kernels/comm -run NCCL"
  eval "$(kernels/cuda/tagged_build.sh --env)"
  go vet -tags cuda ./kernels/comm
  go test -count=1 -tags cuda -run NCCL -v ./kernels/comm | grep -E '^(--- |ok|FAIL)|no NCCL here' | sed 's/^ *//'
  nccl="NCCL built and vetted (-tags cuda), not run on a GPU"
fi
echo "dist: PASS: comm collectives and context-parallel tests under mpirun -np 2 and -np 4, bench -cp under -np 2 ($version) in $((SECONDS - start)) s; $nccl"
