"""The config check hides torch from transformers (a config load is ~2.8x slower with it). When
transformers was imported first and had already asked whether torch is there (a process that read
transformers' version before its first check: the bot's matrix path did), hiding torch afterwards
made every config class import fail with "import of torch halted". Each case runs in a fresh
interpreter, since the state is the process's."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("torch")  # torch installed (the runner extra) is the case that breaks

SCRIPT = """
import json
from transformers.utils import import_utils
assert import_utils.is_torch_available()  # transformers asked first, with torch installed
from draftguard.check.light import check_snapshot
from draftguard.check.resolver import hide_torch
from draftguard.snapshot import load_snapshot
hide_torch()
result = check_snapshot(load_snapshot("examples/qwen3-swa-drafter"))
import sys
print(sorted({f.rule for f in result.findings}), "torch" in sys.modules and sys.modules["torch"] is not None)
"""


def test_torch_hidden_after_transformers_asked_still_lets_configs_load():
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "DG001" in done.stdout and done.stdout.strip().endswith("False"), done.stdout


LIBRARY = """
import sys
from draftguard import bounded
from draftguard.check.run import check
report = check(["examples/qwen3-swa-drafter"])
child = bounded._THREAD.child  # the check's warm child, still running: its memory map says what it loaded
maps = open(f"/proc/{child.proc.pid}/maps").read()
print(sorted({f.rule for f in report.findings}), "libtorch" in maps, "torch" in sys.modules)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the child's /proc/PID/maps")
def test_the_library_check_keeps_torch_out_of_its_child():
    # Before: the CLI hid torch, but check.run.check called from a script did not, so its bounded child
    # imported torch through transformers' config modules: slower, and with a CUDA torch (vLLM's
    # environment) every file failed under the 2 GB bound ("libtorch_cpu.so: failed to map segment").
    done = subprocess.run([sys.executable, "-c", LIBRARY], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "['DG001', 'DG005'] False False", done.stdout
