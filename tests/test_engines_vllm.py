"""The engine's view, real tier: vLLM 0.32.0's own config path and model classes built on torch's meta
device (``check.engines.vllm_probe`` in one worker process), against the light tier, on both real
corpora. Marked ``vllm``: scripts/test.sh runs these in .venv-vllm; elsewhere they are skipped.

Where the two tiers disagree, the light tier is wrong (vLLM is the authority) and these tests fail.
Compared per target: the served max_model_len, head size and KV heads, the per-layer windows of the built attention layers
(where the model builds on CPU), and the dtype (where the light tier can tell without weights); per
DFlash pair and vLLM runner: the target layers read, whether the runner refuses, and the draft's
per-layer windows.
"""

from __future__ import annotations

import json

import sys
from functools import lru_cache
from pathlib import Path

import pytest

from draftguard.check.engines import parse_engines
from draftguard.check.engines.real import PYTHON_ENV, RealEngines
from draftguard.check.run import check as check_targets

pytestmark = pytest.mark.vllm

ROOT = Path(__file__).resolve().parent.parent
REAL = ROOT / "tests" / "data" / "real-configs"
DRAFTERS = ROOT / "tests" / "data" / "real-drafters"
TARGETS = DRAFTERS / "targets"
FIXTURES = ROOT / "tests" / "fixtures" / "vllm-models"
VLLM = parse_engines("vllm==0.32.0")
# DFlash drafters and the target each is served with (the corpus's, the incident's and our fixture).
PAIRS = [
    (DRAFTERS / "specforge-qwen3-8b-dflash", TARGETS / "qwen3-8b"),
    (DRAFTERS / "specforge-qwen3-4b-dflash", TARGETS / "qwen3-4b"),
    (DRAFTERS / "broken" / "vllm-v1-mixed-sliding-full", TARGETS / "qwen3-8b"),
    (DRAFTERS / "broken" / "vllm-48113-qwen3-4b-dflash-on-32-layers", TARGETS / "qwen3-8b"),
    (DRAFTERS / "broken" / "vllm-40727-dflash-ids-plus-one", TARGETS / "qwen3-8b"),
    (ROOT / "examples" / "qwen3-swa-drafter", TARGETS / "qwen3-32b"),
    (FIXTURES / "drafter", FIXTURES / "target"),
]


@lru_cache(maxsize=1)
def engines() -> RealEngines:
    """One vLLM worker for the whole module, as one `draftguard check --engine` call has."""
    import os

    os.environ[PYTHON_ENV] = sys.executable  # this interpreter has vLLM (the marker's promise)
    return RealEngines.find(VLLM)


def _light(folder: Path, target: Path | None = None):
    report = check_targets([str(folder)], drafter_target=str(target) if target else None, engines=VLLM)
    assert report.errors == [], [e.message for e in report.errors]
    return report.targets[0]


def _sliding(windows):
    return [w for w in (windows or []) if w is not None]


def test_light_and_real_tiers_agree_on_every_real_target():
    real = engines()
    disagree, answered = {}, 0  # a light view without a length (nested text configs) makes no claim to compare
    for folder in sorted(p.parent for p in REAL.glob("*/config.json")):
        report = check_targets([str(folder)], engines=VLLM)
        if report.errors:  # transformers cannot resolve it here (remote code): no light view to compare
            continue
        light = report.targets[0].engine_views[0]
        if light.runner:  # a drafter checked alone: compared with its target below
            continue
        got = real.views(VLLM[0], str(folder), None, None)
        if got is None:
            real.failed.pop(VLLM[0], None)  # vLLM cannot configure it on CPU: nothing to compare
            continue
        answered += 1
        [served] = got
        diff = {}
        if light.max_model_len is not None and light.max_model_len != served.max_model_len:
            diff["max_model_len"] = (light.max_model_len, served.max_model_len)
        if light.dtype is not None and light.dtype != served.dtype:
            diff["dtype"] = (light.dtype, served.dtype)
        for field in ("head_size", "num_kv_heads"):
            if None not in (getattr(light, field), getattr(served, field)) and getattr(light, field) != getattr(served, field):
                diff[field] = (getattr(light, field), getattr(served, field))
        if served.windows is not None and _sliding(light.windows) != _sliding(served.windows):
            diff["windows"] = (_sliding(light.windows)[:4], _sliding(served.windows)[:4])
        if diff:
            disagree[folder.name] = diff
    assert answered >= 80
    assert disagree == {}


