"""GLM-4.7-Flash's MTP layer (``Glm4MoeLiteForCausalLM``, model_type ``glm4_moe_lite``) and GLM-4.5V/4.6V's
multimodal exports (``Glm4vMoeForConditionalGeneration``) under the reference (issue 43: "a drafter vLLM
runs is never refused by the reference"; before, both exited 2, "the reference builds MTP layers of the
mimo, deepseek_v3, ... layout"). vLLM 0.32 runs GLM-4.7-Flash's layer; GLM-4.5V's class it maps to no MTP
model (tests/test_mtp_glm_lite_vllm.py), though its checkpoints ship GLM-4.5's layer, which the reference runs.

No weights are shipped for this file; both targets are derived here, into tmp_path, from shipped trained
fixtures whose weights carry over:

- GLM-4.7-Flash from ``tests/fixtures/mtp-models/dsv3-moe``: GLM-4.7-Flash's decoder layer is DeepSeek-V3's
  MLA attention with GLM's MoE, under the same tensor names; dsv3-moe routes as GLM does (sigmoid scores,
  ``noaux_tc``: the correction bias read). One layer is inserted after the target's dense layer 0, an MoE
  layer whose ``o_proj`` and expert ``down_proj``s are zero (it adds nothing to the residual stream, so the
  target's hidden states are dsv3-moe's exactly): vLLM's ``Glm4MoeLiteForCausalLM`` refuses a target with no
  MoE layer ("No Glm4MoE layer found"), as a released one never is. The MTP layer moves to index 2.
  At one draft token τ is then dsv3-moe's prompt for prompt. From the second token on the chains' inputs
  differ (GLM's layer feeds the chain its output before ``shared_head.norm``, DeepSeek-V3's the normed
  one); measured 2026-12-05 at 2 draft tokens, 24 prompts, both τ 2.989 all the same.
- GLM-4.5V from ``tests/fixtures/mtp-models/glm4-moe``: the text keys under ``text_config``, the tensors under
  ``model.language_model.``, a vision tower in a shard of its own that is never read.
vLLM 0.32's CPU build on both: tests/test_mtp_glm_lite_vllm.py.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from tests.test_mtp import MODELS, accept, dropped_fails, trained  # noqa: E402  (one accept call)

VISION = {"depth": 1, "hidden_size": 16, "hidden_act": "silu", "num_heads": 2, "in_channels": 3, "image_size": 28,
          "patch_size": 14, "rms_norm_eps": 1e-05, "spatial_merge_size": 2, "temporal_patch_size": 2,
          "out_hidden_size": 32, "intermediate_size": 32, "model_type": "glm4v_moe_vision"}
VISION_SHARD = "model-00002-of-00003.safetensors"
BAR = ["--no-early-stop", "--min-acceptance-length", "1.8"]


def _load(folder: Path) -> dict:
    from safetensors.torch import load_file

    weights = {}
    for shard in sorted(folder.glob("*.safetensors")):
        weights.update(load_file(str(shard.resolve())))
    return weights


def _save(out: Path, config: dict, shards: dict[str, dict], source: str) -> Path:
    from safetensors.torch import save_file

    out.mkdir(parents=True)
    (out / "config.json").write_text(json.dumps(config, indent=2))
    (out / "generation_config.json").write_text((MODELS / source / "generation_config.json").read_text())
    for name, tensors in shards.items():
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(out / name), metadata={"format": "pt"})
    index = {"metadata": {}, "weight_map": {k: name for name, tensors in shards.items() for k in tensors}}
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    return out


def glm_lite(out: Path, *, drop_mtp: bool = False) -> Path:
    """dsv3-moe as a GLM-4.7-Flash target: a zero-output MoE layer 1 inserted, the MTP layer at index 2."""
    raw = json.loads((MODELS / "dsv3-moe" / "config.json").read_text())
    config = {k: v for k, v in raw.items() if k != "scoring_func"}  # GLM's router is sigmoid whatever it says
    config.update(architectures=["Glm4MoeLiteForCausalLM"], model_type="glm4_moe_lite", num_hidden_layers=2)
    weights = _load(MODELS / "dsv3-moe")
    trunk = {k: v for k, v in weights.items() if not k.startswith("model.layers.1.")}
    mtp = {"model.layers.2." + k[len("model.layers.1."):]: v for k, v in weights.items()
           if k.startswith("model.layers.1.")}
    block = ("self_attn.", "mlp.", "input_layernorm.", "post_attention_layernorm.")
    for k, v in weights.items():  # the MTP layer's MoE decoder block, silenced, as target layer 1
        rest = k[len("model.layers.1."):]
        if k.startswith("model.layers.1.") and rest.startswith(block):
            silent = rest.endswith(("o_proj.weight", "down_proj.weight"))
            trunk["model.layers.1." + rest] = torch.zeros_like(v) if silent else v.clone()
    shards = {"model-00001-of-00002.safetensors": trunk}
    if not drop_mtp:
        shards["model-00002-of-00002.safetensors"] = mtp
    return _save(out, config, shards, "dsv3-moe")


def glm4v_export(out: Path, *, drop_mtp: bool = False) -> Path:
    """The glm4-moe fixture as a GLM-4.5V export: text_config + vision_config, ``model.language_model.*``,
    a vision tower in a shard of its own, the MTP layer in another."""
    raw = json.loads((MODELS / "glm4-moe" / "config.json").read_text())
    text = {k: v for k, v in raw.items() if k != "architectures"}
    text["model_type"] = "glm4v_moe_text"
    config = {"architectures": ["Glm4vMoeForConditionalGeneration"], "model_type": "glm4v_moe", "text_config": text,
              "vision_config": VISION, "tie_word_embeddings": False, "image_token_id": 45, "video_token_id": 46,
              "image_start_token_id": 42, "image_end_token_id": 43, "video_start_token_id": 44,
              "video_end_token_id": 47}
    weights = {("model.language_model." + k[len("model."):] if k.startswith("model.") else k): v
               for k, v in _load(MODELS / "glm4-moe").items()}
    n = raw["num_hidden_layers"]
    is_mtp = lambda k: k.startswith(f"model.language_model.layers.{n}.")  # noqa: E731
    shards = {"model-00001-of-00003.safetensors": {k: v for k, v in weights.items() if not is_mtp(k)},
              VISION_SHARD: {"model.visual.patch_embed.proj.weight": torch.ones(16, 3, 2, 14, 14),
                             "model.visual.merger.proj.weight": torch.ones(32, 32)},
              "model-00003-of-00003.safetensors": {k: v for k, v in weights.items() if is_mtp(k)}}
    if drop_mtp:
        del shards["model-00003-of-00003.safetensors"]
    return _save(out, config, shards, "glm4-moe")


@pytest.fixture(scope="session")
def lite(tmp_path_factory) -> Path:
    return glm_lite(tmp_path_factory.mktemp("glm-lite") / "glm-4.7-flash")


@pytest.fixture(scope="session")
def glm4v(tmp_path_factory) -> Path:
    return glm4v_export(tmp_path_factory.mktemp("glm4v") / "glm-4.5v")


def _per_prompt(result) -> list[float]:
    return [round(p.mean_acceptance_length, 4) for p in result.per_prompt]


def test_both_layouts_are_read_from_the_config_and_the_gpu_path_runs_them(lite, glm4v):
    from draftguard.check.drafter.detect import detect_drafter
    from draftguard.runner.engine_options import drafter_facts, drafting_method
    from draftguard.runner.gpu_job import accept_command
    from draftguard.runner.mtp_weights import mtp_faults, mtp_layout
    from draftguard.settings import Settings

    for folder, name, prefix in ((lite, "glm4_moe_lite", "model.layers.2."),
                                 (glm4v, "glm4v_moe", "model.language_model.layers.2.")):
        raw = json.loads((folder / "config.json").read_text())
        layout = mtp_layout(raw, "config.json")
        assert layout.name == name and layout.block_at_n and layout.recycle_prenorm and layout.embeds_first
        assert layout.prefix.format(n=2) == prefix and mtp_faults(folder) == []
        assert mtp_layout({**raw, "architectures": []}, "config.json").name == name  # by model_type
        assert drafting_method(str(folder)) == "mtp" and drafter_facts(str(folder), method="mtp").block_size == 2
        found = detect_drafter(raw)
        assert found.acceptance_testable and found.acceptance_refusal is None
        cmd = accept_command("Qwen/Qwen3-8B", str(folder), Settings(), python="py", env={})
        assert cmd[cmd.index("--target") + 1] == str(folder)


def test_the_glm_lite_layer_matches_dsv3_moes_trained_tau_prompt_for_prompt(capsys, lite):
    """The target's hidden states are dsv3-moe's and the layer is the same MLA + sigmoid-routed MoE layer, so
    at one draft token the τ is the trained fixture's, prompt for prompt."""
    code, result, err = accept(capsys, str(lite), *BAR)
    assert code == 0, err
    assert result.run["method"] == "mtp" and result.run["block_size"] == 2 and result.diagnosis is None
    assert _per_prompt(result) == trained("dsv3-moe")["per_prompt"]


