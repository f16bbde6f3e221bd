"""The Action on a deployment repo: the `launch-files` input (or .draftguard.yml `launch:`) checks the
launch files a pull request changes, and their findings reach the annotations, the summary and the
sticky comment, on the launch file's line. A real `python -m draftguard action` process on a git
checkout, talking to the fake GitHub."""

from __future__ import annotations

import json
from pathlib import Path

from draftguard.report.comment import parse_sticky
from tests.test_action import REPO, Checkout, add_pull, api, run_action  # noqa: F401

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "vllm-models"
COMPOSE = """services:
  vllm:
    image: vllm/vllm-openai:v0.32.0
    volumes:
      - ./models/target:/models/target
      - ./models/drafter:/models/drafter
    command: >
      /models/target --max-model-len 128
      --speculative-config '{"method": "dflash", "model": "/models/drafter", "num_speculative_tokens": 3}'
"""


def _models() -> dict[str, str]:
    return {f"models/{name}/config.json": (FIXTURES / name / "config.json").read_text() for name in ("target", "drafter")}


def test_a_pull_request_that_edits_a_compose_file_gets_the_launch_findings(tmp_path, api):
    checkout = Checkout(tmp_path, {**_models(), "docker-compose.yml": COMPOSE})
    # The PR sends the drafter as EAGLE-3 and forces the length: vLLM refuses both at start.
    checkout.push({"docker-compose.yml": COMPOSE.replace('"dflash"', '"eagle3"').replace(
        "/models/target --max-model-len 128", "/models/target --max-model-len 128")})
    add_pull(api, checkout)
    run = run_action(tmp_path, checkout, api, **{"launch_files": "docker-compose.yml"})
    assert run.code == 1, run.stderr
    report = json.loads(Path(run.outputs["report-json"]).read_text())
    assert [(f["rule"], f["file"], f["line"]) for f in report["findings"]] == [
        ("DG304", "docker-compose.yml", 9), ("DG300", "docker-compose.yml", 9)]
    [error, *_] = run.annotations("error")
    assert "file=docker-compose.yml" in error and "line=9" in error
    sticky = parse_sticky(api.comments_on(REPO, 7)[0]["body"])
    assert "DG304" in sticky["light"] and "'dflash'" in sticky["light"]


def test_settings_launch_key_and_a_healthy_launch_passes(tmp_path, api):
    checkout = Checkout(tmp_path, {**_models(), ".draftguard.yml": "launch: ['*.yml']\n"})
    checkout.push({"docker-compose.yml": COMPOSE})
    add_pull(api, checkout)
    run = run_action(tmp_path, checkout, api, comment="false")
    assert run.code == 0, run.stderr
    report = json.loads(Path(run.outputs["report-json"]).read_text())
    assert [f["rule"] for f in report["findings"]] == ["DG307"]  # info: the layers the V2 runner reads


def test_a_model_outside_the_checkout_is_not_read(tmp_path, api):
    checkout = Checkout(tmp_path, _models())
    checkout.push({"serve.sh": f"vllm serve {FIXTURES / 'target'}\n"})
    add_pull(api, checkout)
    run = run_action(tmp_path, checkout, api, comment="false", **{"launch_files": "serve.sh"})
    assert run.code == 2 and "outside the repository, not read" in run.stdout + run.stderr


def test_a_launch_finding_already_on_the_base_is_not_new(tmp_path, api):
    # The base already sends the DFlash drafter as EAGLE-3; the PR only adds a comment above it (the
    # lines move by one). Compared with the base's same launch file, nothing is new: before, every
    # launch finding counted as new.
    broken = COMPOSE.replace('"dflash"', '"eagle3"')
    checkout = Checkout(tmp_path, {**_models(), "docker-compose.yml": broken})
    checkout.push({"docker-compose.yml": "# serve the drafter\n" + broken})
    add_pull(api, checkout)
    run = run_action(tmp_path, checkout, api, **{"launch_files": "docker-compose.yml"})
    assert run.code == 1, run.stderr
    report = json.loads(Path(run.outputs["report-json"]).read_text())
    assert [(f["rule"], f["line"]) for f in report["findings"]] == [("DG304", 10), ("DG300", 10)]
    assert "0 new in this pull request" in run.summary and "**new**" not in run.summary
    sticky = parse_sticky(api.comments_on(REPO, 7)[0]["body"])
    assert "0 new in this pull request" in sticky["light"]


def test_a_launch_finding_the_pull_request_brings_is_new(tmp_path, api):
    checkout = Checkout(tmp_path, {**_models(), "docker-compose.yml": COMPOSE})
    checkout.push({"docker-compose.yml": COMPOSE.replace('"dflash"', '"eagle3"')})
    add_pull(api, checkout)
    run = run_action(tmp_path, checkout, api, comment="false", **{"launch_files": "docker-compose.yml"})
    assert run.code == 1, run.stderr
    assert "2 new in this pull request" in run.summary and "**new**" in run.summary
