"""Which targets vLLM drafts for with ``method: mtp`` and the reference does not build (issue 43: "a drafter
vLLM runs is never refused by the reference"), read from the release's own data, not a hand-kept list.

``scripts/gen_engine_releases.py`` runs each vLLM release's ``SpeculativeConfig.hf_config_override`` on
probe configs and ships, per release, the targets it drafts for and its draft model
(``check/engines/releases.py``'s ``mtp_drafters``: ``"architecture:Glm4MoeForCausalLM":
"Glm4MoeMTPModel"``). ``NOT_BUILT`` names every draft model of the newest release whose layer the reference
does not build, with why in one sentence (issue 43: say why any other is not run); ``tests/test_mtp_coverage.py``
holds it equal to what ``mtp_layout`` refuses of that release's targets, so a new release's new family,
or a family built since, shows as a failing test, not as a silent refusal, and holds every reason written.

In: a target's config.json (its ``architectures`` and ``model_type``, or ``text_config``'s).
Out: ``vllm_drafter`` (the newest release that drafts for it, and its draft model, or None) and
``refusal`` (the sentence ``mtp_layout`` ends its refusal with).
"""

from __future__ import annotations

from typing import Any

from draftguard.check.engines.releases import known, mtp_drafter

# vLLM's draft model -> why the reference does not build it: one sentence, never empty (the refusal ends with it;
# tests/test_mtp_coverage.py holds each non-empty and each "transformers 5.24 has no class" true of the installed one).
NOT_BUILT: dict[str, str] = {
    "BailingMoeV25MTPModel": "Ling-2.5's MTP layer is a plain MLA and MoE decoder layer, but its target's "
                             "linear-attention layers are lightning attention (MiniMax-Text-01's computed per-head "
                             "decay slopes; vLLM's bailing_moe_linear.py), which the reference does not build and "
                             "transformers 5.24's bailing_hybrid class (the model_type vLLM also maps to this draft "
                             "model) replaces with Ling-3.0's KDA",
    "DeepSeekV4MTPModel": "DeepSeek-V4's compressed attention and hyper-connections are not written in the reference, "
                          "and vLLM's CPU build refuses its MTP layer too (vLLM 0.32's deepseek_v4/cpu/mtp.py: "
                          "\"DeepSeek-V4 speculative decoding (MTP) is not implemented on CPU\")",
    "Glm5NextMTPModel": "GLM-5.3-Flash's MTP layer is DeepSeek-V3.2's with an MLA and MoE decoder layer whose sparse "
                        "indexer scores keys pooled per index_kpool tokens, without the target's "
                        "hyper-connections; transformers 5.24's glm5_next classes hold these parts and the target "
                        "(KDA, hyper-connections), so the reference could build it from them with moderate work, not "
                        "written yet (vLLM 0.34 has nvidia and amd builds of it, no cpu one)",
    "KimiK3MTPModel": "Kimi K3's config is vLLM's own (model_type kimi_k3): transformers 5.24 has no class for it, and "
                      "neither its kimi_linear classes nor the reference build the attention residuals, DSA sparse MLA "
                      "layers, latent MoE and full-rank KDA gate that vLLM builds K3's target with (vLLM 0.34 has "
                      "nvidia and amd builds of it, no cpu one, and on vLLM 0.32's CPU build its MTP layer's "
                      "fused_mtp_input is a Triton kernel, which that build cannot launch)",
    "MiniMaxM3MTP": "MiniMax-M3's MTP layer is a plain pre-norm decoder layer (block-sparse attention with a lightning "
                    "indexer, clamped-SwiGLU MoE) between zero-centred enorm/hnorm/eh_proj and final_layernorm, parts "
                    "transformers 5.24's minimax_m3_vl classes hold with the target, so the reference could build it "
                    "with moderate work, not written yet (a standalone MTP checkpoint's model_type minimax_m3_mtp is "
                    "vLLM's own, for which transformers 5.24 has no class; vLLM 0.34 has nvidia and amd builds of it, "
                    "no cpu one, and vLLM 0.32's CPU build refuses its MoE, the MTP layer's too: \"No Unquantized "
                    "MoE backend supports the deployment configuration\", its CPU experts lacking the "
                    "swigluoai_uninterleave activation)",
    "OpenPanguMTPModel": "openPangu-Ultra-MoE ships its config and model as remote code (model_type pangu_ultra_moe): "
                         "transformers 5.24 has no class for it, and its decoder (vLLM's openpangu.py) is not "
                         "written in the reference; vLLM loads it only with trust_remote_code, which draftguard "
                         "never passes",
    "Qwen4ExpMTP": "Qwen4-Exp's MTP layer is a hyper-connection decoder layer (QSA sparse attention, MoE) fed the "
                   "target's hc_count residual streams from before its final mixer, not the one hidden state the "
                   "reference's MTP head passes on; transformers 5.24's qwen4_exp classes hold the layer and the "
                   "target (Gated DeltaNet, QSA, hyper-connections, per-layer embeddings), so that multi-stream path "
                   "is what is missing (vLLM 0.34 supports it on CUDA and ROCm only)",
    "Step5MTP": "Step5's config is vLLM's own (model_type step5, or step5_vl for the VL export): transformers 5.24 has "
                "no class for it, and its full-attention layers (the MTP layer's too, where layer_types_with_mtp says "
                "so) run Step5's CSA sparse attention (block-compressed region summaries, a sparse indexer's top-k), "
                "which the reference does not build (vLLM 0.34 has nvidia and amd builds of it, no cpu one)",
    "Nemotron3_5TranscribeMTPModel": "a speech model (Nemotron 3.5 Transcribe): the reference runs text targets",
}
# Targets refused although the reference builds their draft model for another target.
NOT_BUILT_TARGETS: dict[str, str] = {
    "model_type:intern_s2_preview": "Intern-S2-Preview ships its config as remote code (model_type intern_s2_preview): "
                                    "transformers 5.24 has no class for it; the reference builds vLLM's Qwen3_5MTP for "
                                    "Qwen3.5's own configs",
    "model_type:nemotron_h_puzzle": "Nemotron-H Puzzle ships its config as remote code (model_type nemotron_h_puzzle, "
                                    "per-layer block_configs, MTP experts from mtp_n_routed_experts): transformers 5.24 "
                                    "has no class for it; the reference builds vLLM's NemotronHMTPModel for nemotron_h",
    "architecture:BailingMoeV3VLForConditionalGeneration": "the Ling-3.0 VL export's text model is not loaded by the "
                                                           "reference; BailingMoeV3ForCausalLM's MTP layer is built",
}


