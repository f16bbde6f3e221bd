"""`draftguard accept --method mtp` where the target's config class rewrites the MTP layer count (issue 43):
the cause `config-rewrite`, with the key, the count config.json states and the one the class resolves.

Two mechanisms of transformers' own classes, both of which change what vLLM 0.32 builds (it takes
``n_predict`` from the resolved config, vllm/config/speculative.py):

- Step3p7Config on a flat config.json (the MTP key at the top level): it builds ``text_config`` from
  Step3p7TextConfig's defaults, whose ``__post_init__`` pops ``num_nextn_predict_layers`` with a default
  of 0 (transformers 5.24, models/step3p7/configuration_step3p7.py:189). The real file is the one
  aiconfigurator vendors (tests/data/real-configs/stepfun-ai--step-3.7-flash, SOURCE beside it). The
  Hub's nested layout (``text_config`` holding the key) is read as written.
- DeepseekV3Config where config.json states no count: ``num_mtp_layers: int = 1`` (configuration_deepseek_v3.py:116),
  so `method: mtp` builds ``DeepSeekMTPModel`` from ``model.layers.{N}.*`` all the same. Built here at
  test time from the shipped DeepSeek-V3 fixtures, with the key taken out of config.json.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from draftguard.cli import main
from draftguard.runner.mtp_weights import mtp_rewrite, read_config
from draftguard.runner.result import AcceptanceResult

ROOT = Path(__file__).resolve().parent.parent
STEP37 = ROOT / "tests" / "data" / "real-configs" / "stepfun-ai--step-3.7-flash"
REAL = ROOT / "tests" / "data" / "real-configs"
MODELS = ROOT / "tests" / "fixtures" / "mtp-models"
PROMPTS = ROOT / "tests" / "fixtures" / "models" / "prompts.jsonl"
DOCUMENTED = ("draftguard accept --target tests/data/real-configs/stepfun-ai--step-3.7-flash --method mtp "
              "--prompts tests/fixtures/models/prompts.jsonl")


def _without_count(tmp_path: Path, fixture: str) -> Path:
    """A copy of a shipped DeepSeek-V3 fixture whose config.json leaves `num_nextn_predict_layers` out
    (the weights linked, not copied)."""
    out = tmp_path / f"{fixture}-no-count"
    out.mkdir()
    for item in (MODELS / fixture).iterdir():
        if item.name != "config.json":
            os.symlink(item.resolve(), out / item.name)
    raw = json.loads((MODELS / fixture / "config.json").read_text())
    del raw["num_nextn_predict_layers"]
    (out / "config.json").write_text(json.dumps(raw, indent=2))
    return out


def _accept(capsys, target: Path, *args: str) -> tuple[int, AcceptanceResult | None, str]:
    code = main(["accept", "--target", str(target), "--method", "mtp", "--prompts", str(PROMPTS),
                 "--max-new-tokens", "32", "--quiet", "--format", "json", "--no-early-stop", *args])
    out, err = capsys.readouterr()
    return code, (AcceptanceResult.from_json(out, "stdout") if out.strip() else None), err


def test_the_flat_step37_config_is_refused_with_config_rewrite_key_values_and_line(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    code = main(DOCUMENTED.split()[1:])
    _, err = capsys.readouterr()
    assert code == 2
    assert "stepfun-ai--step-3.7-flash/config.json:70: `num_nextn_predict_layers` is 3 in config.json" in err
    assert "Step3p7Config (transformers" in err and "resolves `num_nextn_predict_layers` to 0" in err
    assert "cause: config-rewrite (`num_nextn_predict_layers` 3 → 0)" in err and "Traceback" not in err


def test_the_documented_command_runs_as_written(capsys, monkeypatch):
    """docs/acceptance.md shows this command (tests/test_docs_accept.py lists it here)."""
    monkeypatch.chdir(ROOT)
    assert DOCUMENTED in (ROOT / "docs" / "acceptance.md").read_text()
    assert main(DOCUMENTED.split()[1:]) == 2
    assert "cause: config-rewrite" in capsys.readouterr().err


def test_the_step37_count_is_read_as_written_in_the_nested_layout():
    """The same keys under `text_config` (the layout the Hub's Step-3.7 files use): no rewrite."""
    raw = read_config(STEP37)
    text = {k: v for k, v in raw.items() if k not in ("architectures", "model_type")}
    nested = {"architectures": ["Step3p7ForConditionalGeneration"], "model_type": "step3p7",
              "text_config": {"model_type": "step3p5", **text}}
    assert mtp_rewrite(nested) is None
    flat = mtp_rewrite(raw, str(STEP37 / "config.json"))
    assert (flat.key, flat.raw, flat.resolved, flat.config_class, flat.line) == (
        "num_nextn_predict_layers", 3, 0, "Step3p7Config", 70)


def test_across_the_real_configs_only_the_flat_step37_files_have_their_mtp_count_rewritten():
    found = {}
    for config in sorted(REAL.glob("*/config.json")):
        rewrite = mtp_rewrite(read_config(config.parent), str(config))
        if rewrite is not None:
            found[config.parent.name] = (rewrite.key, rewrite.raw, rewrite.resolved)
    assert found == {"stepfun-ai--step-3.7-flash": ("num_nextn_predict_layers", 3, 0),
                     "stepfun-ai--step-3.7-flash-fp8": ("num_nextn_predict_layers", 3, 0)}


def test_shipped_mtp_fixtures_are_read_as_written():
    for name in ("mimo", "dsv3", "qwen35", "qwen3-next"):
        assert mtp_rewrite(read_config(MODELS / name)) is None, name


def test_a_deepseek_v3_target_that_states_no_count_runs_the_layer_its_class_builds(capsys, tmp_path):
    """Refused before ("declares none") though vLLM builds and runs the layer: the reference now runs it
    too, and the note says the count came from the class."""
    pytest.importorskip("torch")
    target = _without_count(tmp_path, "dsv3")
    code, result, err = _accept(capsys, target, "--min-acceptance-length", "1.8")
    assert code == 0, err
    assert result.diagnosis is None and result.mean_acceptance_length > 1.95  # the dsv3 fixture's: 2.000
    note = next(n for n in result.run["notes"] if n.startswith("the MTP layer count is rewritten"))
    assert "config.json states no MTP layer count, but DeepseekV3Config" in note
    assert "resolves `num_nextn_predict_layers` to 1" in note


def test_a_collapse_on_a_count_the_class_supplied_is_diagnosed_config_rewrite(capsys, tmp_path):
    pytest.importorskip("torch")
    target = _without_count(tmp_path, "dsv3-mtp-dropped")
    code, result, err = _accept(capsys, target, "--min-acceptance-length", "1.8")
    assert code == 1, err
    d = result.diagnosis
    assert d["cause"] == "config-rewrite" and d["config_class"] == "DeepseekV3Config"
    assert d["rewritten"][0]["key"] == "num_nextn_predict_layers"
    assert (d["rewritten"][0]["raw"], d["rewritten"][0]["resolved"]) == (None, 1)
    assert d["rewritten"][0]["line"] == 5  # model_type: the class it picks supplies the count
    assert "dropped at save" in d["reason"] and "which config.json leaves out" in d["reason"]
    assert result.mean_acceptance_length < 1.1  # dsv3-mtp-dropped, count stated: 1.024


@pytest.mark.vllm
def test_vllm_takes_its_mtp_count_from_the_resolved_config(tmp_path):
    """What the messages above say of vLLM 0.32: ``n_predict`` is the class's count, not the file's."""
    from vllm.config.speculative import SpeculativeConfig
    from vllm.transformers_utils.config import get_config

    step = SpeculativeConfig.hf_config_override(get_config(str(STEP37), trust_remote_code=False))
    assert step.architectures == ["Step3p5MTP"] and step.n_predict == 0
    target = _without_count(tmp_path, "dsv3")
    dsv3 = SpeculativeConfig.hf_config_override(get_config(str(target), trust_remote_code=False))
    assert dsv3.architectures == ["DeepSeekMTPModel"] and dsv3.n_predict == 1


def test_a_rewritten_count_whose_layer_is_whole_is_no_cause(tmp_path):
    """vLLM's CPU build fails the whole DeepSeek-V3 layer (its MLA leaves the key unrotated: τ 1.48 on 4
    prompts, K = 1, with or without the key): the class's count is not to blame for that."""
    from draftguard.runner.mtp_weights import mtp_diagnosis

    target = _without_count(tmp_path, "dsv3")
    rewrite = mtp_rewrite(read_config(target), str(target / "config.json"))
    assert (rewrite.raw, rewrite.resolved) == (None, 1)
    assert mtp_diagnosis([], "fail", rewrite) is None
    assert mtp_diagnosis(["the weights hold no tensor under `model.layers.1.`"], "fail", rewrite)["cause"] == \
        "config-rewrite"