@pytest.mark.parametrize("drafter, target", PAIRS, ids=[p[0].name for p in PAIRS])
def test_light_and_real_tiers_agree_on_dflash_pairs(drafter, target):
    light = {runner: v for v in _light(drafter, target).engine_views for runner in v.runner.split(" and ")}
    got = engines().views(VLLM[0], str(drafter), "dflash", str(target))
    assert got is not None, engines().failed
    served = {v.runner: v for v in got}
    assert light.keys() == served.keys() == {"V1", "V2"}
    for runner, view in served.items():
        mine = light[runner]
        assert (mine.refusal is None) == (view.refusal is None), (runner, mine.refusal, view.refusal)
        if view.refusal is None:
            assert mine.layers_read == view.layers_read, runner
            assert mine.windows == view.windows, runner
            assert ("prenorm" in mine.notes) == ("prenorm" in view.notes), runner
        else:
            assert mine.refusal in view.refusal or view.refusal in mine.refusal, (mine.refusal, view.refusal)


EAGLE3 = [
    (DRAFTERS / "specforge-llama3-8b-eagle3", TARGETS / "llama-3.1-8b"),
    (DRAFTERS / "specforge-qwen3-8b-eagle3", TARGETS / "qwen3-8b"),
    (DRAFTERS / "eagle-authors-llama3.1-8b-eagle3", TARGETS / "llama-3.1-8b"),
    (DRAFTERS / "broken" / "vllm-40727-eagle3-aux-ids-without-plus-one", TARGETS / "qwen3-8b"),
]


@pytest.mark.parametrize("drafter, target", EAGLE3, ids=[p[0].name for p in EAGLE3])
def test_light_and_real_tiers_agree_on_the_layers_eagle3_heads_read(drafter, target):
    light = {runner: v for v in _light(drafter, target).engine_views for runner in v.runner.split(" and ")}
    got = engines().views(VLLM[0], str(drafter), "eagle3", str(target))
    assert got is not None, engines().failed
    for view in got:
        assert view.refusal is None, view.refusal
        assert light[view.runner].layers_read == view.layers_read, view.runner


def test_v1_refuses_a_dflash2_draft_in_the_words_the_light_tier_and_dg117_quote(tmp_path):
    import json
    import shutil

    # The published SpecForge DFlash drafter, declared DFlash2 with its layers mixing sliding and full:
    # vLLM's V1 runner lists both features it lacks, in one ValueError.
    drafter = tmp_path / "dflash2-mixed"
    shutil.copytree(DRAFTERS / "specforge-qwen3-8b-dflash", drafter)
    config = json.loads((drafter / "config.json").read_text())
    config.update(architectures=["DFlash2DraftModel"], sliding_window=2048,
                  layer_types=["sliding_attention"] + ["full_attention"] * (config["num_hidden_layers"] - 1))
    (drafter / "config.json").write_text(json.dumps(config))
    target = TARGETS / "qwen3-8b"
    got = engines().views(VLLM[0], str(drafter), "dflash", str(target))
    assert got is not None, engines().failed
    [real] = [v for v in got if v.runner == "V1"]
    said = "Model Runner V1 does not support: mixed sliding/full dflash drafts, DFlash candidate-head drafts"
    assert real.refusal == said
    light = {runner: v for v in _light(drafter, target).engine_views for runner in v.runner.split(" and ")}
    assert light["V1"].refusal == said
    [dg117] = [f for f in check_targets([str(drafter)], drafter_target=str(target)).findings if f.rule == "DG117"]
    assert f'"{said}"' in dg117.message


def test_our_fixture_drafter_is_fed_the_pre_norm_stream_by_vllm_itself():
    got = engines().views(VLLM[0], str(FIXTURES / "drafter"), "dflash", str(FIXTURES / "target"))
    assert got and all("prenorm" in v.notes and v.layers_read == [0, 2] for v in got)


def test_phi_35_is_served_at_4096_by_vllm_itself():
    [served] = engines().views(VLLM[0], str(REAL / "microsoft--phi-3.5-mini-instruct"), None, None)
    assert served.max_model_len == 4096 and served.tier == "engine"


@pytest.mark.parametrize("config", [REAL / "meta-llama--llama-3.1-8b-instruct", REAL / "qwen--qwen3-8b",
                                    REAL / "mistralai--mistral-7b-instruct-v0.3"])
def test_healthy_models_get_no_engine_finding_above_info_from_vllm_itself(config):
    report = check_targets([str(config)], engines=VLLM, real_engines=engines())
    [result] = report.targets
    assert [v.tier for v in result.engine_views] == ["engine"]
    assert [f.message for f in result.findings if f.rule.startswith("DG2") and f.severity.value != "info"] == []


