"""Step-3.5/3.7's MTP layer (issue 43): ``Step3p5ForCausalLM``, ``model.layers.{N}.*`` with its own
``shared_head.head``, zero-centred norms, the embedding not zeroed at position 0, a Step3p5 decoder layer
at N with its own rotary, under the reference. The tiny target and its trained MTP layer are built at test
time into tmp_path (tests/fixtures/make_mtp_step.py; nothing shipped). vLLM 0.32's CPU build on the same
folders: tests/test_mtp_step_vllm.py.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from draftguard.cli import main  # noqa: E402
from draftguard.runner.result import AcceptanceResult  # noqa: E402
from tests.test_mtp import PROMPTS  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent / "fixtures"))
BAR = "1.5"  # the random target's continuations are harder to draft than the trained fixtures' (bar 1.8)
STEP_REAL = Path(__file__).resolve().parent / "data" / "real-configs" / "stepfun-ai--step-3.7-flash"


@pytest.fixture(scope="session")
def step_folders() -> dict[str, Path]:
    import built_once
    import make_mtp_step

    return built_once.once("step", make_mtp_step.build)


def run(capsys, target: Path, *args: str) -> tuple[int, AcceptanceResult | None, str]:
    code = main(["accept", "--target", str(target), "--method", "mtp", "--prompts", str(PROMPTS),
                 "--max-new-tokens", "32", "--quiet", "--format", "json", "--no-early-stop",
                 "--min-acceptance-length", BAR, *args])
    out, err = capsys.readouterr()
    return code, (AcceptanceResult.from_json(out, "stdout") if out.strip() else None), err


def test_the_step_layout_is_read_from_the_architecture_and_the_model_type():
    from draftguard.check.drafter.detect import MTP_REFERENCE_ARCHITECTURES, detect_drafter
    from draftguard.runner.mtp_weights import mtp_layout
    from make_mtp_step import step_config

    raw = step_config()
    layout = mtp_layout(raw, "config.json")
    assert layout.name == "step3p5" and layout.own_head == "shared_head.head" and layout.recycle_prenorm
    assert not layout.zero_first and layout.gemma_norms and layout.embeds_first
    assert layout.prefix.format(n=raw["num_hidden_layers"]) == "model.layers.2."
    assert mtp_layout({**raw, "architectures": []}, "config.json").name == "step3p5"  # by model_type
    nested = {"architectures": ["Step3p7ForConditionalGeneration"], "model_type": "step3p7",
              "text_config": {**raw, "model_type": "step3p5"}}
    assert mtp_layout(nested, "config.json").name == "step3p5"
    for arch in ("Step3p5ForCausalLM", "Step3p7ForConditionalGeneration"):
        assert arch in MTP_REFERENCE_ARCHITECTURES
    assert detect_drafter(raw).acceptance_testable


def test_the_gpu_job_runs_a_step_model_as_its_own_target(step_folders):
    """Before: detection called a Step-3.5 MTP model not acceptance-testable and the GPU path skipped it."""
    from draftguard.runner.gpu_job import accept_command
    from draftguard.settings import Settings

    folder = str(step_folders["healthy"])
    cmd = accept_command("Qwen/Qwen3-8B", folder, Settings(), python="py", env={})
    assert cmd[cmd.index("--target") + 1] == folder and cmd[cmd.index("--drafter") + 1] == folder


def test_healthy_step_mtp_layer_passes_well_above_1(capsys, step_folders):
    """Before: exit 2, "the reference builds MTP layers of the mimo, deepseek_v3, ... layout". Measured
    2026-12-05: τ 1.675 (K = 1, 24 prompts, 32 new tokens; K = 2: 2.123 since 2026-12-06, when drafts past a
    stop token count as vLLM counts them; 2.074 before); the dropped copy 1.000."""
    code, result, err = run(capsys, step_folders["healthy"])
    assert code == 0, err
    assert result.run["method"] == "mtp" and result.run["block_size"] == 2 and result.diagnosis is None
    assert result.mean_acceptance_length > 1.55


def test_a_dropped_step_mtp_layer_fails_with_mtp_weights_named(capsys, step_folders):
    code, result, err = run(capsys, step_folders["dropped"])
    assert code == 1, err
    assert result.diagnosis["cause"] == "mtp-weights" and result.mean_acceptance_length < 1.25
    assert "the weights hold no tensor under `model.layers.2.`: dropped at save" in result.diagnosis["reason"]


def test_a_missing_own_head_is_a_named_fault(step_folders, tmp_path):
    """vLLM's Step3.5 proposer shares no lm_head: a layer without ``shared_head.head`` has no head at all."""
    from safetensors.torch import load_file, save_file

    from draftguard.runner.mtp_weights import mtp_faults

    folder = tmp_path / "no-head"
    folder.mkdir()
    (folder / "config.json").write_text((step_folders["healthy"] / "config.json").read_text())
    weights = load_file(str(step_folders["healthy"] / "model.safetensors"))
    del weights["model.layers.2.shared_head.head.weight"]
    save_file(weights, str(folder / "model.safetensors"))
    assert mtp_faults(step_folders["healthy"]) == []
    assert mtp_faults(folder) == ["the weights lack `model.layers.2.shared_head.head.weight` (the reference runs "
                                  "them as zeros)"]


