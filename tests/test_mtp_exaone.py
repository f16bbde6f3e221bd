"""EXAONE-MoE's MTP layer (issue 43): ``ExaoneMoeForCausalLM`` (K-EXAONE), ``mtp.{fc, pre_fc_norm_embedding,
pre_fc_norm_hidden, norm}`` and a decoder layer under ``mtp.layers.0.*`` (the target's pre-norm layer with
q/k norms, built dense, always rotated), as vLLM 0.32's ``exaone_moe_mtp.py`` runs it, under the reference.

No weights are shipped: ``build_exaone`` makes the tiny target and trains its MTP layer here, into a
session's tmp folder (about 15 s on one core, deterministic). vLLM 0.32's CPU build on the same folder:
tests/test_mtp_exaone_vllm.py.
"""

from __future__ import annotations

import json
import random
import shutil
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from tests.test_mtp import ROOT, dropped_fails, accept  # noqa: E402  (one accept call)

sys.path.insert(0, str(ROOT / "tests" / "fixtures"))
import make_models as mm  # noqa: E402  (the incident fixtures' data: one data source for every fixture)
import make_mtp_models as mk  # noqa: E402  (the MTP trainer and folder writer)

NAME, LAYERS, SEED = "exaone-moe", 2, 4343
BAR, FLOOR = "1.8", 1.8
TARGET_STEPS, HEAD_STEPS, SEQS = 300, 500, 256


def exaone_config() -> dict:
    """A tiny K-EXAONE: GQA 2 over 1 head of 32 (the smallest head vLLM's CPU attention runs), layer 0
    sliding (window 4096: it never binds here) and layer 1 full (NoPE, as K-EXAONE's), both dense; one MTP
    layer (``num_nextn_predict_layers``), attending as layer 0."""
    return {
        "architectures": ["ExaoneMoeForCausalLM"], "model_type": "exaone_moe", "vocab_size": mm.VOCAB,
        "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": LAYERS, "num_attention_heads": 2,
        "num_key_value_heads": 1, "head_dim": 32, "max_position_embeddings": 128, "rms_norm_eps": 1e-5,
        "hidden_act": "silu", "tie_word_embeddings": False, "bos_token_id": mm.BOS, "eos_token_id": mm.EOS,
        "pad_token_id": 0, "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
        "sliding_window": 4096, "sliding_window_pattern": "LG", "layer_types": ["sliding_attention", "full_attention"],
        "mlp_layer_types": ["dense", "dense"], "first_k_dense_replace": LAYERS, "num_experts": 4,
        "num_experts_per_tok": 2, "moe_intermediate_size": 16, "num_shared_experts": 1,
        "num_nextn_predict_layers": 1, "torch_dtype": "float32",
    }


@torch.no_grad()
def _greedy(target, prompts: torch.Tensor, length: int) -> torch.Tensor:
    ids = prompts
    while ids.shape[1] < length:
        ids = torch.cat([ids, target(ids).logits[:, -1].argmax(-1, keepdim=True)], 1)
    return ids


