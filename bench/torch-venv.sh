#!/usr/bin/env bash
# Sets up PyTorch from PyPI in a local virtual environment for the bench's
# PyTorch baselines (bench/README.md, "PyTorch"), and prints the interpreter
# to pass to the bench as -python.
#
#   bash bench/torch-venv.sh [DIR]     # default DIR: bench/.torch-venv
#
# TORCH_VERSION (default 2.15.0) picks the wheel, PYTHON (default python3)
# the interpreter the environment is made from. Running it again reuses the
# environment and installs nothing when that torch version already imports.
#
# PyPI has no CPU-only torch wheel for Linux x86_64: its wheel is the CUDA
# build, and it depends on NVIDIA's runtime wheels (cuBLAS, cuDNN, NCCL,
# ...), which torch loads when it is imported even where no GPU exists, so
# they are installed too (about 3 GB). triton, the GPU kernel compiler of
# torch.compile (about 1 GB), is removed again: the baselines run eager CPU
# operators, which never load it. numpy is installed so that importing
# torch prints no warning.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="${1:-$here/.torch-venv}"
version="${TORCH_VERSION:-2.15.0}"
python="${PYTHON:-python3}"

have_torch() {
	[ -x "$venv/bin/python" ] &&
		"$venv/bin/python" -c 'import sys, torch; sys.exit(torch.__version__.split("+")[0] != sys.argv[1])' "$version" 2>/dev/null
}

if ! have_torch; then
	if [ ! -x "$venv/bin/python" ]; then
		echo "creating $venv with $("$python" --version 2>&1)" >&2
		"$python" -m venv "$venv"
	fi
	echo "installing torch==$version from PyPI into $venv (about 4 GB with its NVIDIA runtime wheels)" >&2
	"$venv/bin/python" -m pip install --disable-pip-version-check "torch==$version" numpy
	if "$venv/bin/python" -m pip show triton >/dev/null 2>&1; then
		"$venv/bin/python" -m pip uninstall --disable-pip-version-check -y triton
	fi
	have_torch || {
		echo "torch $version does not import from $venv" >&2
		exit 1
	}
fi

"$venv/bin/python" - <<'EOF'
import sys
import torch

print("torch", torch.__version__)
print("oneDNN (torch.backends.mkldnn.is_available())", torch.backends.mkldnn.is_available())
print("MKL (torch.backends.mkl.is_available())", torch.backends.mkl.is_available())
print("python", sys.executable)
EOF
echo "bench: go run ./bench -python $venv/bin/python ..."