def test_the_head_is_vllms_step_layer(step_folders):
    """The logits read the layer's own head of the normed output; the next step reads the output before
    ``shared_head.norm``; no zeroing at position 0; the layer rotates with entry N of the per-layer lists
    (theta 500000, half the head dim) where the target's layers use 10000 over the whole head."""
    from safetensors.torch import load_file

    from draftguard.runner.mtp_model import load_mtp, load_mtp_target

    folder = str(step_folders["healthy"])
    target, _ = load_mtp_target(folder)
    head = load_mtp(folder, target)
    stored = load_file(str(step_folders["healthy"] / "model.safetensors"))
    assert torch.equal(head.own_head.weight, stored["model.layers.2.shared_head.head.weight"])
    assert not torch.equal(head.own_head.weight, target.lm_head.weight)
    assert type(head.block.self_attn).__name__ == "Step3p7Attention" and head.block.window is None
    assert head.block.inv_freq.numel() == 8 and abs(float(head.block.inv_freq[1]) / 500000 ** (-2 / 16) - 1) < 1e-6
    assert type(head.block.mlp).__name__ == "Step3p7MLP"
    hidden, embeds = torch.randn(1, 5, 64), torch.randn(1, 5, 64)
    positions = torch.arange(5)[None]
    with torch.no_grad():
        logits, out = head(hidden, embeds, positions)
        assert torch.allclose(logits, head.own_head(head.final_norm(out)))
        zeroed = embeds.clone()
        zeroed[:, 0] = 0
        assert not torch.allclose(head(hidden, zeroed, positions)[0][:, 0], logits[:, 0])


def test_the_target_loads_vllms_names_and_its_moe_layer(step_folders):
    """``moe.*`` / ``share_expert.*`` (vLLM's names) load into transformers' Step3p7 MoE block."""
    from safetensors.torch import load_file

    from draftguard.runner.mtp_model import load_mtp_target

    target, _ = load_mtp_target(str(step_folders["healthy"]))
    stored = load_file(str(step_folders["healthy"] / "model.safetensors"))
    moe = target.model.layers[1].mlp
    assert type(moe).__name__ == "Step3p7SparseMoeBlock" and type(target.model.layers[0].mlp).__name__ == "Step3p7MLP"
    gate, up = moe.experts.gate_up_proj.chunk(2, 1)
    assert torch.equal(gate, stored["model.layers.1.moe.gate_proj.weight"])
    assert torch.equal(up, stored["model.layers.1.moe.up_proj.weight"])
    assert torch.equal(moe.shared_experts.down_proj.weight, stored["model.layers.1.share_expert.down_proj.weight"])


