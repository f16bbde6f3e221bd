"""Gemma 4's MTP drafter (issue 43: "a drafter vLLM runs is never refused by the reference"): the
separate assistant checkpoint (``Gemma4AssistantForCausalLM``) that vLLM 0.32 serves with
``method: mtp`` beside a Gemma 4 target, run by the reference (``draftguard/runner/mtp_gemma4.py``).
No weights are shipped: a tiny target and assistant are trained into tmp_path once per session
(``tests/fixtures/make_mtp_gemma4.py``). vLLM 0.32's CPU build on the same pair:
tests/test_mtp_gemma4_vllm.py.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from draftguard.cli import main  # noqa: E402
from draftguard.runner.result import AcceptanceResult  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PROMPTS = ROOT / "tests" / "fixtures" / "models" / "prompts.jsonl"
sys.path.insert(0, str(ROOT / "tests" / "fixtures"))


@pytest.fixture(scope="session")
def gemma4_models() -> dict[str, Path]:
    """The trained tiny target, its assistant and the assistant without its layers (about 30 s)."""
    import built_once
    import make_mtp_gemma4

    return built_once.once("gemma4-mtp", make_mtp_gemma4.build)


def accept(capsys, target: Path, drafter: Path, *args: str) -> tuple[int, AcceptanceResult | None, str]:
    code = main(["accept", "--target", str(target), "--drafter", str(drafter), "--prompts", str(PROMPTS),
                 "--max-new-tokens", "32", "--quiet", "--format", "json", *args])
    out, err = capsys.readouterr()
    return code, (AcceptanceResult.from_json(out, "stdout") if out.strip() else None), err


def test_the_assistant_is_detected_as_an_mtp_drafter_the_reference_runs(gemma4_models):
    """Before: accept refused it, exit 2 ("is not a drafter of any recognised format", and with --method
    mtp "drop --drafter"); the GPU path would have run the assistant as its own target."""
    from draftguard.check.drafter.detect import detect_drafter
    from draftguard.runner.engine_options import drafter_facts, drafting_method
    from draftguard.runner.gpu_job import accept_command
    from draftguard.settings import Settings

    raw = json.loads((gemma4_models["assistant"] / "config.json").read_text())
    fmt = detect_drafter(raw)
    assert (fmt.kind, fmt.family, fmt.acceptance_testable) == ("mtp-assistant", "mtp", True)
    assert drafting_method(str(gemma4_models["assistant"])) == "mtp"
    assert drafter_facts(str(gemma4_models["assistant"]), method="mtp").block_size == 4  # K 3, the user's to set
    cmd = accept_command("google/gemma-4-e2b-it", str(gemma4_models["assistant"]), Settings(), python="py", env={})
    assert cmd[cmd.index("--target") + 1] == "google/gemma-4-e2b-it"


@pytest.mark.parametrize("method", [[], ["--method", "mtp"]])
def test_a_healthy_assistant_passes_well_above_one(capsys, gemma4_models, method):
    code, result, err = accept(capsys, gemma4_models["target"], gemma4_models["assistant"], *method,
                               "--num-prompts", "8", "--no-early-stop", "--min-acceptance-length", "1.8")
    assert code == 0, err
    assert result.run["method"] == "mtp" and result.run["block_size"] == 4 and result.diagnosis is None
    assert result.mean_acceptance_length > 3.0  # measured 3.54 (K = 3; the assistant was trained on 2 steps)


def test_an_assistant_without_its_layers_fails_with_mtp_weights_named(capsys, gemma4_models):
    code, result, err = accept(capsys, gemma4_models["target"], gemma4_models["assistant-dropped"],
                               "--num-prompts", "8", "--no-early-stop", "--min-acceptance-length", "1.8")
    assert code == 1, err
    assert result.verdict.status == "fail" and result.diagnosis["cause"] == "mtp-weights"
    assert "lack `model.layers.0.input_layernorm.weight`" in result.diagnosis["reason"]
    assert result.mean_acceptance_length < 1.25


@pytest.mark.parametrize("method", [[], ["--method", "mtp"]])
def test_a_gemma4_target_without_drafter_is_told_to_pass_its_assistant(capsys, gemma4_models, method):
    """Before: "declares no MTP layers" (auto) or "needs a target that declares MTP layers" (mtp): true, but
    silent on where Gemma 4's MTP drafter is."""
    code = main(["accept", "--target", str(gemma4_models["target"]), *method, "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "separate assistant checkpoint" in err and "--drafter" in err


def test_a_tensor_the_assistant_does_not_name_is_bad_input_naming_the_key(capsys, gemma4_models, tmp_path):
    from safetensors.torch import load_file, save_file

    folder = tmp_path / "assistant-k"
    shutil.copytree(gemma4_models["assistant"], folder)
    state = load_file(str(folder / "model.safetensors"))
    state["model.layers.0.self_attn.k_proj.weight"] = torch.zeros(32, 32)  # KV-shared: the assistant has none
    save_file(state, str(folder / "model.safetensors"))
    code, _, err = accept(capsys, gemma4_models["target"], folder, "--num-prompts", "1")
    assert code == 2 and "`model.layers.0.self_attn.k_proj.weight`" in err and str(folder) in err


def test_the_drafter_step_equals_transformers_assistant_and_the_run_is_lossless(gemma4_models):
    """One draft step as transformers' own ``Gemma4AssistantForCausalLM`` runs it (its candidate generator:
    the target's scaled embedding of the token beside its last hidden state, the target's shared K/V)
    where the sliding window does not bind; and the speculative tokens equal the target's greedy ones."""
    import make_models as mm

    from draftguard.runner.dflash_model import load_target
    from draftguard.runner.mtp_gemma4 import gemma4_generate, load_gemma4_drafter, target_pass

    target, _ = load_target(str(gemma4_models["target"]))
    drafter, faults = load_gemma4_drafter(str(gemma4_models["assistant"]), target)
    assert faults == []
    prompt = [mm.BOS, 3, 6, 9, 12]
    with torch.no_grad():
        logits, hidden, kv = target_pass(target, torch.tensor([prompt]))
        anchor = logits[:, -1:].argmax(-1)
        p = len(prompt) - 1
        ours, state = drafter(anchor, hidden[:, -1:], torch.tensor([[p]]), kv)
        embeds = target.get_input_embeddings()(anchor)
        theirs = drafter.assistant(inputs_embeds=torch.cat([embeds, hidden[:, -1:]], -1), position_ids=torch.tensor([[p]]),
                                   shared_kv_states=kv)
    cap = target.config.final_logit_softcapping
    assert torch.allclose(ours, torch.tanh(theirs.logits / cap) * cap, atol=1e-5)
    assert torch.allclose(state, theirs.last_hidden_state, atol=1e-5)
    tokens, counts = gemma4_generate(target, drafter, prompt, 24, num_speculative_tokens=2)
    assert tokens == mm.greedy(target, prompt, 24)[len(prompt):]
    assert counts.accepted_tokens > counts.drafts  # τ above 2 at K = 2


def test_the_sliding_window_binds_on_the_draft_layer(gemma4_models):
    """Past the target's window (8) the assistant's sliding layer reads the last 8 of the target's K/V only,
    as vLLM's per-layer window does: reading them all drafts other logits."""
    from draftguard.runner.dflash_model import load_target
    from draftguard.runner.mtp_gemma4 import load_gemma4_drafter, target_pass

    target, _ = load_target(str(gemma4_models["target"]))
    drafter, _ = load_gemma4_drafter(str(gemma4_models["assistant"]), target)
    ids = torch.tensor([[40] + [(5 + 3 * i) % 40 for i in range(15)]])
    with torch.no_grad():
        logits, hidden, kv = target_pass(target, ids)
        at = torch.tensor([[15]])
        windowed, _ = drafter(logits[:, -1:].argmax(-1), hidden[:, -1:], at, kv)
        window, drafter.target_text.sliding_window = drafter.target_text.sliding_window, 1000
        try:
            unbounded, _ = drafter(logits[:, -1:].argmax(-1), hidden[:, -1:], at, kv)
        finally:
            drafter.target_text.sliding_window = window
    assert not torch.allclose(windowed, unbounded, atol=1e-4)


def test_ordered_embeddings_draft_the_argmax_of_vllms_centroid_selection(gemma4_models, tmp_path):
    """``use_ordered_embeddings``: vLLM's ``Gemma4MTPMaskedEmbedder`` scores the top-k centroids' tokens only
    (``_select_and_score``, written out here from gemma4_mtp.py) and drafts their argmax, no softcap."""
    from safetensors.torch import load_file, save_file

    from draftguard.runner.dflash_model import load_target
    from draftguard.runner.mtp_gemma4 import load_gemma4_drafter, target_pass

    folder = tmp_path / "assistant-ordered"
    shutil.copytree(gemma4_models["assistant"], folder)
    raw = json.loads((folder / "config.json").read_text())
    raw.update(use_ordered_embeddings=True, num_centroids=4, centroid_intermediate_top_k=2)
    (folder / "config.json").write_text(json.dumps(raw))
    state = load_file(str(folder / "model.safetensors"))
    gen = torch.Generator().manual_seed(0)
    state["masked_embedding.centroids.weight"] = torch.randn(4, 32, generator=gen)
    state["masked_embedding.token_ordering"] = torch.randperm(48, generator=gen)
    save_file(state, str(folder / "model.safetensors"))
    target, _ = load_target(str(gemma4_models["target"]))
    drafter, faults = load_gemma4_drafter(str(folder), target)
    assert faults == []
    with torch.no_grad():
        logits, hidden, kv = target_pass(target, torch.tensor([[40, 1, 3, 5, 7, 9]]))
        ours, _ = drafter(logits[:, -1:].argmax(-1), hidden[:, -1:], torch.tensor([[5]]), kv)
        # vLLM: the draft-width hidden state after model.norm, as compute_logits receives it
        a = drafter.assistant
        x = a.pre_projection(torch.cat([drafter.embed(logits[:, -1:].argmax(-1)), hidden[:, -1:]], -1))
        h = a.model(inputs_embeds=x, position_ids=torch.tensor([[5]]), attention_mask=drafter._masks(torch.tensor([[5]]), 6),
                    shared_kv_states=kv, use_cache=False).last_hidden_state[0]
        top = torch.topk(h @ state["masked_embedding.centroids.weight"].T, k=2, dim=-1).indices
        selected = state["masked_embedding.token_ordering"].view(4, 12)[top].reshape(1, -1)
        scores = torch.einsum("td,tsd->ts", h, a.lm_head.weight[selected.reshape(-1)].view(1, 24, 32))
    assert int(ours[0, 0].argmax()) == int(selected[0, scores[0].argmax()])
    assert set(torch.nonzero(ours[0, 0] > ours[0, 0].min()).flatten().tolist()) <= set(selected[0].tolist())
