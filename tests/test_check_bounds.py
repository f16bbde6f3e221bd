"""`draftguard check` as a real process on configs shaped to cost memory (issue 25, B5): what a check
costs stays near what a normal config's check costs, measured as the child's peak RSS against a
normal check in the same run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NORMAL = json.loads((ROOT / "examples/qwen3-swa-drafter/config.json").read_text())
PEAK = ("import resource, subprocess, sys; done = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
        "print(done.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); "
        "sys.stderr.write(done.stdout + done.stderr)")


def check_peak(config: Path) -> tuple[int, int, str]:
    """Exit code, peak RSS (KB) and output of `draftguard check <config>` in a fresh process."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1")
    done = subprocess.run([sys.executable, "-c", PEAK, sys.executable, "-m", "draftguard", "check", str(config)],
                          capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    code, peak = map(int, done.stdout.split())
    return code, peak, done.stderr


@pytest.mark.parametrize("extra", [
    {"x" * 100_000: {f"k{i}": 1 for i in range(8000)}},  # 0.2 MB: 1.6 GB before
    {"a" * 200: {f"k{i}": 1 for i in range(99_000)}},  # many keys under a long path
], ids=["long-key-with-children", "many-keys"])
def test_a_config_shaped_to_cost_memory_costs_about_what_a_normal_one_does(tmp_path, extra):
    (tmp_path / "normal.json").write_text(json.dumps(NORMAL, indent=2))
    (tmp_path / "crafted.json").write_text(json.dumps(dict(NORMAL, **extra), indent=1))
    _, normal, _ = check_peak(tmp_path / "normal.json")
    code, crafted, said = check_peak(tmp_path / "crafted.json")
    assert code in (1, 2) and "Traceback" not in said, said[-2000:]
    assert crafted < 4 * normal, (crafted // 1024, normal // 1024)
