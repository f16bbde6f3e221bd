"""dots3's MTP layer (issue 43): rednote-hilab's Dots3Note (``model_type`` dots3_note), vLLM 0.32's
``Dots3NoteMTP`` layout (``model.layers.{N}.*`` and the layer's own ``model.mtp.embed_tokens``), under the
reference. No weights are shipped: the tiny text target and its trained MTP layer are built here once per
session into a temporary folder (``tests/fixtures/make_mtp_dots3.py``). vLLM 0.32's CPU build cannot import
the model (CUDA-only flash attention): tests/test_mtp_dots3_vllm.py.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from tests.test_mtp import BAR, accept, dropped_fails  # noqa: E402  (one accept call)

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "fixtures"))
MTP_SHARD = "model-00002-of-00002.safetensors"


@pytest.fixture(scope="session")
def dots3() -> Path:
    """The healthy tiny dots3 target with its trained MTP layer (built, not shipped)."""
    import built_once
    import make_mtp_dots3

    return built_once.once("dots3", make_mtp_dots3.build, subfolder="dots3-note")


def _copy(healthy: Path, tmp_path: Path, name: str, change) -> Path:
    """The target with its MTP shard's tensors changed by ``change`` (a dict -> dict), the rest as it is."""
    from safetensors.torch import load_file, save_file

    folder = tmp_path / name
    shutil.copytree(healthy, folder)
    mtp = change(load_file(str(folder / MTP_SHARD)))
    save_file(mtp, str(folder / MTP_SHARD), metadata={"format": "pt"})
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    index["weight_map"] = {**{k: v for k, v in index["weight_map"].items() if v != MTP_SHARD},
                           **{k: MTP_SHARD for k in mtp}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    return folder


def test_the_dots3_layout_is_read_as_vllm_reads_it():
    """Before: exit 2, "vLLM 0.34.0 drafts for it with method mtp (its Dots3NoteMTPModel), which the reference
    does not build yet"."""
    import make_mtp_dots3

    from draftguard.check.drafter.detect import detect_drafter
    from draftguard.runner.mtp_coverage import NOT_BUILT
    from draftguard.runner.mtp_weights import mtp_count, mtp_layout

    raw = make_mtp_dots3.dots3_config()
    layout = mtp_layout(raw, "config.json")
    assert layout.name == "dots3_note" and layout.block_at_n and layout.embeds_first
    assert layout.zero_first and not layout.recycle_prenorm  # fused_eh_norm zeroes position 0; the normed output
    assert layout.own_embed == "model.mtp.embed_tokens.weight"
    assert mtp_layout({**raw, "architectures": []}, "config.json").name == "dots3_note"  # by model_type
    assert mtp_count(raw) == ("num_nextn_predict_layers", 1)
    assert "Dots3NoteMTPModel" not in NOT_BUILT
    assert detect_drafter(raw).acceptance_testable


def test_healthy_dots3_mtp_layer_passes(capsys, dots3):
    """Measured 2026-12-05: τ 1.969 at K = 1 on the 24 prompts; the bar is the MTP fixtures' (1.8).
    Before the reference's cache recorded a sliding layer's past, the run raised at the first rejected draft
    past the target's 4-token window (transformers' ``crop``)."""
    code, result, err = accept(capsys, str(dots3), "--no-early-stop", "--min-acceptance-length", BAR)
    assert code == 0, err
    assert result.run["method"] == "mtp" and result.run["block_size"] == 2 and result.diagnosis is None
    assert result.mean_acceptance_length > float(BAR)


def test_a_dropped_dots3_mtp_layer_fails_with_mtp_weights_named(capsys, dots3, tmp_path):
    folder = _copy(dots3, tmp_path, "dots3-mtp-dropped",
                   lambda s: {k: v for k, v in s.items() if not k.startswith("model.layers.2.")})
    reason = dropped_fails(capsys, folder)
    assert "config.json declares 1 MTP layer(s) (`num_nextn_predict_layers`)" in reason
    assert "the weights hold no tensor under `model.layers.2.`: dropped at save" in reason


def test_a_dots3_mtp_layer_left_quantized_fails_with_its_tensors_named(capsys, dots3, tmp_path):
    import make_mtp_models as mk

    def quantize(state):
        layer = {k: v for k, v in state.items() if k.startswith("model.layers.2.")}
        return {**state, **mk.fp8_state(layer)}

    folder = _copy(dots3, tmp_path, "dots3-mtp-fp8", quantize)
    code, result, err = accept(capsys, str(folder), "--no-early-stop", "--min-acceptance-length", BAR)
    assert code == 1, err
    assert result.diagnosis["cause"] == "mtp-weights" and result.mean_acceptance_length < float(BAR)
    reason = result.diagnosis["reason"]
    assert "`model.layers.2.eh_proj.weight` is stored F8_E4M3 with `model.layers.2.eh_proj.weight_scale_inv`" in reason
    assert "declares no quantization_config" in reason


def test_the_layer_drafts_with_its_own_embedding_as_vllm_keeps_it(capsys, dots3, tmp_path):
    """vLLM's Dots3NoteMTP has ``has_own_embed_tokens``: ``model.mtp.embed_tokens`` is loaded into the MTP
    model's table and the proposer keeps it where it differs from the target's. A copy whose own table is
    not the one the layer was trained with (rows shuffled) drafts badly, and the measured fail is reported; the
    differing table is named no fault, as a released dots3 may train a table of its own that differs from the
    target's: vLLM drafts with it as it is."""
    from draftguard.runner.mtp_model import load_mtp, load_mtp_target

    def shuffle(state):
        table = state["model.mtp.embed_tokens.weight"]
        return {**state, "model.mtp.embed_tokens.weight": table[torch.randperm(table.shape[0],
                                                                 generator=torch.Generator().manual_seed(0))]}

    folder = _copy(dots3, tmp_path, "dots3-own-embed", shuffle)
    target, _ = load_mtp_target(str(folder))
    head = load_mtp(str(folder), target)
    assert head.own_embed is not None and not torch.equal(head.own_embed.weight, target.get_input_embeddings().weight)
    code, result, err = accept(capsys, str(folder), "--no-early-stop", "--min-acceptance-length", BAR)
    assert code == 1, err
    assert result.mean_acceptance_length < 1.5 and head.spec.faults == []
    assert (result.diagnosis or {}).get("cause") != "mtp-weights", result.diagnosis
    # without the layer's own table vLLM loads the target's into it: the healthy copy's equal one names nothing
    healthy = load_mtp(str(dots3), target)
    assert healthy.spec.faults == [] and torch.equal(healthy.own_embed.weight, target.get_input_embeddings().weight)


def _window_probe(head, n: int, at: int) -> bool:
    """Whether changing the embedding and hidden state at position ``at`` changes the layer's output at n - 1."""
    gen = torch.Generator().manual_seed(1)
    hidden, embeds = torch.randn(1, n, 32, generator=gen), torch.randn(1, n, 32, generator=gen)
    positions = torch.arange(n)[None]
    with torch.no_grad():
        base = head(hidden, embeds, positions)[1][0, -1]
        hidden[0, at] += 3.0
        embeds[0, at] += 3.0
        moved = head(hidden, embeds, positions)[1][0, -1]
    return not torch.allclose(base, moved, atol=1e-6)


def test_the_mtp_layer_attends_within_its_sliding_window(dots3):
    """vLLM builds the MTP layer by ``layer_types[N]`` (``mtp_layer_types``, default sliding_attention), whose
    kernels keep the query and the ``sliding_window_size`` - 1 tokens before it (the Triton mask
    ``kv >= q - WINDOW_SIZE + 1``; FlashAttention's ``window_size=(W - 1, 0)``). Fails if the window is not
    applied (position 0 would reach the last token) or is one off either way."""
    from draftguard.runner.mtp_model import load_mtp, load_mtp_target

    target, _ = load_mtp_target(str(dots3))
    head = load_mtp(str(dots3), target)
    assert head.window == 4 and head.block.self_attn.sliding_window == 4
    n = 12
    assert _window_probe(head, n, n - 4)  # inside: the 4th token back counts
    assert not _window_probe(head, n, n - 5) and not _window_probe(head, n, 1)  # outside
    head.window = 0  # what an unwindowed layer computes: far tokens reach the last one
    assert _window_probe(head, n, 1)


def test_an_mtp_layer_vllm_builds_with_dsa_or_an_elementwise_gate_is_refused(dots3, tmp_path):
    """mtp_layer_types full_attention makes vLLM build Dots3NoteFullAttention (DSA, the lightning indexer),
    and an elementwise gate a g_proj of heads x v_head_dim: neither is written in the reference, so it says so
    (bad input naming the key), and a mtp_layer_types of the wrong length is refused as vLLM refuses it."""
    import make_mtp_dots3

    from draftguard.runner.mtp_dots3 import dots3_block
    from draftguard.snapshot import BadInput

    raw = make_mtp_dots3.dots3_config()
    with pytest.raises(BadInput, match="DSA") as err:
        dots3_block({**raw, "mtp_layer_types": ["full_attention"]}, "config.json")
    assert err.value.key == "mtp_layer_types"
    with pytest.raises(BadInput, match="elementwise") as err:
        dots3_block({**raw, "swa_attention_gate_type": "elementwise"}, "config.json")
    assert err.value.key == "swa_attention_gate_type"
    with pytest.raises(BadInput, match="one entry per MTP layer"):
        dots3_block({**raw, "mtp_layer_types": ["sliding_attention"] * 2}, "config.json")
    block, _rotary, kind, window = dots3_block({**raw, "apply_mla_qkv_lora_rescale": False}, "config.json")
    assert kind == "sliding_attention" and window == 4 and block.self_attn.q_lora_scale == 1.0


def test_the_light_check_flags_a_dots3_layer_dropped_beside_its_kept_embedding(dots3, tmp_path):
    """Before: no finding. ``model.mtp.embed_tokens`` (under an ``mtp`` prefix) counted as the MTP layer, so
    a copy that kept it and dropped ``model.layers.2.*`` passed the light tier, where vLLM 0.32's Dots3NoteMTP
    loads the table into its embedding (no layer index) and refuses the missing layer 2."""
    from draftguard.check.repo import check_repo
    from draftguard.snapshot import load_snapshot

    def errors(folder: Path) -> set[str]:
        return {f.rule for f in check_repo(load_snapshot(str(folder)), {}) if f.severity.name == "ERROR"}

    assert errors(dots3) == set()
    dropped = _copy(dots3, tmp_path, "dots3-layer-dropped", lambda s: {k: v for k, v in s.items()
                                                                       if k.startswith("model.mtp.")})
    assert errors(dropped) == {"DG404"}
