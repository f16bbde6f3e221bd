"""The incident diagnosed in one run: config views x backends on the shipped fixtures, one named cause,
and a verdict that needs no threshold.

The fixtures (tests/fixtures/models, see test_accept.py) seed the incident's faults: a window the
config class drops (window-lost), target layer ids one off (layers-off), a wrong mask token
(wrong-mask). The engine cell is played by the reference backend reading the target's layer ids one
off (``layer_offset=0``): a simulated engine fault, named as such in the result, so the engine
diagnosis is tested where no vLLM is installed. The real vLLM cell is ``test_vllm_engine_agrees...``,
marked ``vllm``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import types
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from draftguard.cli import main  # noqa: E402
from draftguard.errors import RawViewUnavailable  # noqa: E402
from draftguard.runner import diagnosis as dia  # noqa: E402
from draftguard.runner.result import AcceptanceResult  # noqa: E402
from draftguard.snapshot import BadInput  # noqa: E402

FIXTURES = Path(__file__).resolve().parent / "fixtures"
MODELS = FIXTURES / "models"
TARGET = MODELS / "target"
PROMPTS = MODELS / "prompts.jsonl"


def accept(capsys, drafter: str, *args: str) -> tuple[int, dict]:
    code = main(["accept", "--target", str(TARGET), "--drafter", str(MODELS / drafter), "--prompts", str(PROMPTS),
                 "--max-new-tokens", "32", "--quiet", "--format", "json", *args])
    out, err = capsys.readouterr()
    assert code in (0, 1), err
    AcceptanceResult.from_json(out, "stdout")  # the contract reads back
    return code, json.loads(out)


def test_window_lost_is_a_config_rewrite_with_no_threshold_given(capsys):
    """The default view choice runs both views (the light check finds `sliding_window` rewritten), and
    the paired comparison names the config class, the key and the cost."""
    code, out = accept(capsys, "drafter-window-lost")
    assert code == 1 and out["verdict"]["status"] == "fail"
    assert out["thresholds"]["bar"] is None
    d = out["diagnosis"]
    assert d["cause"] == "config-rewrite"
    assert d["reason"].startswith("τ 4.00 as written, ") and "as Qwen3Config resolves it (−" in d["reason"]
    assert "`sliding_window` dropped" in d["reason"]
    assert d["rewritten"] == [{"key": "sliding_window", "raw": 6, "resolved": None, "text": "dropped", "rule": "DG001"}]
    pair = d["intervals"][0]
    assert (pair["a"], pair["b"]) == ("raw/reference", "resolved/reference")
    assert pair["interval"][1] < dia.SAME_TOLERANCE and pair["tau_a"] == pytest.approx(4.0)
    # Both views' figures; the top level is the resolved view (what an engine trusting the class runs).
    assert set(out["views"]) == {"raw", "resolved"}
    assert out["views"]["raw"]["mean_acceptance_length"] == pytest.approx(4.0)
    assert out["mean_acceptance_length"] == out["views"]["resolved"]["mean_acceptance_length"] < 1.5
    assert out["run"]["config_view"] == "both" and "`sliding_window`" in out["run"]["config_view_chosen"]
    # Per-prompt τ pair up prompt by prompt: the same prompts ran in both views.
    assert len(out["views"]["raw"]["per_prompt_tau"]) == len(out["views"]["resolved"]["per_prompt_tau"])


@pytest.mark.parametrize("drafter", ["drafter-wrong-mask", "drafter-layers-off"])
def test_both_views_low_blame_the_drafter(capsys, drafter):
    # wrong-mask's first position (0.10) is below the default floor; layers-off's (0.30) is below 0.4.
    floor = ["--min-first-position", "0.4"] if drafter == "drafter-layers-off" else []
    code, out = accept(capsys, drafter, "--config-view", "both", *floor)
    assert code == 1 and out["diagnosis"]["cause"] == "drafter", out["diagnosis"]["reason"]
    assert out["diagnosis"]["cells"] == {"raw/reference": "low", "resolved/reference": "low"}
    # The views are the same config: their paired ratio is exactly 1.
    assert out["diagnosis"]["intervals"][0]["interval"] == [1.0, 1.0]


def test_layers_off_against_a_bar_is_the_drafter_and_without_one_is_undecided(capsys):
    code, out = accept(capsys, "drafter-layers-off", "--config-view", "both", "--min-acceptance-length", "3")
    assert code == 1 and out["diagnosis"]["cause"] == "drafter"
    # First position 0.30: not below the floor 0.2, not healthy either; no bar: truly undecided.
    code, out = accept(capsys, "drafter-layers-off", "--config-view", "both", "--num-prompts", "8")
    assert code == 0 and out["verdict"]["status"] == "inconclusive" and out["diagnosis"]["cause"] is None


def test_healthy_drafter_in_both_views_is_none(capsys):
    code, out = accept(capsys, "drafter", "--config-view", "both")
    assert code == 0 and out["verdict"]["status"] == "pass"
    assert out["diagnosis"]["cause"] == "none" and out["diagnosis"]["rewritten"] == []


def test_identical_views_run_one_view_by_default(capsys):
    code, out = accept(capsys, "drafter", "--num-prompts", "4")
    assert out["run"]["config_view"] == "resolved" and out["views"] is None and out["diagnosis"] is None
    assert out["run"]["config_view_chosen"].startswith("resolved: the light check finds no key")


def test_a_single_view_fails_as_catastrophic_below_the_floor(capsys):
    """wrong-mask's views are identical, so one runs; with no bar its first position settles the verdict."""
    code, out = accept(capsys, "drafter-wrong-mask")
    assert code == 1 and out["diagnosis"]["cause"] == "catastrophic"
    assert "lies wholly below the floor 0.2" in out["verdict"]["reason"]
    assert out["run"]["stopped_early"]  # the floor settles it before the prompts run out
    code, out = accept(capsys, "drafter-wrong-mask", "--min-first-position", "0.05", "--num-prompts", "8")
    assert code == 0 and out["verdict"]["status"] == "inconclusive" and out["diagnosis"] is None