def vllm_drafter(raw: dict[str, Any]) -> tuple[str, str, str] | None:
    """(release, matched key, draft model) of the newest known vLLM release whose drafters were read, where
    it drafts for this target with ``method: mtp``, else None.

    Example::

        >>> vllm_drafter({"architectures": ["Glm4MoeLiteForCausalLM"], "model_type": "glm4_moe_lite"})[1:]
        ('architecture:Glm4MoeLiteForCausalLM', 'Glm4MoeLiteMTPModel')
    """
    for release in reversed(known("vllm")):
        found = mtp_drafter(release, raw)
        if found is False:
            continue  # this release's drafters were not read
        return (release, *found) if found else None
    return None


def refusal(raw: dict[str, Any]) -> str:
    """What ``mtp_layout`` says after "the reference does not build it": vLLM's view of the target."""
    found = vllm_drafter(raw)
    if found is None:
        return "; no vLLM release known here drafts for it with method mtp either"
    release, key, drafter = found
    why = NOT_BUILT_TARGETS.get(key) or NOT_BUILT.get(drafter) or ""
    return (f"; vLLM {release} drafts for it with method mtp (its {drafter}), which the reference does not build"
            + (f": {why}" if why else " yet") + "; run --backend vllm alone")


__all__ = ["NOT_BUILT", "NOT_BUILT_TARGETS", "refusal", "vllm_drafter"]
