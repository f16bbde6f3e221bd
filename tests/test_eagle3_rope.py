"""RoPE and decoder layers of EAGLE-3 heads as vLLM 0.32 builds them (issue 43: a drafter vLLM runs is
never refused by the reference): the reference's cos/sin tables against vLLM's ``get_rope`` for every
kind it builds for a head's config (``runner/eagle3_layer.py``), published heads' scaled RoPE, what
neither builds, and the DeepSeek MLA heads vLLM builds and the reference refuses in one sentence. The
τ of heads with each kind, reference against vLLM's CPU build, is in test_eagle3_engine_files.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from tests.test_eagle3 import MODELS, ROOT, accept  # noqa: E402  (one accept call)
from tests.test_eagle3_engine_files import LONGROPE  # noqa: E402


@pytest.mark.vllm
@pytest.mark.parametrize("rope", [
    {"rope_type": "linear", "factor": 4.0}, {"rope_type": "dynamic", "factor": 4.0},
    {"rope_type": "dynamic", "factor": 4.0, "max_trained_positions": 64}, {"rope_type": "dynamic", "alpha": 1000.0},
    {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32},
    {"rope_type": "yarn", "factor": 64.0, "original_max_position_embeddings": 2, "beta_fast": 32.0, "beta_slow": 1.0,
     "mscale": 1.0, "mscale_all_dim": 1.0},  # Kimi K2.5's head's form
    {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
     "original_max_position_embeddings": 16},
    # Kinds the reference refused before (issue 43): LongRoPE (long factors past the original length, short
    # ones within it, vLLM's mscale overrides, the file's factor and attention_factor, which vLLM does not
    # read), the legacy "su", vLLM's ntk (fixed and mixed), DeepSeek's YaRN (its mscale ratio; a
    # DeepSeek-V2-Lite-style 0.707 pair; mscale alone), deepseek_llama_scaling and DeepSeek-V4's.
    {"rope_type": "longrope", **LONGROPE},
    {"rope_type": "longrope", **LONGROPE, "original_max_position_embeddings": 256},
    {"rope_type": "longrope", **LONGROPE, "factor": 7.0, "attention_factor": 3.0},
    {"rope_type": "longrope", **LONGROPE, "short_mscale": 1.3, "long_mscale": 1.7}, {"type": "su", **LONGROPE},
    {"rope_type": "ntk", "factor": 4.0}, {"rope_type": "ntk", "factor": 4.0, "mixed_b": 0.5},
    {"rope_type": "deepseek_yarn", "factor": 4.0, "original_max_position_embeddings": 32},
    {"rope_type": "deepseek_yarn", "factor": 40.0, "original_max_position_embeddings": 4, "mscale": 0.707,
     "mscale_all_dim": 0.707, "beta_fast": 32, "beta_slow": 1},
    {"rope_type": "deepseek_yarn", "factor": 40.0, "original_max_position_embeddings": 4, "mscale": 0.707},
    {"rope_type": "deepseek_llama_scaling", "factor": 4.0, "original_max_position_embeddings": 32, "mscale": 1.0,
     "mscale_all_dim": 0.5},
    {"rope_type": "deepseek_yarn", "factor": 4.0, "original_max_position_embeddings": 32, "is_deepseek_v4": True},
    # Partial rotation: get_rope's table covers the rotary dims only (rope_dim, else partial_rotary_factor).
    {"rope_type": "default", "partial_rotary_factor": 0.5}, {"rope_type": "ntk", "factor": 4.0, "rope_dim": 16},
    {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32, "partial_rotary_factor": 0.25},
    {"rope_type": "dynamic", "alpha": 1000.0, "partial_rotary_factor": 0.5},
    # mrope sections: plain RoPE on text positions; with YaRN, vLLM's MRotaryEmbedding reads YaRN's correction
    # range over its cache of 4 x the original length (before: the table was plain YaRN's, off by up to 2.28).
    {"type": "mrope", "mrope_section": [4, 6, 6]},
    {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32, "mrope_section": [4, 6, 6]}])
def test_the_rope_tables_are_vllms(rope):
    """The reference's cos and sin at positions 0..127 equal vLLM's get_rope cache for each kind (LongRoPE
    under an engine of max_model_len 128, its long or short half of vLLM's cache as vLLM picks it)."""
    pytest.importorskip("vllm")
    from types import SimpleNamespace

    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.model_executor.layers.rotary_embedding import get_rope

    from draftguard.runner.eagle3_layer import rope_parameters, rope_tables

    params = rope_parameters({"rope_scaling": dict(rope), "rope_theta": 10000.0}, Path("config.json"))
    inv, factor = rope_tables(params, 32, 128, Path("config.json"), engine_len=128)
    freqs = torch.arange(128).float()[:, None] * inv
    ours = torch.cat([freqs.cos() * factor, freqs.sin() * factor], -1)
    config = VllmConfig()
    with set_current_vllm_config(config):
        config.model_config = SimpleNamespace(max_model_len=128)  # what LongRoPE reads of the engine
        legacy = {"rope_type": "default"} if params["rope_type"] == "mrope" else {}  # vLLM's patch_legacy_rope_type
        emb = get_rope(32, 128, True, {**{k: v for k, v in params.items() if k != "type"}, **legacy}, torch.float32)
    if hasattr(emb, "long_short_cos_sin_cache"):  # the short half (original positions), then the long one
        original = rope["original_max_position_embeddings"]
        cache = emb.long_short_cos_sin_cache[original if emb.use_long_rope else 0:][:128].float()
    else:
        cache = emb.cos_sin_cache[:128].float()
    assert torch.allclose(cache, ours, atol=1e-5), (cache - ours).abs().max()


@pytest.mark.parametrize("folder, kind, factor", [("specforge-llama3-70b-eagle3", "llama3", 8.0),
                                                  ("torchspec-kimi-k2.5-eagle3", "yarn", 64.0),
                                                  ("angelslim-hunyuan-1.8b-eagle3", "dynamic", None)])
def test_published_heads_with_scaled_rope_build_their_tables(folder, kind, factor):
    """The published configs the light check now hands to accept (tests/data/real-drafters): each reads
    its RoPE where it states it (the older ``rope_scaling`` with ``type`` or ``rope_type``) and builds
    tables that are not plain RoPE's. Before: refused ("RoPE is scaled")."""
    from draftguard.runner.eagle3_layer import rope_tables
    from draftguard.runner.eagle3_model import read_eagle3_spec

    spec = read_eagle3_spec(ROOT / "tests" / "data" / "real-drafters" / folder, 36)
    assert spec.rope["rope_type"] == kind and spec.rope.get("factor") == (factor or spec.rope.get("factor"))
    plain, _ = rope_tables({"rope_type": "default", "rope_theta": spec.rope["rope_theta"]}, spec.head_dim, 4096,
                           Path(folder))
    assert not torch.allclose(spec.inv_freq, plain)


@pytest.mark.parametrize("rope, key", [({"rope_type": "made_up", "factor": 4.0}, "rope_parameters.rope_type"),
                                       ({"rope_type": "llama3", "factor": 8.0}, "rope_parameters"),
                                       ({"rope_type": "longrope", "factor": 4.0}, "rope_parameters"),
                                       ({"rope_type": "ntk"}, "rope_parameters"),
                                       ({"rope_type": "default", "use_fope": True}, "rope_parameters.use_fope"),
                                       ({"rope_type": "proportional"}, "rope_parameters.rope_type")])
def test_a_rope_neither_builds_is_refused_naming_the_key(tmp_path, rope, key):
    """A RoPE kind vLLM does not know either ("Unknown RoPE scaling type"), a llama3, LongRoPE or ntk RoPE
    without its factors (vLLM's get_rope raises KeyError on each too) are exit 2 naming the key; so are
    Fourier RoPE (before: run as plain RoPE) and Gemma 4's proportional RoPE, which vLLM builds but the
    reference does not."""
    from draftguard.runner.eagle3_model import read_eagle3_spec
    from draftguard.snapshot import BadInput

    config = json.loads((MODELS / "eagle3" / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "rope_parameters": {"rope_theta": 1e4, **rope}}))
    with pytest.raises(BadInput) as caught:
        read_eagle3_spec(tmp_path, 3)
    assert caught.value.key == key, caught.value


