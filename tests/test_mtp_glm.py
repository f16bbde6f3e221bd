"""GLM-4.5/4.6/4.7's MTP layer (issue 43): ``Glm4MoeForCausalLM``, DeepSeek-V3's ``model.layers.{N}.*`` names
with a Glm4Moe decoder layer (GQA, partial rotary, qk-norm, q/k/v bias; MoE, sigmoid-routed with the
correction bias), on the tiny trained fixture ``tests/fixtures/mtp-models/glm4-moe`` (``make_mtp_glm.py``),
under the reference; its dropped-layer copy is built here into tmp_path. vLLM 0.32's CPU build on the same
fixture: tests/test_mtp_glm_vllm.py.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from tests.test_mtp import MODELS, assert_healthy_matches_trained, dropped_fails  # noqa: E402  (one accept call)

NAME, MTP_SHARD = "glm4-moe", "model-00002-of-00002.safetensors"


def dropped_copy(tmp_path: Path) -> Path:
    """The fixture with its MTP shard left out at save, the config still declaring the layer."""
    folder = tmp_path / "glm4-moe-mtp-dropped"
    shutil.copytree(MODELS / NAME, folder)
    (folder / MTP_SHARD).unlink()
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    index["weight_map"] = {k: v for k, v in index["weight_map"].items() if v != MTP_SHARD}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    return folder


def test_the_glm_layout_is_read_from_the_config_and_the_fixture_is_small():
    from draftguard.check.drafter.detect import MTP_REFERENCE_ARCHITECTURES
    from draftguard.runner.engine_options import drafting_method
    from draftguard.runner.mtp_weights import mtp_layout

    raw = json.loads((MODELS / NAME / "config.json").read_text())
    layout = mtp_layout(raw, "config.json")
    assert layout.name == "glm4_moe" and layout.embeds_first and layout.block_at_n and layout.recycle_prenorm
    assert layout.prefix.format(i=0, n=raw["num_hidden_layers"]) == "model.layers.2."
    assert mtp_layout({**raw, "architectures": []}, "config.json").name == "glm4_moe"  # by model_type
    assert "Glm4MoeForCausalLM" in MTP_REFERENCE_ARCHITECTURES
    assert drafting_method(str(MODELS / NAME)) == "mtp"
    assert sum(f.stat().st_size for f in (MODELS / NAME).iterdir()) <= 200_000


def test_the_gpu_job_runs_a_glm_model_as_its_own_target():
    """Before: detection called a GLM-4.5 MTP model not acceptance-testable and the GPU path skipped it."""
    from draftguard.check.drafter.detect import detect_drafter
    from draftguard.runner.gpu_job import accept_command
    from draftguard.settings import Settings

    folder = str(MODELS / NAME)
    assert detect_drafter(json.loads((MODELS / NAME / "config.json").read_text())).acceptance_testable
    cmd = accept_command("Qwen/Qwen3-8B", folder, Settings(), python="py", env={})
    assert cmd[cmd.index("--target") + 1] == folder and cmd[cmd.index("--drafter") + 1] == folder


def test_healthy_glm_mtp_layer_passes_and_matches_its_trained_tau_prompt_for_prompt(capsys):
    """Before: exit 2, the reference "builds MTP layers of the mimo, deepseek_v3, ... layout"."""
    assert_healthy_matches_trained(capsys, NAME, 1.95)


def test_a_dropped_glm_mtp_layer_fails_with_mtp_weights_named(capsys, tmp_path):
    reason = dropped_fails(capsys, dropped_copy(tmp_path))
    assert "the weights hold no tensor under `model.layers.2.`: dropped at save" in reason


def test_the_layer_is_glms_moe_routed_with_sigmoid_and_the_correction_bias():
    """vLLM's Glm4MoE routes with grouped_topk, sigmoid scores and the correction bias, though the config
    names no scoring_func or topk_method (DeepSeek-V3's router reads both and would score with softmax)."""
    from safetensors.torch import load_file

    from draftguard.runner.mtp_model import load_mtp, load_mtp_target

    target, _ = load_mtp_target(str(MODELS / NAME))
    head = load_mtp(str(MODELS / NAME), target)
    assert type(head.block).__name__ == "Glm4MoeDecoderLayer" and head.block.self_attn.use_qk_norm
    gate = head.block.mlp.gate
    assert gate.scoring == "sigmoid" and gate.biased
    stored = load_file(str(MODELS / NAME / MTP_SHARD))
    experts = head.block.mlp.experts
    gate_w, up = experts.gate_up_proj[3].chunk(2)
    assert torch.equal(gate_w, stored["model.layers.2.mlp.experts.3.gate_proj.weight"].float())
    assert torch.equal(up, stored["model.layers.2.mlp.experts.3.up_proj.weight"].float())
    bias = stored["model.layers.2.mlp.gate.e_score_correction_bias"]
    assert torch.equal(gate.e_score_correction_bias, bias) and bias.abs().sum() > 0
    # transformers' own Glm4MoeTopkRouter (sigmoid, bias always) picks the same experts with the same weights
    from transformers.models.glm4_moe.modeling_glm4_moe import Glm4MoeTopkRouter

    theirs = Glm4MoeTopkRouter(target.config)
    theirs.load_state_dict(gate.state_dict())
    hidden = torch.randn(64, 32)
    _, w_ours, ids_ours = gate(hidden)
    _, w_theirs, ids_theirs = theirs(hidden)
    assert torch.equal(ids_ours.sort(-1).values, ids_theirs.sort(-1).values)
    assert torch.allclose(w_ours.gather(1, ids_ours.argsort(-1)), w_theirs.gather(1, ids_theirs.argsort(-1)), atol=1e-6)


def test_the_next_chain_step_reads_the_output_before_the_final_norm():
    """vLLM's glm4_moe_mtp.py returns the layer's output before ``shared_head.norm`` (the logits alone are
    normed): the second draft step reads that, where DeepSeek-V3's and MiMo's read it normed."""
    from draftguard.runner.mtp_model import load_mtp, load_mtp_target

    target, _ = load_mtp_target(str(MODELS / NAME))
    head = load_mtp(str(MODELS / NAME), target)
    hidden, embeds = torch.randn(1, 5, 32), torch.randn(1, 5, 32)
    positions = torch.arange(5)[None]
    with torch.no_grad():
        logits, out = head(hidden, embeds, positions)
        assert torch.allclose(logits, head._shared["head"](head.final_norm(out)))
        assert not torch.allclose(out, head.final_norm(out), atol=1e-3)


def test_the_light_check_flags_the_dropped_glm_layer_without_a_run(tmp_path):
    """`draftguard check` (no torch): DG404 on the dropped copy, no error on the healthy fixture."""
    from draftguard.check.repo import check_repo
    from draftguard.snapshot import load_snapshot

    def errors(folder: Path) -> set[str]:
        return {f.rule for f in check_repo(load_snapshot(str(folder)), {}) if f.severity.name == "ERROR"}

    assert errors(MODELS / NAME) == set()
    assert errors(dropped_copy(tmp_path)) == {"DG404"}