SGLANG_SITE = ROOT / ".venv-sglang" / "site"  # pip install --no-deps --target .venv-sglang/site sglang==0.5.23 orjson gguf traitlets


@pytest.mark.skipif(not (SGLANG_SITE / "sglang").is_dir(), reason="SGLang 0.5.23's wheel is not installed --no-deps "
                    "into .venv-sglang/site (its kernels do not install on CPU)")
def test_light_tier_sglang_rules_agree_with_sglangs_own_model_config():
    """SGLang's ModelConfig (context length, dtype) on every real target, against the light tier."""
    from draftguard.check.engines.real import sglang_views

    sglang = parse_engines("sglang==0.5.23")
    folders, light = [], {}
    for folder in sorted(p.parent for p in REAL.glob("*/config.json")):
        report = check_targets([str(folder)], engines=sglang)
        if report.errors or report.targets[0].engine_views[0].runner:
            continue
        folders.append(str(folder))
        light[str(folder)] = report.targets[0].engine_views[0]
    disagree, answered = {}, 0
    for folder, answer in zip(folders, sglang_views(sys.executable, str(SGLANG_SITE), folders)):
        if isinstance(answer, dict):
            continue  # SGLang's ModelConfig cannot take it on CPU (quantization, remote code)
        answered += 1
        [served], mine = answer, light[folder]
        diff = {k: (getattr(mine, k), served[k]) for k in ("max_model_len", "dtype")
                if getattr(mine, k) is not None and getattr(mine, k) != served[k]}
        if diff:
            disagree[Path(folder).name] = diff
    assert answered >= 80
    assert disagree == {}, "\n".join(f"{k}: {v}" for k, v in sorted(disagree.items()))


# The generator, run in a process of its own: the registries it reads (transformers' model types among them)
# are the installed engine's, not what a test run earlier in this process registered (a file of EAGLE-3
# tests registers a model type; run before it in the pass, this comparison failed).
GENERATE = """
import importlib.util, json, sys
from pathlib import Path
spec = importlib.util.spec_from_file_location("gen_engine_registry", sys.argv[1])
gen = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gen)
out = {"vllm": gen.vllm_from_installed()}
if sys.argv[3]:
    out["sglang"] = gen.sglang_from_source(Path(sys.argv[3]))
with open(sys.argv[2], "w") as f:
    json.dump(out, f)
"""


