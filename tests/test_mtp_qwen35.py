"""`draftguard accept --method mtp` on the Qwen3.5/3.6 MTP layout (``mtp.fc``, ``mtp.pre_fc_norm_*``,
``mtp.layers.0.*``, ``mtp.norm``; tests/fixtures/make_qwen35_mtp_models.py): the Qwen3.5 text target and
the Qwen3-Next one that shares its layout, their seeded faults under the reference backend, and
(marked vllm) against vLLM's CPU build, which runs the Qwen3-Next target and cannot import Qwen3.5's
classes without torchvision.

The fixtures are committed; nothing here trains. Each folder's ``trained_eval.json`` holds the τ the
training script measured; the reference must reproduce it prompt for prompt.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

torch = pytest.importorskip("torch")

from draftguard.cli import main  # noqa: E402
from tests.test_mtp import BAR, MODELS, NEW_TOKENS, PROMPTS, ROOT, accept, trained  # noqa: E402  (one accept call)

BRYCE = ROOT / "tests" / "data" / "real-repos" / "bryce-hoehn--qwen3.5-18b-reap-a3b-coding"


def test_the_layout_is_read_from_the_architecture_and_k_from_the_declared_layers():
    from draftguard.runner.engine_options import drafter_facts, drafting_method
    from draftguard.runner.mtp_weights import mtp_layout

    for folder, layout in (("qwen35", "qwen3_5"), ("qwen3-next", "qwen3_next")):
        raw = json.loads((MODELS / folder / "config.json").read_text())
        assert mtp_layout(raw, "config.json").name == layout
        assert drafting_method(str(MODELS / folder)) == "mtp"
        assert drafter_facts(str(MODELS / folder), method="mtp").block_size == 2


@pytest.mark.parametrize("folder", ["qwen35", "qwen3-next"])
def test_healthy_mtp_layer_passes_and_matches_its_trained_tau_prompt_for_prompt(capsys, folder):
    code, result, err = accept(capsys, folder, "--no-early-stop", "--min-acceptance-length", BAR)
    assert code == 0, err
    assert result.run["method"] == "mtp" and result.run["block_size"] == 2 and result.diagnosis is None
    assert [round(p.mean_acceptance_length, 4) for p in result.per_prompt] == trained(folder)["per_prompt"]
    assert result.mean_acceptance_length > 1.9


@pytest.mark.parametrize("fault, named", [
    ("qwen35-mtp-dropped", "the weights hold no tensor under `mtp.`: dropped at save"),
    ("qwen35-mtp-fp8", "`mtp.fc.weight` is stored F8_E4M3 with `mtp.fc.weight_scale_inv` beside it"),
    ("qwen3-next-mtp-dropped", "the weights hold no tensor under `mtp.`: dropped at save"),
    ("qwen3-next-mtp-fp8", "`mtp.layers.0.self_attn.q_proj.weight` is stored F8_E4M3"),
])
def test_each_faulty_copy_fails_with_mtp_weights_named(capsys, fault, named):
    code, result, err = accept(capsys, fault, "--no-early-stop", "--min-acceptance-length", BAR)
    assert code == 1, err
    assert result.verdict.status == "fail"
    assert result.diagnosis["cause"] == "mtp-weights" and named in result.diagnosis["reason"]
    assert result.mean_acceptance_length < 1.6  # healthy: 2.0
    assert [round(p.mean_acceptance_length, 4) for p in result.per_prompt] == trained(fault)["per_prompt"]


def test_the_dropped_copy_has_the_real_reap_exports_shape():
    """bryce-hoehn/Qwen3.5-18B-REAP-A3B-Coding declares `mtp_num_hidden_layers: 1` and its index holds
    no `mtp.` tensor; the dropped fixture is that, and the light check flags both (DG404)."""
    from draftguard.check.repo import check_repo
    from draftguard.snapshot import load_snapshot

    for folder in (BRYCE, MODELS / "qwen35-mtp-dropped"):
        raw = json.loads((folder / "config.json").read_text())
        names = json.loads((folder / "model.safetensors.index.json").read_text())["weight_map"]
        assert raw["mtp_num_hidden_layers"] == 1 and not [n for n in names if n.startswith("mtp.")]
        assert "DG404" in {f.rule for f in check_repo(load_snapshot(str(folder)), {})}
    healthy = json.loads((MODELS / "qwen35" / "model.safetensors.index.json").read_text())["weight_map"]
    assert {"mtp.fc.weight", "mtp.pre_fc_norm_embedding.weight", "mtp.pre_fc_norm_hidden.weight",
            "mtp.norm.weight", "mtp.layers.0.self_attn.q_proj.weight"} <= set(healthy)


def test_the_gpu_path_runs_the_text_classes_and_the_multimodal_export():
    """The bot and the Action run a model whose MTP layout the reference builds: the text classes and,
    since the reference loads a multimodal export's text model (tests/test_mtp_qwen35_export.py), the
    REAP export published as Qwen3_5MoeForConditionalGeneration, which it once refused."""
    from draftguard.check.drafter.detect import detect_drafter

    for folder in (MODELS / "qwen35", MODELS / "qwen3-next", BRYCE):
        found = detect_drafter(json.loads((folder / "config.json").read_text()))
        assert found.acceptance_testable and found.acceptance_refusal is None
    found = detect_drafter({"architectures": ["MiniMaxM2ForCausalLM"], "num_mtp_modules": 1})  # GLM-4.5 runs now
    assert not found.acceptance_testable
    assert "Qwen3_5MoeForConditionalGeneration" in found.acceptance_refusal


@pytest.mark.parametrize("folder, rule", [("qwen35", None), ("qwen35-mtp-dropped", "DG404"),
                                          ("qwen35-mtp-fp8", "DG410")])
def test_the_light_check_flags_the_same_copies_without_a_run(folder, rule):
    from draftguard.check.repo import check_repo
    from draftguard.snapshot import load_snapshot

    errors = {f.rule for f in check_repo(load_snapshot(str(MODELS / folder)), {}) if f.severity.name == "ERROR"}
    assert errors == ({rule} if rule else set())


def test_the_documented_command_runs_as_written(capsys, monkeypatch):
    import re
    import shlex

    doc = (ROOT / "docs" / "acceptance.md").read_text()
    block = re.search(r"<!-- mtp-qwen35 -->\n```sh\n(.*?)```", doc, re.S).group(1)
    argv = shlex.split(block.replace("\\\n", " "))
    assert argv[:2] == ["draftguard", "accept"]
    monkeypatch.chdir(ROOT)
    code = main(argv[1:] + ["--quiet"])
    out = capsys.readouterr().out
    assert code == 1
    assert "cause: mtp-weights — " in out and "no tensor under `mtp.`: dropped at save" in out


def _rate(target, head, prompts) -> float:
    from draftguard.runner.eagle3 import eagle3_generate

    total = 0.0
    for p in prompts:
        _, c = eagle3_generate(target, head, p, NEW_TOKENS, num_speculative_tokens=1, stop_ids=[41])
        total += c.accepted_tokens / c.drafts
    return total / len(prompts)


def test_the_reference_is_lossless_and_the_forward_details_matter():
    """The drafts never change the text, and the family's forward is no detail: [hidden, embedding]
    (MiMo's order) or norms read as x * w instead of Qwen's zero-centred x * (1 + w) draft far worse."""
    from draftguard.runner.eagle3 import eagle3_generate
    from draftguard.runner.eagle3_model import _RMSNorm
    from draftguard.runner.mtp_model import load_mtp, load_mtp_target
    from draftguard.runner.reference import greedy_generate

    target, _ = load_mtp_target(str(MODELS / "qwen35"))
    head = load_mtp(str(MODELS / "qwen35"), target)
    prompts = [json.loads(line)["input_ids"] for line in PROMPTS.read_text().splitlines()][:6]
    for p in prompts[:3]:
        tokens, _ = eagle3_generate(target, head, p, NEW_TOKENS, num_speculative_tokens=2, stop_ids=[41])
        assert tokens == greedy_generate(target, p, NEW_TOKENS, stop_ids=[41])
    assert _rate(target, head, prompts) > 0.95
    layout = head.spec.layout
    object.__setattr__(head.spec, "layout", dataclasses.replace(layout, embeds_first=False))
    assert _rate(target, head, prompts) < 0.5
    object.__setattr__(head.spec, "layout", layout)
    for name in ("enorm", "hnorm", "final_norm"):
        plain = _RMSNorm(head.enorm.weight.shape[0], 1e-6)
        plain.weight.data.copy_(getattr(head, name).weight.data)
        setattr(head, name, plain)
    assert _rate(target, head, prompts) < 0.5


def test_a_hybrid_targets_mtp_layer_is_full_attention():
    """Qwen3.5's targets are hybrid (Gated DeltaNet with full attention every fourth layer); vLLM builds
    the MTP layer as full attention whatever layer 0 is, and so does the reference."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from draftguard.runner.mtp_model import LAYOUTS, MtpHead, MtpSpec

    raw = json.loads((MODELS / "qwen35" / "config.json").read_text())
    keys = {k: v for k, v in raw.items() if k not in ("model_type", "architectures")}
    keys.update(num_hidden_layers=2, layer_types=["linear_attention", "full_attention"])
    target = AutoModelForCausalLM.from_config(AutoConfig.for_model("qwen3_5_text", **keys)).eval()
    assert hasattr(target.model.layers[0], "linear_attn")
    head = MtpHead(MtpSpec("hybrid", LAYOUTS["qwen3_5"], "mtp_num_hidden_layers", 1, [2]), target)
    assert hasattr(head.block, "self_attn") and not hasattr(head.block, "linear_attn")
    assert target.config.layer_types == ["linear_attention", "full_attention"]  # the target's own config untouched
    hidden, embeds = torch.randn(1, 5, 64), torch.randn(1, 5, 64)
    logits, _ = head(hidden, embeds, torch.arange(5)[None])
    assert logits.shape == (1, 5, 48) and torch.isfinite(logits).all()


@pytest.mark.vllm
def test_both_backends_agree_on_the_qwen3_next_mtp_layer_within_5_percent(capsys, monkeypatch):
    """The Qwen3.5 layout's forward as vLLM runs it (``qwen3_next_mtp.py``, the same layer names,
    norms and order as ``qwen3_5_mtp.py``), two draft tokens so the second chain step is compared too.
    Measured 2026-12-05 (4 prompts): τ 3.00 in both, the same tokens."""
    pytest.importorskip("vllm")
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    code, result, err = accept(capsys, "qwen3-next", "--backend", "both", "--num-prompts", "4", "--enforce-eager",
                               "--gpu-memory-utilization", "0.4", "--num-speculative-tokens", "2",
                               "--min-acceptance-length", "2.7")
    assert code == 0, err
    diff = result.run["differential"]
    assert result.run["method"] == "mtp" and result.run["block_size"] == 3
    assert abs(diff["vllm_tau"] / diff["reference_tau"] - 1) <= 0.05, diff
    assert diff["same_tokens"] == diff["prompts"] == 4


@pytest.mark.vllm
@pytest.mark.parametrize("fault, says", [
    ("qwen3-next-mtp-dropped", "Following weights were not initialized from checkpoint"),
    ("qwen3-next-mtp-fp8", "weight_scale_inv"),
])
def test_vllm_refuses_each_faulty_copy_and_the_line_names_mtp_weights(capsys, monkeypatch, fault, says):
    pytest.importorskip("vllm")
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    code, result, err = accept(capsys, fault, "--backend", "vllm", "--num-prompts", "2", "--enforce-eager",
                               "--gpu-memory-utilization", "0.4", "--min-acceptance-length", BAR)
    line = [x for x in err.splitlines() if x.startswith("draftguard: ")][-1]
    assert code == 2 and result is None
    assert says in line and "cause: mtp-weights — " in line


@pytest.mark.vllm
@pytest.mark.parametrize("export", [False, True], ids=["text-class", "multimodal-export"])
def test_vllm_cpu_cannot_import_qwen35_without_torchvision_and_says_so(capsys, monkeypatch, tmp_path, export):
    """vLLM 0.32's qwen3_5.py imports Qwen3-VL's module, which imports transformers' Qwen2-VL image
    processor, which imports torchvision; scripts/test.sh leaves torchvision out (PyPI's is a CUDA build
    that breaks `import vllm` beside CPU torch). The Qwen3.5 fixture is then refused at start, exit 2.
    Where torchvision is installed this test fails: then compare the backends
    on ``qwen35`` as on ``qwen3-next``. The multimodal export built from it (tests/test_mtp_qwen35_export.py),
    which the reference runs, is refused the same way: PyPI's torchvision 0.28.0 does not load beside
    torch 2.13.0+cpu (a CUDA 13 build; docs/acceptance.md)."""
    pytest.importorskip("vllm")
    import importlib.util

    assert importlib.util.find_spec("torchvision") is None
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    from tests.test_mtp_qwen35_export import export as multimodal

    target = str(multimodal(tmp_path / "export")) if export else "qwen35"
    code, result, err = accept(capsys, target, "--backend", "vllm", "--num-prompts", "2", "--enforce-eager",
                               "--gpu-memory-utilization", "0.4", "--min-acceptance-length", BAR)
    line = [x for x in err.splitlines() if x.startswith("draftguard: ")][-1]
    assert code == 2 and result is None
    # The engine's own log names `No module named 'torchvision'`; the line carries it where the engine's
    # stderr is read (the command line), and always vLLM's refusal of the architecture.
    arch = "Qwen3_5ForConditionalGeneration" if export else "Qwen3_5ForCausalLM"
    assert f"Model architectures ['{arch}'] failed to be inspected" in line
