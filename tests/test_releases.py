"""The engine releases' launch facts as shipped (draftguard/check/engines/data/releases/, generated from each
release's own code by scripts/gen_engine_releases.py), read through their one reader."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from packaging.version import Version

from draftguard.check.engines import releases
from draftguard.check.engines.releases import (facts, first_refusing, known, last_accepting, newest, option_kind,
                                               parse_version, refuses_value, resolve)
from draftguard.check.launch.known_flags import NO_VALUE, OPTIONS

# the releases issue 39 measured by hand with vLLM's own parser; the data must hold them (never forced)
DRIFT = ["disable-log-requests", "task", "swap-space", "rope-scaling", "guided-decoding-backend"]


def test_the_releases_are_known_oldest_first_in_version_order():
    for engine in ("vllm", "sglang"):
        versions = known(engine)
        assert versions, engine
        assert versions == sorted(versions, key=Version) and len(set(versions)) == len(versions)
        assert newest(engine) == versions[-1]
    assert {"0.8.5", "0.10.1.1", "0.20.0", "0.32.0"} <= set(known("vllm"))
    assert "0.5.23" in known("sglang")
    assert known("no-such-engine") == []
    with pytest.raises(LookupError):
        newest("no-such-engine")


def test_a_pin_resolves_to_the_known_release_it_means():
    vllm = known("vllm")
    assert resolve("vllm", "latest") == resolve("vllm", "nightly") == resolve("vllm", " Latest ") == vllm[-1]
    assert resolve("vllm", "v0.20.0") == resolve("vllm", "0.20.0") == "0.20.0"
    assert resolve("vllm", "0.10.1.1") == "0.10.1.1"
    # a post-release of a known release is read as it; a release older than all known is none
    assert resolve("vllm", "0.10.1.1.post2") == "0.10.1.1"
    assert resolve("vllm", "0.1.0") is None
    assert resolve("vllm", "not-a-version") is None
    # a release between two known ones: the newest known one not newer than it
    assert resolve("vllm", "0.8.6") == "0.8.5"
    newest_known = Version(vllm[-1])
    future = f"{newest_known.major}.{newest_known.minor + 1}.0"
    assert resolve("vllm", future) == vllm[-1]
    # a release candidate parses, and is read as the release it precedes where that is known
    rc = f"v{vllm[-1]}rc1"
    assert parse_version(rc) < newest_known
    assert resolve("vllm", rc) == vllm[-1]


def test_version_parsing_takes_v_prefixes_rc_post_and_local():
    assert parse_version("v0.34.0rc1") == Version("0.34.0rc1")
    assert parse_version("V0.10.1") == Version("0.10.1")
    assert parse_version("0.12.0.post2") > Version("0.12.0")
    assert parse_version("0.10.1.1+cpu").public == "0.10.1.1"
    assert parse_version("latest") is None


def test_the_flags_release_drift_breaks_are_accepted_by_0_10_1_1_and_refused_by_0_20_and_0_32():
    for option in DRIFT:
        assert option_kind("vllm", "0.10.1.1", option) is not None, option
        assert option_kind("vllm", "0.20.0", option) is None, option
        assert option_kind("vllm", "0.32.0", option) is None, option
    assert option_kind("vllm", "0.10.1.1", "--disable-log-requests") == "switch"
    assert option_kind("vllm", "0.10.1.1", "--swap-space") == "value"


def test_first_refusing_names_the_first_known_release_that_refuses():
    vllm = known("vllm")
    for option in DRIFT:
        first = first_refusing("vllm", option, after="0.10.1.1")
        assert first is not None and Version("0.10.1.1") < Version(first) <= Version("0.20.0"), (option, first)
        between = [r for r in vllm if Version("0.10.1.1") <= Version(r) < Version(first)]
        assert all(option_kind("vllm", r, option) is not None for r in between), option
        last = last_accepting("vllm", option)
        assert last == [r for r in vllm if option_kind("vllm", r, option) is not None][-1], option
    assert first_refusing("vllm", "max-model-len", after=vllm[0]) is None
    assert last_accepting("vllm", "max-model-len") == vllm[-1]
    assert last_accepting("vllm", "no-such-flag-anywhere") is None


def test_0_33_pairs_enable_with_disable_so_disable_log_requests_is_accepted_again():
    # a fact of the data (issue 39 measured 0.20.0 and 0.32.0 only): 0.33.0's parser pairs every
    # --enable-x with --disable-x and still accepts the --no-enable-x it hides from help
    assert option_kind("vllm", "0.33.0", "disable-log-requests") == "switch"
    assert option_kind("vllm", "0.33.0", "no-enable-log-requests") == "switch"
    assert option_kind("vllm", "0.32.0", "no-enable-log-requests") == "switch"
    assert first_refusing("vllm", "disable-log-requests", after="0.32.0") is None
    assert last_accepting("vllm", "disable-log-requests") == newest("vllm")


def test_bitsandbytes_is_a_quantization_method_of_0_20_and_not_of_0_32():
    assert "bitsandbytes" in facts("vllm", "0.20.0").quantization_methods
    assert "bitsandbytes" not in facts("vllm", "0.32.0").quantization_methods
    assert not refuses_value("vllm", "0.20.0", "--quantization", "bitsandbytes")
    assert refuses_value("vllm", "0.32.0", "--quantization", "bitsandbytes")
    assert not refuses_value("vllm", "0.32.0", "quantization", "fp8")


def test_values_are_judged_against_the_releases_choices():
    assert facts("vllm", "0.32.0").options["dtype"] == ("auto", "bfloat16", "float", "float16", "float32", "half")
    assert not refuses_value("vllm", "0.32.0", "dtype", "bfloat16")
    assert refuses_value("vllm", "0.32.0", "dtype", "bf16")
    assert refuses_value("vllm", "0.10.1.1", "task", "nonsense")
    assert not refuses_value("vllm", "0.10.1.1", "task", "generate")
    assert not refuses_value("vllm", "0.32.0", "max-model-len", "4096")  # no bound on its values
    assert not refuses_value("vllm", "0.32.0", "no-such-option", "x")  # the option's refusal is option_kind's
    assert facts("vllm", "0.32.0").options["gpu-memory-utilization"] == "float"
    assert refuses_value("vllm", "0.32.0", "gpu-memory-utilization", "most")  # argparse's type= refuses it
    assert not refuses_value("vllm", "0.32.0", "gpu-memory-utilization", "0.9")
    assert refuses_value("vllm", "0.32.0", "max-num-seqs", "1.5") and not refuses_value("vllm", "0.32.0", "max-num-seqs", "256")
    # vLLM reads these token counts with its own converter, which takes "8k": no bound recorded
    assert not refuses_value("vllm", "0.32.0", "max-num-batched-tokens", "8k")
    assert not refuses_value("vllm", "0.32.0", "max-model-len", "32k")


def test_an_old_option_may_live_on_as_the_prefix_of_a_new_one():
    # --device left vLLM after 0.9.2; from 0.30.0 argparse reads it as the one option it begins
    assert "device" in facts("vllm", "0.9.2").options and "device" not in facts("vllm", "0.30.0").options
    longer = [o for o in facts("vllm", "0.30.0").options if o.startswith("device")]
    assert len(longer) == 1 and option_kind("vllm", "0.30.0", "--device") == "value"


def test_option_names_follow_the_parsers_rules():
    assert option_kind("vllm", "0.32.0", "--max_model_len") == "value"  # vLLM reads _ as -
    assert option_kind("vllm", "0.32.0", "--speculative-config.method") == "value"  # its dotted keys
    assert option_kind("vllm", "0.32.0", "--max-model") == "value"  # an unambiguous prefix
    assert option_kind("vllm", "0.32.0", "--enable") is None  # an ambiguous one
    assert option_kind("vllm", "0.32.0", "--enforce-eager") == "switch"
    assert option_kind("vllm", "0.32.0", "--no-enforce-eager") == "switch"
    assert option_kind("vllm", "0.32.0", "--bogus-flag") is None
    assert option_kind("sglang", "0.5.23", "--context-length") == "value"


@pytest.mark.parametrize(("engine", "release"), [("vllm", "0.32.0"), ("sglang", "0.5.23")])
def test_the_shipped_release_equals_the_hand_table_read_from_the_same_release(engine, release):
    options = facts(engine, release).options
    assert set(options) == OPTIONS[engine]
    assert {name for name, kind in options.items() if kind == "switch"} == NO_VALUE[engine]


def test_every_release_says_how_it_was_read_and_the_data_is_small():
    for engine in ("vllm", "sglang"):
        for version in known(engine):
            release = facts(engine, version)
            assert release.version == version and release.source and release.generated
            assert release.options and all(not name.startswith("-") for name in release.options)
            assert set(release.deprecated) <= set(release.options)
    size = sum(path.stat().st_size for path in Path(releases.DATA).glob("*.json"))
    assert size <= 2 * 1024 * 1024, size


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_first_refusing_and_last_accepting_agree_with_each_release_for_every_option(engine):
    versions = known(engine)
    every = sorted({name for version in versions for name in facts(engine, version).options})
    for option in every:  # accepted as itself or as the unambiguous prefix of a longer option (argparse)
        accepting = [v for v in versions if option_kind(engine, v, option) is not None]
        assert last_accepting(engine, option) == accepting[-1], option
        first = first_refusing(engine, option, after=accepting[0])
        later = [v for v in versions if Version(v) > Version(accepting[0])]
        refusing = [v for v in later if option_kind(engine, v, option) is None]
        assert first == (refusing[0] if refusing else None), option


def _generator():
    import importlib.util

    path = Path(__file__).resolve().parent.parent / "scripts" / "gen_engine_releases.py"
    spec = importlib.util.spec_from_file_location("gen_engine_releases", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# the shapes vLLM 0.32's SpeculativeConfig.hf_config_override compares a model_type in (config/speculative.py)
OVERRIDE = '''
def hf_config_override(hf_config):
    if hf_config.model_type in ("pangu_ultra_moe"):
        hf_config.model_type = "pangu_ultra_moe_mtp"
    if hf_config.model_type == "pangu_ultra_moe_mtp":
        hf_config.update({"n_predict": 1, "architectures": ["OpenPanguMTPModel"]})
    if hf_config.model_type in {"nemotron_h", "nemotron_h_puzzle"} and hf_config.num_nextn_predict_layers > 0:
        hf_config.model_type = "nemotron_h_mtp"
    if "exaone4_5" in hf_config.model_type:
        hf_config.model_type = "exaone4_5_mtp"
    if getattr(hf_config.text_config, "model_type", None) == "qwen3_5_moe_text" or hf_config.model_type in NAMED:
        hf_config.architectures = ["Qwen3_5MoeMTP"]
    if hf_config.architectures[0] == "MiMoForCausalLM":
        hf_config.model_type = "mimo_mtp"
'''


def test_the_generator_probes_every_model_type_the_release_compares_against():
    """A family whose config is remote code (OpenPangu's pangu_ultra_moe) is registered neither by
    transformers nor by vLLM: only the override's own comparisons name it. The types the function writes
    itself (its draft's, compared so a second pass keeps them) are no targets."""
    found = _generator().compared_model_types(OVERRIDE, {"NAMED": ("interns2_mobius", 3)})
    assert found == ["exaone4_5", "interns2_mobius", "nemotron_h", "nemotron_h_puzzle", "pangu_ultra_moe",
                     "qwen3_5_moe_text"]


def test_every_release_that_compares_pangu_ultra_moe_drafts_for_openpangu():
    """OpenPangu-Ultra-MoE (remote code, model_type pangu_ultra_moe): vLLM 0.11.2's hf_config_override first
    maps it to OpenPanguMTPModel; before the probe read the override's own model_types, no release did."""
    raw = {"architectures": ["PanguUltraMoEForCausalLM"], "model_type": "pangu_ultra_moe", "num_nextn_predict_layers": 1}
    assert releases.first_mtp_drafting(raw) == "0.11.2"
    assert releases.mtp_drafter("0.11.0", raw) is None
    assert releases.mtp_drafter("0.32.0", raw) == ("model_type:pangu_ultra_moe", "OpenPanguMTPModel")


def test_merge_only_replaces_that_field_and_keeps_every_other_byte(tmp_path, monkeypatch):
    gen = _generator()
    monkeypatch.setattr(gen, "OUT", tmp_path)
    old = {"version": "0.32.0", "options": {"model": "value"}, "source": "read", "mtp_drafters": {"a": "B"}}
    first = tmp_path / "old.json"
    first.write_text(json.dumps(old))
    gen.merge("vllm", [first])
    before = (tmp_path / "vllm.json").read_text()
    fresh = tmp_path / "fresh.json"
    fresh.write_text(json.dumps({**old, "options": {"other": "switch"}, "mtp_drafters": {"a": "B", "c": "D"}}))
    gen.merge("vllm", [fresh], only="mtp_drafters")
    after = (tmp_path / "vllm.json").read_text()
    assert after == before.replace('{"a":"B"}', '{"a":"B","c":"D"}')
    unknown = tmp_path / "unknown.json"
    unknown.write_text(json.dumps({**old, "version": "0.99.0"}))
    with pytest.raises(SystemExit, match="0.99.0 is not in vllm.json"):
        gen.merge("vllm", [unknown], only="mtp_drafters")
