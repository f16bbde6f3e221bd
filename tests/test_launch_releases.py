"""A launch judged under the engine release it pins, with what the newer releases break (issue 39): the
releases' options, values and speculative methods are data generated from each release's own code
(``draftguard/check/engines/data/releases/``), read by ``check.engines.releases``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from draftguard.check.engines import releases
from draftguard.check.engines.specs import parse_engines, sort_key
from draftguard.check.launch import launch_report
from draftguard.errors import BadInput

ROOT = Path(__file__).resolve().parents[1]
TARGET = ROOT / "tests" / "data" / "real-drafters" / "targets" / "llama-3.1-8b"
MEDUSA = ROOT / "tests" / "data" / "real-drafters" / "medusa-vicuna-7b-v1.3"


def run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DRAFTGUARD_", "VLLM_"))}
    return subprocess.run([sys.executable, "-m", "draftguard", *args], cwd=cwd, capture_output=True, text=True,
                          env=env, timeout=180)


def compose(tmp_path: Path, image: str, *flags: str) -> Path:
    """A deployment repo: the Llama target beside a compose file that serves it from ``image``."""
    shutil.copytree(TARGET, tmp_path / "llama")
    command = " ".join(["/models/llama", "--max-model-len", "8192", *flags])
    (tmp_path / "compose.yaml").write_text(
        f"services:\n  vllm:\n    image: {image}\n    volumes:\n      - ./llama:/models/llama\n"
        f"    command: {command}\n", encoding="utf-8")
    return tmp_path / "compose.yaml"


def rules(report) -> list[tuple[str, str, int]]:
    assert report.errors == [], [e.message for e in report.errors]
    return [(f.rule, f.severity.value, f.line) for f in report.findings]


def test_a_pinned_release_takes_what_it_took_and_the_upgrade_is_a_warning(tmp_path):
    """Done when: a compose file pinning vllm/vllm-openai:v0.10.1.1 with a flag later releases refuse gets no
    error, and a warning naming the first release that refuses it; the same file on latest, the error.
    --swap-space: accepted by 0.10.1.1, refused from 0.18.1 on (each release's own parser)."""
    first = releases.first_refusing("vllm", "swap-space", after="0.10.1.1")
    assert first is not None and sort_key(first) <= sort_key("0.20.0")
    assert releases.option_kind("vllm", releases.newest("vllm"), "swap-space") is None
    pinned = launch_report([str(compose(tmp_path, "vllm/vllm-openai:v0.10.1.1", "--swap-space", "4"))],
                           [], None, None)
    found = rules(pinned)
    assert not [r for r in found if r[1] == "error"], pinned.findings
    [upgrade] = [f for f in pinned.findings if f.rule == "DG309"]
    assert upgrade.severity.value == "warning" and upgrade.line == 6 and upgrade.key == "--swap-space"
    assert f"refused from {first} on" in upgrade.message and "accepted by 0.10.1.1" in upgrade.message
    view = pinned.targets[0].launch_view
    assert view.engine == "vLLM 0.10.1.1"
    assert any("pinned by image vllm/vllm-openai:v0.10.1.1" in n for n in view.notes), view.notes

    latest = launch_report([str(compose(tmp_path / "l", "vllm/vllm-openai:latest", "--swap-space", "4"))],
                           [], None, None)
    [refused] = [f for f in latest.findings if f.rule == "DG300"]
    assert refused.severity.value == "error" and "unrecognized arguments: --swap-space" in refused.message
    assert f"vLLM {releases.newest('vllm')}" in refused.message
    assert not [f for f in latest.findings if f.rule == "DG309"]
    assert any("no release pinned" in n or "latest" in n for n in latest.targets[0].launch_view.notes)


def test_a_flag_refused_on_the_way_and_taken_again(tmp_path):
    """--disable-log-requests: accepted by 0.10.1.1, refused from 0.17.1 to 0.32.0, and taken again from
    0.33.0 (its --enable-log-requests/--disable-log-requests pair): the data, not the issue's expectation.
    Pinned to 0.10.1.1 it is no error, and the releases on the way are said as info; pinned to 0.32.0 it
    is the error."""
    assert releases.option_kind("vllm", "0.32.0", "disable-log-requests") is None
    assert releases.option_kind("vllm", releases.newest("vllm"), "disable-log-requests") == "switch"
    path = compose(tmp_path, "vllm/vllm-openai:v0.10.1.1", "--disable-log-requests")
    found = launch_report([str(path)], [], None, None).findings
    assert [f.rule for f in found if f.severity.value == "error"] == []
    [note] = [f for f in found if f.rule == "DG309"]
    assert note.severity.value == "info" and "refused by 0.17.1 to 0.32.0" in note.message
    old = launch_report([str(compose(tmp_path / "o", "vllm/vllm-openai:v0.32.0", "--disable-log-requests"))],
                        [], None, None).findings
    assert [f.rule for f in old if f.severity.value == "error"] == ["DG300"]


def test_a_value_a_newer_release_dropped(tmp_path):
    """--quantization bitsandbytes: a method of 0.20.0's, gone from 0.32.0's (each release's own list)."""
    assert not releases.refuses_value("vllm", "0.20.0", "quantization", "bitsandbytes")
    assert releases.refuses_value("vllm", "0.32.0", "quantization", "bitsandbytes")
    path = compose(tmp_path, "vllm/vllm-openai:v0.20.0", "--quantization", "bitsandbytes")
    found = launch_report([str(path)], [], None, None).findings
    assert [f.rule for f in found if f.severity.value == "error"] == []
    [note] = [f for f in found if f.rule == "DG309"]
    assert note.key == "--quantization" and "bitsandbytes" in note.message
    refused = launch_report([str(path)], [], parse_engines("vllm==0.32.0"), None).findings
    assert [f.rule for f in refused if f.severity.value == "error"] == ["DG300"]


def test_engine_overrides_the_pin_and_two_releases_compare(tmp_path):
    path = compose(tmp_path, "vllm/vllm-openai:v0.10.1.1", "--swap-space", "4")
    both = launch_report([str(path)], [], parse_engines("vllm==0.10.1.1,vllm==0.32.0"), None).findings
    assert [(f.rule, f.severity.value) for f in both if f.rule in ("DG300", "DG309")] == [("DG309", "warning")]
    assert "vLLM 0.32.0 (upgrade from 0.10.1.1)" in [f for f in both if f.rule == "DG309"][0].message
    newer = launch_report([str(path)], [], parse_engines("vllm==0.32.0"), None).findings
    assert [f.rule for f in newer if f.severity.value == "error"] == ["DG300"]


@pytest.mark.parametrize("version", ["0.20.0", "0.34.0", "0.8.5"])
def test_engine_flag_takes_any_release_with_data(version, tmp_path):
    assert version in releases.known("vllm")
    done = run("check", "--launch", f"vllm serve {TARGET} --max-model-len 4096", "--engine", f"vllm=={version}")
    assert done.returncode in (0, 1), done.stderr
    assert f"vLLM {version}" in done.stdout and "Traceback" not in done.stderr


def test_an_unknown_release_is_bad_input_naming_the_range():
    with pytest.raises(BadInput) as caught:
        parse_engines("vllm==0.7.9")
    assert "vllm==" + releases.known("vllm")[0] in str(caught.value)
    done = run("check", "--launch", f"vllm serve {TARGET}", "--engine", "vllm==0.7.9")
    assert done.returncode == 2 and "0.7.9" in done.stderr and "Traceback" not in done.stderr


def test_versions_sort_as_releases_not_as_text():
    """0.9.2 < 0.10.1.1 < 0.34.0rc1 < 0.34.0: the hand-written int sorts crashed on rc and post tags."""
    from draftguard.audit.versions import engine_regressions
    from types import SimpleNamespace as NS

    assert sorted(["0.34.0", "0.10.1.1", "0.34.0rc1", "0.9.2", "0.8.5.post1"], key=sort_key) == \
        ["0.8.5.post1", "0.9.2", "0.10.1.1", "0.34.0rc1", "0.34.0"]
    old, new = parse_engines("vllm==0.9.2,vllm==0.10.1.1")
    refusal = NS(rule="DG200", key="architectures", severity=NS(value="error"))
    [regression] = engine_regressions({new: [refusal], old: []})
    assert regression.present == ["vLLM 0.10.1.1"] and regression.absent == ["vLLM 0.9.2"]


def test_a_medusa_head_under_the_release_that_removed_the_method():
    """vLLM 0.33.0 removed Medusa: its SpeculativeConfig (read from its own code) has no such method."""
    assert "medusa" in releases.facts("vllm", "0.32.0").speculative_methods
    assert "medusa" not in releases.facts("vllm", "0.33.0").speculative_methods
    done = run("check", str(MEDUSA), "--engine", "vllm==0.32.0,vllm==0.33.0", "--format", "json")
    assert done.returncode == 1, done.stderr
    data = json.loads(done.stdout)
    refused = [f for f in data["findings"] if f["rule"] == "DG200"]
    assert len(refused) == 1 and "vLLM 0.33.0" in refused[0]["message"]
    assert "last served by vLLM 0.32.0" in refused[0]["message"]


MIMO = ROOT / "tests" / "data" / "real-drafters" / "mtp-mimo-7b"  # XiaomiMiMo/MiMo-7B-RL's config (SOURCE.md)
MTP = "--speculative-config '{\"method\": \"mtp\", \"num_speculative_tokens\": 1}'"


def test_an_mtp_draft_does_not_inherit_a_dict_hf_overrides():
    """vllm-project/vllm 58080: the target is lengthened by --hf-overrides, the MTP draft keeps config.json's
    32768 and drafts token 0 past it. Before, the light tier also ignored the override and refused the
    launch (a false DG300: vLLM applies hf_overrides before it derives the length)."""
    longer = "--hf-overrides '{\"max_position_embeddings\": 65536}' --max-model-len 65536"
    found = launch_report([], [f"vllm serve {MIMO} {longer} {MTP}"], parse_engines("vllm==0.32.0"), None).findings
    assert "DG300" not in [f.rule for f in found]
    [collapse] = [f for f in found if f.rule == "DG305"]
    assert collapse.severity.value == "error" and collapse.key == "--hf-overrides"
    assert "58080" in collapse.message and "32768" in collapse.message
    # no MTP, or a length config.json states: nothing to say
    plain = launch_report([], [f"vllm serve {MIMO} {longer}"], parse_engines("vllm==0.32.0"), None).findings
    assert "DG305" not in [f.rule for f in plain] and "DG300" not in [f.rule for f in plain]
    stated = launch_report([], [f"vllm serve {MIMO} --max-model-len 32768 {MTP}"], parse_engines("vllm==0.32.0"),
                           None).findings
    assert stated == []


def test_engines_list_names_every_release_and_install_refuses_what_has_no_cpu_build():
    listed = run("engines", "list", "--format", "json")
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)["releases"]
    assert [r["version"] for r in rows if r["engine"] == "vllm"] == releases.known("vllm")
    assert all(r["launch_data"] for r in rows) and {r["version"] for r in rows if r["registry"]} >= {"0.32.0", "0.34.0"}
    text = run("engines", "list", "--engine", "vllm")
    assert f"vLLM: {len(releases.known('vllm'))} releases, 0.8.5 to {releases.newest('vllm')}" in text.stdout
    for spec, words in (("vllm==0.33.0", "no CPU build"), ("vllm==0.7.0", "not one whose code"),
                        ("sglang==0.5.23", "no real tier")):
        done = run("engines", "install", spec)
        assert done.returncode == 2 and words in done.stderr and "Traceback" not in done.stderr, done.stderr


