"""Nemotron-H's MTP layer (issue 43: "a drafter vLLM runs is never refused by the reference"):
``NemotronHForCausalLM`` (Nemotron 3 Super/Ultra style), its MTP layer ``mtp.layers.{j}.*`` a stack of
sublayers by ``mtp_hybrid_override_pattern`` (``*E``), under the reference. The tiny target (Mamba-2,
attention, MoE) and its trained MTP layer are built at test time into tmp_path
(tests/fixtures/make_mtp_nemotron.py), once per session. vLLM 0.32's CPU build on the same target:
tests/test_mtp_nemotron_vllm.py.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from tests.test_mtp import PROMPTS, accept, dropped_fails  # noqa: E402  (one accept call)

sys.path.insert(0, str(Path(__file__).resolve().parent / "fixtures"))
import built_once  # noqa: E402  (built once per checkout, shared with the vLLM pass)
import make_mtp_nemotron  # noqa: E402  (the test-time builder)

FLOOR = 1.8


@pytest.fixture(scope="session")
def nemotron() -> Path:
    """The tiny Nemotron-H target with its trained MTP layer (about 30 s on one core)."""
    return built_once.once("nemotron", make_mtp_nemotron.build, subfolder="nemotron-h")


def dropped_copy(source: Path, folder: Path) -> Path:
    """The target saved without its ``mtp.*`` tensors, the config still declaring the layer."""
    from safetensors.torch import load_file, save_file

    shutil.copytree(source, folder)
    weights = load_file(str(source / "model.safetensors"))
    save_file({k: v for k, v in weights.items() if not k.startswith("mtp.")}, str(folder / "model.safetensors"))
    return folder


def test_the_nemotron_layout_is_read_from_the_config(nemotron):
    from draftguard.check.drafter.detect import MTP_REFERENCE_ARCHITECTURES, detect_drafter
    from draftguard.runner.engine_options import drafting_method
    from draftguard.runner.gpu_job import accept_command
    from draftguard.runner.mtp_weights import mtp_count, mtp_faults, mtp_layout
    from draftguard.settings import Settings

    raw = json.loads((nemotron / "config.json").read_text())
    layout = mtp_layout(raw, "config.json")
    assert layout.name == "nemotron_h" and layout.embeds_first and not layout.zero_first and not layout.final_norm
    assert mtp_layout({**raw, "architectures": []}, "config.json").name == "nemotron_h"  # by model_type
    assert mtp_count(raw, str(nemotron / "config.json")) == ("num_nextn_predict_layers", 1)
    assert mtp_faults(nemotron) == []
    assert drafting_method(str(nemotron)) == "mtp"
    # Before: the GPU path skipped it ("MTP heads are not run for NemotronHForCausalLM").
    assert "NemotronHForCausalLM" in MTP_REFERENCE_ARCHITECTURES and detect_drafter(raw).acceptance_testable
    cmd = accept_command("Qwen/Qwen3-8B", str(nemotron), Settings(), python="py", env={})
    assert cmd[cmd.index("--target") + 1] == str(nemotron) == cmd[cmd.index("--drafter") + 1]


def test_healthy_nemotron_mtp_layer_passes(capsys, nemotron):
    """Before: exit 2, the reference "builds MTP layers of the mimo, deepseek_v3, ... layout"."""
    code, result, err = accept(capsys, str(nemotron), "--no-early-stop", "--min-acceptance-length", str(FLOOR))
    assert code == 0, err
    assert result.run["method"] == "mtp" and result.run["block_size"] == 2 and result.diagnosis is None
    assert result.mean_acceptance_length > 1.9


def test_a_dropped_nemotron_mtp_layer_fails_with_mtp_weights_named(capsys, nemotron, tmp_path):
    reason = dropped_fails(capsys, dropped_copy(nemotron, tmp_path / "dropped"))
    assert "the weights hold no tensor under `mtp.`: dropped at save" in reason


def test_the_reference_is_lossless_on_a_mamba_target(nemotron):
    """A Mamba-2 layer's state cannot be cropped past a rejected draft (transformers refuses ``crop``);
    the verification keeps a copy and reruns the kept tokens, so the text is the target's greedy text
    at K = 1 and K = 3, rejections included."""
    from draftguard.runner.eagle3 import eagle3_generate
    from draftguard.runner.mtp_model import load_mtp, load_mtp_target
    from draftguard.runner.reference import greedy_generate

    target, _ = load_mtp_target(str(nemotron))
    head = load_mtp(str(nemotron), target)
    prompts = [json.loads(line)["input_ids"] for line in PROMPTS.read_text().splitlines()][:4]
    rejected = 0
    for noise in (0.0, 0.5):  # the trained layer drafts the tiny target's text almost perfectly: a noisy copy too
        with torch.no_grad():
            head.proj.weight.add_(noise * torch.randn_like(head.proj.weight))
        for k in (1, 3):
            for p in prompts:
                tokens, c = eagle3_generate(target, head, p, 24, num_speculative_tokens=k, stop_ids=[41])
                assert tokens == greedy_generate(target, p, 24, stop_ids=[41])
                rejected += c.draft_tokens - c.accepted_tokens
    assert rejected > 0  # the rollback ran


def test_the_layer_is_built_as_vllm_builds_it(nemotron):
    """Sublayers by ``mtp_hybrid_override_pattern`` (attention, then MoE with the stored experts stacked),
    the final norm in the last, no rotary; the chain is fed the normed output the logits read."""
    from safetensors.torch import load_file

    from draftguard.runner.mtp_model import load_mtp, load_mtp_target

    target, _ = load_mtp_target(str(nemotron))
    head = load_mtp(str(nemotron), target)
    assert [layer.block_type for layer in head.block.layers] == ["full_attention", "moe"]
    stored = load_file(str(nemotron / "model.safetensors"))
    moe = head.block.layers[1].mixer
    assert torch.equal(moe.experts.up_proj[3], stored["mtp.layers.1.mixer.experts.3.up_proj.weight"])
    assert torch.equal(moe.gate.e_score_correction_bias, stored["mtp.layers.1.mixer.gate.e_score_correction_bias"])
    assert torch.equal(head.block.layers[1].final_layernorm.weight, stored["mtp.layers.1.final_layernorm.weight"])
    assert torch.equal(head.proj.weight, stored["mtp.layers.0.eh_proj.weight"])
    hidden, embeds = torch.randn(1, 5, 32), torch.randn(1, 5, 32)
    with torch.no_grad():
        logits, out = head(hidden, embeds, torch.arange(5)[None])
        assert torch.allclose(logits, target.lm_head(out))
        # vLLM's forward by hand: eh_proj([enorm(e), hnorm(h)]), each sublayer pre-norm with its residual,
        # final_layernorm of the sum; the embedding not zeroed at position 0
        x = head.proj(torch.cat([head.enorm(embeds), head.hnorm(hidden)], -1))
        attn, moe_layer = head.block.layers
        mask = torch.full((5, 5), float("-inf")).triu(1)[None, None]
        x = x + attn.mixer(attn.norm(x), attention_mask=mask)[0]
        x = x + moe_layer.mixer(moe_layer.norm(x))
        assert torch.allclose(out, moe_layer.final_layernorm(x), atol=1e-5)


def test_an_mtp_sublayer_vllm_does_not_build_is_refused_as_vllm_refuses_it(capsys, nemotron, tmp_path):
    """vLLM 0.32 builds ``*`` and ``E`` MTP sublayers only (NotImplementedError for the rest)."""
    folder = tmp_path / "mamba-mtp"
    shutil.copytree(nemotron, folder)
    raw = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**raw, "mtp_hybrid_override_pattern": "*M"}))
    code, result, err = accept(capsys, str(folder), "--num-prompts", "2")
    assert code == 2 and result is None
    assert "mtp_hybrid_override_pattern '*M' has sublayer(s) ['M']" in err and "Traceback" not in err


def test_the_light_check_flags_the_dropped_nemotron_layer_without_a_run(nemotron, tmp_path):
    """`draftguard check` (no torch): DG404 on the dropped copy, no error on the healthy target."""
    from draftguard.check.repo import check_repo
    from draftguard.snapshot import load_snapshot

    def errors(folder: Path) -> set[str]:
        return {f.rule for f in check_repo(load_snapshot(str(folder)), {}) if f.severity.name == "ERROR"}

    assert errors(nemotron) == set()
    assert errors(dropped_copy(nemotron, tmp_path / "dropped")) == {"DG404"}


def test_vllm_runs_a_mamba_target_with_prefix_caching_off(nemotron):
    """vLLM 0.32's prefix caching puts a Mamba target's state in "align" mode, whose copy for speculative
    decoding has no CPU kernel (tests/test_mtp_nemotron_vllm.py); the engine is started without it."""
    from draftguard.runner.engine_options import EngineOptions
    from draftguard.runner.vllm import llm_kwargs, mamba_target

    from tests.test_mtp import MODELS

    assert mamba_target(str(nemotron)) and not mamba_target(str(MODELS / "mimo"))
    kw = llm_kwargs(str(nemotron), str(nemotron), EngineOptions(method="mtp"), num_speculative_tokens=2)
    assert kw["enable_prefix_caching"] is False
    assert "enable_prefix_caching" not in llm_kwargs(str(MODELS / "mimo"), str(MODELS / "mimo"),
                                                     EngineOptions(method="mtp"), num_speculative_tokens=2)
