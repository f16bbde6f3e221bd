"""EAGLE-3 heads whose decoder layer is DeepSeek MLA attention (vLLM 0.32's ``Eagle3DeepseekV2ForCausalLM``
/ ``Eagle3DeepseekV3ForCausalLM``, deepseek_eagle3.py; TorchSpec's and SpecForge's Kimi-K2 heads): the
reference runs them (it refused them, exit 2 "the reference does not build MLA"). The head is trained at
test time for the shipped DeepSeek-V3 target ``mtp-models/dsv3`` (tests/fixtures/make_eagle3_mla.py, no
weights shipped); its faulty copies are judged as vLLM would run them."""

from __future__ import annotations

import json
import shutil
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from draftguard.cli import main
from draftguard.runner.result import AcceptanceResult

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
TARGET = FIXTURES / "mtp-models" / "dsv3"
PROMPTS = FIXTURES / "models" / "prompts.jsonl"
REAL = ROOT / "tests" / "data" / "real-drafters"
sys.path.insert(0, str(FIXTURES))


@pytest.fixture(scope="session")
def mla_head(tmp_path_factory) -> Path:
    """The healthy MLA head, trained for dsv3 (about 20 s on one core; deterministic)."""
    from make_eagle3_mla import build

    return build(tmp_path_factory.mktemp("eagle3-mla") / "healthy")


def accept(capsys, drafter: Path, *args: str) -> tuple[int, AcceptanceResult | None, str]:
    code = main(["accept", "--target", str(TARGET), "--drafter", str(drafter), "--prompts", str(PROMPTS),
                 "--max-new-tokens", "32", "--quiet", "--format", "json", *args])
    out, err = capsys.readouterr()
    return code, (AcceptanceResult.from_json(out, "stdout") if out.strip() else None), err


DROP = "<drop>"


def variant(head: Path, folder: Path, config: dict | None = None, state: dict | None = None) -> Path:
    """A copy of the head with its config keys changed (DROP: removed) or its tensors replaced."""
    from safetensors.torch import save_file

    shutil.copytree(head, folder)
    if config:
        raw = json.loads((head / "config.json").read_text())
        raw = {k: v for k, v in {**raw, **config}.items() if v != DROP}
        (folder / "config.json").write_text(json.dumps(raw))
    if state is not None:
        save_file(state, str(folder / "model.safetensors"))
    return folder


def weights(head: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(head / "model.safetensors"))


def test_the_healthy_mla_head_passes_well_above_one(capsys, mla_head):
    """τ 3.69 at K = 3 on the 24 prompts (4.0 the most there is); the target's greedy tokens unchanged."""
    code, result, err = accept(capsys, mla_head, "--no-early-stop", "--min-acceptance-length", "3.0")
    assert code == 0 and result.verdict.status == "pass", err
    assert 3.3 < result.mean_acceptance_length <= 4.0, result.mean_acceptance_length
    assert not result.run.get("notes"), result.run["notes"]


def test_a_head_without_d2t_is_run_with_the_engines_zero_map_and_fails(capsys, mla_head, tmp_path):
    """As vLLM runs it (its ``draft_id_to_target_id`` stays zeros): the same head with its draft vocabulary
    reversed and ``d2t`` dropped (make_eagle3_models.permuted_head) drafts target id i for draft id i."""
    from make_eagle3_models import permuted_head

    state = {k: v for k, v in permuted_head(weights(mla_head)).items() if k != "d2t"}
    code, result, err = accept(capsys, variant(mla_head, tmp_path / "no-d2t", state=state),
                               "--min-acceptance-length", "3.0", "--num-prompts", "6")
    assert code == 1 and result.verdict.status == "fail", err
    assert result.mean_acceptance_length < 1.5, result.mean_acceptance_length
    assert any("with the map at zeros" in n for n in result.run["notes"]), result.run["notes"]


def test_aux_id_0_on_a_deepseek_target_is_refused_as_vllm_fails_on_it(capsys, mla_head, tmp_path):
    """vLLM 0.32's DeepseekV2Model captures aux state k as hidden + residual before layer k, and the residual is
    None before layer 0: measured on this head with ids [0], "unsupported operand type(s) for +: 'Tensor' and
    'NoneType'" at the first step. The reference ran it (τ 2.41); it refuses it now, naming the key."""
    code, result, err = accept(capsys, variant(mla_head, tmp_path / "ids-0", {"eagle_aux_hidden_state_layer_ids": [0]}))
    assert code == 2 and result is None, err
    assert "`eagle_aux_hidden_state_layer_ids` [0]" in err and "NoneType" in err and err.count("\n") == 1, err