def test_longrope_factors_follow_the_engines_length(capsys, tmp_path):
    """vLLM's Phi3LongRoPE takes the long factors for every position when its max_model_len exceeds the
    original length: the target's 128 by default (the fixture head reads long ones), ``--max-model-len 32``
    keeps the short ones; the reference reads the same length (before: always the head's own length)."""
    from draftguard.runner.dflash_model import load_target
    from draftguard.runner.eagle3_layer import rope_tables
    from draftguard.runner.eagle3_model import load_eagle3
    from tests.test_eagle3_engine_files import engine_variants

    head = engine_variants(tmp_path)["rope-longrope"]
    target, _ = load_target(str(MODELS / "target"))
    rope = {"rope_type": "longrope", "rope_theta": 10000.0, **LONGROPE}
    for length, half in ((None, "long_factor"), (32, "short_factor")):
        built = load_eagle3(str(head), target, max_model_len=length).spec
        inv, factor = rope_tables(rope, 32, 128, Path("config.json"), engine_len=length or 128)
        plain, _ = rope_tables({"rope_type": "default", "rope_theta": 10000.0}, 32, 128, Path("config.json"))
        assert torch.allclose(built.inv_freq, inv) and built.rope_factor == factor
        assert torch.allclose(inv, plain / torch.tensor(LONGROPE[half]))
    code, result, err = accept(capsys, head, "--num-prompts", "6", "--no-early-stop", "--max-model-len", "32")
    assert code in (0, 1) and result is not None, err
    # Measured: 4.00 with the short factors (near 1), 3.19 with the long ones.
    assert result.mean_acceptance_length > 3.9, result.mean_acceptance_length
