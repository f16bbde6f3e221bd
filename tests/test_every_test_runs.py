"""Every test runs in some pass of scripts/test.sh: the main pass runs `-m "not vllm"` over the whole
suite, the vLLM pass runs `-m vllm` over the files in VLLM_TESTS only (those grep finds the marker in). A test marked vllm in a file
that list leaves out runs in neither (two in tests/test_runners.py did, issue 42). The marked tests
come from pytest's own collection, in this interpreter, which collects them without vLLM installed.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def vllm_pass_files() -> set[str]:
    """The files scripts/test.sh's vLLM pass runs: its ``VLLM_TESTS`` line, run by bash in the repo root."""
    script = (ROOT / "scripts" / "test.sh").read_text()
    match = re.search(r"^(mapfile -t VLLM_TESTS .*|VLLM_TESTS=\(.*)$", script, re.M)
    assert match, "scripts/test.sh sets no VLLM_TESTS"
    done = subprocess.run(["bash", "-c", match.group(1) + '\nprintf "%s\\n" "${VLLM_TESTS[@]}"'], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return set(done.stdout.split())


def marked_vllm() -> set[str]:
    """The node ids pytest collects under ``-m vllm`` (collection only: nothing runs)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           "-m", "vllm", "tests"], cwd=ROOT, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return {line for line in done.stdout.splitlines() if "::" in line and not line.startswith(" ")}


def test_every_test_marked_vllm_lives_in_a_file_the_vllm_pass_runs():
    files = vllm_pass_files()
    assert all((ROOT / f).is_file() for f in files), sorted(f for f in files if not (ROOT / f).is_file())
    marked = marked_vllm()
    assert len(marked) > 10  # the collection found them: a parsing slip cannot pass as "none missing"
    nowhere = sorted(node for node in marked if node.split("::", 1)[0] not in files)
    assert nowhere == [], f"marked vllm but in no file scripts/test.sh's VLLM_TESTS finds: {nowhere}"
