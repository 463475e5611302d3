#!/usr/bin/env bash
# Create ./.venv and install unstable into it (editable), without pulling CUDA packages on CPU.
#
#   bash scripts/install.sh          # the library, its CLI and matplotlib (the default job plots)
#   bash scripts/install.sh --dev    # plus the test and lint tools
#
# torch is installed first, pinned, so that nothing later resolves a newer multi-GB CUDA build.
# On a CPU-only machine with no local torch wheel, set TORCH_INDEX_URL to PyTorch's CPU index;
# on a GPU machine the default PyPI build of the same version is the CUDA one you want.
set -euo pipefail
cd "$(dirname "$0")/.."

extras="[plot]"  # the default job ends with learning-curve plots
for arg in "$@"; do
  case "$arg" in
    --dev) extras="[dev]" ;;
    *) echo "unknown option: $arg (known: --dev)" >&2; exit 2 ;;
  esac
done

PYTHON="${PYTHON:-python3}"
"$PYTHON" - <<'PY' || { echo "unstable needs Python >= 3.11" >&2; exit 1; }
import sys
raise SystemExit(0 if sys.version_info >= (3, 11) else 1)
PY

[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
pip_install() { .venv/bin/python -m pip install --quiet "$@"; }
pip_install --upgrade pip
if [ -n "${TORCH_INDEX_URL:-}" ]; then
  pip_install torch==2.13.0 --index-url "$TORCH_INDEX_URL"
else
  pip_install torch==2.13.0
fi
# setuptools warns in a box at every editable install ("BuildBackendWarning: Editable installation ... folders
# with the same name as your package"), which a newcomer reads as an error: that warning only is ignored
EDITABLE_NOTICE="ignore:Editable installation"
PYTHONWARNINGS="$EDITABLE_NOTICE${PYTHONWARNINGS:+,$PYTHONWARNINGS}" pip_install -e ".${extras}"
echo "installed unstable into .venv ($(.venv/bin/python -c 'import torch; print("torch", torch.__version__)'))"
