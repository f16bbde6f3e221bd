"""The launch view's two tiers held equal: on every vLLM launch in tests/data (and the DFlash and EAGLE-3
pairs of the engine view's corpus launched both ways), vLLM 0.32.0's own serve parser and
``create_engine_config()`` (the real tier, ``vllm_probe``'s "launch" request in one worker) and the
light tier's rules say the same: whether it refuses (the light tier's words are the start of vLLM's),
the served length, the length derived from the config, dtype, runner, method, draft architecture,
draft length and the target layers read. Marked ``vllm``: scripts/test.sh runs it in .venv-vllm."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from functools import lru_cache
from pathlib import Path

import pytest

from draftguard.check.engines import parse_engines
from draftguard.check.engines.real import PYTHON_ENV, RealEngines
from draftguard.check.launch import launch_files
from draftguard.check.launch.check import check_launch
from draftguard.check.launch.sources import command_launches, read_launches

pytestmark = pytest.mark.vllm

ROOT = Path(__file__).resolve().parent.parent
DRAFTERS = ROOT / "tests" / "data" / "real-drafters"
TARGETS = DRAFTERS / "targets"
FIXTURES = ROOT / "tests" / "fixtures" / "vllm-models"
VLLM = parse_engines("vllm==0.32.0")
FIELDS = ("max_model_len", "derived_max_len", "dtype", "runner", "method", "num_speculative_tokens",
          "draft_architecture", "draft_max_model_len", "layers_read")


def _spec(method: str, draft: Path, n: int = 3) -> str:
    return "'" + json.dumps({"method": method, "model": str(draft), "num_speculative_tokens": n}) + "'"


PAIRS = [
    ("dflash", DRAFTERS / "specforge-qwen3-8b-dflash", TARGETS / "qwen3-8b"),
    ("dflash", DRAFTERS / "broken" / "vllm-v1-mixed-sliding-full", TARGETS / "qwen3-8b"),
    ("dflash", DRAFTERS / "broken" / "vllm-40727-dflash-ids-plus-one", TARGETS / "qwen3-8b"),
    ("dflash", ROOT / "examples" / "qwen3-swa-drafter", TARGETS / "qwen3-32b"),
    ("dflash", FIXTURES / "drafter", FIXTURES / "target"),
    ("eagle3", DRAFTERS / "specforge-llama3-8b-eagle3", TARGETS / "llama-3.1-8b"),
    ("eagle", DRAFTERS / "specforge-llama3-8b-eagle3", TARGETS / "llama-3.1-8b"),
    ("eagle3", FIXTURES / "drafter", FIXTURES / "target"),
]
COMMANDS = [f"{env}vllm serve {target} --max-model-len 2048 --speculative-config {_spec(method, draft)}"
            for method, draft, target in PAIRS for env in ("", "VLLM_USE_V2_MODEL_RUNNER=0 ")] + [
    f"vllm serve {FIXTURES / 'target'} --max-model-len 4096",
    f"VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 vllm serve {FIXTURES / 'target'} --max-model-len 4096",
    f"vllm serve {ROOT / 'tests/data/real-configs/google--gemma-2-2b-it'} --dtype float16",
    f"vllm serve {ROOT / 'tests/data/real-configs/google--gemma-2-2b-it'} --dtype half --max-model-len 4k",
    f"vllm serve {TARGETS / 'qwen3-8b'} --dtype float32",
    f"vllm serve {TARGETS / 'qwen3-8b'} --max-model 4096 --max-num-seq 8",  # argparse's unambiguous prefixes
    f"vllm serve {TARGETS / 'qwen3-8b'} --max_model_len 4096 --enable-prefix-cache 1",  # a typo: refused
    f"vllm serve {TARGETS / 'qwen3-8b'} -tp 8",
    # LongRoPE (Phi-3.5, trained to 131072): serves 4096 by default, takes its trained length when asked
    f"vllm serve {ROOT / 'tests/data/real-configs/microsoft--phi-3.5-mini-instruct'} --max-model-len 131072",
    f"vllm serve {ROOT / 'tests/data/real-configs/microsoft--phi-3.5-mini-instruct'} --max-model-len 140000",
    f"vllm serve {ROOT / 'tests/data/real-configs/microsoft--phi-3.5-mini-instruct'}",
    # a dict --hf-overrides lengthens the model before vLLM derives its length
    f"vllm serve {TARGETS / 'qwen3-8b'} --hf-overrides '{{\"max_position_embeddings\": 65536}}' --max-model-len 65536",
    f"vllm serve {TARGETS / 'qwen3-8b'} --quantization bitsandbytes",  # gone from 0.32.0's methods
]


@lru_cache(maxsize=1)
def engines() -> RealEngines:
    os.environ[PYTHON_ENV] = sys.executable  # this interpreter has vLLM (the marker's promise)
    return RealEngines.find(VLLM)


def _launches():
    out = []
    for file in launch_files([str(ROOT / "tests" / "data" / "launch" / "*")]):
        out += [(Path(file).name, launch) for launch in read_launches(file) if launch.engine == "vllm"]
    return out + [(command[:90], launch) for command in COMMANDS for launch in command_launches(command)]


LAUNCHES = _launches()


@pytest.mark.parametrize("name, launch", LAUNCHES, ids=[n for n, _ in LAUNCHES])
def test_the_light_tier_says_what_vllm_says_of_each_launch(name, launch):
    real = check_launch(launch, VLLM, engines()).launch_view
    light = check_launch(launch, VLLM, None).launch_view
    assert real.tier == "engine" and light.tier == "light"
    assert (real.refusal is None) == (light.refusal is None), (real.refusal, light.refusal)
    if real.refusal:
        assert real.refusal.startswith(light.refusal), (real.refusal, light.refusal)
        return
    for field in FIELDS:
        if getattr(light, field) is not None or field in ("max_model_len", "runner", "layers_read"):
            assert getattr(light, field) == getattr(real, field), (field, getattr(light, field), getattr(real, field))


def test_the_flags_that_take_no_value_are_vllms():
    from vllm.entrypoints.cli.serve import ServeSubcommand  # vLLM: this test runs in .venv-vllm only
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    from draftguard.check.launch.known_flags import NO_VALUE, OPTIONS

    parser = FlexibleArgumentParser(prog="vllm")
    subs = parser.add_subparsers(dest="subparser")
    ServeSubcommand().subparser_init(subs)
    serve = subs.choices["serve"]
    switches = {o[2:] for a in serve._actions if a.nargs == 0 for o in a.option_strings if o.startswith("--")}
    assert NO_VALUE["vllm"] == switches
    assert OPTIONS["vllm"] == {o[2:] for a in serve._actions for o in a.option_strings if o.startswith("--")}


def test_a_launch_answers_within_the_cost_bounds():
    launch = command_launches(COMMANDS[0])[0]
    engines()
    check_launch(launch, VLLM, engines())  # the worker is warm once it has answered one launch
    start = time.monotonic()
    view = check_launch(launch, VLLM, engines()).launch_view
    assert view.tier == "engine" and time.monotonic() - start <= 2.0


SGLANG_SITE = ROOT / ".venv-sglang" / "site"
if not (SGLANG_SITE / "sglang").is_dir():  # a worktree: the main checkout's install
    SGLANG_SITE = Path(sys.prefix).parent / ".venv-sglang" / "site"
SGLANG = parse_engines("sglang==0.5.23")
SGLANG_COMMANDS = [
    f"python -m sglang.launch_server --model-path {FIXTURES / 'target'} --context-length 4096",
    f"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 sglang serve --model-path {FIXTURES / 'target'} --context-length 4096",
    f"python3 -m sglang.launch_server --model-path {TARGETS / 'llama-3.1-8b'} --speculative-algorithm EAGLE "
    f"--speculative-draft-model-path {DRAFTERS / 'specforge-llama3-8b-eagle3'}",
    f"python3 -m sglang.launch_server --model-path {TARGETS / 'qwen3-8b'} --context-length 8192 --dtype bfloat16",
    f"python3 -m sglang.launch_server --model-path {TARGETS / 'qwen3-8b'} --context-len 8192",
]


@lru_cache(maxsize=1)
def sglang_engines() -> RealEngines:
    os.environ[PYTHON_ENV] = sys.executable
    os.environ["DRAFTGUARD_SGLANG_SITE"] = str(SGLANG_SITE)
    return RealEngines.find(SGLANG)


@pytest.mark.skipif(not (SGLANG_SITE / "sglang").is_dir(), reason="SGLang 0.5.23's wheel is not installed --no-deps "
                    "into .venv-sglang/site")
@pytest.mark.parametrize("command", SGLANG_COMMANDS, ids=[c.split()[-1][-40:] for c in SGLANG_COMMANDS])
def test_the_light_tier_says_what_sglangs_server_args_say(command):
    [launch] = command_launches(command)
    real = check_launch(launch, SGLANG, sglang_engines()).launch_view
    light = check_launch(launch, SGLANG, None).launch_view
    assert real.tier == "engine" and light.tier == "light", sglang_engines().failed
    assert (real.refusal is None) == (light.refusal is None), (real.refusal, light.refusal)
    if real.refusal:
        assert real.refusal.startswith(light.refusal), (real.refusal, light.refusal)
        return
    for field in ("max_model_len", "derived_max_len", "method", "draft_architecture"):
        assert getattr(light, field) == getattr(real, field), (field, getattr(light, field), getattr(real, field))
    if light.dtype is not None:
        assert light.dtype == real.dtype


@pytest.mark.skipif(not (SGLANG_SITE / "sglang").is_dir(), reason="SGLang 0.5.23's wheel is not installed --no-deps "
                    "into .venv-sglang/site")
@pytest.mark.parametrize("name", ["sglang-compose.yaml", "k8s-sglang-service.yaml"])
def test_real_sglang_launches_get_no_warning_from_sglang_itself(tmp_path, name):
    """sgl-project/sglang's own compose file and manifest, their Hub model read from an offline cache
    holding its published config.json: SGLang's ServerArgs and ModelConfig accept them, and nothing
    above info is said."""
    repo = tmp_path / "models--meta-llama--Meta-Llama-3.1-8B-Instruct"
    commit = "0e9e39f249a16976918f6564b8830bc894c89659"
    (repo / "snapshots" / commit).mkdir(parents=True)
    shutil.copy(TARGETS / "llama-3.1-8b" / "config.json", repo / "snapshots" / commit / "config.json")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    env = {**os.environ, "HF_HUB_CACHE": str(tmp_path), "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT),
           PYTHON_ENV: sys.executable, "DRAFTGUARD_SGLANG_SITE": str(SGLANG_SITE)}
    done = subprocess.run([sys.executable, "-m", "draftguard", "check", "--engine", "sglang==0.5.23", "--format", "json",
                           "--fail-on", "warning", "--launch-file", str(ROOT / "tests" / "data" / "real-launch" / name)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    [target] = report["targets"]
    assert target["config_class"] == ("SGLang 0.5.23 launch (engine tier): LlamaForCausalLM, max_model_len 131072, "
                                      "bfloat16")
    assert [(f["rule"], f["severity"]) for f in report["findings"]] == [("DG302", "info")]


def test_a_file_the_checker_lacks_is_not_the_engines_refusal():
    """The Qwen3-8B folder here holds config.json only; under --reasoning-parser vLLM reads the tokenizer and
    fails. That is this checkout's lack, not vLLM refusing the deployment: before, a false DG300."""
    [launch] = command_launches(f"vllm serve {TARGETS / 'qwen3-8b'} --reasoning-parser deepseek_r1 --max-model-len 4096")
    result = check_launch(launch, VLLM, engines())
    assert [f.rule for f in result.findings if f.rule == "DG300"] == []
    assert result.launch_view.tier == "light"
    assert any("could not take this launch here" in n and "tokenizer" in n for n in result.launch_view.notes)
