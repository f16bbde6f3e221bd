#!/usr/bin/env bash
# README Quickstart command 1, then the light-check tests, under every Python the package claims
# (requires-python >= 3.10). Each interpreter gets its own venv (.venv-py3XX); one this machine lacks
# is skipped with a line that says so. The whole suite runs under the default python3 (scripts/test.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

VERSIONS=${DRAFTGUARD_PYTHONS:-"3.10 3.11 3.12 3.13"}
# README command 1 runs under each of them; the light-check tests under the oldest and the newest, which
# differ from the main pass's 3.11 (3.10 resolves with transformers 5.20.2; 3.13 is the newest Python), unless
# DRAFTGUARD_LIGHT_PYTHONS names others ("all": every one). CI's 90 minutes hold the suite with this split.
LIGHT_PYTHONS=${DRAFTGUARD_LIGHT_PYTHONS:-"3.10 3.13"}
# The real-config and real-drafter corpora too: a false alarm under one transformers is the same defect.
LIGHT_TESTS=(tests/test_fidelity.py tests/test_cli_check.py tests/test_rules_doc.py tests/test_false_alarms.py
             tests/test_dflash_corpus.py tests/test_os_bounds.py)

# The first command of the README's Quickstart block, exactly as a user copies it.
readme_command=$(awk '/^## Quickstart/{q=1} q && /^# 1\./{getline; print; exit}' README.md)
case "$readme_command" in
  "python3 -c "*" && python3 -m venv .venv && "*) ;;  # the version guard, then the venv
  *) echo "error: README.md Quickstart command 1 not found or changed shape: '$readme_command'" >&2; exit 1 ;;
esac

find_python() {  # a python3.X on PATH, else a pyenv install of 3.X
  local v=$1 p
  if p=$(command -v "python$v" 2>/dev/null) && "$p" -c 'import sys' 2>/dev/null; then echo "$p"; return; fi
  for p in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$v".*/bin/python"$v"; do
    [ -x "$p" ] && { echo "$p"; return; }
  done
  return 1
}

# One interpreter's run: README command 1, then the light-check tests. Its output goes to stdout; the
# exit status says whether it passed. Installs into the shared checkout (pip's editable build writes
# draftguard.egg-info there) take a lock, so runs side by side never install at once.
mkdir -p .test-logs
run_one() {
  local v=$1 py=$2 venv=".venv-py${1/./}" cmd out start
  # Same command, with this interpreter (the guard and the venv) and its own venv.
  cmd=${readme_command//python3 -/$py -}
  cmd=${cmd/-m venv .venv/-m venv $venv}
  cmd=${cmd//.venv\/bin\//$venv/bin/}
  echo "== Python $v ($py): README command 1"
  start=$SECONDS
  if ! out=$(flock .test-logs/pip.lock bash -c "$cmd" 2>&1); then
    echo "$out" | grep -v '^WARNING: Location' | tail -20
    echo "== Python $v: README command 1 FAILED"; return 1
  fi
  echo "$out" | grep -q "DG005 sliding-layer-runs-full" \
    || { echo "$out" | tail -20; echo "== Python $v: README command 1 ran but did not report DG005"; return 1; }
  if [ "$LIGHT_PYTHONS" != all ] && [[ " $LIGHT_PYTHONS " != *" $v "* ]]; then
    echo "== Python $v: README command 1 ok ($((SECONDS - start)) s); light-check tests under $LIGHT_PYTHONS"
    return 0
  fi
  echo "== Python $v: README command 1 ok ($((SECONDS - start)) s); light-check tests"
  flock .test-logs/pip.lock "$venv/bin/pip" install -q -c constraints.txt -e '.[test]' 2>&1 | grep -v '^WARNING: Location' || true
  if ! "$venv/bin/python" -m pytest -q -p no:cacheprovider "${LIGHT_TESTS[@]}"; then
    echo "== Python $v: light-check tests FAILED"; return 1
  fi
}

# Two interpreters at a time where there are two cores or more (DRAFTGUARD_TEST_JOBS=1: one at a time);
# each one's output is printed whole, in the order of VERSIONS, once all have ended.
jobs=${DRAFTGUARD_TEST_JOBS:-$(nproc 2>/dev/null || echo 1)}
[ "$jobs" -ge 2 ] && jobs=2
failed=()
names=()
for v in $VERSIONS; do
  if ! py=$(find_python "$v"); then
    echo "== Python $v: not on this machine, skipped"
    continue
  fi
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
  rm -f ".test-logs/python-$v.rc"
  { rc=0; run_one "$v" "$py" > ".test-logs/python-$v.log" 2>&1 || rc=$?; echo "$rc" > ".test-logs/python-$v.rc"; } &
  names+=("$v")
done
wait
for v in ${names[@]+"${names[@]}"}; do
  cat ".test-logs/python-$v.log"
  [ "$(cat ".test-logs/python-$v.rc" 2>/dev/null)" = 0 ] || failed+=("$v")
done

if [ ${#failed[@]} -gt 0 ]; then
  echo "Pythons that failed: ${failed[*]}" >&2
  exit 1
fi