MINIMAX = ROOT / "tests" / "data" / "real-drafters" / "mtp-minimax-m2.7"  # MiniMax-M2.7's config (SOURCE.md)


def test_method_mtp_on_a_target_the_pinned_release_has_no_mtp_model_for_is_refused():
    """MiniMax-M2.7's config declares MTP modules (use_mtp, num_mtp_modules 3), but vLLM 0.32's
    SpeculativeConfig.hf_config_override maps only MiniMax-M3 to an MTP draft model (the release's own
    code, run on probe configs: ``mtp_drafters``); the draft stays a minimax_m2 model and vLLM stops with
    NotImplementedError. Before, the light tier passed the launch."""
    assert releases.mtp_drafter("0.32.0", {"architectures": ["MiniMaxM2ForCausalLM"], "model_type": "minimax_m2"}) is None
    found = launch_report([], [f"vllm serve {MINIMAX} {MTP}"], parse_engines("vllm==0.32.0"), None).findings
    [refused] = [f for f in found if f.rule == "DG300"]
    assert refused.severity.value == "error" and refused.key == "--speculative-config"
    assert ("vLLM 0.32.0 maps no MTP draft model for MiniMaxM2ForCausalLM, minimax_m2 and stops at configuration "
            "(NotImplementedError: the draft is not an MTP model type); no release known here drafts for it") \
        in refused.message
    # MiMo, which 0.32 drafts for (MiMoMTPModel): no refusal
    assert "DG300" not in [f.rule for f in launch_report([], [f"vllm serve {MIMO} --max-model-len 32768 {MTP}"],
                                                         parse_engines("vllm==0.32.0"), None).findings]