def build_exaone(folder: Path, config: dict | None = None, model_type: str = "exaone_moe",
                 text_prefix: str = "model.") -> Path:
    """The target trained briefly on the progressions, then (the target frozen) its MTP layer with
    draftguard's own head on the target's greedy continuations, written as a K-EXAONE checkpoint (or, with
    ``config`` an EXAONE-4.5 export's, its text model's tensors under ``text_prefix``): the target's shard
    and the MTP layer's (``mtp.*``)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from draftguard.runner.eagle3_model import PrenormHook, aux_features
    from draftguard.runner.mtp_model import LAYOUTS, MtpHead, MtpSpec

    config = config or exaone_config()
    text = config.get("text_config", config)
    t0, threads = time.time(), torch.get_num_threads()
    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    rng = random.Random(SEED)
    keys = {k: v for k, v in text.items() if k not in ("model_type", "architectures")}
    target = AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, **keys))
    opt = torch.optim.AdamW(target.parameters(), lr=3e-3, weight_decay=0.0)
    for _ in range(TARGET_STEPS):
        batch = torch.tensor([mm.progression(rng, 32) for _ in range(32)])
        loss = target(batch, labels=batch).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    target.eval().requires_grad_(False)
    prompts = torch.tensor([mm.progression(rng, 4) for _ in range(SEQS)])
    ids = _greedy(target, prompts, mm.SEQ_LEN)
    hook = PrenormHook(target)
    with torch.no_grad():
        feats = aux_features(target, target(ids, output_hidden_states=True), [LAYERS], hook.value)
    hook.handle.remove()
    layout = LAYOUTS["exaone_moe" if model_type == "exaone_moe" else "exaone4_5"]
    head = MtpHead(MtpSpec(source="train", layout=layout, key="num_nextn_predict_layers", layers=1,
                           aux_ids=[LAYERS]), target)
    mk.train_head(head, target.get_input_embeddings(), ids, feats, rng, HEAD_STEPS, t0)
    names = {"enorm": layout.enorm, "hnorm": layout.hnorm, "proj": layout.proj, "final_norm": layout.final_norm,
             "block": "layers.0"}
    mtp = {layout.prefix + names[k.partition(".")[0]] + "." + k.partition(".")[2]: v.detach().contiguous()
           for k, v in head.state_dict().items()}
    state = {(text_prefix + k[len("model."):] if k.startswith("model.") else k): v.detach().contiguous()
             for k, v in target.state_dict().items()}
    mk.write_folder(folder, {mk.TARGET_SHARD: state, mk.MTP_SHARD: mtp}, config)
    torch.set_num_threads(threads)
    print(f"{folder.name}: built in {time.time() - t0:.1f}s")
    return folder


@pytest.fixture(scope="session")
def exaone(tmp_path_factory) -> Path:
    return build_exaone(tmp_path_factory.mktemp("mtp") / NAME)


def dropped_copy(healthy: Path, tmp_path: Path) -> Path:
    """The folder with its MTP shard left out at save, the config still declaring the layer."""
    folder = tmp_path / f"{healthy.name}-mtp-dropped"
    shutil.copytree(healthy, folder)
    (folder / mk.MTP_SHARD).unlink()
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    index["weight_map"] = {k: v for k, v in index["weight_map"].items() if v != mk.MTP_SHARD}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    return folder


def test_the_exaone_layout_is_read_from_the_config_and_the_gpu_job_runs_it(exaone):
    """Before: accept refused ExaoneMoeForCausalLM (exit 2, "the reference builds MTP layers of the mimo,
    ... layout") and the GPU path called it not acceptance-testable."""
    from draftguard.check.drafter.detect import MTP_REFERENCE_ARCHITECTURES, detect_drafter
    from draftguard.runner.engine_options import drafting_method
    from draftguard.runner.gpu_job import accept_command
    from draftguard.runner.mtp_weights import mtp_layout, mtp_rewrite
    from draftguard.settings import Settings

    raw = exaone_config()
    layout = mtp_layout(raw, "config.json")
    assert layout.name == "exaone_moe" and layout.embeds_first and not layout.zero_first
    assert not layout.gemma_norms and not layout.recycle_prenorm and not layout.copies
    assert layout.prefix + layout.block.format(i=0) == "mtp.layers.0."
    assert mtp_layout({**raw, "architectures": []}, "config.json").name == "exaone_moe"  # by model_type
    assert mtp_rewrite(raw) is None  # ExaoneMoeConfig keeps the file's count
    assert "ExaoneMoeForCausalLM" in MTP_REFERENCE_ARCHITECTURES and detect_drafter(raw).acceptance_testable
    assert drafting_method(str(exaone)) == "mtp"
    cmd = accept_command("Qwen/Qwen3-8B", str(exaone), Settings(), python="py", env={})
    assert cmd[cmd.index("--target") + 1] == str(exaone) and cmd[cmd.index("--drafter") + 1] == str(exaone)


def test_a_healthy_exaone_mtp_layer_passes(capsys, exaone):
    code, result, err = accept(capsys, str(exaone), "--no-early-stop", "--min-acceptance-length", BAR)
    assert code == 0, err
    assert result.run["method"] == "mtp" and result.run["block_size"] == 2 and result.diagnosis is None
    assert result.mean_acceptance_length > FLOOR


def test_a_dropped_exaone_mtp_layer_fails_with_mtp_weights_named(capsys, exaone, tmp_path):
    reason = dropped_fails(capsys, dropped_copy(exaone, tmp_path))
    assert "the weights hold no tensor under `mtp.`: dropped at save" in reason


def test_the_block_is_dense_rotated_and_loads_under_the_exaone_names(exaone):
    """vLLM builds the MTP layer with is_mtp=True: a dense MLP, RoPE even where the layer attends in full
    (the target's full layer is NoPE), plain RMS norms; the stored tensors load under their names."""
    from safetensors.torch import load_file

    from draftguard.runner.eagle3_model import _RMSNorm
    from draftguard.runner.mtp_model import load_mtp, load_mtp_target

    target, _ = load_mtp_target(str(exaone))
    head = load_mtp(str(exaone), target)
    assert type(head.block).__mro__[1].__name__ == "ExaoneMoeDecoderLayer"
    assert type(head.block.mlp).__name__ == "ExaoneMoeMLP" and type(head.enorm) is _RMSNorm
    stored = load_file(str(exaone / mk.MTP_SHARD))
    assert torch.equal(head.block.self_attn.q_norm.weight, stored["mtp.layers.0.self_attn.q_norm.weight"])
    assert torch.equal(head.proj.weight, stored["mtp.fc.weight"])
    assert torch.equal(head.final_norm.weight, stored["mtp.norm.weight"])
    assert head.spec.faults == []
    hidden, embeds, positions = torch.randn(1, 6, 32), torch.randn(1, 6, 32), torch.arange(6)[None]
    with torch.no_grad():
        logits, out = head(hidden, embeds, positions)
        assert torch.allclose(logits, head._shared["head"](out))
        # A full-attention MTP layer still rotates: shifting every position changes nothing only if
        # RoPE is relative, and zeroing the rotation (NoPE) changes the output.
        head.block.self_attn.sliding_window = 1  # transformers' rule: rotate when None or sliding
        head.block.self_attn.is_sliding = False
        _, nope = head(hidden, embeds, positions)
    assert not torch.allclose(out, nope)


def test_the_mtp_window_clamp_and_kind_follow_vllms_keys():
    """``mtp_layer_types`` / ``mtp_sliding_windows`` win over the target's, a full layer has no window, and
    ``swiglu_limits[0]`` clamps the MLP as vLLM's SiluAndMulWithClamp."""
    from transformers import AutoConfig

    from draftguard.runner.mtp_exaone import exaone_block, exaone_window
    from draftguard.snapshot import BadInput

    keys = {k: v for k, v in exaone_config().items() if k not in ("model_type", "architectures")}
    text = AutoConfig.for_model("exaone_moe", **keys)
    assert exaone_window(text) == 4096
    text.mtp_layer_types, text.mtp_sliding_windows = ["sliding_attention"], [3]
    assert exaone_window(text) == 3
    text.mtp_layer_types = ["full_attention"]
    assert exaone_window(text) is None
    text.mtp_layer_types = ["chunked"]
    with pytest.raises(BadInput, match="mtp_layer_types"):
        exaone_window(text)
    text.mtp_layer_types, text.swiglu_limits = ["sliding_attention"], [0.5, 0.0]
    from transformers import AutoModelForCausalLM

    target = AutoModelForCausalLM.from_config(AutoConfig.for_model("exaone_moe", **keys))
    block = exaone_block(text, target)
    x = torch.randn(3, 32) * 50
    mlp = block.mlp
    want = mlp.down_proj(torch.nn.functional.silu(mlp.gate_proj(x).clamp(max=0.5)) * mlp.up_proj(x).clamp(-0.5, 0.5))
    assert torch.allclose(mlp(x), want)
    # the window: a query sees itself and the 2 tokens before it
    mask = torch.full((5, 5), float("-inf")).triu(1)[None, None]
    seen = {}
    block.self_attn.register_forward_pre_hook(lambda m, a, kw: seen.update(mask=kw["attention_mask"]), with_kwargs=True)
    rope = target.model.rotary_emb(torch.zeros(1, 5, 32), torch.arange(5)[None])
    block(torch.randn(1, 5, 32), attention_mask=mask, position_ids=torch.arange(5)[None], position_embeddings=rope)
    assert torch.isinf(seen["mask"][0, 0, 4, :2]).all() and not torch.isinf(seen["mask"][0, 0, 4, 2:]).any()


def test_the_light_check_flags_the_dropped_exaone_layer_without_a_run(exaone, tmp_path):
    """`draftguard check` (no torch): DG404 on the dropped copy, no error on the healthy folder."""
    from draftguard.check.repo import check_repo
    from draftguard.snapshot import load_snapshot

    def errors(folder: Path) -> set[str]:
        return {f.rule for f in check_repo(load_snapshot(str(folder)), {}) if f.severity.name == "ERROR"}

    assert errors(exaone) == set()
    assert errors(dropped_copy(exaone, tmp_path)) == {"DG404"}
