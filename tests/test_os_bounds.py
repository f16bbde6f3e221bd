"""One bound, enforced by the operating system (issue 32): each file's check runs in a child process
with hard limits on memory (address space), CPU seconds and wall time; a file past one gets an error
that names the bound, and the other files of the same run are still reported. Black-box: the real
`draftguard check` process.

B2 of the fourth probe: a 90-byte config (efficientloftr, one large count in `stage_num_blocks`)
makes transformers' EfficientLoFTRConfig build three lists of that length in one build, which no
cooperative budget can interrupt. Before the bound its check ran 15-28 s under a 3 s budget, peaked
at 1.5 GB, and passed.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from draftguard import bounded
from draftguard.errors import BadInput

REPO_ROOT = Path(__file__).resolve().parents[1]
HEALTHY = REPO_ROOT / "examples" / "qwen3-swa-drafter"
B2 = {"model_type": "efficientloftr", "stage_num_blocks": [1, 1, 1, 100_000_000]}


def check(*paths: Path, timeout: float = 120, **env: str) -> subprocess.CompletedProcess:
    full = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "HF_HUB_OFFLINE": "1"}
    for name in (bounded.MEMORY_ENV, bounded.CPU_ENV, bounded.BUDGET_ENV):
        full.pop(name, None)
    full.update(env)
    return subprocess.run([sys.executable, "-m", "draftguard", "check", "--format", "json", *map(str, paths)],
                          capture_output=True, text=True, timeout=timeout, env=full, cwd=REPO_ROOT)


def b2_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "loftr"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(B2))
    assert len((folder / "config.json").read_bytes()) <= 90
    return folder


def test_b2_a_huge_class_build_is_stopped_at_its_memory_bound_and_the_other_files_still_report(tmp_path):
    folder = b2_folder(tmp_path)
    started = time.monotonic()
    done = check(folder, HEALTHY, DRAFTGUARD_CHECK_MEMORY="1GB", DRAFTGUARD_CHECK_CPU_SECONDS="20",
                 DRAFTGUARD_CHECK_SECONDS="3")
    took = time.monotonic() - started
    assert done.returncode == 2, done.stdout + done.stderr
    report = json.loads(done.stdout)
    [error] = report["errors"]
    assert error["file"] == str(folder / "config.json")
    assert "stopped at 1 GB of memory (DRAFTGUARD_CHECK_MEMORY)" in error["message"], error
    assert "Traceback" not in done.stderr
    # the other file of the same run is still checked and reported
    assert {f["rule"] for f in report["findings"] if f["file"].startswith(str(HEALTHY))} >= {"DG001", "DG005"}
    assert took < 30, took


def test_b2_under_a_cpu_bound_names_the_cpu_bound(tmp_path):
    folder = b2_folder(tmp_path)
    done = check(folder, HEALTHY, DRAFTGUARD_CHECK_MEMORY="16GB", DRAFTGUARD_CHECK_CPU_SECONDS="1",
                 DRAFTGUARD_CHECK_SECONDS="30")
    assert done.returncode == 2, done.stdout + done.stderr
    report = json.loads(done.stdout)
    [error] = report["errors"]
    assert "stopped after 1 s of CPU (DRAFTGUARD_CHECK_CPU_SECONDS)" in error["message"], error
    assert any(f["rule"] == "DG001" for f in report["findings"])


def test_a_setting_that_is_no_limit_is_one_line_exit_2(tmp_path):
    done = check(HEALTHY, DRAFTGUARD_CHECK_MEMORY="plenty")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == (
        "draftguard: DRAFTGUARD_CHECK_MEMORY='plenty' is not an amount of memory (e.g. 2GB, 1500MB, 4GiB)")


def test_the_caller_reads_no_answer_over_its_caps():
    with pytest.raises(ValueError, match="deeper than"):
        bounded.read_json(b"[" * 100 + b"]" * 100)
    assert bounded.read_json(b'["[[[[", {"a": "]]]"}]') == ["[[[[", {"a": "]]]"}]
    with pytest.raises(ValueError, match="over 16.8 MB"):
        bounded.read_json(b" " * (bounded.MAX_ANSWER + 1))


def _depth(value) -> int:
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    return 0


def _nested(rng: random.Random, levels: int):
    """A JSON value nested ``levels`` deep along one branch, with strings full of brackets,
    quotes and backslashes (text, not depth) beside it."""
    text = "".join(rng.choice('[]{}"\\/ab\n\tu') for _ in range(rng.randint(0, 8)))
    if levels == 0:
        return rng.choice([text, 1, None, 2.5])
    beside = [rng.choice([text, [text], {text: [1]}]) for _ in range(rng.randint(0, 2))]
    inner = _nested(rng, levels - 1)
    if rng.random() < 0.5:
        return [*beside, inner] if rng.random() < 0.5 else [inner, *beside]
    return {**{f"{text}{i}": v for i, v in enumerate(beside)}, text + "]}": inner}


def test_the_answers_depth_is_counted_before_parsing_exactly_at_its_cap():
    """The caller refuses an answer nested past MAX_DEPTH before json parses it; brackets inside
    strings (after escaped quotes and backslashes too) are text, not depth."""
    assert bounded.read_json(b"[" * 64 + b"]" * 64) is not None
    with pytest.raises(ValueError, match="deeper than 64"):
        bounded.read_json(b"[" * 65 + b"]" * 65)
    hidden = json.dumps(["\\", '\\"[[[[' * 40, {"k\\": "\\\\]"}]).encode()
    assert bounded.read_json(hidden) == json.loads(hidden)
    with pytest.raises(ValueError, match="deeper than 64"):  # strings that end in backslashes hide nothing
        bounded.read_json(b'["\\\\", ' * 65 + b"1" + b"]" * 65)
    rng = random.Random(42)
    for _ in range(600):
        value = _nested(rng, rng.choice([rng.randint(0, 70), rng.randint(60, 70)]))
        data = json.dumps(value, ensure_ascii=rng.random() < 0.5, indent=rng.choice([None, 1])).encode()
        if _depth(value) > bounded.MAX_DEPTH:
            with pytest.raises(ValueError, match="deeper than"):
                bounded.read_json(data)
        else:
            assert bounded.read_json(data) == value


def _setting_then_change_it(name: str) -> str | None:
    seen = os.environ.get(name)
    os.environ[name] = "changed by the file before"
    return seen


def _environment_case(threads: bool) -> list:
    import threading

    stop = threading.Event()
    if threads:
        threading.Thread(target=stop.wait, daemon=True).start()
    name = "DRAFTGUARD_TEST_SETTING"
    try:
        os.environ[name] = "1"
        child = bounded.Child(bounded.Limits())
        seen = [child.run(_setting_then_change_it, name), child.run(_setting_then_change_it, name)]
        pid = child.proc.pid
        os.environ[name] = "2"
        seen.append(child.run(_setting_then_change_it, name))
        del os.environ[name]
        seen.append(child.run(_setting_then_change_it, name))
        seen.append(child.proc.pid == pid)
        child.close()
        return seen
    finally:
        stop.set()


def _environment_case_in(threads: bool, out) -> None:
    out.put(_environment_case(threads))


@pytest.mark.parametrize("threads", [False, True], ids=["forked-from-the-caller", "from-the-forkserver"])
def test_one_child_runs_every_file_with_the_callers_settings_not_the_file_befores(threads):
    """A warm child checks many files in turn; each runs with the caller's environment of the moment
    (sent again only when it changed), never with what the file before it set there."""
    import multiprocessing

    out = multiprocessing.get_context("fork").Queue()
    caller = multiprocessing.get_context("fork").Process(target=_environment_case_in, args=(threads, out))
    caller.start()
    assert out.get(timeout=300) == ["1", "1", "2", None, True]
    caller.join(30)


def test_a_bounded_check_hands_back_what_the_in_process_check_finds():
    """The child's answer crosses as JSON written once (bounded.Encoded), findings and attention rows
    in a compact form: every field of every result comes back as the in-process check has it."""
    from draftguard.check.run import check as check_sources

    real = REPO_ROOT / "tests" / "data" / "real-configs"
    sources = [str(HEALTHY)] + [str(real / name) for name in (
        "google--gemma-2-2b-it", "llava-hf--llava-1.5-7b-hf", "microsoft--phi-4",
        "mistralai--mistral-7b-instruct-v0.3")]
    bounded_report, in_process = check_sources(sources), check_sources(sources, in_process=True)
    assert not bounded_report.errors and not in_process.errors
    assert any(t.attention for t in in_process.targets) and in_process.findings
    assert bounded_report.targets == in_process.targets


def test_a_check_that_runs_a_repos_own_code_has_a_child_of_its_own(monkeypatch):
    """With trust_remote_code a repository's code runs in the child, and what it leaves there (a
    patched module, a cache) must reach no other check: such a check never uses the thread's warm
    child, and its own has ended when it returns. Other checks share the warm one."""
    from draftguard.check.run import check as check_sources

    made: list[bounded.Child] = []

    class Recorded(bounded.Child):
        def __init__(self, limits: bounded.Limits):
            super().__init__(limits)
            made.append(self)

    monkeypatch.setattr(bounded, "Child", Recorded)
    monkeypatch.setattr(bounded._THREAD, "child", None, raising=False)
    for _ in range(2):
        assert check_sources([str(HEALTHY)], trust_remote_code=True).targets
    assert len(made) == 2 and all(child.proc is None for child in made)  # one each, ended
    assert bounded._THREAD.child is None  # the warm child was never made
    check_sources([str(HEALTHY)]), check_sources([str(HEALTHY)])
    assert len(made) == 3 and bounded._THREAD.child is made[2] and made[2].proc is not None
    made[2].close()


def _sleep(seconds: float) -> str:
    time.sleep(seconds)
    return "woke"


def _step(what: str, amount: float) -> list:
    """One call of a batch: sleep, allocate past the bound, or refuse its input."""
    if what == "refuse":
        raise BadInput("refused", file=f"f{amount}")
    if what == "allocate":
        return [len([0] * int(amount))]
    time.sleep(amount)
    return [os.getpid()]


def test_each_call_of_one_message_has_its_own_bounds_and_a_stopped_one_costs_only_itself():
    """Child.run_each: many calls in one message, answered one by one. Each has the whole wall time
    from the answer before it (five calls of 0.5 s under a wall time of 1.2 s all answer); a call
    that raises BadInput leaves the child running; a call past the memory bound or the wall time
    gets its own Stopped, and the calls after it are answered by a fresh child."""
    child = bounded.Child(bounded.Limits(memory=10**9, wall=1.2))
    calls = [("sleep", 0.5), ("sleep", 0.5), ("refuse", 1), ("sleep", 0.5), ("allocate", 400_000_000),
             ("sleep", 0.5), ("sleep", 5), ("sleep", 0.0)]
    answers = child.run_each(_step, calls, handlers=[{}] * len(calls), where=[{"file": f"c{i}"} for i in
                                                                             range(len(calls))])
    first, second, refused, third, memory, fourth, slept, fifth = answers
    assert first == second == third and isinstance(first[0], int)  # one child for the calls before a stop
    assert type(refused) is BadInput and str(refused) == "refused"
    assert isinstance(memory, bounded.Stopped) and memory.bound == "memory" and memory.file == "c4"
    assert fourth != first and isinstance(fourth[0], int)  # a fresh child after the stop
    assert isinstance(slept, bounded.Stopped) and slept.bound == "wall" and slept.file == "c6"
    assert fifth not in (first, fourth) and child.calls == 1
    child.close()


def test_a_child_past_its_wall_time_is_stopped_and_the_caller_goes_on():
    started = time.monotonic()
    with pytest.raises(bounded.Stopped, match="stopped after 0.5 s of wall time") as stopped:
        bounded.run(_sleep, 30, limits=bounded.Limits(wall=0.5))
    assert stopped.value.bound == "wall"
    assert time.monotonic() - started < 10
    assert bounded.run(_sleep, 0, limits=bounded.Limits()) == "woke"


def _in_a_daemonic_worker(out) -> None:
    try:
        out.put(bounded.run(_sleep, 0, limits=bounded.Limits()))
    except BaseException as exc:  # the test reads it
        out.put(repr(exc))


def test_a_daemonic_queue_worker_can_check_files():
    """huey's process workers are daemonic, and multiprocessing refuses children there by default."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    worker = ctx.Process(target=_in_a_daemonic_worker, args=(out,), daemon=True)
    worker.start()
    assert out.get(timeout=120) == "woke"
    worker.join(30)


