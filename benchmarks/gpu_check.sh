#!/usr/bin/env bash
# The GPU check: every GPU measurement of the project in one command, each step under its own timeout
# and all within BUDGET_S (480 s by default), then one summary ($OUT/summary.json and summary.md).
#
#   OUT=/some/dir bash benchmarks/gpu_check.sh                  # on the GPU machine, from the project's root
#   OUT=/tmp/gpu-check bash benchmarks/gpu_check.sh --device cpu   # the same path on a CPU, tiny models
#
# Steps, in this order (the GPU issue's priorities, so a budget cut leaves the last): (b) learner:
# bench_learner.py (on a GPU the Qwen3-1.7B shape at 4,096-token steps: MFU, one update profiled, the
# attention kernel and compiled decoder layers as variants); (d) inference: bench_inference.py, the engine
# before (.gpu/before/, or git revision BEFORE) and after, side by side, with the graphs each row compiled;
# (a) build_async, build_sync: unstable.build() through Ray, learner and one transformers inference actor
# sharing the device, mode="async" then mode="sync" (gpu_build_run.py); (c) vram: bench_vram.py;
# (b2) learner_mixed: the bare passes at mixed step lengths; (e) quickstart: `unstable quickstart`,
# shortened (not in the default STEPS on a GPU). STEPS=b,d picks steps; CAP_A ... CAP_E override caps in
# seconds (CAP_A each build run, CAP_B2 the mixed-length learner); ARGS_B ... their arguments.
# Each step's status (ok, failed, timeout, missing: its script is not in this tree) goes to
# $OUT/steps.jsonl; the script itself always exits 0 once the summary is written.
#
# Offline GPU machines lack Ray, TextArena and the rest: if they do not import, the wheels and Ray of
# .gpu/ (made by benchmarks/gpu_bundle.sh) are installed into $SITE first (USE_BUNDLE=always: even
# when they do import, ahead of the installed ones: to test a bundle off the GPU machine).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
DEVICE=${DEVICE:-cuda}
[ "${1:-}" = "--device" ] && DEVICE=${2:?--device needs cpu or cuda}
OUT=${OUT:-/tmp/gpu-check}
PY=${PY:-python3}
BUNDLE=${BUNDLE:-$ROOT/.gpu}
SITE=${SITE:-/tmp/unstable-gpu-site}
RUNS=${RUNS:-/tmp/unstable-gpu-runs}  # run directories (checkpoints: not under $OUT)
BUDGET_S=${BUDGET_S:-480}
START=$SECONDS
mkdir -p "$OUT"
rm -f "$OUT/steps.jsonl"
exec > >(tee -a "$OUT/log.txt") 2>&1

if [ "$DEVICE" = cpu ]; then  # the rehearsal: tiny models, short steps
  ARCH=${ARCH:-1m}
  STEPS=${STEPS:-b,d,a,c,b2,e}
  CAP_A=${CAP_A:-150} CAP_B=${CAP_B:-60} CAP_B2=${CAP_B2:-40} CAP_C=${CAP_C:-40} CAP_D=${CAP_D:-90} CAP_E=${CAP_E:-150}
  A_ARGS=(--steps 2 --batch 16 --mini-batch 8 --gen-len 16 --workers 8)
  # flex_attention has no backward on a CPU: its variants are recorded as left out; compiling is left to
  # the GPU (the 1M model's layers take ~40 s to compile on 2 cores)
  B_ARGS=(--arch 1m --quick --extra packed-flex --profile update,ideal)
  B2_ARGS=(--arch 1m --quick --seq-len 256 --mixed-lengths --batch 4 --mini-batch 1 --no-before --no-update
           --no-fp32-lora --extra packed-flex)
  C_ARGS=(--shapes 1m --lens 64,128 --budget-s 20)
  D_ARGS=(--arch 1m --batches 1,8 --max-new-tokens 16 --quick --mixed 2)
  E_CFG="learning_steps: 1\nbatch_size: 32\nmini_batch_size: 16\nnum_collection_workers: 8\neval_games: 10\n"
  E_CFG+="eval_workers: 1\nnum_eval_workers: 0\n"
  E_ARGS=(--warm-start-positions 256 --warm-start-max-rounds 1)