def test_an_mtp_launch_pinned_before_the_first_release_that_drafts_for_its_target_names_that_release():
    """Qwen3.5-35B-A3B (real config): every vLLM release's own hf_config_override, run on probes, first maps
    Qwen3_5MoeForConditionalGeneration to an MTP draft model in 0.17.1; a launch pinned to 0.16.0 cannot
    start with method mtp, and 0.32.0 drafts for it."""
    qwen = ROOT / "tests" / "data" / "real-configs" / "qwen--qwen3.5-35b-a3b"
    raw = json.loads((qwen / "config.json").read_text())
    assert releases.first_mtp_drafting(raw) == "0.17.1" and releases.mtp_drafter("0.16.0", raw) is None
    assert releases.mtp_drafter("0.32.0", raw) == ("architecture:Qwen3_5MoeForConditionalGeneration", "Qwen3_5MoeMTP")
    found = launch_report([], [f"vllm serve {qwen} {MTP}"], parse_engines("vllm==0.16.0"), None).findings
    [refused] = [f for f in found if f.rule == "DG300"]
    assert "vLLM 0.16.0 maps no MTP draft model for Qwen3_5MoeForConditionalGeneration" in refused.message
    assert "or earlier where it does not serve the architecture at all" in refused.message  # 0.16's registry unread
    assert refused.message.endswith("vLLM 0.17.1 is the first release known here that drafts for it\"")
    later = launch_report([], [f"vllm serve {qwen} {MTP}"], parse_engines("vllm==0.32.0"), None).findings
    assert not [f for f in later if f.rule == "DG300" and "MTP draft model" in f.message]