def test_the_glm_lite_layer_is_built_as_vllm_builds_it_and_feeds_the_chain_its_prenorm_output(lite):
    """vLLM's Glm4MoeLiteDecoderLayer: MLA attention, MoE at N by first_k_dense_replace / moe_layer_freq
    (transformers' class reads ``mlp_layer_types``, which has no entry for N), sigmoid routing with the
    correction bias; glm4_moe_lite_mtp.py returns the output before ``shared_head.norm``."""
    from draftguard.runner.mtp_dsv3 import VllmRouter
    from draftguard.runner.mtp_glm_lite import glm4_lite_block
    from draftguard.runner.mtp_model import load_mtp, load_mtp_target

    target, _ = load_mtp_target(str(lite))
    assert type(target).__name__ == "Glm4MoeLiteForCausalLM"
    head = load_mtp(str(lite), target)
    assert type(head.block).__name__ == "Glm4MoeLiteDecoderLayer" and head.block.self_attn.kv_lora_rank == 512
    gate = head.block.mlp.gate
    assert isinstance(gate, VllmRouter) and gate.scoring == "sigmoid" and gate.biased
    assert gate.e_score_correction_bias.abs().sum() > 0
    hidden, embeds, positions = torch.randn(1, 5, 32), torch.randn(1, 5, 32), torch.arange(5)[None]
    with torch.no_grad():
        logits, out = head(hidden, embeds, positions)
        assert torch.allclose(logits, head._shared["head"](head.final_norm(out)))
        assert not torch.allclose(out, head.final_norm(out), atol=1e-3)
    text = target.config
    for changes, moe in (({}, True), ({"moe_layer_freq": 2}, True), ({"moe_layer_freq": 3}, False),
                         ({"first_k_dense_replace": 2}, True), ({"first_k_dense_replace": 3}, False)):
        config = type(text)(**{**text.to_dict(), **changes})
        config.mlp_layer_types = ["dense", "sparse"]  # the target's two layers only
        block = glm4_lite_block(config, type(target.model.layers[0]), 2)
        assert hasattr(block.mlp, "experts") is moe, changes
        assert config.mlp_layer_types == ["dense", "sparse"]  # a copy is changed, not the target's config