else
  ARCH=${ARCH:-qwen3-0.6b}
  STEPS=${STEPS:-b,d,a,c,b2}
  # caps for one device call of 600 s (BUDGET_S=585): the H100 runs of 2026-11-26
  # (benchmarks/results/gpu-2026-11-26/) took 78 s for the learner's 3 rounds of 16 steps and 200 s for
  # 11 inference rows; the compiled variants and the engine's compiles are estimates until a GPU run
  CAP_A=${CAP_A:-80} CAP_B=${CAP_B:-180} CAP_B2=${CAP_B2:-50} CAP_C=${CAP_C:-45} CAP_D=${CAP_D:-130} CAP_E=${CAP_E:-70}
  A_ARGS=(--steps 4 --batch 64 --mini-batch 16 --gen-len 64 --workers 64)
  B_ARGS=(--arch qwen3-1.7b --seq-len 4096 --batch 8 --mini-batch 1 --no-before --rounds 2
          --extra flex,compiled,flex-compiled,packed-flex --profile update,ideal,flex-compiled)
  B2_ARGS=(--arch qwen3-1.7b --seq-len 4096 --mixed-lengths --batch 8 --mini-batch 1 --no-before --rounds 2
           --no-update --no-fp32-lora --extra packed-flex)
  C_ARGS=(--shapes 8b,4b --lens 4096,8192 --settings activation+gradient,activation --budget-s 35)
  D_ARGS=(--arch "$ARCH" --batches 1,128 --max-new-tokens 64 --mixed 4 --no-base)
  E_CFG="learning_steps: 2\neval_games: 50\neval_workers: 2\nnum_eval_workers: 0\n"
  E_ARGS=(--warm-start-positions 2048 --warm-start-max-rounds 1)
fi
# ARGS_A ... ARGS_D, ARGS_B2: a step's arguments instead of the ones above (words split on spaces)
for x in A B B2 C D; do
  v="ARGS_$x"; [ -n "${!v:-}" ] && read -ra "${x}_ARGS" <<< "${!v}"
done
# the quickstart without the in-run exploitability: that reading runs on the CPU whatever the device (tested
# there), and its wait for the last checkpoint (~20 s for the 1M model on TicTacToe, 2 cores) eats the cap
E_CFG+="exploitability_eval: \"off\"\n"

want() { [[ ",$STEPS," == *",$1,"* ]]; }
left() { echo $((BUDGET_S - (SECONDS - START))); }
record() {  # record NAME STATUS RC SECONDS TIMEOUT
  printf '{"step": "%s", "status": "%s", "rc": %s, "seconds": %s, "timeout_s": %s}\n' "$@" >> "$OUT/steps.jsonl"
}
step() {  # step NAME CAP FILE ARGS...: `$PY ARGS...` under min(CAP, time left) seconds, if FILE is in the tree
  local name=$1 cap=$2 script=$3 t0 rc status
  shift 3
  if [ ! -f "$script" ]; then
    echo "=== [$name] missing: $script is not in this tree"; record "$name" missing null 0 null; return
  fi
  [ "$(( $(left) - 15 ))" -lt "$cap" ] && cap=$(( $(left) - 15 ))
  if [ "$cap" -lt 10 ]; then
    echo "=== [$name] skipped: $(left) s of the budget left"; record "$name" skipped null 0 null; return
  fi
  echo; echo "=== [$name] at +$((SECONDS - START)) s, timeout $cap s: $*"
  t0=$SECONDS
  GPU_CHECK_STEP_CAP_S=$cap timeout -k 10 "$cap" "$PY" "$@"
  rc=$?
  case $rc in 0) status=ok ;; 124|137) status=timeout ;; *) status=failed ;; esac
  echo "=== [$name] $status (rc $rc) in $((SECONDS - t0)) s"
  record "$name" "$status" "$rc" "$((SECONDS - t0))" "$cap"
}
stop_ray() {  # a step killed by its timeout can leave Ray's processes behind; on the GPU machine they are ours
  [ "$DEVICE" != cpu ] && timeout 20 "$PY" -m ray.scripts.scripts stop --force > /dev/null 2>&1
  return 0
}

echo "=== gpu check: DEVICE=$DEVICE ARCH=$ARCH OUT=$OUT budget $BUDGET_S s, $(date -u +%FT%TZ), $(git rev-parse --short HEAD 2>/dev/null || echo no-git)"
command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader

