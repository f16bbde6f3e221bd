"""Which real published drafters the bot and the Action hand to `draftguard accept`
(``DrafterFormat.acceptance_testable``, issue 33), read from their config.json as the bot reads them
before any weights are fetched (tests/data/real-drafters, each with its SOURCE.md). A drafter that is
not run carries the reason the comment shows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from draftguard.check.drafter.detect import MTP_REFERENCE_ARCHITECTURES, detect_drafter

DATA = Path(__file__).resolve().parent / "data" / "real-drafters"

RUN = [  # the one-layer LLaMA EAGLE-3 head with midlayer.* weights, and DFlash
    "specforge-llama3-8b-eagle3", "specforge-qwen3-8b-eagle3", "specforge-gpt-oss-20b-eagle3",
    "specforge-deepseek-v3-671b-eagle3", "angelslim-qwen3-4b-eagle3", "angelslim-hunyuan-7b-eagle3",
    "eagle-authors-llama3.1-8b-eagle3", "torchspec-qwen3-8b-eagle3", "specforge-qwen3-8b-dflash",
    "specforge-phi4-eagle3", "specforge-qwq-32b-eagle3",  # model_type copied from the target; a LLaMA layer
    "angelslim-qwen3-vl-8b-eagle3-mrope",  # an mrope section: plain RoPE on text prompts
    "mtp-mimo-7b",  # MiMo's own MTP layer: the reference builds its layout (runner/mtp_model.py)
    "redhatai-gemma-4-31b-it-speculator.eagle3",  # the speculators layout: layers.0.* load as midlayer.*
    "specforge-qwen3-30b-a3b-eagle3.1",  # fc_norm: true, which the reference head builds
    "speculators-qwen3-moe-eagle3",  # norm_before_fc, norm_output and a sliding window: all built
    # scaled RoPE, computed as vLLM's get_rope computes it (issue 43): llama3, yarn, Hunyuan's NTK-alpha dynamic
    "specforge-llama3-70b-eagle3", "torchspec-kimi-k2.5-eagle3", "angelslim-hunyuan-1.8b-eagle3",
    "torchspec-kimi-k2.5-eagle3-mla",  # deepseek_eagle3's MLA layer (runner/eagle3_mla.py; issue 43)
]
NOT_RUN = {  # folder -> words the reason holds
    "specforge-qwen3-8b-peagle": "P-EAGLE heads draft in parallel",
    "deepspec-qwen3-8b-eagle3": "Qwen3Eagle3Model decoder layer",
    # the list grows with each MTP family the reference builds (the first ten, EXAONE-MoE and EXAONE-4.5, ...)
    "mtp-minimax-m2.7": "MTP heads are not run for MiniMaxM2ForCausalLM: draftguard accept's reference builds "
                        f"the MTP layers of {', '.join(MTP_REFERENCE_ARCHITECTURES)} only",
    "torchspec-qwen3-8b-eagle3-mla": "as DeepSeek's MTP model",  # model_type deepseek_v3: vLLM 0.32 cannot start it
    "specforge-qwen3-8b-dspark": "DSpark drafters are not run",
    "zlab-dflash2": "drafters are not run",
    "medusa-vicuna-7b-v1.3": "Medusa heads are not run",
}


def fmt(folder: str):
    found = detect_drafter(json.loads((DATA / folder / "config.json").read_text()))
    assert found is not None, folder
    return found


@pytest.mark.parametrize("folder", RUN)
def test_heads_accept_builds_are_run(folder):
    found = fmt(folder)
    assert found.acceptance_testable and found.acceptance_refusal is None, found.acceptance_refusal


@pytest.mark.parametrize("folder", sorted(NOT_RUN))
def test_other_drafters_are_not_run_and_say_why(folder):
    found = fmt(folder)
    assert not found.acceptance_testable
    assert NOT_RUN[folder] in found.acceptance_refusal, found.acceptance_refusal
    assert "`" not in found.acceptance_refusal  # the comment escapes backticks: plain words only


def test_the_shipped_eagle3_fixtures_are_run():
    fixtures = Path(__file__).resolve().parent / "fixtures" / "vllm-models"
    for head in ("eagle3", "eagle3-no-ids", "eagle3-bad-d2t", "eagle3-ids-shifted", "eagle3-speculators",
                 "eagle3-speculators-norm-default", "eagle3-no-d2t"):
        assert detect_drafter(json.loads((fixtures / head / "config.json").read_text())).acceptance_testable


@pytest.mark.parametrize("change, words", [
    ({"transformer_layer_config": {"model_type": "llama", "num_hidden_layers": 1,
                                   "rope_parameters": {"rope_type": "made_up", "factor": 4.0}}}, "RoPE is made_up"),
    ({"transformer_layer_config": {"model_type": "llama", "num_hidden_layers": 1,
                                   "rope_parameters": {"rope_type": "default", "use_fope": True}}},
     "RoPE is Fourier (use_fope)"),
    ({"transformer_layer_config": {"model_type": "mistral"}}, "which vLLM also refuses"),
    ({"transformer_layer_config": {"model_type": "llama", "num_hidden_layers": 2}}, "of 2 decoder layers"),
    ({"speculators_model_type": "peagle"}, "P-EAGLE heads draft in parallel"),
])
def test_speculators_heads_are_judged_as_vllm_builds_them(change, words):
    """The speculators layout is run where the config vLLM builds from it is a head the reference
    builds; each other head gets its reason (the speculators adapter's defaults: the top level's norm
    options, the layer's model_type picking the class)."""
    raw = json.loads((DATA / "redhatai-gemma-4-31b-it-speculator.eagle3" / "config.json").read_text())
    assert fmt("redhatai-gemma-4-31b-it-speculator.eagle3").acceptance_testable
    found = detect_drafter({**raw, **change})
    assert not found.acceptance_testable and words in found.acceptance_refusal, found.acceptance_refusal


def test_the_norm_variants_vllm_builds_are_run():
    """norm_before_fc, fc_norm and norm_output: vLLM builds them and so does the reference (issue 43)."""
    raw = json.loads((DATA / "redhatai-gemma-4-31b-it-speculator.eagle3" / "config.json").read_text())
    for key in ("norm_before_fc", "fc_norm", "norm_output"):
        assert detect_drafter({**raw, key: True}).acceptance_testable, key
    spec = json.loads((DATA / "specforge-qwen3-8b-eagle3" / "config.json").read_text())
    assert detect_drafter({**spec, "eagle_config": {"use_aux_hidden_state": False}}).acceptance_testable


def test_the_heads_vllm_builds_are_run():
    """A Qwen3 layer (speculators qwen3, or a plain Qwen3ForCausalLM head vLLM names Eagle3Qwen3ForCausalLM),
    a head without aux features and scaled RoPE: vLLM builds each and so does the reference (issue 43);
    DeepSpec's Qwen3Eagle3Model stays out (vLLM has no Eagle3Qwen3Eagle3Model)."""
    raw = json.loads((DATA / "redhatai-gemma-4-31b-it-speculator.eagle3" / "config.json").read_text())
    layer = {**raw["transformer_layer_config"], "model_type": "qwen3"}
    assert detect_drafter({**raw, "transformer_layer_config": layer}).acceptance_testable
    spec = json.loads((DATA / "specforge-qwen3-8b-eagle3" / "config.json").read_text())
    assert detect_drafter({**spec, "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3"}).acceptance_testable
    assert detect_drafter({**spec, "rope_scaling": {"type": "linear", "factor": 2.0}}).acceptance_testable
    assert not fmt("deepspec-qwen3-8b-eagle3").acceptance_testable


@pytest.mark.parametrize("rope", [{"rope_type": "longrope"}, {"type": "su"}, {"rope_type": "ntk"},
                                  {"rope_type": "deepseek_yarn"}, {"rope_type": "deepseek_llama_scaling"}])
def test_the_rope_kinds_vllm_builds_are_run(rope):
    """LongRoPE (and its legacy name su), vLLM's ntk and DeepSeek's YaRN: vLLM's get_rope builds them for an
    EAGLE-3 head and so does the reference since issue 43 (before: "its RoPE is longrope ...", not run)."""
    raw = json.loads((DATA / "redhatai-gemma-4-31b-it-speculator.eagle3" / "config.json").read_text())
    layer = {**raw["transformer_layer_config"], "rope_parameters": {"rope_theta": 1e4, **rope}}
    found = detect_drafter({**raw, "transformer_layer_config": layer})
    assert found.acceptance_testable, found.acceptance_refusal


@pytest.mark.parametrize("folder", ["deepseek-ai--deepseek-v3", "deepseek-ai--deepseek-r1"])
def test_released_deepseek_v3_mtp_targets_are_run(folder):
    """Their MTP layer is MoE and block-FP8 under a declared quantization_config; the reference builds both
    since issue 43 (runner/mtp_dsv3.py), so the GPU path no longer skips them."""
    raw = json.loads((DATA.parent / "real-configs" / folder / "config.json").read_text())
    assert raw["quantization_config"]["weight_block_size"] == [128, 128] and raw["first_k_dense_replace"] < 61
    found = detect_drafter(raw)
    assert found.family == "mtp" and found.acceptance_testable, found.acceptance_refusal
