#!/usr/bin/env bash
# Set-up: install this package with its test, MuJoCo and DeepMind Control extras into the active Python environment.
#
# torch: an already-installed torch (for example a CUDA build on a GPU machine) is kept as it is.
# Otherwise the CPU build of torch 2.13.0 is installed first, so that resolving the package's
# `torch>=2.3` requirement never pulls a multi-GB CUDA build onto a CPU machine. Where pip's
# indexes do not carry a CPU wheel (plain PyPI on Linux serves the CUDA one), point
# TORCH_INDEX_URL at https://download.pytorch.org/whl/cpu.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python}"

if "$PY" -c "import torch" >/dev/null 2>&1; then
    echo "install.sh: keeping installed torch $("$PY" -c 'import torch; print(torch.__version__)')"
elif [ -n "${TORCH_INDEX_URL:-}" ]; then
    "$PY" -m pip install "torch==2.13.0" --index-url "$TORCH_INDEX_URL"
else
    "$PY" -m pip install "torch==2.13.0"
fi
"$PY" -m pip install -e ".[dev,mujoco,dmc]"
"$PY" -c "import torch; print('install.sh: torch', torch.__version__, '| CUDA build:', torch.version.cuda is not None)"