def test_shipped_registries_equal_what_the_installed_engines_say(tmp_path):
    """draftguard/check/engines/data/ is generated by scripts/gen_engine_registry.py from the engines'
    code; regenerated here from the installed vLLM (and SGLang's wheel, where present) it is the same."""
    import subprocess

    out = tmp_path / "registries.json"
    sglang = str(SGLANG_SITE) if (SGLANG_SITE / "sglang").is_dir() else ""
    done = subprocess.run([sys.executable, "-c", GENERATE, str(ROOT / "scripts" / "gen_engine_registry.py"), str(out),
                           sglang], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(out.read_text())
    data = ROOT / "draftguard" / "check" / "engines" / "data"
    assert got["vllm"] == json.loads((data / "vllm-0.32.0.json").read_text())
    if sglang:
        assert got["sglang"] == json.loads((data / "sglang-0.5.23.json").read_text())


# Targets vLLM 0.32.0 itself will not configure (measured with its own config path): the light tier says so.
UNSERVED = ["muzammil822--emotion-api-best_model", "mdhabeebvulla--physics-qa-trainer-trained_model",
            "salesforce--blip-image-captioning-base", "stepfun-ai--step-3.7-flash",
            "issawarasna--text-classification-with-xlnet-fine_tuned_model"]


@pytest.mark.parametrize("name", UNSERVED)
def test_light_tier_says_vllm_will_not_serve_what_vllm_refuses(name):
    real = engines()
    assert real.views(VLLM[0], str(REAL / name), None, None) is None  # vLLM could not take it
    words = real.fallbacks[-1][2]
    light = _light(REAL / name).engine_views[0]
    assert light.refusal is not None and light.refusal.split(" Supported")[0] in words, (light.refusal, words)


# Drafters vLLM 0.32.0 will not serve (asked with the method it serves each with: DSpark's own, else the
# drafter's family): refused at configuration, or (SpecForge's DSpark: `markov_rank` under `dflash_config`,
# read at the top level) at model build.
REFUSED_DRAFTERS = ["specforge-qwen3-8b-domino", "deepspec-qwen3-8b-eagle3", "angelslim-qwen3-dflash",
                    "torchspec-dflash-draft", "specforge-qwen3-8b-peagle", "specforge-qwen3-8b-dspark",
                    "torchspec-qwen3.8-27b-dspark"]


@pytest.mark.parametrize("name", REFUSED_DRAFTERS)
def test_light_tier_says_vllm_refuses_these_real_drafters(name):
    import json

    from draftguard.check.drafter import detect_drafter

    fmt = detect_drafter(json.loads((DRAFTERS / name / "config.json").read_text()))
    method = "dspark" if fmt.label == "DSpark" else fmt.family
    got = engines().views(VLLM[0], str(DRAFTERS / name), method, str(TARGETS / "qwen3-8b"))
    assert got is not None and all(v.refusal for v in got), engines().failed
    light = {r: v for v in _light(DRAFTERS / name, TARGETS / "qwen3-8b").engine_views for r in v.runner.split(" and ")}
    for view in got:
        mine = light[view.runner].refusal
        assert mine is not None and mine.split(" Supported")[0] in view.refusal, (view.runner, mine, view.refusal)


def test_a_config_vllm_cannot_take_says_so_and_claims_no_authority(capsys):
    """The real tier ran and failed on this config: stderr names it and what vLLM said, and the view it
    falls back to says it is the light tier's. Before: 'its views are the authority', and nothing more."""
    import os

    from draftguard.cli import main

    os.environ[PYTHON_ENV] = sys.executable
    code = main(["check", str(REAL / "muzammil822--emotion-api-best_model"), "--engine", "vllm==0.32.0",
                 "--format", "json"])
    err = capsys.readouterr().err
    assert code in (0, 1)
    assert "authority" not in err
    assert "could not take" in err and "muzammil822--emotion-api-best_model" in err and "EmotionBERT" in err


def test_the_readmes_engine_example_asks_vllm_itself():
    """README's `--engine` command, run as written (from the repo root, vLLM's interpreter named by the
    variable it sets): the vLLM lines are the engine tier's, and vLLM's own refusal is quoted."""
    import os
    import re
    import shlex
    import subprocess

    readme = (ROOT / "README.md").read_text()
    section = readme.split("## What the engines serve: `--engine`", 1)[1]
    command = re.search(r"```bash\n(.+?)\n```", section, re.S).group(1)
    words = shlex.split(command)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}
    while "=" in words[0]:
        key, value = words.pop(0).split("=", 1)
        env[key] = str(ROOT / value) if key == PYTHON_ENV else value
    env[PYTHON_ENV] = sys.executable  # .venv-vllm's interpreter is this one: the marker runs there
    assert words[0] == "draftguard"
    done = subprocess.run([sys.executable, "-m", "draftguard", *words[1:]], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 1, done.stderr[-2000:]
    assert "V1 runner (engine tier)" in done.stdout or "V1 and V2 runners (engine tier)" in done.stdout, done.stdout[-3000:]
    assert "light tier" not in " ".join(l for l in done.stdout.splitlines() if "vLLM" in l)
    assert "could not take" not in done.stderr


def test_vllm_itself_runs_a_float16_gemma_2_in_bfloat16_as_the_light_tier_says(tmp_path):
    import json
    import shutil

    folder = tmp_path / "gemma-2-2b-it-fp16"  # the published config, its dtype changed to float16
    shutil.copytree(REAL / "google--gemma-2-2b-it", folder)
    config = json.loads((folder / "config.json").read_text())
    config["torch_dtype"] = "float16"
    (folder / "config.json").write_text(json.dumps(config))
    [served] = engines().views(VLLM[0], str(folder), None, None)
    assert served.dtype == "bfloat16"
    assert _light(folder).engine_views[0].dtype == "bfloat16"


def test_vllm_itself_slides_a_llama_whose_transformers_code_never_reads_the_window(tmp_path):
    # The light tier's claim (tests/test_engines.py): vLLM applies the window LlamaConfig keeps and
    # modeling_llama.py ignores, to every layer.
    raw = json.loads((REAL / "meta-llama--llama-3.1-8b-instruct" / "config.json").read_text())
    raw["sliding_window"] = 4096
    (tmp_path / "config.json").write_text(json.dumps(raw))
    [served] = engines().views(VLLM[0], str(tmp_path), None, None)
    assert served.tier == "engine" and served.windows == [4096] * 32
    assert _light(tmp_path).engine_views[0].windows == served.windows