def test_a_missing_latent_norm_runs_at_ones_with_a_note(capsys, mla_head, tmp_path):
    """vLLM's loader checks no set of loaded names: a head without ``kv_a_layernorm`` runs with it at ones."""
    state = {k: v for k, v in weights(mla_head).items() if k != "midlayer.self_attn.kv_a_layernorm.weight"}
    code, result, err = accept(capsys, variant(mla_head, tmp_path / "no-kv-norm", state=state), "--num-prompts", "4")
    assert result is not None, err
    assert any("kv_a_layernorm" in n and "at ones" in n for n in result.run["notes"]), result.run["notes"]


@pytest.mark.parametrize("name, config, extra", [
    # vLLM sizes fc for 3 aux states without num_aux_hidden_states (its loader asserts the shape)
    ("fc-for-3", {"num_aux_hidden_states": DROP}, {}),
    # its mapper renames kv_a_proj_with_mqa to fused_qkv_a_proj, which MLA without a q LoRA lacks (measured:
    # "There is no module or parameter named 'layers.0.self_attn.fused_qkv_a_proj' in DeepseekV2Eagle3Model")
    ("no-q-lora", {"q_lora_rank": None}, {}),
    # deepseek_eagle3 builds no input_norm and drops no tensor: "There is no module or parameter named"
    ("input-norm", {"norm_before_fc": True}, {"input_norm.weight": torch.ones(32)}),
])
def test_what_vllm_refuses_is_refused_in_one_line(capsys, mla_head, tmp_path, name, config, extra):
    head = variant(mla_head, tmp_path / name, config, {**weights(mla_head), **extra})
    code, result, err = accept(capsys, head)
    assert code == 2 and result is None, (name, err)
    assert "Traceback" not in err and err.count("\n") == 1, err
    assert {"fc-for-3": "fc", "input-norm": "input_norm", "no-q-lora": "`q_lora_rank`"}[name] in err, err


