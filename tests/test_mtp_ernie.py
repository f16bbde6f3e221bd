"""ERNIE-4.5's MTP layer (issue 43): ``Ernie4_5_MoeForCausalLM``, ``model.mtp_{emb_norm,hidden_norm,
linear_proj}.0.*`` and a Llama decoder layer under ``model.mtp_block.0.*`` (neox RoPE, dense MLP, no final
norm), as vLLM 0.32's ``ernie_mtp.py`` runs it, on the tiny trained fixture ``tests/fixtures/mtp-models/ernie45``
(``make_mtp_ernie.py``), under the reference; its dropped-layer copy is built here into tmp_path. vLLM
0.32's CPU build on the same fixture: tests/test_mtp_ernie_vllm.py.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from tests.test_mtp import MODELS, assert_healthy_matches_trained, dropped_fails  # noqa: E402  (one accept call)

NAME, MTP_SHARD = "ernie45", "model-00002-of-00002.safetensors"


def dropped_copy(tmp_path: Path) -> Path:
    """The fixture with its MTP shard left out at save, the config still declaring the layer."""
    folder = tmp_path / "ernie45-mtp-dropped"
    shutil.copytree(MODELS / NAME, folder)
    (folder / MTP_SHARD).unlink()
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    index["weight_map"] = {k: v for k, v in index["weight_map"].items() if v != MTP_SHARD}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    return folder


def test_the_ernie_layout_is_read_from_the_config_and_the_fixture_is_small():
    from draftguard.check.drafter.detect import MTP_REFERENCE_ARCHITECTURES
    from draftguard.runner.engine_options import drafting_method
    from draftguard.runner.mtp_weights import mtp_layout

    raw = json.loads((MODELS / NAME / "config.json").read_text())
    layout = mtp_layout(raw, "config.json")
    assert layout.name == "ernie4_5_moe" and layout.embeds_first and layout.zero_first and not layout.final_norm
    assert layout.prefix + layout.block.format(i=0) == "model.mtp_block.0." and not layout.copies
    assert mtp_layout({**raw, "architectures": []}, "config.json").name == "ernie4_5_moe"  # by model_type
    assert "Ernie4_5_MoeForCausalLM" in MTP_REFERENCE_ARCHITECTURES
    assert drafting_method(str(MODELS / NAME)) == "mtp"
    assert sum(f.stat().st_size for f in (MODELS / NAME).iterdir()) <= 150_000


def test_the_gpu_job_runs_an_ernie_model_as_its_own_target():
    """Before: detection called an ERNIE-4.5 MTP model not acceptance-testable and the GPU path skipped it."""
    from draftguard.check.drafter.detect import detect_drafter
    from draftguard.runner.gpu_job import accept_command
    from draftguard.settings import Settings

    folder = str(MODELS / NAME)
    assert detect_drafter(json.loads((MODELS / NAME / "config.json").read_text())).acceptance_testable
    cmd = accept_command("Qwen/Qwen3-8B", folder, Settings(), python="py", env={})
    assert cmd[cmd.index("--target") + 1] == folder and cmd[cmd.index("--drafter") + 1] == folder


def test_healthy_ernie_mtp_layer_passes_and_matches_its_trained_tau_prompt_for_prompt(capsys):
    """Before: exit 2, the reference "builds MTP layers of the mimo, deepseek_v3, ... layout"."""
    assert_healthy_matches_trained(capsys, NAME, 1.75)


def test_a_dropped_ernie_mtp_layer_fails_with_mtp_weights_named(capsys, tmp_path):
    reason = dropped_fails(capsys, dropped_copy(tmp_path))
    assert "the weights hold no tensor under `model.mtp_`: dropped at save" in reason


def test_the_block_is_vllms_llama_layer_with_neox_rope_and_no_final_norm():
    """vLLM's ernie_mtp.py builds a LlamaDecoderLayer (neox RoPE, where the target's attention rotates
    interleaved pairs) and reads the logits from the layer's output without a norm; the stored tensors
    load under their ERNIE names."""
    from safetensors.torch import load_file

    from draftguard.runner.mtp_model import load_mtp, load_mtp_target

    target, _ = load_mtp_target(str(MODELS / NAME))
    head = load_mtp(str(MODELS / NAME), target)
    assert type(head.block).__name__ == "LlamaDecoderLayer" and isinstance(head.final_norm, torch.nn.Identity)
    assert type(head._shared["rotary"]).__name__ == "LlamaRotaryEmbedding"
    stored = load_file(str(MODELS / NAME / MTP_SHARD))
    assert torch.equal(head.block.self_attn.q_proj.weight, stored["model.mtp_block.0.self_attn.q_proj.weight"].float())
    assert torch.equal(head.proj.weight, stored["model.mtp_linear_proj.0.weight"].float())
    assert torch.equal(head.enorm.weight, stored["model.mtp_emb_norm.0.weight"].float())
    assert head.spec.faults == []
    hidden, embeds = torch.randn(1, 5, 32), torch.randn(1, 5, 32)
    positions = torch.arange(5)[None]
    with torch.no_grad():
        logits, out = head(hidden, embeds, positions)
        assert torch.allclose(logits, head._shared["head"](out))


def test_the_light_check_flags_the_dropped_ernie_layer_without_a_run(tmp_path):
    """`draftguard check` (no torch): DG404 on the dropped copy, no error on the healthy fixture."""
    from draftguard.check.repo import check_repo
    from draftguard.snapshot import load_snapshot

    def errors(folder: Path) -> set[str]:
        return {f.rule for f in check_repo(load_snapshot(str(folder)), {}) if f.severity.name == "ERROR"}

    assert errors(MODELS / NAME) == set()
    assert errors(dropped_copy(tmp_path)) == {"DG404"}
