"""Every `draftguard accept` command that README.md and docs/*.md show in a code block, run as written
(issue 33): the shell runs it from the repository root, as a reader who pasted it would, with the
installed `draftguard` on PATH. A command that needs a GPU or the Hub is listed in SKIPPED with its
reason; a command added to the docs that is in neither list fails the first test.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FIX = "--target tests/fixtures/vllm-models/target --drafter tests/fixtures/vllm-models"

# command as written (continuation lines joined, a trailing comment dropped) -> (exit code, what the
# first line of stdout starts with, text stdout must hold)
RUN = {
    "draftguard accept --target tests/fixtures/models/target --drafter tests/fixtures/models/drafter-window-lost "
    "--prompts tests/fixtures/models/prompts.jsonl --max-new-tokens 32":
        (1, "acceptance test: fail", "cause: config-rewrite"),
    f"draftguard accept {FIX}/eagle3 --prompts tests/fixtures/models/prompts.jsonl --min-acceptance-length 3.9":
        (0, "acceptance test: pass — τ 4.00", "block size                        4"),
    f"draftguard accept {FIX}/eagle3-bad-d2t --prompts tests/fixtures/models/prompts.jsonl "
    "--min-acceptance-length 3.9":
        (1, "acceptance test: fail — τ 1.00", "is below the bar 3.90"),
    "draftguard accept --target tests/fixtures/mtp-models/mimo --prompts tests/fixtures/models/prompts.jsonl "
    "--min-acceptance-length 1.8":
        (0, "acceptance test: pass — τ 1.99", "block size                        2"),
    "draftguard accept --target tests/fixtures/mtp-models/mimo-mtp-fp8 --prompts tests/fixtures/models/prompts.jsonl "
    "--min-acceptance-length 1.8":
        (1, "acceptance test: fail", "cause: mtp-weights — the MTP layer's weights: `model.mtp_layers.0.input_proj"),
}
SKIPPED = {
    "draftguard accept --target Qwen/Qwen3-8B --drafter z-lab/Qwen3-8B-DFlash-b16 --device cuda "
    "--min-acceptance-length 3.0": "needs a CUDA GPU and the Hub (Qwen3-8B and its DFlash drafter)",
    "draftguard accept --target Qwen/Qwen3-8B --drafter z-lab/Qwen3-8B-DFlash-b16 --backend both --device cuda "
    "--max-model-len 8192 --min-acceptance-length 3": "needs a CUDA GPU, vLLM and the Hub",
    ".venv-vllm/bin/draftguard accept --target tests/fixtures/vllm-models/target --drafter "
    "tests/fixtures/vllm-models/drafter --prompts tests/fixtures/models/prompts.jsonl --max-new-tokens 32 "
    "--backend both --enforce-eager --min-acceptance-length 3":
        "needs vLLM's CPU build in .venv-vllm; tests/test_vllm_engine.py "
        "(test_the_documented_cpu_example_runs_as_written_and_the_healthy_pair_passes) runs it as written",
    f"draftguard accept {FIX}/eagle3-nested-ids --prompts tests/fixtures/models/prompts.jsonl --max-new-tokens 96 "
    "--model-runner both":
        "tests/test_runners.py (test_the_documented_command_runs_as_written) runs it as written and asserts "
        "the runner diagnosis",
    "draftguard accept --target tests/data/real-configs/stepfun-ai--step-3.7-flash --method mtp "
    "--prompts tests/fixtures/models/prompts.jsonl":
        "exits 2 (bad input, stderr only); tests/test_mtp_rewrite.py (test_the_documented_command_runs_as_written) "
        "runs it as written in process and asserts the exit and its cause",
    "draftguard accept --target tests/fixtures/mtp-models/qwen35-mtp-dropped --prompts tests/fixtures/models/prompts.jsonl "
    "--min-acceptance-length 1.8":
        "tests/test_mtp_qwen35.py (test_the_documented_command_runs_as_written) runs it as written in process and "
        "asserts the fail and its cause",
}


def documented_commands() -> list[tuple[str, str]]:
    """(file:line, command) for each `draftguard accept` command in a fenced code block; `$ ` prompts
    dropped, continuation lines joined, a trailing `# comment` dropped."""
    out = []
    for path in DOCS:
        lines = path.read_text(encoding="utf-8").splitlines()
        fenced, i = False, 0
        while i < len(lines):
            text = lines[i].strip()
            if text.startswith("```"):
                fenced = not fenced
            elif fenced and re.match(r"^(\$ )?(\S*/)?draftguard accept\b", text):
                where, parts = f"{path.relative_to(ROOT)}:{i + 1}", [text.removeprefix("$ ")]
                while parts[-1].endswith("\\") and i + 1 < len(lines):
                    parts[-1] = parts[-1][:-1].strip()
                    i += 1
                    parts.append(lines[i].strip())
                out.append((where, re.sub(r"\s+#.*$", "", " ".join(parts)).strip()))
            i += 1
    return out


def test_every_documented_accept_command_is_run_or_skipped_with_a_reason():
    found = documented_commands()
    assert len(found) >= 6
    unlisted = [f"{where}: {cmd}" for where, cmd in found if cmd not in RUN and cmd not in SKIPPED]
    assert not unlisted, ("add each to RUN (it runs on CPU with the fixtures) or SKIPPED (why not):\n"
                          + "\n".join(unlisted))
    shown = {cmd for _, cmd in found}
    assert not [c for c in (*RUN, *SKIPPED) if c not in shown], "a listed command is no longer in the docs"


@pytest.mark.parametrize("command", sorted(RUN))
def test_documented_accept_command_runs_as_written(command):
    pytest.importorskip("torch")
    code, first, holds = RUN[command]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DRAFTGUARD_", "VLLM_"))}
    # The installed entry point (the venv's bin first), reading this checkout's draftguard.
    env.update(PATH=os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]),
               PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, env=env, timeout=600, cwd=ROOT)
    assert done.returncode == code, done.stdout[-2000:] + done.stderr[-2000:]
    assert done.stdout.startswith(first), done.stdout[:500]
    assert holds in done.stdout, done.stdout[-2000:]
