"""The real tier under the same bounds (issue 32): vLLM's worker (``check/engines/vllm_probe.py``, a
long-lived process in vLLM's environment) answers each config within the check's wall time, CPU
seconds and memory, is stopped and started afresh past one (the file gets an error naming the bound),
and writes its temp and cache files in a scratch folder draftguard deletes. Before, it ran 84 s under
a 20 s budget and left files in the temp folder and in vLLM's cache folder. Black-box: the real
`draftguard check --engine` process. Marked ``vllm`` (runs in .venv-vllm).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from draftguard import bounded

pytestmark = pytest.mark.vllm

ROOT = Path(__file__).resolve().parent.parent
DRAFTERS = ROOT / "tests" / "data" / "real-drafters"
TARGET = DRAFTERS / "targets" / "qwen3-8b"


def check(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    (tmp_path / "tmp").mkdir(exist_ok=True)
    (tmp_path / "home").mkdir(exist_ok=True)
    full = {k: v for k, v in os.environ.items() if k not in ("XDG_CACHE_HOME", "VLLM_CACHE_ROOT")}
    for name in (bounded.MEMORY_ENV, bounded.CPU_ENV, bounded.BUDGET_ENV):
        full.pop(name, None)
    full.update(PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1", TMPDIR=str(tmp_path / "tmp"), HOME=str(tmp_path / "home"),
                DRAFTGUARD_VLLM_PYTHON=sys.executable, **env)
    return subprocess.run([sys.executable, "-m", "draftguard", "check", "--format", "json", "--engine", "vllm==0.32.0",
                           *args], capture_output=True, text=True, timeout=600, env=full, cwd=ROOT)


def leftovers(tmp_path: Path) -> list[str]:
    """Files under the run's temp folder and home (vLLM's cache folder is ~/.cache/vllm)."""
    return sorted(str(p.relative_to(tmp_path)) for base in ("tmp", "home") for p in (tmp_path / base).rglob("*")
                  if p.is_file() and ".cache/draftguard" not in str(p))  # draftguard's own cache, by design


def test_the_real_tier_leaves_no_file_in_the_temp_or_cache_folders(tmp_path):
    done = check(tmp_path, str(TARGET))
    assert done.returncode in (0, 1), done.stderr
    report = json.loads(done.stdout)
    assert any(v["tier"] == "engine" for t in report["targets"] for v in t.get("engines", [])), done.stderr
    assert leftovers(tmp_path) == []


def test_a_request_past_the_cpu_bound_stops_the_worker_names_the_bound_and_the_run_goes_on(tmp_path):
    # Qwen3-8B's view now takes vLLM under a CPU second on this machine: a copy with 3,000 layers takes
    # several to build on the meta device, so the request surely passes the bound.
    heavy = tmp_path / "heavy"
    heavy.mkdir()
    raw = json.loads((TARGET / "config.json").read_text())
    raw.pop("layer_types", None)
    (heavy / "config.json").write_text(json.dumps({**raw, "num_hidden_layers": 3000}))
    started = time.monotonic()
    done = check(tmp_path, str(heavy), str(ROOT / "examples" / "qwen3-swa-drafter"),
                 DRAFTGUARD_CHECK_CPU_SECONDS="1", DRAFTGUARD_CHECK_SECONDS="30")
    took = time.monotonic() - started
    assert done.returncode == 2, done.stdout + done.stderr
    report = json.loads(done.stdout)
    [error] = report["errors"]
    assert error["source"] == str(heavy)
    assert "vLLM 0.32.0: the engine's worker stopped after 1 s of CPU (DRAFTGUARD_CHECK_CPU_SECONDS)" in error["message"]
    # the run went on: the other file is checked and reported
    assert {"DG001", "DG005"} <= {f["rule"] for f in report["findings"] if "qwen3-swa-drafter" in f["file"]}
    assert took < 120, took
    assert leftovers(tmp_path) == []
