"""bench/gpu_check.sh, the one command for the day a GPU runner is lent, checked without a GPU: it
parses, and its dry run (GPU_CHECK_DRY_RUN=1) lists every `draftguard accept` it would start,
including the EAGLE-3 fixture heads and the real public EAGLE-3 pair (issue 33)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "bench" / "gpu_check.sh"


def test_gpu_check_parses():
    done = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_gpu_check_dry_run_lists_the_eagle3_runs(tmp_path):
    out = tmp_path / "check.md"
    env = {**os.environ, "GPU_CHECK_DEVICE": "cpu", "GPU_CHECK_DRY_RUN": "1", "GPU_CHECK_HUB": "1",
           "PYTHON": sys.executable}
    done = subprocess.run(["bash", str(SCRIPT), str(out)], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    rows = {line.split("|")[1].strip(): line for line in out.read_text().splitlines() if "dry run:" in line}
    for head in ("eagle3", "eagle3-no-ids", "eagle3-bad-d2t", "eagle3-ids-shifted", "eagle3-speculators",
                 "eagle3-speculators-norm-default", "eagle3-no-d2t"):
        row = rows[f"{head}-cpu-fp32"]
        assert f"--drafter tests/fixtures/vllm-models/{head} " in row and "--min-acceptance-length 3.9" in row
    for backend in ("reference", "vllm"):
        row = rows[f"eagle3-hub-{backend}"]
        assert "--target meta-llama/Llama-3.1-8B-Instruct --drafter yuhuili/EAGLE3-LLaMA3.1-Instruct-8B" in row
        assert f"--backend {backend} " in row and "--prompts builtin" in row
    for model in ("mimo", "mimo-mtp-dropped", "mimo-mtp-fp8", "dsv3-moe", "glm4-moe", "ernie45",
                  "mimo-v2-flash"):  # MTP: a model is its own target
        row = rows[f"mtp-{model}-cpu-fp32"]
        assert f"--target tests/fixtures/mtp-models/{model} --drafter tests/fixtures/mtp-models/{model} " in row
        assert "--min-acceptance-length 1.8" in row
    assert "healthy-cpu" in rows  # the DFlash runs it had stay


def test_each_dry_run_command_parses_as_draftguard_accept(tmp_path):
    """The commands the script would start are valid `draftguard accept` command lines."""
    from draftguard.cli import _parser

    out = tmp_path / "check.md"
    env = {**os.environ, "GPU_CHECK_DEVICE": "cpu", "GPU_CHECK_DRY_RUN": "1", "GPU_CHECK_HUB": "1",
           "PYTHON": sys.executable}
    subprocess.run(["bash", str(SCRIPT), str(out)], capture_output=True, text=True, env=env, timeout=120, check=True)
    commands = [line.split("dry run:", 1)[1].rsplit("|", 1)[0].split() for line in out.read_text().splitlines()
                if "dry run:" in line]
    assert commands
    parser = _parser()
    for argv in commands:
        assert argv[1:4] == ["-m", "draftguard", "accept"], argv
        assert parser.parse_args(argv[3:]).drafter == argv[argv.index("--drafter") + 1]