def test_min_first_position_out_of_range_is_bad_input(capsys):
    code = main(["accept", "--target", str(TARGET), "--drafter", str(MODELS / "drafter"), "--prompts", str(PROMPTS),
                 "--min-first-position", "1.5", "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "--min-first-position must be in (0, 1)" in err


# --- the engine column ------------------------------------------------------------------------------


def _args(drafter: str, *extra: str) -> argparse.Namespace:
    from draftguard.runner.cli import add_accept_parser

    parser = argparse.ArgumentParser()
    add_accept_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["accept", "--target", str(TARGET), "--drafter", str(MODELS / drafter),
                              "--prompts", str(PROMPTS), "--max-new-tokens", "32", "--quiet", *extra])


def _cells_run(drafter: str, views: tuple[str, ...], engine_offset: int, *extra: str) -> AcceptanceResult:
    """run_cells with the reference as the reference and a second ReferenceBackend as the engine:
    ``engine_offset`` 0 makes that engine read the target's layer ids one off."""
    from draftguard.runner import cli
    from draftguard.runner.prompts import select_prompts
    from draftguard.runner.reference import ReferenceBackend
    from draftguard.runner.stats import make_thresholds

    args = _args(drafter, *extra)
    cli._settings(args)
    args.backend = "both"
    _, config_class, rewrites = cli.config_views("both", args.drafter)

    def engine(view: str) -> ReferenceBackend:
        return ReferenceBackend(args.target, args.drafter, view=view, layer_offset=engine_offset)

    return cli.run_cells(args, select_prompts(args.prompts, None), make_thresholds(), {"drafter": args.drafter},
                         views, config_class=config_class, rewrites=rewrites, engine=engine)


def test_an_engine_reading_layer_ids_one_off_is_named_engine():
    from draftguard.runner.reference import LAYER_IDS_ONE_OFF

    result = _cells_run("drafter", ("resolved", "raw"), 0)
    d = result.diagnosis
    assert d["cause"] == "engine", d["reason"]
    assert result.verdict.status == "fail"
    assert d["reason"].startswith(f"{LAYER_IDS_ONE_OFF} τ ") and "target_layer_ids + 1" in d["reason"]
    # The 2 x 2 table: views x backends, the engine named for what it is.
    assert set(result.views) == {"raw", "resolved"}
    assert set(result.views["raw"]) == {"reference", LAYER_IDS_ONE_OFF}
    assert d["cells"]["raw/reference"] == "ok"
    gaps = [p for p in d["intervals"] if p["a"].endswith("/reference") and p["b"].endswith(LAYER_IDS_ONE_OFF)]
    assert len(gaps) == 2 and all(p["interval"][1] < dia.SAME_TOLERANCE for p in gaps)


def test_an_engine_that_reads_the_drafter_right_agrees_with_the_reference():
    """The same 2 x 2 with an engine that reads layer ids as the format says: nothing to blame."""
    result = _cells_run("drafter", ("resolved", "raw"), 1)
    assert result.diagnosis["cause"] == "none" and result.verdict.status == "pass"


def test_the_window_fault_in_a_2x2_is_the_config_rewrite_also_with_a_faulty_engine():
    result = _cells_run("drafter-window-lost", ("resolved", "raw"), 0)
    d = result.diagnosis
    assert d["cause"] == "config-rewrite" and "`sliding_window` dropped" in d["reason"]
    assert "; also " in d["reason"]  # the engine's own gap is not hidden


def test_markdown_sticky_section_shows_the_table_and_the_cause_in_one_line(capsys):
    from draftguard.report.comment import render_acceptance_section

    _, out = accept(capsys, "drafter-window-lost", "--num-prompts", "8")
    section = render_acceptance_section("done", out)
    lines = section.splitlines()
    assert "| config view | reference |" in lines
    assert any(line.startswith("| raw (as written) | τ 4.00") for line in lines)
    assert any(line.startswith("| resolved (as Qwen3Config resolves it) | τ 1.") and "⚠️" in line for line in lines)
    cause = [line for line in lines if line.startswith("**cause: config-rewrite** — ")]
    assert len(cause) == 1 and "<code>sliding_window</code> dropped" in cause[0]
    # The reason is said once: on the cause line, not again on the verdict line.
    assert section.count("as written") == 2  # the table's row label and the cause line


# --- shared work between views ------------------------------------------------------------------------


@pytest.mark.parametrize("drafter", ["drafter-window-lost", "drafter-wrong-mask"])
def test_replayed_views_count_exactly_what_their_own_runs_count(drafter):
    """The second view replays the first view's target trace: same tokens, same counters, prompt for
    prompt, as running it on its own (in either order)."""
    from draftguard.runner.reference import ReferenceBackend

    prompts = [json.loads(line)["input_ids"] for line in PROMPTS.read_text().splitlines()[:6]]
    for views in (("resolved", "raw"), ("raw", "resolved")):
        shared = ReferenceBackend(str(TARGET), str(MODELS / drafter), views=views)
        alone = {v: ReferenceBackend(str(TARGET), str(MODELS / drafter), view=v) for v in views}
        for i, prompt in enumerate(prompts):
            both = shared.run_prompt_views(i, prompt, 32)
            for view in views:
                result, tokens = alone[view].run_prompt(i, prompt, 32)
                assert both[view][1] == tokens
                assert (both[view][0].drafts, both[view][0].accepted_per_position) == (
                    result.drafts, result.accepted_per_position), (view, i)


def test_views_share_one_target():
    from draftguard.runner.reference import ReferenceBackend

    backend = ReferenceBackend(str(TARGET), str(MODELS / "drafter-window-lost"), views=("resolved", "raw"))
    assert backend.drafters["raw"].spec.layer_windows == [6, None]
    assert backend.drafters["resolved"].spec.layer_windows == [None, None]
    # Context features come from the one target: no second copy of it was loaded.
    assert sum(isinstance(m, torch.nn.Module) and hasattr(m, "lm_head") for m in vars(backend).values()) == 1


# --- the default elsewhere: the bot's GPU job and the Action ----------------------------------------------


def test_gpu_job_and_action_leave_the_view_to_accept(tmp_path):
    """Neither pins a view, so accept's auto choice (both where the light check finds a rewrite) holds."""
    from draftguard import action
    from draftguard.runner.gpu_job import accept_command, run_acceptance_job
    from draftguard.settings import Settings

    assert "--config-view" not in accept_command("t", "d", Settings(), python="python", env={})
    assert "--config-view" not in action.accept_command("t", "d", Settings(), backend_default=action.ACTION_BACKEND,
                                                         settings_dir="/s", quiet=True)
    env = {"DRAFTGUARD_ACCEPT_ARGS": f"--prompts {PROMPTS} --max-new-tokens 32 --quiet",
           "DRAFTGUARD_DEVICE": "cpu", "PATH": "/usr/bin:/bin"}
    result = run_acceptance_job(str(TARGET), str(MODELS / "drafter-window-lost"), Settings(), env=env)
    assert result["diagnosis"]["cause"] == "config-rewrite" and set(result["views"]) == {"raw", "resolved"}


# --- the contract ---------------------------------------------------------------------------------------


def test_a_diagnosis_with_an_unknown_cause_is_bad_input():
    from draftguard.runner.result import PromptResult

    p = PromptResult.from_counts(0, drafts=1, draft_tokens=3, accepted_tokens=3, accepted_per_position=[1, 1, 1],
                                 new_tokens=4)
    data = AcceptanceResult.from_prompts([p], wall_seconds=1.0).to_dict()
    assert data["views"] is None and data["diagnosis"] is None
    data["diagnosis"] = {"cause": "gremlins", "reason": "?"}
    with pytest.raises(BadInput, match="`diagnosis.cause` must be one of none, config-rewrite"):
        AcceptanceResult.from_dict(data, "r.json")


def test_raw_view_for_an_engine_keeps_the_window_and_refuses_unknown_rewrites(tmp_path):
    _, found = dia.light_check_rewrites(str(MODELS / "drafter-window-lost"))
    folder = Path(dia.raw_view_folder(str(MODELS / "drafter-window-lost"), found, str(tmp_path / "raw")))
    config = json.loads((folder / "config.json").read_text())
    assert config["use_sliding_window"] is True and (folder / "model.safetensors").is_symlink()
    with pytest.raises(RawViewUnavailable, match="`rope_theta`"):
        dia.raw_view_folder(str(MODELS / "drafter"), [dia.Rewrite("rope_theta", 1.0, 2.0, "1.0 → 2.0", "DG001")],
                            str(tmp_path / "other"))


# --- the real engine ------------------------------------------------------------------------------------

VLLM_MODELS = FIXTURES / "vllm-models"


@pytest.mark.vllm
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed here")
@pytest.mark.skipif(not (VLLM_MODELS / "target").is_dir(), reason="no vLLM-runnable fixtures (head_dim >= 32)")
def test_vllm_engine_agrees_with_the_reference_on_a_healthy_drafter(capsys, monkeypatch):
    # As a user runs it on a CPU: no memory setting. vLLM's CPU build then got 0.85 of the RAM and refused to
    # start beside the main pass ("Available memory on node 0 ... is less than desired CPU memory utilization").
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    code = main(["accept", "--target", str(VLLM_MODELS / "target"), "--drafter", str(VLLM_MODELS / "drafter"),
                 "--prompts", str(PROMPTS), "--max-new-tokens", "32", "--quiet", "--format", "json",
                 "--backend", "both", "--config-view", "resolved", "--enforce-eager"])
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert out["diagnosis"]["cause"] == "none", out["diagnosis"]["reason"]
    assert code == 0
    assert "running with a 4 GiB KV cache instead" in captured.err


def test_vllm_gets_the_raw_view_as_a_folder_whose_config_keeps_the_window(monkeypatch, capsys):
    """`--backend vllm` with both views on the fake engine (tests/test_vllm_backend.py): one engine per
    view, the raw one started on a copy whose config.json keeps `sliding_window` through the class."""
    from draftguard.runner import vllm as vb
    from tests.test_vllm_backend import FakeLLM, FakeSamplingParams

    module = types.ModuleType("vllm")
    module.LLM, module.SamplingParams, module.__version__ = FakeLLM, FakeSamplingParams, "0.0-fake"
    monkeypatch.setitem(sys.modules, "vllm", module)
    FakeLLM.instances.clear()
    seen: list[dict] = []
    start = FakeLLM.__init__

    def record(self, **kwargs):
        drafter = Path(kwargs["speculative_config"]["model"])
        seen.append(json.loads((drafter / "config.json").read_text()))
        start(self, **kwargs)

    monkeypatch.setattr(FakeLLM, "__init__", record)
    monkeypatch.delenv(vb.RUNNER_ENV, raising=False)
    code, out = accept(capsys, "drafter-window-lost", "--backend", "vllm", "--num-prompts", "6")
    assert [c.get("use_sliding_window") for c in seen] == [None, True]  # resolved first, then raw
    assert set(out["views"]) == {"raw", "resolved"} and out["run"]["backend"] == "vllm"
    pair = out["diagnosis"]["intervals"][0]
    assert (pair["a"], pair["b"]) == ("raw/vllm", "resolved/vllm")  # no reference ran: views compared in vLLM


def _cell(accepted: list[int], first: list[int]) -> AcceptanceResult:
    from draftguard.runner.result import PromptResult

    prompts = [PromptResult.from_counts(i, drafts=10, draft_tokens=30, accepted_tokens=a,
                                        accepted_per_position=[f, 0, 0], new_tokens=20)
               for i, (a, f) in enumerate(zip(accepted, first))]
    return AcceptanceResult.from_prompts(prompts, wall_seconds=1.0)


def test_the_served_cell_below_its_bar_with_no_single_cause_is_a_failure_not_a_crash():
    """A served cell below the bar that no rewrite, engine gap or second cell explains (one vLLM run
    with --min-acceptance-length, as the GPU job and the CPU example run it) reached a branch that
    raised TypeError (``**base`` on a string), and `accept` exited 3."""

    from draftguard.runner.result import Thresholds

    low = _cell([10, 12, 9, 11, 10, 12], [6, 7, 5, 6, 6, 7])  # τ about 1.9, well under a bar of 3
    d = dia.diagnose({("resolved", "vllm"): low}, Thresholds(bar=3.0), config_class="Qwen3Config")
    assert (d.cause, d.status) == (None, dia.FAIL)
    assert "below the bar" in d.reason and "vllm" in d.reason
    assert d.config_class == "Qwen3Config" and d.cells  # the shared fields are kept, as every other branch keeps them