def test_a_llama_head_renamed_deepseek_does_not_load_as_mla(capsys, tmp_path):
    """The shipped LLaMA head with ``architectures`` DeepseekV3ForCausalLM: vLLM builds the MLA layer and
    refuses its q/k/v weights; so does the reference (before: refused as "MLA is not built")."""
    head = tmp_path / "renamed"
    shutil.copytree(FIXTURES / "vllm-models" / "eagle3", head)
    raw = json.loads((head / "config.json").read_text())
    (head / "config.json").write_text(json.dumps({**raw, "architectures": ["DeepseekV3ForCausalLM"]}))
    code = main(["accept", "--target", str(FIXTURES / "vllm-models" / "target"), "--drafter", str(head), "--prompts",
                 str(PROMPTS), "--max-new-tokens", "8", "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "EAGLE-3 weights" in err and err.count("\n") == 1, err


def test_torchspecs_published_kimi_mla_config_is_read_as_vllm_reads_it():
    """Yarn is rewritten deepseek_yarn (attention_factor unset); the softmax scale is (128 + 64)^-0.5 times
    yarn_get_mscale(64, mscale_all_dim 1)^2; cos/sin times mscale / mscale_all_dim (1 here); fc over 3 states."""
    import math

    from draftguard.runner.eagle3_model import read_eagle3_spec

    spec = read_eagle3_spec(REAL / "torchspec-kimi-k2.5-eagle3-mla", 61)
    d = spec.mla
    assert spec.layer_kind == "mla" and spec.hidden_size == 7168 and spec.fc_inputs == 3
    assert (d.q_lora_rank, d.kv_lora_rank, d.qk_nope_head_dim, d.qk_rope_head_dim, d.v_head_dim) == (1536, 512, 128, 64, 128)
    assert d.inv_freq.shape == (32,) and d.rope_factor == pytest.approx(1.0)
    assert d.scaling == pytest.approx(192 ** -0.5 * (0.1 * math.log(64) + 1) ** 2)
    assert not spec.norm_before_fc


def test_a_head_of_model_type_deepseek_v3_is_refused_as_vllm_cannot_start_it(capsys, mla_head, tmp_path):
    """vLLM 0.32 rewrites a draft of model_type deepseek_v3 into DeepSeekMTPModel whatever the method, and
    then fails: "Model architectures ['Eagle3DeepSeekMTPModel'] are not supported" (measured on this head
    with model_type deepseek_v3). TorchSpec's Qwen3-8B MLA head says deepseek_v3; its Kimi head kimi_k2 runs."""
    from draftguard.check.drafter.detect import detect_drafter
    from draftguard.runner.eagle3_model import read_eagle3_spec
    from draftguard.snapshot import BadInput

    with pytest.raises(BadInput) as caught:
        read_eagle3_spec(REAL / "torchspec-qwen3-8b-eagle3-mla", 36)
    assert caught.value.key == "model_type" and "DeepSeekMTPModel" in str(caught.value)
    refusal = detect_drafter(json.loads((REAL / "torchspec-qwen3-8b-eagle3-mla" / "config.json").read_text()))
    assert "DeepSeekMTPModel" in refusal.acceptance_refusal
    code, result, err = accept(capsys, variant(mla_head, tmp_path / "v3", {"model_type": "deepseek_v3"}))
    assert code == 2 and result is None and "`model_type`" in err and err.count("\n") == 1, err


@pytest.mark.parametrize("q_lora_rank", [None, 16])
@pytest.mark.parametrize("rope", [{"rope_type": "default", "rope_theta": 10000.0},
                                  {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "beta_fast": 32,
                                   "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0,
                                   "original_max_position_embeddings": 32}])
def test_mla_attention_equals_transformers_deepseek_v3_attention(q_lora_rank, rope):
    """At an input as wide as the output, the head's MLA is transformers' DeepseekV3Attention (interleaved
    RoPE, yarn's mscale on the softmax scale and on cos/sin) on the same weights."""
    from transformers import DeepseekV3Config
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3Attention, DeepseekV3RotaryEmbedding

    from draftguard.runner.eagle3_mla import MlaAttention, mla_dims

    raw = {"hidden_size": 32, "num_attention_heads": 2, "num_key_value_heads": 2, "q_lora_rank": q_lora_rank, "kv_lora_rank": 16,
           "qk_rope_head_dim": 8, "qk_nope_head_dim": 8, "v_head_dim": 8, "rope_parameters": rope,
           "max_position_embeddings": 128, "rope_interleave": True, "rms_norm_eps": 1e-6}
    torch.manual_seed(0)
    dims = replace(mla_dims({**raw, "q_lora_rank": 16}, Path("config.json"), 128), q_lora_rank=q_lora_rank)
    ours = MlaAttention(dims, 32, 32, 1e-6)
    for p in ours.parameters():
        p.data.normal_(0, 0.3)
    config = DeepseekV3Config(**{k: v for k, v in raw.items() if k != "rope_parameters"}, rope_parameters=dict(rope),
                              attn_implementation="eager")
    theirs = DeepseekV3Attention(config, 0)
    assert not theirs.load_state_dict(ours.state_dict(), strict=False).missing_keys
    x, positions = torch.randn(1, 12, 32), torch.arange(3, 15)[None]
    cos, sin = DeepseekV3RotaryEmbedding(config)(x, positions)
    mask = torch.full((12, 12), float("-inf")).triu(1)[None, None]
    expected = theirs(x, (cos, sin), mask)[0]
    assert torch.allclose(ours(x, positions), expected, atol=1e-5), (ours(x, positions) - expected).abs().max()


def test_the_light_check_does_not_read_head_dim_against_an_mla_q_proj(capsys, mla_head, tmp_path):
    """MLA without a q LoRA has a q_proj of heads x (nope + rope) rows and no k/v_proj: DG123 called it a
    mismatch (head_dim derived as hidden / heads = 16, so 32 rows expected against 144)."""
    state = {k: v for k, v in weights(mla_head).items() if ".q_a_" not in k and ".q_b_" not in k}
    state["midlayer.self_attn.q_proj.weight"] = torch.zeros(2 * 72, 64)
    head = variant(mla_head, tmp_path / "q-proj", {"q_lora_rank": None}, state)
    main(["check", str(head), "--target", str(TARGET), "--format", "json"])
    out = capsys.readouterr().out
    assert "DG123" not in out and "layers.0" not in out, out[-2000:]
