"""EXAONE-4.5's MTP layer (issue 43): the multimodal export ``Exaone4_5_ForConditionalGeneration``
(``text_config``, the text model under ``model.language_model.*``), its MTP layer ``mtp.{fc,
pre_fc_norm_embedding, pre_fc_norm_hidden, norm}`` and ``mtp.layers.0.*`` (the text model's post-norm
``Exaone4DecoderLayer``), as vLLM 0.32's ``exaone4_5_mtp.py`` runs it, under the reference.

No weights are shipped: tests/test_mtp_exaone.py's ``build_exaone`` makes the tiny text model (no vision
tower: the reference neither builds nor reads one) and trains its MTP layer here, into a session's tmp
folder. vLLM 0.32's CPU build cannot start the export (its Exaone4_5 module imports torchvision): a
strict xfail in tests/test_mtp_exaone_vllm.py records it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from tests.test_mtp import accept, dropped_fails  # noqa: E402  (one accept call)
from tests.test_mtp_exaone import BAR, FLOOR, build_exaone, dropped_copy, exaone_config  # noqa: E402

NAME = "exaone45"


def exaone45_config() -> dict:
    """EXAONE-4.5's export shape around the tiny text model (the MoE one less its MoE keys): the MTP count
    under ``text_config`` as the released 33B states it; the text model's layer 0 slides, so the MTP layer
    does and rotates; layer 1 is full, NoPE."""
    text = {k: v for k, v in exaone_config().items() if not k.startswith(("mlp_layer", "first_k", "num_experts",
                                                                          "moe_", "num_shared", "torch_dtype"))}
    text.update({"model_type": "exaone4_5_text", "architectures": ["Exaone4ForCausalLM"]})
    return {"architectures": ["Exaone4_5_ForConditionalGeneration"], "model_type": "exaone4_5",
            "tie_word_embeddings": False, "vocab_size": text["vocab_size"], "text_config": text}


@pytest.fixture(scope="session")
def exaone45(tmp_path_factory) -> Path:
    return build_exaone(tmp_path_factory.mktemp("mtp") / NAME, exaone45_config(), "exaone4",
                        "model.language_model.")


def test_the_exaone45_layout_is_read_from_the_export_config_and_the_gpu_job_runs_it(exaone45):
    """Before: accept refused Exaone4_5_ForConditionalGeneration with exit 2 and the GPU path skipped it."""
    from draftguard.check.drafter.detect import MTP_REFERENCE_ARCHITECTURES, detect_drafter
    from draftguard.runner.engine_options import drafting_method
    from draftguard.runner.gpu_job import accept_command
    from draftguard.runner.mtp_weights import mtp_count, mtp_layout, mtp_rewrite, read_config
    from draftguard.settings import Settings

    real = read_config(Path(__file__).parent / "data" / "real-configs" / "lgai-exaone--exaone-4.5-33b")
    for raw in (exaone45_config(), real):
        assert mtp_layout(raw, "config.json").name == "exaone4_5"
        assert mtp_rewrite(raw) is None and mtp_count(raw) == ("text_config.num_nextn_predict_layers", 1)
        assert detect_drafter(raw).acceptance_testable
    assert "Exaone4_5_ForConditionalGeneration" in MTP_REFERENCE_ARCHITECTURES
    assert drafting_method(str(exaone45)) == "mtp"
    cmd = accept_command("Qwen/Qwen3-8B", str(exaone45), Settings(), python="py", env={})
    assert cmd[cmd.index("--target") + 1] == str(exaone45)


def test_a_healthy_exaone45_mtp_layer_passes(capsys, exaone45):
    code, result, err = accept(capsys, str(exaone45), "--no-early-stop", "--min-acceptance-length", BAR)
    assert code == 0, err
    assert result.run["method"] == "mtp" and result.run["block_size"] == 2 and result.diagnosis is None
    assert result.mean_acceptance_length > FLOOR


def test_a_dropped_exaone45_mtp_layer_fails_with_mtp_weights_named(capsys, exaone45, tmp_path):
    reason = dropped_fails(capsys, dropped_copy(exaone45, tmp_path))
    assert "the weights hold no tensor under `mtp.`: dropped at save" in reason


def test_the_text_model_and_the_post_norm_layer_are_built_from_the_export(exaone45):
    """The target is transformers' Exaone4ForCausalLM read from ``model.language_model.*``; the MTP layer
    is its post-norm Exaone4DecoderLayer (no input norm), loaded under EXAONE's names. A vision shard is
    never read: the index naming a missing one for ``model.visual.*`` changes nothing."""
    from safetensors.torch import load_file

    from draftguard.runner.mtp_model import load_mtp, load_mtp_target

    index = json.loads((exaone45 / "model.safetensors.index.json").read_text())
    index["weight_map"]["model.visual.patch_embed.proj.weight"] = "model-vision.safetensors"
    (exaone45 / "model.safetensors.index.json").write_text(json.dumps(index))
    target, _ = load_mtp_target(str(exaone45))
    head = load_mtp(str(exaone45), target)
    assert type(target).__name__ == "Exaone4ForCausalLM"
    assert type(head.block).__mro__[1].__name__ == "Exaone4DecoderLayer"
    assert hasattr(head.block, "post_feedforward_layernorm") and not hasattr(head.block, "input_layernorm")
    stored = load_file(str(exaone45 / "model-00002-of-00002.safetensors"))
    assert torch.equal(head.block.post_feedforward_layernorm.weight,
                       stored["mtp.layers.0.post_feedforward_layernorm.weight"])
    shard = load_file(str(exaone45 / "model-00001-of-00002.safetensors"))
    assert torch.equal(target.model.embed_tokens.weight, shard["model.language_model.embed_tokens.weight"])
    assert head.spec.faults == []