def test_an_mtp_launch_of_a_remote_code_family_only_the_release_names_is_judged_by_its_release(tmp_path):
    """openPangu-Ultra-MoE (model_type pangu_ultra_moe, remote code: no transformers or vLLM config class
    registers it) is drafted for by vLLM 0.11.2's hf_config_override on (OpenPanguMTPModel). Before the probe
    read the model_types the override compares against, every release was said to refuse it."""
    (tmp_path / "config.json").write_text(json.dumps(
        {"architectures": ["PanguUltraMoEForCausalLM"], "model_type": "pangu_ultra_moe", "num_nextn_predict_layers": 1,
         "auto_map": {"AutoConfig": "configuration_openpangu_moe.PanguUltraMoEConfig"}, "torch_dtype": "bfloat16",
         "max_position_embeddings": 131072}))
    now = launch_report([], [f"vllm serve {tmp_path} --trust-remote-code --max-model-len 32768 {MTP}"],
                        parse_engines("vllm==0.32.0"), None).findings
    assert not [f for f in now if f.rule == "DG300" and "MTP draft model" in f.message]
    before = launch_report([], [f"vllm serve {tmp_path} --trust-remote-code --max-model-len 32768 {MTP}"],
                           parse_engines("vllm==0.11.0"), None).findings
    [refused] = [f for f in before if f.rule == "DG300" and "MTP draft model" in f.message]
    assert "vLLM 0.11.0 maps no MTP draft model for PanguUltraMoEForCausalLM, pangu_ultra_moe" in refused.message
    assert "vLLM 0.11.2 is the first release known here that drafts for it" in refused.message
