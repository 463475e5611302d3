#!/usr/bin/env bash
# Build .gpu/, what benchmarks/gpu_check.sh installs on an offline GPU machine that has Python, torch,
# transformers and peft but none of this project's other dependencies:
#   .gpu/whl/         wheels of the missing packages (cp$PYV manylinux x86_64 or pure Python), one version each
#   .gpu/ray.tar.xz   Ray's wheel, less what a single-node ray.init() with actors never loads, binaries stripped
#   .gpu/before/      the transformers engine at $BEFORE, the "before" arm of the inference benchmark
#   .gpu/PYV          the Python version the wheels are for
# Usage, from the project's root (needs PyPI): bash benchmarks/gpu_bundle.sh [PYV=3.12]
#   DEST=.gpu-cp311 bash benchmarks/gpu_bundle.sh 3.11   builds a twin for a Python 3.11 machine, to test
#   the install path off the GPU machine (BUNDLE=.gpu-cp311 bash benchmarks/gpu_check.sh --device cpu).
# About 29 MB; .gpu/ is git-ignored, so carry it to the GPU machine explicitly.
set -euo pipefail
PYV=${1:-3.12}
TAG=cp${PYV/./}
DEST=${DEST:-.gpu}
BEFORE=${BEFORE:-4309509}
RAY=${RAY:-2.60.0}
DL=${DL:-/tmp/unstable-gpu-dl-$TAG}
PY=${PY:-python3}
mkdir -p "$DEST" "$DL"
rm -rf "$DEST/whl" "$DEST/before" && mkdir -p "$DEST/whl" "$DEST/before"
echo "$PYV" > "$DEST/PYV"
git show "$BEFORE:unstable/inference/transformers_backend.py" > "$DEST/before/transformers_backend.py"
echo "$BEFORE" > "$DEST/before/REV"

PLATFORMS=()
for p in manylinux_2_28_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do
  PLATFORMS+=(--platform "$p")
done
download() {
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version "$PYV" --implementation cp \
    "${PLATFORMS[@]}" -d "$DL" "$@" 2>&1 | { grep -v "is ignored: it is neither" || true; }
}
# What the project imports beyond the image: TextArena and its needs, openai (<3) and its needs,
# datasets (unstable.environments imports it) and its needs, Ray's pure-Python needs; trueskill below.
download textarena==0.7.4 "openai<3" jiter sniffio distro pydantic pydantic-core annotated-types \
  typing-inspection typing-extensions nltk defusedxml chess python-dotenv websockets \
  datasets "dill<0.4.2" "multiprocess<0.70.20" jsonschema referencing jsonschema-specifications rpds-py
download "ray==$RAY"
for w in "$DL"/*.whl; do
  case "$(basename "$w")" in
    ray-*) ;;  # travels stripped
    *) cp "$w" "$DEST/whl/" ;;
  esac
done
# trueskill is published as an sdist only: a wheel from it (pure Python)
[ -f "$DL/trueskill-0.4.5.tar.gz" ] || "$PY" -m pip download -q --no-deps --no-binary=:all: -d "$DL" trueskill==0.4.5
"$PY" -m pip wheel -q --no-deps -w "$DEST/whl" "$DL/trueskill-0.4.5.tar.gz"

# Ray: its wheel's files less the Java jars, the dashboard's web client, the libraries (rllib, data,
# serve, tune, train, llm, air, workflow), tests and source maps; the binaries stripped.
RAYWHL=$(ls "$DL"/ray-"$RAY"-"$TAG"-*.whl | head -1)
RX=$(mktemp -d /tmp/unstable-gpu-ray-XXXXXX)
unzip -q "$RAYWHL" -d "$RX"
(
  cd "$RX/ray"
  rm -rf jars dashboard/client rllib data serve tune train llm air workflow
  find . -name "*.map" -delete
  find . -type d -name tests -prune -exec rm -rf {} +
  strip --strip-unneeded _raylet.so core/src/ray/raylet/raylet core/src/ray/gcs/gcs_server
)
tar -C "$RX" -cf - ray "ray-$RAY.dist-info" | xz "${XZ:--9}" -T2 > "$DEST/ray.tar.xz"
rm -rf "$RX"
du -sh "$DEST"
ls "$DEST/whl"