def _allocate(count: int) -> int:
    return len([0] * count)


def _memory_case(threads: bool) -> str:
    import threading

    stop = threading.Event()
    if threads:
        threading.Thread(target=stop.wait, daemon=True).start()
    try:
        if (threading.active_count() > 1) != threads:
            return f"{threading.active_count()} threads"
        child = bounded.Child(bounded.Limits(memory=10**9))
        try:
            child.run(_allocate, 400_000_000)  # 3.2 GB of list
            return "not stopped"
        except bounded.Stopped as exc:
            stopped = str(exc)
        answered = child.run(_allocate, 1000)  # a fresh child answers the next call
        child.close()
        return f"{stopped} | {answered}"
    finally:
        stop.set()


def _memory_case_in(threads: bool, out) -> None:
    out.put(_memory_case(threads))


@pytest.mark.parametrize("threads", [False, True], ids=["forked-from-the-caller", "from-the-forkserver"])
def test_a_child_past_its_memory_bound_is_stopped_naming_it_and_the_next_call_gets_a_fresh_child(threads):
    """A caller of one thread forks its children itself; a caller with threads (a bot) gets them
    from the forkserver. Both are bounded alike. Each case runs in a fresh process of one thread
    (this test process may hold other tests' threads)."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    caller = ctx.Process(target=_memory_case_in, args=(threads, out))
    caller.start()
    assert out.get(timeout=300) == "stopped at 1 GB of memory (DRAFTGUARD_CHECK_MEMORY) | 1000"
    caller.join(30)


def test_the_bench_that_measures_the_bound_runs_as_the_docs_show_it():
    """docs/performance.md's figure comes from `python bench/bench_bound.py`; one short run of it."""
    done = subprocess.run([sys.executable, "bench/bench_bound.py", "--runs", "1", "--warm-runs", "1", "--corpus-runs",
                           "1", "--corpus-warm-runs", "1", "--corpus-limit", "8"],
                          capture_output=True, text=True, timeout=600, cwd=REPO_ROOT,
                          env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads(done.stdout[:done.stdout.rindex("}") + 1])
    assert figures["files"] == 6 and figures["cold_cpu_ratio"] > 0 and figures["warm_bounded_ms"] > 0
    corpus = figures["corpus"]
    assert 0 < corpus["configs"] <= 8 and len(figures["load_average"]["start"]) == 3
    for how in ("cold", "warm"):  # the bound's cost and the bare AutoConfig loop, both measured
        assert corpus[how]["bounded_over_in_cpu"] > 0 and corpus[how]["bounded_over_autoconfig_cpu"] > 0


def test_a_launch_files_model_is_resolved_under_the_same_bound(tmp_path):
    """A launch file is untrusted as a config is: the config it serves was resolved by the launch view
    in the caller's own process (no bound: the B2 config held it, and a larger count would have taken
    the process down). It is now resolved in the bounded child, stopped and named like any file."""
    folder = b2_folder(tmp_path)
    script = tmp_path / "serve.sh"
    script.write_text(f"#!/bin/sh\nvllm serve {folder.name} --max-model-len 4096\n")
    started = time.monotonic()
    full = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "HF_HUB_OFFLINE": "1", "DRAFTGUARD_CHECK_MEMORY": "1GB",
            "DRAFTGUARD_CHECK_CPU_SECONDS": "20", "DRAFTGUARD_CHECK_SECONDS": "3"}
    full.pop("DRAFTGUARD_VLLM_PYTHON", None)
    done = subprocess.run([sys.executable, "-m", "draftguard", "check", "--format", "json", "--launch-file", str(script)],
                          capture_output=True, text=True, timeout=120, env=full, cwd=REPO_ROOT)
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    [error] = json.loads(done.stdout)["errors"]
    assert "stopped at 1 GB of memory (DRAFTGUARD_CHECK_MEMORY)" in error["message"], error
    assert "Traceback" not in done.stderr
    assert time.monotonic() - started < 60


def test_an_answer_whose_brackets_never_close_is_refused_not_a_recursion_error():
    # json recursed into these past the interpreter's depth: a RecursionError out of the caller's
    # read, which takes ValueError for an unreadable answer, so a child could crash its caller
    for data in (b"[" * 100_000, b'{"a":' * 50_000, b"[" * 100_000 + b"[]", b'["x", ' * 70 + b"1"):
        with pytest.raises(ValueError, match="do not pair"):
            bounded.read_json(data)
    assert bounded.read_json(b'["[[[", "\\"{"]') == ["[[[", '"{']
    with pytest.raises(ValueError):  # a string left open is text to its end: json refuses it
        bounded.read_json(b'["[[[' * 1000)
