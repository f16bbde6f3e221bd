"""DeepSeek-V3.2's and GLM-5's MTP layer (``DeepseekV32ForCausalLM`` / ``GlmMoeDsaForCausalLM``, vLLM 0.32's
``DeepseekV32MTPModel``) under the reference (issue 43). Before, accept refused both (exit 2: "sparse attention
(the lightning indexer) is not written in the reference").

The targets are derived at test time from the trained DeepSeek-V3 MTP fixture (tests/dsa_targets.py): the
same trunk and MTP layer with the low-rank query V3.2 always has and a seeded indexer in every layer.
``index_topk`` 1024 (above every sequence): the indexer selects every token, and the V3.2 target and MTP
layer compute dsv3's (τ prompt for prompt). ``index_topk`` 16: prompts of 6-11 tokens plus 32 new ones
pass 16, so the selection changes what the target writes and what its MTP layer drafts (τ 1.654 measured
2026-12-05, 24 prompts, K = 1; the MTP layer was trained for the dense target, so the bar here is 1.5).
vLLM 0.32's CPU build on them: tests/test_mtp_dsa_vllm.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from tests.dsa_targets import dsa_target  # noqa: E402  (the targets, built into tmp_path)
from tests.test_mtp import accept, dropped_fails, trained  # noqa: E402  (one accept call)

BAR = ["--no-early-stop", "--min-acceptance-length", "1.5"]
SPARSE_TAU = 1.6542  # index_topk 16, K = 1, 24 prompts: measured 2026-12-05


@pytest.fixture(scope="session")
def sparse(tmp_path_factory) -> Path:
    return dsa_target(tmp_path_factory.mktemp("dsa") / "v32-topk16", index_topk=16)


def _per_prompt(result) -> list[float]:
    return [round(p.mean_acceptance_length, 4) for p in result.per_prompt]


def test_both_architectures_are_read_from_the_config_and_are_acceptance_testable(sparse, tmp_path):
    from draftguard.check.drafter.detect import detect_drafter
    from draftguard.runner.mtp_coverage import NOT_BUILT
    from draftguard.runner.mtp_weights import mtp_faults, mtp_layout

    glm = dsa_target(tmp_path / "glm5", index_topk=16, model_type="glm_moe_dsa")
    for folder, name in ((sparse, "deepseek_v32"), (glm, "glm_moe_dsa")):
        raw = json.loads((folder / "config.json").read_text())
        layout = mtp_layout(raw, "config.json")
        assert layout.name == name and layout.block_at_n and layout.zero_first and not layout.recycle_prenorm
        assert layout.prefix.format(n=1) == "model.layers.1." and mtp_faults(folder) == []
        assert mtp_layout({**raw, "architectures": []}, "config.json").name == name  # by model_type
        found = detect_drafter(raw)
        assert found.acceptance_testable and found.acceptance_refusal is None
    assert "DeepseekV32MTPModel" not in NOT_BUILT


def test_with_every_token_selected_the_v32_layer_measures_dsv3s_trained_tau_prompt_for_prompt(capsys, tmp_path):
    code, result, err = accept(capsys, str(dsa_target(tmp_path / "v32-dense")), *BAR)
    assert code == 0, err
    assert result.run["method"] == "mtp" and result.run["block_size"] == 2 and result.diagnosis is None
    assert _per_prompt(result) == trained("dsv3")["per_prompt"]


def test_a_sparse_target_passes_and_its_selection_changes_the_tau(capsys, sparse):
    code, result, err = accept(capsys, str(sparse), *BAR)
    assert code == 0, err
    assert result.diagnosis is None and round(result.mean_acceptance_length, 4) == SPARSE_TAU
    assert result.mean_acceptance_length < trained("dsv3")["mean_acceptance_length"]  # 2.0 with every token


def test_the_glm5_layer_runs_its_own_indexer_interleaved(capsys, tmp_path):
    """GLM-5 (indexer_rope_interleave true, as vLLM reads it; transformers' GlmMoeDsa rotates so): the same
    weights select other tokens than V3.2's half-split indexer, so the τ differs from the V3.2 target's."""
    code, result, err = accept(capsys, str(dsa_target(tmp_path / "glm5", index_topk=16, model_type="glm_moe_dsa")),
                               *BAR)
    assert code == 0, err
    assert result.diagnosis is None and result.mean_acceptance_length > 1.5
    assert round(result.mean_acceptance_length, 4) != SPARSE_TAU


def test_the_mtp_layers_indexer_is_used_and_below_index_topk_the_layer_is_dsv3s(sparse):
    """The cross-check: transformers' DeepSeek-V3 decoder layer loaded with the V3.2 layer's weights (all but
    the indexer) in its place gives the same outputs wherever the sequence is within index_topk (16), and
    others past it; changing the MTP layer's indexer changes the outputs past 16 only."""
    from transformers import DeepseekV3Config

    from draftguard.runner.mtp_dsv3 import dsv3_block
    from draftguard.runner.mtp_model import load_mtp, load_mtp_target
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3DecoderLayer

    target, _ = load_mtp_target(str(sparse))
    head = load_mtp(str(sparse), target)
    attn = head.block.self_attn
    assert type(head.block).__name__ == "DeepseekV32DecoderLayer" and attn.indexer.index_topk == 16
    assert attn.indexer.wk.weight.abs().sum() > 0  # loaded from model.layers.1.self_attn.indexer.wk
    raw = json.loads((sparse / "config.json").read_text())
    v3 = DeepseekV3Config(**{k: v for k, v in raw.items() if not k.startswith("index") and k != "model_type"})
    dense = dsv3_block(v3, DeepseekV3DecoderLayer, 1)
    missing, unexpected = dense.load_state_dict(head.block.state_dict(), strict=False)
    assert missing == [] and {k.split(".")[1] for k in unexpected} == {"indexer"}
    torch.manual_seed(0)
    hidden, embeds, positions = torch.randn(1, 24, 32), torch.randn(1, 24, 32), torch.arange(24)[None]
    with torch.no_grad():
        sparse_logits, _ = head(hidden, embeds, positions)
        head.block, kept = dense, head.block
        dense_logits, _ = head(hidden, embeds, positions)
        head.block = kept
        kept.self_attn.indexer.wk.weight.mul_(-1)
        other_logits, _ = head(hidden, embeds, positions)
    assert torch.allclose(sparse_logits[:, :16], dense_logits[:, :16], atol=1e-5)
    assert not torch.allclose(sparse_logits[:, 16:], dense_logits[:, 16:], atol=1e-3)
    assert torch.equal(other_logits[:, :16], sparse_logits[:, :16])
    assert not torch.allclose(other_logits[:, 16:], sparse_logits[:, 16:], atol=1e-3)


def test_a_dropped_v32_layer_fails_with_mtp_weights_named(capsys, tmp_path):
    reason = dropped_fails(capsys, dsa_target(tmp_path / "dropped", index_topk=16, drop_mtp=True))
    assert "the weights hold no tensor under `model.layers.1.`: dropped at save" in reason


def test_a_layer_left_fp8_fails_naming_the_indexers_weights(capsys, tmp_path):
    code, result, err = accept(capsys, str(dsa_target(tmp_path / "fp8", index_topk=16, fp8_mtp=True)), *BAR)
    assert code == 1, err
    assert result.diagnosis["cause"] == "mtp-weights" and result.mean_acceptance_length < 1.25
    assert "`model.layers.1.self_attn.indexer.wk.weight` is stored F8_E4M3" in result.diagnosis["reason"]


def test_an_embedding_copy_other_than_the_targets_is_named(tmp_path):
    from draftguard.runner.mtp_weights import mtp_faults

    faults = mtp_faults(dsa_target(tmp_path / "own", index_topk=16, own_embeddings=True))
    assert len(faults) == 1 and "`model.layers.1.embed_tokens.weight` differs from the target's" in faults[0]


@pytest.mark.parametrize("changes, key", [
    ({"index_share_for_mtp_iteration": True}, "index_share_for_mtp_iteration"),
    ({"indexer_rope_interleave": True}, "indexer_rope_interleave"),
])
def test_what_the_reference_would_run_otherwise_than_vllm_is_bad_input(capsys, tmp_path, changes, key):
    code, _, err = accept(capsys, str(dsa_target(tmp_path / "bad", index_topk=16, **changes)), *BAR)
    assert code == 2 and key in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_the_layer_at_n_is_moe_as_vllm_builds_it_and_always_has_its_own_indexer(tmp_path):
    """vLLM's DeepseekV32DecoderLayer: MoE at N by first_k_dense_replace / moe_layer_freq (transformers reads
    ``mlp_layer_types``, which has no entry for N), routed by vLLM's grouped_topk; the MTP layer builds a full
    indexer whatever the target's layers share (GLM-5's ``indexer_types``; vLLM's ``is_mtp_layer``)."""
    from draftguard.runner.mtp_dsa import dsa_block
    from draftguard.runner.mtp_dsv3 import VllmRouter
    from draftguard.runner.mtp_model import load_mtp_target

    for model_type in ("deepseek_v32", "glm_moe_dsa"):
        target, _ = load_mtp_target(str(dsa_target(tmp_path / model_type, index_topk=16, model_type=model_type)))
        text, layer = target.config, type(target.model.layers[0])
        before = list(text.mlp_layer_types)
        for changes, moe in (({}, False), ({"first_k_dense_replace": 1}, True),
                             ({"first_k_dense_replace": 1, "moe_layer_freq": 2}, False)):
            config = type(text)(**{**text.to_dict(), **changes})
            if model_type == "glm_moe_dsa":
                config.indexer_types = ["shared"]  # the target's layer 0 would reuse a previous layer's top-k
            block = dsa_block(config, layer, 1)
            assert hasattr(block.mlp, "experts") is moe, (model_type, changes)
            assert isinstance(block.mlp.gate, VllmRouter) if moe else True
            assert block.self_attn.indexer is not None
        assert text.mlp_layer_types == before  # a copy is changed, not the target's config
