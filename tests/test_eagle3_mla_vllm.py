"""vLLM 0.32's CPU build runs the DeepSeek MLA EAGLE-3 head (deepseek_eagle3.py) as the reference does
(tests/test_eagle3_mla.py builds the heads at test time). Its CPU MLA leaves the key's RoPE out
(docs/acceptance.md, tests/test_mtp_dsv3.py's strict xfail), so on the trained dsv3 target its texts are
not the reference's; a copy whose key's rotary rows are zero, target and head alike, takes that bug out,
and there the two must agree."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_eagle3_mla import accept, mla_head, variant, weights  # noqa: F401  (mla_head: the session fixture)

BOTH = ("--backend", "both", "--enforce-eager", "--gpu-memory-utilization", "0.4", "--no-early-stop",
        "--num-speculative-tokens", "3")


@pytest.fixture(scope="session")
def rope_free_pair(tmp_path_factory) -> tuple[Path, Path]:
    """(target, head): dsv3 with its key's rotary rows zeroed, and a head trained on it with its own zeroed."""
    from make_eagle3_mla import build, rope_free_target

    folder = tmp_path_factory.mktemp("eagle3-mla-rope-free")
    target = rope_free_target(folder / "target")
    return target, build(folder / "head", target, rope_free=True)


@pytest.mark.vllm
def test_vllm_runs_the_mla_head_as_the_reference_where_its_cpu_mla_is_not_in_the_way(capsys, monkeypatch, tmp_path,
                                                                                     rope_free_pair):
    """Measured: τ 2.644 both, the same tokens on 6 of 6; without d2t 1.000 both, DG131 in the notes."""
    pytest.importorskip("vllm")
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    target, head = rope_free_pair
    code, result, err = accept(capsys, head, *BOTH, "--num-prompts", "6", "--target", str(target))
    assert result is not None, err
    diff = result.run["differential"]
    assert diff["reference_tau"] > 2.0, diff
    assert abs(diff["vllm_tau"] / diff["reference_tau"] - 1) <= 0.05, diff
    assert diff["same_tokens"] == diff["prompts"] == 6, diff
    # The faulty copy without d2t (its draft vocabulary reversed): vLLM too drafts target id i for draft id i.
    from make_eagle3_models import permuted_head

    state = {k: v for k, v in permuted_head(weights(head)).items() if k != "d2t"}
    code, faulty, err = accept(capsys, variant(head, tmp_path / "no-d2t", state=state), *BOTH, "--num-prompts", "4",
                               "--target", str(target), "--min-acceptance-length", "2.0")
    assert code == 1 and faulty is not None, err
    diff = faulty.run["differential"]
    assert diff["reference_tau"] < 1.2 and diff["vllm_tau"] < 1.2 and faulty.diagnosis["cause"] == "drafter", diff


@pytest.mark.vllm
@pytest.mark.xfail(strict=True, reason="vLLM 0.32's CPU MLA leaves the key's RoPE out, the target's and the head's: "
                   "measured 2026-12-05, 6 prompts, K = 3: vLLM τ 1.56 against the reference's 3.61, no text the "
                   "same (engine mismatch); strict, so a vLLM that rotates the key shows here")
def test_vllm_runs_the_trained_mla_head_within_5_percent(capsys, monkeypatch, mla_head):  # noqa: F811
    pytest.importorskip("vllm")
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    code, result, err = accept(capsys, mla_head, *BOTH, "--num-prompts", "6")
    assert result is not None, err
    diff = result.run["differential"]
    assert abs(diff["vllm_tau"] / diff["reference_tau"] - 1) <= 0.05, diff
