"""`draftguard accept --method mtp` on Qwen3.5/3.6 as they are released: multimodal exports
(``Qwen3_5ForConditionalGeneration``, ``Qwen3_5MoeForConditionalGeneration``) whose config.json nests the
text model's keys (``mtp_num_hidden_layers`` among them) under ``text_config`` beside a ``vision_config``,
and whose weights are ``model.language_model.*``, ``model.visual.*``, ``lm_head.*`` and ``mtp.*``. vLLM
0.32 serves them with ``method: mtp`` (``Qwen3_5MTP`` / ``Qwen3_5MoeMTP``); the reference must not refuse them.

The exports are built here, into tmp_path, from the shipped text fixtures (tests/fixtures/mtp-models):
``qwen35`` (dense) and ``qwen3-next``, whose MoE decoder layer (router, 2 experts, gated shared expert,
gated attention, zero-centred norms) is the one Qwen3.5-MoE has, renamed and wrapped as the release
is. The MoE export stores its experts one by one (as transformers 5 saves them: the REAP export in
tests/data) or fused (``experts.gate_up_proj`` [E, 2I, H], ``experts.down_proj`` [E, H, I], as the
released Qwen3.5/3.6-MoE checkpoints store them and vLLM's first Qwen3.5-MoE loader read them). No
weights are shipped for this file.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from tests.test_mtp import MODELS, ROOT, accept, trained  # noqa: E402  (one accept call)

REAL = ROOT / "tests" / "data" / "real-configs"
RELEASED = ["qwen--qwen3.5-9b", "qwen--qwen3.5-27b", "qwen--qwen3.5-35b-a3b", "qwen--qwen3.5-122b-a10b",
            "qwen--qwen3.5-397b-a17b", "qwen--qwen3.6-35b-a3b", "qwen3.5-0.8b"]
BRYCE = ROOT / "tests" / "data" / "real-repos" / "bryce-hoehn--qwen3.5-18b-reap-a3b-coding"
_EXPERT = re.compile(r"^(.*\.experts)\.(\d+)\.(gate_proj|up_proj|down_proj)\.weight$")
# A vision tower of the release's shape, tiny (Qwen/Qwen3.5-9B's keys, tests/data/real-configs).
VISION = {"deepstack_visual_indexes": [], "depth": 1, "hidden_act": "gelu_pytorch_tanh", "hidden_size": 16,
          "in_channels": 3, "initializer_range": 0.02, "intermediate_size": 32, "model_type": "qwen3_5",
          "num_heads": 2, "num_position_embeddings": 16, "out_hidden_size": 64, "patch_size": 2,
          "spatial_merge_size": 2, "temporal_patch_size": 2}


def _fuse(weights: dict) -> dict:
    """Per-expert tensors stacked as the released MoE checkpoints hold them (gate rows, then up rows)."""
    out, parts = {}, {}
    for k, v in weights.items():
        m = _EXPERT.match(k)
        if m is None:
            out[k] = v
        else:
            parts.setdefault(m.group(1), {}).setdefault(int(m.group(2)), {})[m.group(3)] = v
    for stem, ex in parts.items():
        out[f"{stem}.gate_up_proj"] = torch.stack([torch.cat([ex[e]["gate_proj"], ex[e]["up_proj"]])
                                                   for e in sorted(ex)])
        out[f"{stem}.down_proj"] = torch.stack([ex[e]["down_proj"] for e in sorted(ex)])
    return out


def export(out: Path, source: str = "qwen35", *, fused: bool = False, drop_mtp: bool = False,
           flat: bool = False) -> Path:
    """The shipped text fixture ``source`` as a ConditionalGeneration export in ``out``: config wrapped
    (text_config + vision_config), tensors renamed, a vision tower in a shard of its own, the MTP layer
    in another (left out with ``drop_mtp``: the index then names no ``mtp.`` tensor). ``flat``: the text
    keys at the top level under the multimodal class, as the REAP export in tests/data writes them."""
    from safetensors.torch import load_file, save_file

    raw = json.loads((MODELS / source / "config.json").read_text())
    text = {k: v for k, v in raw.items() if k != "architectures"}
    moe = source == "qwen3-next"
    if moe:  # Qwen3-Next's keys as Qwen3.5-MoE's text config names them (its gate is always on)
        for k in ("decoder_sparse_step", "norm_topk_prob", "num_nextn_predict_layers", "partial_rotary_factor"):
            text.pop(k)
        text.update(model_type="qwen3_5_moe_text", attn_output_gate=True, mtp_num_hidden_layers=1,
                    mtp_use_dedicated_embeddings=False)
    config = {"architectures": ["Qwen3_5MoeForConditionalGeneration" if moe else "Qwen3_5ForConditionalGeneration"],
              "model_type": "qwen3_5_moe" if moe else "qwen3_5", "text_config": text, "vision_config": VISION,
              "tie_word_embeddings": False, "image_token_id": 45, "video_token_id": 46,
              "vision_start_token_id": 43, "vision_end_token_id": 44}
    if flat:
        config = {**text, "architectures": config["architectures"]}
    weights = {}
    for shard in sorted((MODELS / source).glob("*.safetensors")):
        weights.update(load_file(str(shard)))
    weights = {("model.language_model." + k[len("model."):] if k.startswith("model.") else k): v
               for k, v in weights.items()}
    if fused:
        weights = _fuse(weights)
    shards = {"model-00001-of-00003.safetensors": {k: v for k, v in weights.items() if not k.startswith("mtp.")},
              "model-00002-of-00003.safetensors": {"model.visual.patch_embed.proj.weight": torch.ones(16, 3, 2, 2, 2),
                                                   "model.visual.merger.linear_fc2.weight": torch.ones(64, 64)},
              "model-00003-of-00003.safetensors": {k: v for k, v in weights.items() if k.startswith("mtp.")}}
    if drop_mtp:
        del shards["model-00003-of-00003.safetensors"]
    out.mkdir(parents=True)
    (out / "config.json").write_text(json.dumps(config, indent=2))
    (out / "generation_config.json").write_text((MODELS / source / "generation_config.json").read_text())
    for name, tensors in shards.items():
        save_file(tensors, str(out / name), metadata={"format": "pt"})
    index = {"metadata": {}, "weight_map": {k: name for name, tensors in shards.items() for k in tensors}}
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    return out


def _accept(capsys, folder: Path, *args: str):
    # tests.test_mtp.accept takes a folder under MODELS; an absolute path joins as itself
    return accept(capsys, str(folder), "--no-early-stop", "--min-acceptance-length", "1.8", *args)


@pytest.mark.parametrize("source, fused, flat", [("qwen35", False, False), ("qwen3-next", False, False),
                                                 ("qwen3-next", True, False), ("qwen3-next", False, True)],
                         ids=["dense", "moe-per-expert", "moe-fused", "moe-flat-config"])
def test_the_export_runs_and_measures_the_text_fixtures_tau_prompt_for_prompt(capsys, tmp_path, source, fused, flat):
    folder = export(tmp_path / "export", source, fused=fused, flat=flat)
    code, result, err = _accept(capsys, folder)
    assert code == 0, err
    assert result.run["method"] == "mtp" and result.run["block_size"] == 2 and result.diagnosis is None
    assert [round(p.mean_acceptance_length, 4) for p in result.per_prompt] == trained(source)["per_prompt"]
    # two draft tokens: the second chain step too, against the text fixture run the same way
    runs = [_accept(capsys, f, "--num-speculative-tokens", "2", "--num-prompts", "8") for f in (MODELS / source, folder)]
    assert [r[0] for r in runs] == [0, 0]
    text, multimodal = ([p.mean_acceptance_length for p in r[1].per_prompt] for r in runs)
    assert multimodal == text and sum(text) / len(text) > 2.9


@pytest.mark.parametrize("source, fused", [("qwen35", False), ("qwen3-next", True)], ids=["dense", "moe-fused"])
def test_the_export_builds_the_text_model_only_and_the_same_numbers_bit_for_bit(tmp_path, source, fused):
    """The target is the text class (no vision tower built), and the target's and the MTP layer's logits
    equal the text fixture's exactly; the MTP layer's tensors are read from the shards that hold them
    only (the vision shard removed after the target loaded: the layer still loads)."""
    from draftguard.runner.mtp_model import load_mtp, load_mtp_target

    folder = export(tmp_path / "export", source, fused=fused)
    ids = torch.tensor([[40, 3, 6, 9, 12, 15, 18]])
    outs = []
    for name in (MODELS / source, folder):
        target, _ = load_mtp_target(str(name))
        if name == folder:
            assert type(target).__name__ == ("Qwen3_5MoeForCausalLM" if fused else "Qwen3_5ForCausalLM")
            assert not [n for n, _ in target.named_modules() if "visual" in n]
            (folder / "model-00002-of-00003.safetensors").unlink()
        head = load_mtp(str(name), target)
        assert head.spec.faults == []
        assert (head.spec.key == "text_config.mtp_num_hidden_layers") == (name == folder)
        with torch.no_grad():
            out = target(ids, output_hidden_states=True)
            hidden = out.hidden_states[-1]
            logits, _ = head(hidden, target.get_input_embeddings()(ids), torch.arange(ids.shape[1])[None])
        outs.append((out.logits, logits))
    assert torch.equal(outs[0][0], outs[1][0]) and torch.equal(outs[0][1], outs[1][1])


def test_the_export_with_its_mtp_layer_dropped_fails_with_mtp_weights(capsys, tmp_path):
    folder = export(tmp_path / "dropped", drop_mtp=True)
    code, result, err = _accept(capsys, folder)
    assert code == 1, err
    assert result.verdict.status == "fail" and result.diagnosis["cause"] == "mtp-weights"
    assert "config.json declares 1 MTP layer(s) (`text_config.mtp_num_hidden_layers`)" in result.diagnosis["reason"]
    assert "the weights hold no tensor under `mtp.`: dropped at save" in result.diagnosis["reason"]
    assert [round(p.mean_acceptance_length, 4) for p in result.per_prompt] == trained("qwen35-mtp-dropped")["per_prompt"]


def test_fused_experts_left_fp8_are_named_by_the_light_check(tmp_path):
    """A fused expert stack has no ``.weight`` suffix; stored float8 with no quantization_config declared,
    the check names it as it names any other MTP weight left quantized."""
    from safetensors.torch import load_file, save_file

    from draftguard.runner.mtp_weights import mtp_faults

    folder = export(tmp_path / "fp8", "qwen3-next", fused=True)
    assert mtp_faults(folder) == []
    shard = folder / "model-00003-of-00003.safetensors"
    tensors = load_file(str(shard))
    for k in ("mtp.layers.0.mlp.experts.gate_up_proj", "mtp.layers.0.mlp.experts.down_proj"):
        tensors[k] = tensors[k].to(torch.float8_e4m3fn)
    save_file(tensors, str(shard), metadata={"format": "pt"})
    faults = mtp_faults(folder)
    assert len(faults) == 2 and "`mtp.layers.0.mlp.experts.down_proj` is stored F8_E4M3" in faults[0]
    assert "`mtp.layers.0.mlp.experts.gate_up_proj` is stored F8_E4M3" in faults[1]


@pytest.mark.parametrize("name", RELEASED + ["bryce"])
def test_released_configs_are_read_as_the_qwen35_layout_and_run(name):
    """Published config.json files of Qwen/Qwen3.5-*, Qwen3.6-35B-A3B and the REAP export (whose keys are
    flat, its class the MoE ConditionalGeneration): the MTP layer is found under text_config, the
    layout is Qwen3.5's, K is 1 layer + 1, and the GPU path runs them (no refusal sentence)."""
    from draftguard.check.drafter.detect import detect_drafter
    from draftguard.check.repo.checkpoint import mtp_declared
    from draftguard.runner.engine_options import drafter_facts, drafting_method
    from draftguard.runner.mtp_weights import mtp_layout

    folder = BRYCE if name == "bryce" else REAL / name
    raw = json.loads((folder / "config.json").read_text())
    assert raw["architectures"][0] in ("Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration")
    assert mtp_declared(raw) == (("mtp_num_hidden_layers", 1) if name == "bryce"
                                 else ("text_config.mtp_num_hidden_layers", 1))
    assert mtp_layout(raw, "config.json").name == "qwen3_5"
    assert drafting_method(str(folder)) == "mtp"
    assert drafter_facts(str(folder), method="mtp").block_size == 2
    found = detect_drafter(raw)
    assert found.acceptance_testable and found.acceptance_refusal is None


def test_a_multimodal_class_of_another_family_is_still_refused():
    """GLM-4.5V's class (Glm4vMoeForConditionalGeneration) was the example here; the reference builds it now
    (tests/test_mtp_glm_lite.py). ERNIE-4.5-VL's is one vLLM 0.32's ``method: mtp`` maps to no MTP model."""
    from draftguard.runner.mtp_weights import mtp_layout
    from draftguard.snapshot import BadInput

    raw = {"architectures": ["Ernie4_5_VLMoeForConditionalGeneration"], "model_type": "ernie4_5_moe_vl",
           "text_config": {"num_nextn_predict_layers": 1}}
    with pytest.raises(BadInput, match="Qwen3_5MoeForConditionalGeneration"):
        mtp_layout(raw, "config.json")
