"""The vLLM backend without a GPU: metric snapshots shaped exactly like vLLM's metric reader types,
per-prompt deltas, the engine arguments, and the error when vLLM is missing.

``FakeLLM`` stands in for ``vllm.LLM``: it keeps Prometheus-style process totals the way vLLM's
``SpecDecodingProm`` does (counters per engine label, a per-position vector) and hands them out through
``get_metrics()`` as the reader's dataclasses. It also keeps the true figures of each request, so the
backend's deltas are checked against what really happened per prompt.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import types
from dataclasses import dataclass
from pathlib import Path

import pytest

from draftguard.errors import VllmOptionError
from draftguard.runner import engine_options as eo
from draftguard.runner import metrics as m
from draftguard.runner import vllm as vb
from draftguard.runner.result import AcceptanceResult

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "tests" / "fixtures" / "models"


# The metric reader's types, as in vllm/v1/metrics/reader.py (vLLM 0.33.0).
@dataclass
class Metric:
    name: str
    labels: dict[str, str]


@dataclass
class Counter(Metric):
    value: int


@dataclass
class Vector(Metric):
    values: list[int]


@dataclass
class Gauge(Metric):
    value: float


@dataclass
class Histogram(Metric):
    count: int
    sum: float
    buckets: dict[str, int]


class FakeLLM:
    """A DFlash engine that accepts ``schedule[step % len(schedule)]`` drafted tokens per step, from a step
    that depends on the prompt, so prompts get different figures."""

    instances: list["FakeLLM"] = []
    fail_with: Exception | None = None

    def __init__(self, **kwargs):
        if FakeLLM.fail_with is not None:
            raise FakeLLM.fail_with
        if kwargs.get("disable_log_stats", True):
            raise AssertionError("vLLM's LLM defaults to disable_log_stats=True; get_metrics() would assert")
        self.kwargs = kwargs
        self.env_at_start = os.environ.get(vb.RUNNER_ENV)
        self.n = kwargs["speculative_config"]["num_speculative_tokens"]
        self.engines = 2  # counters arrive per engine label, as under data parallelism
        self.totals = {e: {"drafts": 0, "draft_tokens": 0, "accepted": 0, "per_pos": [0] * self.n}
                       for e in range(self.engines)}
        self.schedule = [self.n, 1, 0, 2, self.n, self.n, 0]
        self.requests: list[dict] = []
        FakeLLM.instances.append(self)

    def get_metrics(self):
        out = [Gauge("vllm:num_requests_running", {"engine": "0"}, 0.0),
               Histogram("vllm:e2e_request_latency_seconds", {"engine": "0"}, 3, 1.5, {"+Inf": 3}),
               Counter("vllm:prompt_tokens", {"engine": "0"}, 123)]
        for e, t in self.totals.items():
            labels = {"model_name": "t", "engine": str(e)}
            out += [Counter(m.DRAFTS, labels, t["drafts"]), Counter(m.DRAFT_TOKENS, labels, t["draft_tokens"]),
                    Counter(m.ACCEPTED, labels, t["accepted"]), Vector(m.PER_POS, labels, list(t["per_pos"]))]
        return out

    def generate(self, prompts, sampling_params, use_tqdm=True):
        assert use_tqdm is False
        assert sampling_params.temperature == 0.0
        outputs = []
        for p in prompts:
            engine = len(self.requests) % self.engines
            t = self.totals[engine]
            truth = {"drafts": 0, "draft_tokens": 0, "accepted": 0, "per_pos": [0] * self.n}
            tokens: list[int] = []
            step = len(p["prompt_token_ids"])  # a different pattern per prompt length
            while len(tokens) < sampling_params.max_tokens:
                a = min(self.n, self.schedule[step % len(self.schedule)])
                step += 1
                for rec in (t, truth):
                    rec["drafts"] += 1
                    rec["draft_tokens"] += self.n
                    rec["accepted"] += a
                    for i in range(a):
                        rec["per_pos"][i] += 1
                tokens.extend(range(a + 1))
            self.requests.append({**truth, "prompt_tokens": len(p["prompt_token_ids"])})
            outputs.append(types.SimpleNamespace(outputs=[types.SimpleNamespace(token_ids=tokens[: sampling_params.max_tokens])]))
        return outputs


class FakeSamplingParams:
    def __init__(self, **kwargs):
        self.__dict__.update(kwargs)
        self.kwargs = kwargs


@pytest.fixture
def fake_vllm(monkeypatch):
    module = types.ModuleType("vllm")
    module.LLM, module.SamplingParams, module.__version__ = FakeLLM, FakeSamplingParams, "0.0-fake"
    monkeypatch.setitem(sys.modules, "vllm", module)
    monkeypatch.delenv(vb.RUNNER_ENV, raising=False)
    FakeLLM.instances.clear()
    FakeLLM.fail_with = None
    yield module
    FakeLLM.fail_with = None


def snapshot(drafts, draft_tokens, accepted, per_pos, labels=None):
    labels = labels or {"engine": "0"}
    return [Counter(m.DRAFTS, labels, drafts), Counter(m.DRAFT_TOKENS, labels, draft_tokens),
            Counter(m.ACCEPTED, labels, accepted), Vector(m.PER_POS, labels, per_pos)]


# ---- metrics -------------------------------------------------------------------------------------


def test_read_counts_sums_engines_and_ignores_other_metrics():
    snap = (snapshot(10, 30, 18, [9, 6, 3], {"engine": "0"}) + snapshot(4, 12, 5, [3, 2, 0], {"engine": "1"})
            + [Gauge("vllm:gpu_cache_usage_perc", {}, 0.5), Counter("vllm:generation_tokens", {}, 999),
               Histogram("vllm:time_to_first_token_seconds", {}, 2, 0.3, {"+Inf": 2})])
    c = m.read_counts(snap)
    assert (c.drafts, c.draft_tokens, c.accepted_tokens, c.accepted_per_position) == (14, 42, 23, [12, 8, 3])
    assert c.found and c.mean_acceptance_length == pytest.approx(1 + 23 / 14)


def test_delta_is_one_prompts_work_and_vectors_may_grow():
    before = m.read_counts(snapshot(5, 10, 4, [3, 1]))
    after = m.read_counts(snapshot(9, 22, 11, [7, 3, 1]))
    d = after - before
    assert (d.drafts, d.draft_tokens, d.accepted_tokens, d.accepted_per_position) == (4, 12, 7, [4, 2, 1])
    r = m.prompt_result(2, d, new_tokens=11, wall_seconds=0.5, label="p2", positions=3)
    assert r.mean_acceptance_length == pytest.approx(1 + 7 / 4)
    assert (r.index, r.label, r.new_tokens) == (2, "p2", 11)


def test_counter_going_down_is_an_error_not_a_negative_count():
    with pytest.raises(m.MetricsError, match="went down"):
        m.read_counts(snapshot(1, 3, 1, [1])) - m.read_counts(snapshot(5, 15, 9, [4]))


def test_no_spec_decode_metrics_says_how_to_turn_them_on():
    counts = m.read_counts([Gauge("vllm:num_requests_running", {}, 0.0)])
    assert not counts.found
    with pytest.raises(m.MetricsError, match="disable_log_stats=False"):
        m.require_spec_decode(counts)


def test_wrong_metric_shapes_are_named():
    with pytest.raises(m.MetricsError, match="Vector"):
        m.read_counts([Counter(m.PER_POS, {}, 3)])
    with pytest.raises(m.MetricsError, match="Counter"):
        m.read_counts([Vector(m.DRAFTS, {}, [1])])


def test_a_counter_that_is_not_a_count_is_named_not_cut_or_crashed():
    """Infinity once escaped as an OverflowError traceback, and 2.5 drafts were cut to 2."""
    for bad in (float("inf"), 2.5, "many"):
        with pytest.raises(m.MetricsError, match=f"{m.DRAFTS} has a value that is not a count"):
            m.read_counts([Counter(m.DRAFTS, {}, bad)])
    assert m.read_counts([Counter(m.DRAFTS, {}, 4.0), Counter(m.DRAFTS, {"engine": "1"}, "3")]).drafts == 7


def test_positions_beyond_the_speculative_width_are_refused():
    with pytest.raises(m.MetricsError, match="num_speculative_tokens"):
        m.prompt_result(0, m.SpecDecodeCounts(1, 4, 4, [1, 1, 1, 1]), new_tokens=5, positions=3)


# ---- the backend, on the fake engine --------------------------------------------------------------


def test_per_prompt_figures_are_deltas_of_each_prompt(fake_vllm):
    backend = vb.VllmBackend(str(MODELS / "target"), str(MODELS / "drafter"))
    llm = FakeLLM.instances[-1]
    # Traffic before the test (a warm-up) must not leak into the first prompt.
    llm.generate([{"prompt_token_ids": [40, 1, 2]}], FakeSamplingParams(temperature=0.0, max_tokens=9), use_tqdm=False)
    prompts = [[40, 1, 2, 3], [40, 5, 7], [40, 2, 4, 6, 8, 10]]
    results = [backend.run_prompt(i, p, max_new_tokens=20, label=f"p{i}")[0] for i, p in enumerate(prompts)]
    for r, truth in zip(results, llm.requests[1:]):
        assert (r.drafts, r.draft_tokens, r.accepted_tokens, r.accepted_per_position) == (
            truth["drafts"], truth["draft_tokens"], truth["accepted"], truth["per_pos"])
        assert r.new_tokens == 20
    # The prompts differ, so equal figures would mean the deltas were not per prompt.
    assert len({r.accepted_tokens for r in results}) > 1
    total = AcceptanceResult.from_prompts(results, wall_seconds=1.0)
    assert total.accepted_tokens == sum(t["accepted"] for t in llm.requests[1:])
    assert len(total.per_position_acceptance) == 3  # block 4: the anchor and 3 drafted tokens


def test_engine_arguments_follow_the_drafter_and_the_options(fake_vllm):
    opts = vb.EngineOptions(attention_backend="FLASH_ATTN", model_runner="v2", max_model_len=256)
    backend = vb.VllmBackend(str(MODELS / "target"), str(MODELS / "drafter-window-lost"), opts)
    kw = FakeLLM.instances[-1].kwargs
    assert kw["speculative_config"] == {"method": "dflash", "model": str(MODELS / "drafter-window-lost"),
                                        "num_speculative_tokens": 3, "attention_backend": "FLASH_ATTN"}
    assert kw["attention_config"] == {"backend": "FLASH_ATTN"}
    assert kw["max_model_len"] == 256 and kw["trust_remote_code"] is False
    # The fixture target ships no tokenizer: prompts are token ids, nothing to detokenize.
    assert kw["skip_tokenizer_init"] is True
    assert FakeLLM.instances[-1].env_at_start == "1"
    params = backend.sampling_params(32)
    assert params.kwargs["stop_token_ids"] == [41] and params.kwargs["detokenize"] is False
    assert backend.run_info()["engine"] == {"attention_backend": "FLASH_ATTN", "model_runner": "v2",
                                            "max_model_len": 256, "gpu_memory_utilization": 0.85}


def test_model_runner_v1_and_auto(fake_vllm, monkeypatch):
    vb.VllmBackend(str(MODELS / "target"), str(MODELS / "drafter"), vb.EngineOptions(model_runner="v1"))
    assert FakeLLM.instances[-1].env_at_start == "0"
    monkeypatch.setenv(vb.RUNNER_ENV, "1")
    vb.VllmBackend(str(MODELS / "target"), str(MODELS / "drafter"), vb.EngineOptions())
    assert FakeLLM.instances[-1].env_at_start is None


def test_engine_start_failure_is_one_line_with_vllms_reason(fake_vllm):
    FakeLLM.fail_with = ValueError("Unsupported DFlash drafter architecture\nlong traceback text")
    with pytest.raises(vb.EngineStartError) as err:
        vb.VllmBackend(str(MODELS / "target"), str(MODELS / "drafter"))
    assert "Unsupported DFlash drafter architecture" in str(err.value)
    assert "\n" not in str(err.value) and "0.0-fake" in str(err.value)


def test_cli_options_parse_and_validate():
    p = argparse.ArgumentParser()
    eo.add_engine_arguments(p)
    opts = eo.engine_options(p.parse_args(["--attention-backend", "TRITON_ATTN", "--long-context-tokens", "0",
                                           "--num-speculative-tokens", "7", "--enforce-eager"]))
    assert (opts.attention_backend, opts.long_context_tokens, opts.num_speculative_tokens, opts.enforce_eager) == (
        "TRITON_ATTN", 0, 7, True)
    for bad in (["--gpu-memory-utilization", "1.5"], ["--num-speculative-tokens", "0"], ["--long-context-tokens", "-1"]):
        with pytest.raises(VllmOptionError, match=bad[0]):
            eo.engine_options(p.parse_args(bad))


def test_compilation_config_is_a_json_object_passed_to_the_engine_as_it_is(fake_vllm):
    """``--compilation-config`` is vLLM's own (docs/acceptance.md: HY-V4 on the CPU build runs RoPE as plain PyTorch
    with ``{"custom_ops": ["-rotary_embedding"]}``); anything but a JSON object is one line and exit 2."""
    p = argparse.ArgumentParser()
    eo.add_engine_arguments(p)
    opts = eo.engine_options(p.parse_args(["--compilation-config", '{"custom_ops": ["-rotary_embedding"]}']))
    vb.VllmBackend(str(MODELS / "target"), str(MODELS / "drafter"), opts)
    assert FakeLLM.instances[-1].kwargs["compilation_config"] == {"custom_ops": ["-rotary_embedding"]}
    vb.VllmBackend(str(MODELS / "target"), str(MODELS / "drafter"), vb.EngineOptions())
    assert "compilation_config" not in FakeLLM.instances[-1].kwargs  # vLLM's own default
    for bad, said in (('["-rotary_embedding"]', "must be a JSON object"), ("{custom_ops}", "is not JSON")):
        with pytest.raises(VllmOptionError, match=said):
            eo.engine_options(p.parse_args(["--compilation-config", bad]))


def test_hyv4_on_vllms_cpu_build_is_told_of_the_rope_kernel_and_the_switch(tmp_path):
    """vLLM 0.32's CPU build turns HY-V4's RoPE wrong (tests/test_mtp_hyv4_vllm.py measures it): a run there says
    so and names the switch; with the switch, off CPU, or for another family it says nothing."""
    folder = tmp_path / "hy"
    folder.mkdir()
    (folder / "config.json").write_text('{"architectures": ["HYV4ForCausalLM"], "model_type": "hy_v4"}')
    note = eo.cpu_rope_note(str(folder), vb.EngineOptions(method="mtp"), on_cpu=True)
    assert "turns HY-V4's RoPE wrong" in note and eo.ROPE_SWITCH in note
    switched = vb.EngineOptions(method="mtp", compilation_config={"custom_ops": ["-rotary_embedding"]})
    assert eo.cpu_rope_note(str(folder), switched, on_cpu=True) is None
    assert eo.cpu_rope_note(str(folder), vb.EngineOptions(method="mtp"), on_cpu=False) is None
    assert eo.cpu_rope_note(str(MODELS / "target"), vb.EngineOptions(), on_cpu=True) is None


def test_long_context_prompt_runs_past_the_window():
    facts = vb.drafter_facts(str(MODELS / "drafter"))
    assert (facts.block_size, facts.sliding_window) == (4, 6)
    length = eo.long_context_length(vb.EngineOptions(), facts, 32)
    prompt = eo.long_context_prompt([[40, 1, 2, 3], [40, 9, 8]], length)
    assert len(prompt) == length > facts.sliding_window
    assert eo.long_context_length(vb.EngineOptions(long_context_tokens=0), facts, 32) == 0
    # A drafter without sliding layers gets no long prompt unless asked.
    assert eo.long_context_length(vb.EngineOptions(), eo.DrafterFacts(16, None, 0), 32) == 0


# ---- vLLM missing ---------------------------------------------------------------------------------


def _without_vllm(tmp_path: Path) -> dict[str, str]:
    """An environment where `import vllm` fails even on a runner that has it installed."""
    blocker = tmp_path / "block" / "vllm"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'vllm'\", name='vllm')\n")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path / "block"), str(ROOT)])
    env.pop("DRAFTGUARD_DEBUG", None)
    return env


def test_missing_vllm_in_process_names_the_extra_and_the_runner(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # what Python does for a module that cannot be imported
    with pytest.raises(vb.VllmMissing) as err:
        vb.import_vllm()
    assert "pip install -c constraints.txt -e '.[vllm]'" in str(err.value) and "GPU runner" in str(err.value)


# ---- the GPU job ----------------------------------------------------------------------------------


def _fake_accept(tmp_path: Path, body: str) -> str:
    """An interpreter stand-in for `python -m draftguard accept ...`: records its argv, then runs body."""
    script = tmp_path / "fake-python"
    script.write_text(f"#!{sys.executable}\nimport json, sys\nopen({str(tmp_path / 'argv.json')!r}, 'w').write(json.dumps(sys.argv[1:]))\n{body}\n")
    script.chmod(0o755)
    return str(script)


def _target_folder(tmp_path: Path) -> str:
    folder = tmp_path / "target"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text('{"model_type": "qwen3"}')
    return str(folder)


def test_gpu_job_runs_accept_and_returns_the_result(tmp_path):
    from draftguard.runner.gpu_job import run_acceptance_job
    from draftguard.settings import Settings

    ok = result_json = AcceptanceResult.from_prompts(
        [m.prompt_result(0, m.SpecDecodeCounts(4, 12, 9, [4, 3, 2]), new_tokens=13)], wall_seconds=1.0).to_json()
    python = _fake_accept(tmp_path, f"sys.stdout.write({result_json!r}); sys.exit(1)")
    env = {"PATH": os.environ.get("PATH", ""), "DRAFTGUARD_BACKEND": "both",
           "DRAFTGUARD_ACCEPT_ARGS": "--attention-backend FLASH_ATTN --max-model-len 8192"}
    # A local target folder: a Hub id is downloaded by the job itself before the child runs
    # (tests/test_gpu_path.py), so the child never needs the token.
    target = _target_folder(tmp_path)
    out = run_acceptance_job(target, "/tmp/d", Settings(max_new_tokens=64), env=env, python=python)
    assert out == json.loads(ok)  # exit 1 (a failed verdict) still carries its result
    argv = json.loads((tmp_path / "argv.json").read_text())
    assert argv[:10] == ["-m", "draftguard", "accept", "--target", target, "--drafter", "/tmp/d",
                         "--format", "json", "--backend"]
    assert argv[10] == "both" and argv[-4:] == ["--attention-backend", "FLASH_ATTN", "--max-model-len", "8192"]
    assert ["--max-new-tokens", "64"] == argv[argv.index("--max-new-tokens"):argv.index("--max-new-tokens") + 2]


def test_gpu_job_errors_carry_the_childs_one_line(tmp_path):
    from draftguard.runner.gpu_job import AcceptanceJobError, run_acceptance_job

    env = {"PATH": os.environ.get("PATH", "")}
    python = _fake_accept(tmp_path, "print('draftguard: --backend vllm needs vLLM', file=sys.stderr); sys.exit(2)")
    with pytest.raises(AcceptanceJobError, match="rejected its input: draftguard: --backend vllm needs vLLM"):
        run_acceptance_job(_target_folder(tmp_path), "d", env=env, python=python)
    python = _fake_accept(tmp_path, "import time; time.sleep(5)")
    with pytest.raises(AcceptanceJobError, match="ran past 1s"):
        run_acceptance_job(_target_folder(tmp_path), "d", env=env, python=python, timeout=1)
    python = _fake_accept(tmp_path, "print('not json')")
    with pytest.raises(AcceptanceJobError, match="without a result"):
        run_acceptance_job(_target_folder(tmp_path), "d", env=env, python=python)


def test_close_shuts_the_engine_core_down(fake_vllm):
    backend = vb.VllmBackend(str(MODELS / "target"), str(MODELS / "drafter"))
    llm = FakeLLM.instances[-1]
    stopped = []
    llm.llm_engine = types.SimpleNamespace(engine_core=types.SimpleNamespace(shutdown=lambda: stopped.append(1)))
    backend.close()
    backend.close()  # twice is harmless
    assert stopped == [1] and backend.llm is None


def test_accept_backend_vllm_without_vllm_exits_2_with_one_line(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "draftguard", "accept", "--target", str(MODELS / "target"),
         "--drafter", str(MODELS / "drafter"), "--prompts", str(MODELS / "prompts.jsonl"), "--backend", "vllm",
         "--settings", str(tmp_path)],
        capture_output=True, text=True, env=_without_vllm(tmp_path), cwd=tmp_path, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "pip install -c constraints.txt -e '.[vllm]'" in lines[0] and "GPU runner" in lines[0]


def test_accept_backend_both_end_to_end_on_the_fake_engine(fake_vllm, tmp_path, capsys):
    """`draftguard accept --backend both`: the fake engine accepts less than the healthy fixture drafter
    does in the reference, so the verdict is an engine mismatch, with both per-position rows. All 24
    prompts: the paired interval must rule the gap in, which 3 prompts cannot."""
    pytest.importorskip("torch")
    from draftguard.cli import main

    code = main(["accept", "--target", str(MODELS / "target"), "--drafter", str(MODELS / "drafter"),
                 "--prompts", str(MODELS / "prompts.jsonl"), "--max-new-tokens", "16",
                 "--backend", "both", "--format", "json", "--quiet", "--settings", str(tmp_path),
                 "--attention-backend", "TRITON_ATTN"])
    out = json.loads(capsys.readouterr().out)
    assert code == 1
    llm = FakeLLM.instances[-1]
    assert llm.kwargs["attention_config"] == {"backend": "TRITON_ATTN"}
    # Three prompts plus the long-context one, twice the drafter's window of 6.
    assert [p["label"] for p in out["per_prompt"]][-1] == "long-context" and len(out["per_prompt"]) == 25
    assert [p["accepted_tokens"] for p in out["per_prompt"]] == [t["accepted"] for t in llm.requests]
    diff = out["run"]["differential"]
    assert out["run"]["backend"] == "both" and diff["kind"] == "engine mismatch"
    assert out["verdict"]["status"] == "fail" and out["diagnosis"]["cause"] == "engine"
    assert out["verdict"]["reason"].startswith("engine: vllm τ")
    assert diff["reference_tau"] > 3.0 > out["mean_acceptance_length"]  # healthy reference, weak engine
    assert out["run"]["reference"]["mean_acceptance_length"] == diff["reference_tau"]
    rows = diff["per_position"]
    assert [r["vllm"] for r in rows] == out["per_position_acceptance"]
    assert [r["reference"] for r in rows] == out["run"]["reference"]["per_position_acceptance"]


@pytest.mark.parametrize("window", [10**9, 1])
def test_accept_sizes_the_long_context_prompt_within_bounds_whatever_window_the_drafter_states(
        fake_vllm, tmp_path, capsys, window):
    """R6 of issue 25: the long-context prompt is twice the drafter's sliding_window, and the window
    comes from the pull request's config.json. A forged 10**9 asked the GPU job to build and send a
    prompt of 2 * 10**9 tokens (16 GB of ids, before any engine would refuse it); it is capped at
    MAX_LONG_CONTEXT_TOKENS. A window of 1 gets a prompt of 2 tokens: still a prompt, past the window."""
    import shutil

    from draftguard.cli import main

    drafter = tmp_path / "drafter"
    shutil.copytree(MODELS / "drafter", drafter)
    raw = json.loads((drafter / "config.json").read_text())
    raw["sliding_window"] = window
    (drafter / "config.json").write_text(json.dumps(raw, indent=2))
    code = main(["accept", "--target", str(MODELS / "target"), "--drafter", str(drafter),
                 "--prompts", str(MODELS / "prompts.jsonl"), "--num-prompts", "3", "--max-new-tokens", "8",
                 "--backend", "vllm", "--format", "json", "--quiet", "--settings", str(tmp_path)])
    captured = capsys.readouterr()
    assert code in (0, 1), captured.err[-2000:]  # with the cap reverted: MemoryError, exit 3
    out = json.loads(captured.out)
    assert out["per_prompt"][-1]["label"] == "long-context"
    sent = FakeLLM.instances[-1].requests[-1]["prompt_tokens"]
    assert sent == min(2 * window, eo.MAX_LONG_CONTEXT_TOKENS), sent


# ---- the bugs running the real engine found (the tests marked vllm show them on vLLM's CPU build) --


def test_console_keeps_engine_output_off_stdout_and_finds_the_cause(capfd):
    """Bug A's fix at the file-descriptor level: vLLM's engine processes inherit stdout, so anything
    they print must land on stderr; and their last exception is the cause of an EngineDeadError."""
    print("before", flush=True)
    with vb.EngineConsole() as console:
        print("a python print", flush=True)
        subprocess.run([sys.executable, "-c", "import sys; print('child stdout'); "
                        "print('(EngineCore pid=7) ERROR 11-30 20:00:01 [core.py:9] RuntimeError: head size 16 "
                        "is not supported', file=sys.stderr); "
                        "print('vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.')"],
                       check=True)
    print("after", flush=True)
    out, err = capfd.readouterr()
    assert out == "before\nafter\n"
    assert "a python print" in err and "child stdout" in err and "RuntimeError: head size 16" in err
    assert console.last_error() == "RuntimeError: head size 16 is not supported"


def test_start_up_error_carries_the_validation_details(fake_vllm):
    pydantic = pytest.importorskip("pydantic")

    @pydantic.dataclasses.dataclass
    class VllmConfig:
        block: int

        @pydantic.field_validator("block")
        @classmethod
        def check(cls, v):
            raise ValueError("Model Runner V1 does not support: mixed sliding/full dflash drafts")

    try:
        VllmConfig(block=1)
    except pydantic.ValidationError as exc:
        FakeLLM.fail_with = exc
    assert str(FakeLLM.fail_with).splitlines()[0] == "1 validation error for VllmConfig"
    with pytest.raises(vb.EngineStartError) as err:
        vb.VllmBackend(str(MODELS / "target"), str(MODELS / "drafter"))
    assert "mixed sliding/full dflash drafts" in str(err.value) and "\n" not in str(err.value)


class EngineDeadError(Exception):
    """Named as vLLM's (vllm.v1.engine.exceptions): the parent learns only that the engine died."""