def test_a_dropped_glm_lite_layer_fails_with_mtp_weights_named(capsys, tmp_path):
    reason = dropped_fails(capsys, glm_lite(tmp_path / "dropped", drop_mtp=True))
    assert "the weights hold no tensor under `model.layers.2.`: dropped at save" in reason


def test_the_glm4v_export_runs_and_measures_the_text_fixtures_tau_prompt_for_prompt(capsys, glm4v):
    code, result, err = accept(capsys, str(glm4v), *BAR)
    assert code == 0, err
    assert result.run["method"] == "mtp" and result.run["block_size"] == 2 and result.diagnosis is None
    assert _per_prompt(result) == trained("glm4-moe")["per_prompt"]
    # two draft tokens: the second chain step (fed the pre-norm output) too, against the text fixture
    runs = [accept(capsys, str(f), *BAR, "--num-speculative-tokens", "2", "--num-prompts", "8")
            for f in (MODELS / "glm4-moe", glm4v)]
    assert [r[0] for r in runs] == [0, 0]
    text, multimodal = (_per_prompt(r[1]) for r in runs)
    assert multimodal == text and sum(text) / len(text) > 2.9


def test_the_glm4v_export_builds_the_text_model_only_and_never_reads_the_vision_tower(tmp_path):
    """The target is GLM-4.5's text class (no vision module), its logits and the MTP layer's equal the text
    fixture's bit for bit, and the vision shard is never opened: it holds garbage here, and is gone
    before the MTP layer loads."""
    from draftguard.runner.mtp_model import load_mtp, load_mtp_target

    folder = glm4v_export(tmp_path / "export")
    (folder / VISION_SHARD).write_bytes(b"not a safetensors file")
    ids = torch.tensor([[40, 3, 6, 9, 12, 15, 18]])
    outs = []
    for name in (MODELS / "glm4-moe", folder):
        target, _ = load_mtp_target(str(name))
        assert type(target).__name__ == "Glm4MoeForCausalLM"
        assert not [n for n, _ in target.named_modules() if "visual" in n]
        if name == folder:
            (folder / VISION_SHARD).unlink()
        head = load_mtp(str(name), target)
        assert head.spec.faults == [] and head.spec.key == ("text_config." if name == folder else "") + \
            "num_nextn_predict_layers"
        with torch.no_grad():
            out = target(ids, output_hidden_states=True)
            logits, _ = head(out.hidden_states[-1], target.get_input_embeddings()(ids), torch.arange(7)[None])
        outs.append((out.logits, logits))
    assert torch.equal(outs[0][0], outs[1][0]) and torch.equal(outs[0][1], outs[1][1])


