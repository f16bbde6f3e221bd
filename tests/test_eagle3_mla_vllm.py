"""vLLM 0.32's CPU build runs the DeepSeek MLA EAGLE-3 head (deepseek_eagle3.py) as the reference does
(tests/test_eagle3_mla.py builds the heads at test time). Its CPU MLA leaves the key's RoPE out
(docs/acceptance.md, tests/test_mtp_dsv3.py's strict xfail), so on the trained dsv3 target its texts are
not the reference's; a copy whose key's rotary rows are zero, target and head alike, takes that bug out,
and there the two must agree."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_eagle3_mla import accept, mla_head  # noqa: F401  (the session fixture: one trained head)

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
def test_vllm_runs_the_mla_head_as_the_reference_where_its_cpu_mla_is_not_in_the_way(capsys, monkeypatch,
                                                                                     rope_free_pair):
    pytest.importorskip("vllm")
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    target, head = rope_free_pair
    code, result, err = accept(capsys, head, *BOTH, "--num-prompts", "6", "--target", str(target))
    assert result is not None, err
    diff = result.run["differential"]
    assert diff["reference_tau"] > 2.0, diff
    assert abs(diff["vllm_tau"] / diff["reference_tau"] - 1) <= 0.05, diff
    assert diff["same_tokens"] == diff["prompts"] == 6, diff


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
