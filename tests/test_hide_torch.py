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
