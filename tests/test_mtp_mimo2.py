"""MiMo-V2-Flash's MTP layer (issue 43): ``MiMoV2FlashForCausalLM``, ``model.mtp.layers.{i}.*`` (enorm, hnorm,
eh_proj, final_layernorm; [embedding, hidden], the embedding not zeroed at position 0), a dense decoder layer
attending as the sliding-window layers (``swa_*`` geometry and rope theta, sinks), its layer count by
architecture (the config names no MTP key); on the tiny trained fixture ``tests/fixtures/mtp-models/mimo-v2-flash``
(``make_mtp_mimo2.py``), under the reference; its dropped-layer copy is built here into tmp_path. vLLM 0.32's
CPU build on the same fixture: tests/test_mtp_mimo2_vllm.py.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from tests.test_mtp import MODELS, assert_healthy_matches_trained, dropped_fails  # noqa: E402  (one accept call)

NAME, MTP_SHARD = "mimo-v2-flash", "model-00002-of-00002.safetensors"
REAL = Path(__file__).resolve().parent / "data" / "real-configs" / "xiaomimimo--mimo-v2-flash" / "config.json"


def dropped_copy(tmp_path: Path) -> Path:
    """The fixture with its MTP shard left out at save (the architecture still makes vLLM build the layer)."""
    folder = tmp_path / "mimo-v2-flash-mtp-dropped"
    shutil.copytree(MODELS / NAME, folder)
    (folder / MTP_SHARD).unlink()
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    index["weight_map"] = {k: v for k, v in index["weight_map"].items() if v != MTP_SHARD}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    return folder


def test_the_layout_is_read_from_the_architecture_and_the_fixture_is_small():
    """The config (the fixture's, the released one's) names no MTP key: the layout and its one layer come
    from the architecture, as vLLM 0.32 takes ``_MIMO_V2_FLASH_NUM_MTP_LAYERS``."""
    from draftguard.check.drafter.detect import MTP_BY_ARCHITECTURE, MTP_KEYS, MTP_REFERENCE_ARCHITECTURES
    from draftguard.check.repo import checkpoint
    from draftguard.runner.engine_options import drafting_method
    from draftguard.runner.mtp_weights import mtp_count, mtp_layout

    for path in (MODELS / NAME / "config.json", REAL):
        raw = json.loads(path.read_text())
        assert not any(k in raw for k in MTP_KEYS)
        layout = mtp_layout(raw, str(path))
        assert layout.name == "mimo_v2_flash" and layout.embeds_first and not layout.zero_first and layout.sliding
        assert layout.prefix.format(i=0) == "model.mtp.layers.0." and not layout.recycle_prenorm
        assert mtp_count(raw, str(path)) == ("architectures", 1)
    assert checkpoint.MTP_BY_ARCHITECTURE == MTP_BY_ARCHITECTURE
    assert MTP_BY_ARCHITECTURE["MiMoV2FlashForCausalLM"] == 1
    assert "MiMoV2FlashForCausalLM" in MTP_REFERENCE_ARCHITECTURES
    assert drafting_method(str(MODELS / NAME)) == "mtp"
    assert sum(f.stat().st_size for f in (MODELS / NAME).iterdir()) <= 150_000


def test_the_gpu_job_runs_a_mimo_v2_flash_model_as_its_own_target():
    """Before: no MTP key, so detection called MiMo-V2-Flash no drafter and the GPU path skipped it."""
    from draftguard.check.drafter.detect import detect_drafter
    from draftguard.runner.gpu_job import accept_command
    from draftguard.settings import Settings

    folder = str(MODELS / NAME)
    for path in (MODELS / NAME / "config.json", REAL):
        fmt = detect_drafter(json.loads(path.read_text()))
        assert fmt.family == "mtp" and fmt.acceptance_testable and fmt.num_target_layers.key == "architectures"
    cmd = accept_command("Qwen/Qwen3-8B", folder, Settings(), python="py", env={})
    assert cmd[cmd.index("--target") + 1] == folder and cmd[cmd.index("--drafter") + 1] == folder


def test_healthy_mimo_v2_flash_mtp_layer_passes_and_matches_its_trained_tau_prompt_for_prompt(capsys):
    """Before: exit 2, "--method mtp needs a target that declares MTP layers"."""
    assert_healthy_matches_trained(capsys, NAME, 1.85)


def test_a_dropped_mimo_v2_flash_mtp_layer_fails_with_mtp_weights_named(capsys, tmp_path):
    reason = dropped_fails(capsys, dropped_copy(tmp_path))
    assert "vLLM 0.32 builds 1 MTP layer(s) for MiMoV2FlashForCausalLM" in reason
    assert "the weights hold no tensor under `model.mtp.layers.0.`: dropped at save" in reason


def test_the_layer_attends_with_sinks_in_its_window_and_does_not_zero_position_0():
    """The block is transformers' MiMoV2FlashDecoderLayer, dense, sliding-window with the stored sinks
    (``attention_sink_bias``) and ``pre_mlp_layernorm`` as its post-attention norm; the window masks
    tokens ``sliding_window_size`` back or more; the embedding at position 0 is read, not zeroed."""
    from safetensors.torch import load_file

    from draftguard.runner.mtp_model import load_mtp, load_mtp_target

    target, _ = load_mtp_target(str(MODELS / NAME))
    head = load_mtp(str(MODELS / NAME), target)
    assert type(head.block).__name__ == "MiMoV2FlashDecoderLayer" and type(head.block.mlp).__name__ == "MiMoV2FlashMLP"
    stored = load_file(str(MODELS / NAME / MTP_SHARD))
    sinks = stored["model.mtp.layers.0.self_attn.attention_sink_bias"].float()
    assert torch.equal(head.block.self_attn.sinks, sinks) and sinks.abs().sum() > 0
    assert torch.equal(head.block.post_attention_layernorm.weight,
                      stored["model.mtp.layers.0.pre_mlp_layernorm.weight"].float())
    hidden, embeds, positions = torch.randn(1, 6, 32), torch.randn(1, 6, 32), torch.arange(6)[None]
    with torch.no_grad():
        logits, _ = head(hidden, embeds, positions)
        other = embeds.clone()
        other[:, 0] += 1.0
        assert not torch.allclose(head(hidden, other, positions)[0][:, 0], logits[:, 0])  # position 0 read
        head._shared["text"].sliding_window_size = 2  # the last token sees itself and one before it
        narrow, _ = head(hidden, embeds, positions)
        far = embeds.clone()
        far[:, 3] += 1.0
        assert torch.allclose(head(hidden, far, positions)[0][:, 5], narrow[:, 5], atol=1e-6)
        assert not torch.allclose(narrow[:, 5], logits[:, 5], atol=1e-4)
    head._shared["text"].sliding_window_size = 128


def test_the_light_check_flags_the_dropped_mimo_v2_flash_layer_without_a_run(tmp_path):
    """`draftguard check` (no torch): DG404 on the dropped copy (the architecture declares the layer), no
    error on the healthy fixture."""
    from draftguard.check.repo import check_repo
    from draftguard.snapshot import load_snapshot

    def errors(folder: Path) -> set[str]:
        return {f.rule for f in check_repo(load_snapshot(str(folder)), {}) if f.severity.name == "ERROR"}

    assert errors(MODELS / NAME) == set()
    assert errors(dropped_copy(tmp_path)) == {"DG404"}


def test_a_declared_fp8_target_keeps_the_sinks_eager_attention(tmp_path):
    """The released checkpoint declares block FP8, so its target is built from the config (not
    from_pretrained). Before: that path asked for sdpa attention, which transformers' MiMo-V2-Flash refuses
    (it has no sinks): ValueError, the released model could not be loaded."""
    from draftguard.runner.mtp_model import load_mtp_target

    folder = tmp_path / "mimo-v2-flash-fp8-declared"
    shutil.copytree(MODELS / NAME, folder)  # the tensors stay bf16: only the declaration changes the path
    raw = json.loads((folder / "config.json").read_text())
    raw["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128],
                                  "activation_scheme": "dynamic"}
    (folder / "config.json").write_text(json.dumps(raw))
    plain, _ = load_mtp_target(str(MODELS / NAME))
    built, _ = load_mtp_target(str(folder))
    assert built.config._attn_implementation == "eager"
    ids = torch.tensor([[1, 40, 3, 6, 9, 12, 15, 18, 21]])
    with torch.no_grad():
        assert torch.allclose(built(ids).logits, plain(ids).logits, atol=1e-5)
