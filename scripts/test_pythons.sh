#!/usr/bin/env bash
# README Quickstart command 1, then the light-check tests, under every Python the package claims
# (requires-python >= 3.10). Each interpreter gets its own venv (.venv-py3XX); one this machine lacks
# is skipped with a line that says so. The whole suite runs under the default python3 (scripts/test.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

VERSIONS=${DRAFTGUARD_PYTHONS:-"3.10 3.11 3.12 3.13"}
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

failed=()
for v in $VERSIONS; do
  if ! py=$(find_python "$v"); then
    echo "== Python $v: not on this machine, skipped"
    continue
  fi
  venv=".venv-py${v/./}"
  # Same command, with this interpreter (the guard and the venv) and its own venv.
  cmd=${readme_command//python3 -/$py -}
  cmd=${cmd/-m venv .venv/-m venv $venv}
  cmd=${cmd//.venv\/bin\//$venv/bin/}
  echo "== Python $v ($py): README command 1"
  start=$SECONDS
  if ! out=$(bash -c "$cmd" 2>&1); then
    echo "$out" | grep -v '^WARNING: Location' | tail -20
    echo "== Python $v: README command 1 FAILED"; failed+=("$v"); continue
  fi
  echo "$out" | grep -q "DG005 sliding-layer-runs-full" \
    || { echo "$out" | tail -20; echo "== Python $v: README command 1 ran but did not report DG005"; failed+=("$v"); continue; }
  echo "== Python $v: README command 1 ok ($((SECONDS - start)) s); light-check tests"
  "$venv/bin/pip" install -q -c constraints.txt -e '.[test]' 2>&1 | grep -v '^WARNING: Location' || true
  if ! "$venv/bin/python" -m pytest -q -p no:cacheprovider "${LIGHT_TESTS[@]}"; then
    echo "== Python $v: light-check tests FAILED"; failed+=("$v"); continue
  fi
done

if [ ${#failed[@]} -gt 0 ]; then
  echo "Pythons that failed: ${failed[*]}" >&2
  exit 1
fi