def test_more_than_one_mtp_layer_at_k_above_1_is_refused_in_one_sentence(capsys, step_folders, tmp_path):
    """vLLM drafts step j with layer j mod n; the reference holds layer 0, so K > 1 on a 3-layer target is
    bad input rather than a τ measured on other layers than vLLM's."""
    import os

    folder = tmp_path / "three"
    folder.mkdir()
    raw = json.loads((step_folders["healthy"] / "config.json").read_text())
    raw["num_nextn_predict_layers"] = 3
    (folder / "config.json").write_text(json.dumps(raw))
    os.symlink(step_folders["healthy"] / "model.safetensors", folder / "model.safetensors")
    code, _, err = run(capsys, folder, "--num-speculative-tokens", "2")
    assert code == 2 and "MTP layer j mod 3" in err and "Traceback" not in err


def test_the_flat_step37_config_is_still_refused_as_config_rewrite(capsys, monkeypatch):
    """The layout is built now; the flat Step-3.7 file's count still resolves to 0 (test_mtp_rewrite)."""
    code = main(["accept", "--target", str(STEP_REAL), "--method", "mtp", "--prompts", str(PROMPTS)])
    assert code == 2 and "cause: config-rewrite" in capsys.readouterr().err


def test_without_layer_types_the_target_slides_where_vllm_does():
    """vLLM's Step3p5Attention makes the even layers sliding-window where the config sets ``sliding_window``
    and no ``layer_types``; transformers' class would make every layer full attention."""
    from draftguard.runner.mtp_step import text_config_of
    from make_mtp_step import step_config

    raw = {**step_config(), "sliding_window": 8}
    assert text_config_of(raw, "config.json").layer_types == ["sliding_attention", "full_attention"]
    assert text_config_of(step_config(), "config.json").layer_types == ["full_attention", "full_attention"]
    with pytest.raises(Exception, match="use_head_wise_attn_gate"):
        text_config_of({**step_config(), "use_head_wise_attn_gate": False}, "config.json")


def test_a_softmax_routed_target_routes_with_softmax_as_vllm_does(step_folders):
    """``moe_router_activation`` softmax (vLLM's Step3p5Config default; the fixture's, as vLLM's CPU router
    refuses sigmoid): transformers' Step3p7 router scores with sigmoid only, which picks other weights."""
    from draftguard.runner.mtp_model import load_mtp_target
    from draftguard.runner.mtp_step import StepRouter

    target, _ = load_mtp_target(str(step_folders["healthy"]))
    gate = target.model.layers[1].mlp.gate
    assert isinstance(gate, StepRouter) and gate.scoring == "softmax"
    hidden = torch.randn(16, 64)
    logits, weights, index = gate(hidden)
    scores = (hidden @ gate.weight.T).softmax(-1)
    top = scores.topk(2, -1)
    assert torch.equal(index.sort(-1).values, top.indices.sort(-1).values)
    renormed = top.values / top.values.sum(-1, keepdim=True)
    assert torch.allclose(weights.sum(-1), torch.ones(16))
    assert torch.allclose(weights.max(-1).values, renormed.max(-1).values)


def test_a_sigmoid_target_without_renormalisation_keeps_vllms_weights():
    """``norm_expert_weight`` false: vLLM's FusedMoE does not renormalise; transformers' router always did."""
    from draftguard.runner.mtp_step import StepRouter, build_step_target
    from make_mtp_step import step_config

    raw = {**step_config(), "moe_router_activation": "sigmoid", "norm_expert_weight": False}
    gate = build_step_target(raw, "config.json").model.layers[1].mlp.gate
    assert isinstance(gate, StepRouter) and gate.scoring == "sigmoid" and not gate.renormalize
    hidden = torch.randn(8, 64)
    _, weights, index = gate(hidden)
    assert torch.allclose(weights, (hidden @ gate.weight.T).sigmoid().gather(1, index))
