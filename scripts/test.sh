#!/usr/bin/env bash
# Set up everything the test suite needs on a fresh machine, then run it.
# Idempotent: a second run reuses .venv and only installs what changed.
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

exec .venv/bin/python -m pytest -q "$@"