def test_the_glm4v_export_with_its_mtp_layer_dropped_fails_with_mtp_weights(capsys, tmp_path):
    reason = dropped_fails(capsys, glm4v_export(tmp_path / "dropped", drop_mtp=True))
    assert "config.json declares 1 MTP layer(s) (`text_config.num_nextn_predict_layers`)" in reason
    assert "the weights hold no tensor under `model.language_model.layers.2.`: dropped at save" in reason


def test_the_glm4v_layers_own_copies_are_compared_with_the_text_models_tensors(tmp_path):
    """The export's MTP layer keeps copies of the embeddings and head; copies that differ from
    ``model.language_model.embed_tokens`` / ``lm_head`` are a fault, as in GLM-4.5's text checkpoint."""
    from safetensors.torch import load_file, save_file

    from draftguard.runner.mtp_weights import mtp_faults

    folder = glm4v_export(tmp_path / "own")
    shard = folder / "model-00003-of-00003.safetensors"
    tensors = load_file(str(shard))
    tensors["model.language_model.layers.2.embed_tokens.weight"] += 1
    save_file(tensors, str(shard), metadata={"format": "pt"})
    faults = mtp_faults(folder)
    assert len(faults) == 1 and ("`model.language_model.layers.2.embed_tokens.weight` differs from the target's "
                                 "`model.language_model.embed_tokens.weight`") in faults[0]


def test_the_light_check_flags_both_dropped_layers_without_a_run(lite, glm4v, tmp_path):
    """`draftguard check` (no torch): DG404 on each dropped copy, no error on the healthy targets."""
    from draftguard.check.repo import check_repo
    from draftguard.snapshot import load_snapshot

    def errors(folder: Path) -> set[str]:
        return {f.rule for f in check_repo(load_snapshot(str(folder)), {}) if f.severity.name == "ERROR"}

    assert errors(lite) == errors(glm4v) == set()
    assert errors(glm_lite(tmp_path / "lite", drop_mtp=True)) == {"DG404"}
    assert errors(glm4v_export(tmp_path / "glm4v", drop_mtp=True)) == {"DG404"}


def test_a_glm4v_config_without_text_config_is_bad_input_naming_file_and_key(capsys, tmp_path):
    folder = glm4v_export(tmp_path / "flat")
    raw = json.loads((folder / "config.json").read_text())
    flat = {**raw.pop("text_config"), "architectures": raw["architectures"], "model_type": "glm4v_moe"}
    (folder / "config.json").write_text(json.dumps(flat))
    code, result, err = accept(capsys, str(folder), "--num-prompts", "1")
    assert code == 2 and result is None and len(err.strip().splitlines()) == 1, err
    assert f"{folder / 'config.json'}: " in err and "`text_config`" in err