# ------------------------------------------------------------------ setup: the bundle, if packages are missing
t0=$SECONDS
if [ "${USE_BUNDLE:-auto}" != always ] && "$PY" -c "import ray, textarena, trueskill, openai, datasets" 2> /dev/null; then
  echo "=== [setup] every package imports: the bundle is not needed"; record setup ok 0 0 null
elif [ ! -d "$BUNDLE/whl" ]; then
  echo "=== [setup] Ray, TextArena, ... do not import and there is no bundle at $BUNDLE: make it with"
  echo "    bash benchmarks/gpu_bundle.sh (on a machine with PyPI) and carry .gpu/ here"
  record setup failed 1 0 null
else
  want_pyv=$(cat "$BUNDLE/PYV"); have_pyv=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  [ "$want_pyv" != "$have_pyv" ] && echo "=== [setup] the bundle is for Python $want_pyv, this is $have_pyv"
  rm -rf "$SITE" && mkdir -p "$SITE"
  timeout 120 "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" \
    "$BUNDLE"/whl/*.whl && timeout 120 tar -xJf "$BUNDLE/ray.tar.xz" -C "$SITE"
  rc=$?
  export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH}
  "$PY" -c "import ray, textarena, trueskill, openai, datasets" || rc=1
  echo "=== [setup] bundle installed into $SITE: rc $rc in $((SECONDS - t0)) s"
  record setup "$([ $rc = 0 ] && echo ok || echo failed)" "$rc" "$((SECONDS - t0))" 240
fi
export PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1 WANDB_MODE=disabled HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1
export TOKENIZERS_PARALLELISM=false RAY_USAGE_STATS_ENABLED=0 RAY_DISABLE_DOCKER_CPU_WARNING=1
BEFORE=${BEFORE:-$BUNDLE/before/transformers_backend.py}
[ -f "$BEFORE" ] || BEFORE=4309509  # a git revision, where .git is at hand
RES=$OUT/results
mkdir -p "$RES"
"$PY" -c "
import sys, torch, transformers, peft, ray, unstable
print('python', sys.version.split()[0], '| torch', torch.__version__, '| transformers', transformers.__version__,
      '| peft', peft.__version__, '| ray', ray.__version__, ray.__file__, '| unstable', unstable.__file__)
print('cuda', torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')"

# ------------------------------------------------------------------ the steps
want b && step learner "$CAP_B" benchmarks/bench_learner.py benchmarks/bench_learner.py --device "$DEVICE" "${B_ARGS[@]}" \
  --name "learner-$DEVICE" --out "$RES"
want d && step inference "$CAP_D" benchmarks/bench_inference.py benchmarks/bench_inference.py --device "$DEVICE" --before "$BEFORE" \
  --no-collector "${D_ARGS[@]}" --out "$RES"
for mode in async sync; do
  want a && step "build_$mode" "$CAP_A" benchmarks/gpu_build_run.py benchmarks/gpu_build_run.py --device "$DEVICE" --arch "$ARCH" \
    "${A_ARGS[@]}" --mode "$mode" --runs-dir "$RUNS" --out "$RES" && stop_ray
done
want c && step vram "$CAP_C" benchmarks/bench_vram.py benchmarks/bench_vram.py --device "$DEVICE" "${C_ARGS[@]}" --out "$RES/vram.json"
want b2 && step learner_mixed "$CAP_B2" benchmarks/bench_learner.py benchmarks/bench_learner.py --device "$DEVICE" \
  "${B2_ARGS[@]}" --name "learner-mixed-$DEVICE" --out "$RES"
if want e; then
  printf "$E_CFG" > "$OUT/quickstart.yaml"
  rm -rf "$RUNS/quickstart"
  step quickstart "$CAP_E" unstable/cli/quickstart.py -m unstable.cli quickstart --config "$OUT/quickstart.yaml" \
    --out "$RUNS/quickstart" "${E_ARGS[@]}"
  [ -f "$RUNS/quickstart/summary.json" ] && cp "$RUNS/quickstart/summary.json" "$RES/quickstart_summary.json"
  stop_ray
fi

# ------------------------------------------------------------------ the summary
"$PY" benchmarks/gpu_summary.py --out "$OUT" --device "$DEVICE" --seconds "$((SECONDS - START))"
echo "=== gpu check done in $((SECONDS - START)) s: $OUT/summary.md"
exit 0