def test_engine_death_after_start_up_is_exit_2_saying_it_was_the_engine(fake_vllm, tmp_path, capsys, monkeypatch):
    from draftguard.cli import main

    def dead(self, *a, **k):
        raise EngineDeadError("EngineCore encountered an issue. See stack trace (above) for the root cause.")

    monkeypatch.setattr(FakeLLM, "generate", dead)
    code = main(["accept", "--target", str(MODELS / "target"), "--drafter", str(MODELS / "drafter"),
                 "--prompts", str(MODELS / "prompts.jsonl"), "--backend", "vllm", "--settings", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "engine failed while generating prompt" in err and "EngineDeadError" in err
    assert "internal error" not in err and "bug in draftguard" not in err


def test_dtype_reaches_vllm_and_both_runs_it_in_the_references_dtype(fake_vllm, tmp_path, capsys):
    pytest.importorskip("torch")
    from draftguard.cli import main

    common = ["accept", "--target", str(MODELS / "target"), "--drafter", str(MODELS / "drafter"),
              "--prompts", str(MODELS / "prompts.jsonl"), "--num-prompts", "2", "--max-new-tokens", "8",
              "--format", "json", "--quiet", "--settings", str(tmp_path), "--long-context-tokens", "0"]
    main(common + ["--backend", "vllm", "--dtype", "float16"])
    assert FakeLLM.instances[-1].kwargs["dtype"] == "float16"
    json.loads(capsys.readouterr().out)
    main(common + ["--backend", "both"])
    assert FakeLLM.instances[-1].kwargs["dtype"] == "float32"  # the reference's dtype on CPU
    out = json.loads(capsys.readouterr().out)
    assert out["run"]["engine"]["dtype"] == "float32"


def test_gpu_job_passes_the_fetched_prompts_and_refuses_to_run_without_them(tmp_path):
    from draftguard.runner.gpu_job import AcceptanceJobError, run_acceptance_job
    from draftguard.settings import Settings

    ok = AcceptanceResult.from_prompts(
        [m.prompt_result(0, m.SpecDecodeCounts(4, 12, 9, [4, 3, 2]), new_tokens=13)], wall_seconds=1.0).to_json()
    python = _fake_accept(tmp_path, f"sys.stdout.write({ok!r})")
    env = {"PATH": os.environ.get("PATH", "")}
    settings = Settings(prompts="eval/prompts.jsonl")
    with pytest.raises(AcceptanceJobError, match="eval/prompts.jsonl"):
        run_acceptance_job(_target_folder(tmp_path), "d", settings, env=env, python=python)
    run_acceptance_job(_target_folder(tmp_path), "d", settings, env=env, python=python, prompts="/tmp/job/prompts.jsonl")
    argv = json.loads((tmp_path / "argv.json").read_text())
    assert argv[argv.index("--prompts") + 1] == "/tmp/job/prompts.jsonl"
    # The repo's settings arrive as arguments: accept reads no .draftguard.yml of the worker's own.
    settings_dir = argv[argv.index("--settings") + 1]
    assert "draftguard-settings-" in settings_dir


def test_vllms_cpu_build_gets_a_kv_cache_of_its_own_not_85_percent_of_the_ram(fake_vllm, monkeypatch, capsys):
    # Before: every engine was started with --gpu-memory-utilization 0.85, which vLLM's CPU build reads as the
    # share of RAM to reserve at start, refusing to start unless that much is free ("Available memory on
    # node 0 (19.57/23.54 GiB) on startup is less than desired CPU memory utilization (0.85, 20.01 GiB)"):
    # seen in a fresh clone's vLLM pass beside the main pass.
    monkeypatch.setattr(vb, "_on_cpu", lambda: True)
    monkeypatch.delenv(vb.CPU_KV_CACHE_ENV, raising=False)
    seen = []
    start = FakeLLM.__init__

    def record(self, **kwargs):
        seen.append(os.environ.get(vb.CPU_KV_CACHE_ENV))
        start(self, **kwargs)

    monkeypatch.setattr(FakeLLM, "__init__", record)
    backend = vb.VllmBackend(str(MODELS / "target"), str(MODELS / "drafter"), vb.EngineOptions())
    assert seen == ["4"] and "a 4 GiB KV cache instead" in capsys.readouterr().err
    assert backend.run_info()["engine"]["cpu_kv_cache_gib"] == "4"
    # A choice the user made is kept: the fraction, or the variable itself.
    monkeypatch.delenv(vb.CPU_KV_CACHE_ENV)
    backend = vb.VllmBackend(str(MODELS / "target"), str(MODELS / "drafter"),
                             vb.EngineOptions(gpu_memory_utilization=0.3))
    assert seen[-1] is None and backend.kwargs["gpu_memory_utilization"] == 0.3
    monkeypatch.setenv(vb.CPU_KV_CACHE_ENV, "2")
    backend = vb.VllmBackend(str(MODELS / "target"), str(MODELS / "drafter"), vb.EngineOptions())
    assert seen[-1] == "2" and backend.run_info()["engine"]["cpu_kv_cache_gib"] == "2"
    assert "KV cache instead" not in capsys.readouterr().err
    # Off the CPU build nothing changes: vLLM gets its 0.85.
    monkeypatch.setattr(vb, "_on_cpu", lambda: False)
    monkeypatch.delenv(vb.CPU_KV_CACHE_ENV)
    backend = vb.VllmBackend(str(MODELS / "target"), str(MODELS / "drafter"), vb.EngineOptions())
    assert seen[-1] is None and backend.kwargs["gpu_memory_utilization"] == 0.85
