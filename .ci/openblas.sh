#!/usr/bin/env bash
# OpenBLAS check: the -tags openblas variant of kernels/blas and the bench
# (blas.OpenBLAS: gonum's netlib cgo binding to the system's OpenBLAS). Installs
# libopenblas-dev from the Debian packages when the linker cannot find
# -lopenblas, vets and tests the tagged build, and runs the tiny graph
# group on the three BLAS side by side (gonum, msa, openblas).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cc >/dev/null; then
  echo "openblas: FAIL: no C compiler (cc): cgo and this check need one"
  exit 1
fi
links() { echo 'int main(void){return 0;}' | cc -x c - -lopenblas -o /dev/null 2>/dev/null; }
if ! links; then
  echo "--- installing OpenBLAS (libopenblas-dev)"
  sudo=""
  if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
  if ! command -v apt-get >/dev/null; then
    echo "openblas: FAIL: -lopenblas does not link and this is not a Debian/Ubuntu machine: install OpenBLAS's development files"
    exit 1
  fi
  # apt's output (including debconf's note about a missing apt-utils, which
  # is harmless) is shown only when a step fails.
  log=$(mktemp)
  trap 'rm -f "$log"' EXIT
  for step in "update -qq" "install -y -qq libopenblas-dev"; do
    # shellcheck disable=SC2086 # step holds apt-get's arguments
    if ! DEBIAN_FRONTEND=noninteractive $sudo apt-get $step >"$log" 2>&1; then
      cat "$log"
      echo "openblas: FAIL: apt-get $step failed (output above): install OpenBLAS's development files by hand"
      exit 1
    fi
  done
  links || { echo "openblas: FAIL: -lopenblas still does not link after installing libopenblas-dev"; exit 1; }
  echo "--- installed: $(dpkg-query -W -f '${Package} ${Version}' libopenblas-dev)"
fi

echo "--- go vet -tags openblas ./kernels/blas ./bench"
CGO_ENABLED=1 go vet -tags openblas ./kernels/blas ./bench
echo "--- go test -tags openblas ./kernels/blas; ./bench -run 'GraphSuiteBLAS|TableWidth'"
CGO_ENABLED=1 go test -count=1 -tags openblas ./kernels/blas
CGO_ENABLED=1 go test -count=1 -tags openblas ./bench -run 'GraphSuiteBLAS|TableWidth'
echo "--- go run -tags openblas ./bench -tiny -cases graph -graph-machines tape -graph-blas gonum,msa,openblas"
CGO_ENABLED=1 go run -tags openblas ./bench -tiny -cases graph -graph-machines tape -graph-blas gonum,msa,openblas -torch off
