"""Benchmark of the OS bound (issue 32): what checking each file in a bounded child process costs
against today's in-process path, measured in the same run, runs interleaved (A, B, A, B...), medians.

Run:  python bench/bench_bound.py [--runs 7] [--warm-runs 15]

Files: the shipped example (examples/qwen3-swa-drafter) and five real configs from
tests/data/real-configs (Llama, Gemma 2, Phi-4, SmolLM2, LLaVA).

1. Cold, a normal check: ``python -m draftguard check --format json FILES`` (bounded: the forkserver
   starts and imports transformers while the CLI imports, one child checks every file) against the
   same CLI with ``check``'s ``in_process`` default turned on, started as ``python -m draftguard``
   was before the bound (today's path). Wall and CPU seconds (every process under the command,
   waited for by a subreaper; the steadier figure on a shared machine). Goal: a ratio of at most 1.10.
2. Warm: one process (a bot worker) checks the six files again and again: the bounded check (the
   thread's warm child, every file through its pipe) against the in-process check. The difference
   per call is what the bound costs once transformers and the config modules are loaded.
3. The real corpus (issue 42): every folder of tests/data/real-configs that a bare
   ``AutoConfig.from_pretrained`` resolves (``--corpus-limit`` takes the first N), three ways in
   turn: the bounded check, the in-process check, and a bare AutoConfig loop over the same folders
   (torch hidden in all three, as the check hides it). Cold: one fresh process each
   (``draftguard check --format json DIR...``), wall and CPU seconds of every process under it.
   Warm: one process that has checked the corpus once, then ``check(folders)`` bounded, in process,
   and the AutoConfig loop, again and again; CPU is this process's plus its bounded children's
   (read from /proc while one lives, from the reaped children's usage once it ended). Goals: warm,
   the bounded check at most 1.10 x the AutoConfig loop, CPU and wall (issue 42: the bound and the
   check's own work together); cold, at most 1.10 x the in-process CLI (the bound's cost; against
   the AutoConfig loop a fresh process also pays its imports). Both ratios are printed, each way.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
REAL = ROOT / "tests" / "data" / "real-configs"
FILES = [str(ROOT / "examples" / "qwen3-swa-drafter")] + [str(REAL / name) for name in (
    "codellama--codellama-7b-hf", "google--gemma-2-2b-it", "microsoft--phi-4",
    "huggingfacetb--smollm2-135m-instruct", "llava-hf--llava-1.5-7b-hf")]
# Today's path: the same CLI with check()'s in_process default turned on, started as `python -m
# draftguard` was before the bound (its __main__ only called cli.entry()).
IN_PROCESS = ("import sys; import draftguard.check.run as run; run.check.__kwdefaults__['in_process'] = True; "
              "from draftguard.cli import entry; sys.argv[0] = 'draftguard'; entry()")


# Runs one command as a child subreaper (Linux): every process under it, the bounded child included,
# is waited for, so the CPU seconds it prints are the whole command's.
LAUNCHER = """
import ctypes, json, os, resource, subprocess, sys, time
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
start = time.perf_counter()
done = subprocess.run(sys.argv[1:], capture_output=True, text=True)
wall = time.perf_counter() - start
while True:
    try:
        os.wait()
    except ChildProcessError:
        break
used = resource.getrusage(resource.RUSAGE_CHILDREN)
# a check: its report has no error; a bare loop (no output): it exited 0
ok = done.returncode in (0, 1) and not (json.loads(done.stdout)["errors"] if done.stdout.strip() else done.returncode)
print(json.dumps({"ok": ok, "wall": wall, "cpu": used.ru_utime + used.ru_stime, "stderr": done.stderr[-2000:]}))
"""


def cold(mode: str) -> tuple[float, float]:
    """Wall and CPU seconds of one fresh `draftguard check` process, every process under it counted."""
    command = ["-c", IN_PROCESS] if mode == "in" else ["-m", "draftguard"]
    done = subprocess.run([sys.executable, "-c", LAUNCHER, sys.executable, *command, "check", "--format", "json",
                           *FILES], capture_output=True, text=True, cwd=ROOT,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"})
    result = json.loads(done.stdout)
    if not result["ok"]:
        sys.exit(f"the cold check failed ({mode}): {result['stderr']}")
    return result["wall"], result["cpu"]


# The bare baseline, as bench_check.py's corpus row runs it: torch hidden from transformers' probe.
BARE = ("import sys\nfrom draftguard.check.resolver import hide_torch\nhide_torch()\n"
        "import json, transformers\ntransformers.logging.set_verbosity_error()\n"
        "for d in json.load(open(sys.argv[1])): transformers.AutoConfig.from_pretrained(d)")


def corpus_folders(limit: int) -> list[str]:
    """The corpus folders a bare AutoConfig resolves (first ``limit``; 0: all), in a fresh process."""
    listing = ("import sys, json\nfrom draftguard.check.resolver import hide_torch\nhide_torch()\n"
               "import transformers\ntransformers.logging.set_verbosity_error()\nok = []\n"
               "for d in json.loads(sys.argv[1]):\n    try:\n        transformers.AutoConfig.from_pretrained(d)\n"
               "        ok.append(d)\n    except Exception:\n        pass\nprint('FOLDERS' + json.dumps(ok))")
    folders = sorted(str(path.parent) for path in REAL.glob("*/config.json"))
    done = subprocess.run([sys.executable, "-c", listing, json.dumps(folders[:limit] if limit else folders)],
                          capture_output=True, text=True, cwd=ROOT, env=_ENV)
    if "FOLDERS" not in done.stdout:
        sys.exit(f"listing the corpus failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout.rsplit("FOLDERS", 1)[1])


_ENV = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}


def measured(command: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds of one fresh process (every process under it counted)."""
    done = subprocess.run([sys.executable, "-c", LAUNCHER, sys.executable, *command], capture_output=True, text=True,
                          cwd=ROOT, env=_ENV)
    result = json.loads(done.stdout)
    if not result["ok"]:
        sys.exit(f"the cold run failed ({command[:2]}): {result['stderr']}")
    return result["wall"], result["cpu"]


def corpus_cold(folders: list[str], listing: str, runs: int) -> dict[str, list[tuple[float, float]]]:
    """The three cold commands over the corpus, in turn."""
    check_args = ["check", "--format", "json", "--fail-on", "never", *folders]
    commands = {"bounded": ["-m", "draftguard", *check_args], "in": ["-c", IN_PROCESS, *check_args],
                "autoconfig": ["-c", BARE, listing]}
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
    for name, command in commands.items():
        measured(command)  # the page cache warmed for each
    for _ in range(runs):
        for name, command in commands.items():
            times[name].append(measured(command))
    return times


def _child_cpu(pid: int | None) -> float:
    """CPU seconds a live child has used so far (0 where there is none)."""
    if pid is None:
        return 0.0
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _reaped_cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def corpus_warm(folders: list[str], runs: int) -> dict[str, list[tuple[float, float]]]:
    """One process: the bounded check, the in-process check and the AutoConfig loop, in turn."""
    from draftguard import bounded
    from draftguard.check.resolver import hide_torch
    from draftguard.check.run import check

    hide_torch()
    import transformers

    transformers.logging.set_verbosity_error()

    def live() -> int | None:
        child = getattr(bounded._THREAD, "child", None)
        return child.proc.pid if child is not None and child.proc is not None else None

    def bounded_run() -> float:  # CPU of the children: the live one's, and any reaped since
        pid, reaped = live(), _reaped_cpu()
        before = _child_cpu(pid)
        check(folders)
        after_pid = live()
        # a child that ended (recycled after RECYCLE calls) is in the reaped children's usage whole, the
        # live one in /proc: either way, what the first had used before this run is taken off once
        return _reaped_cpu() - reaped + _child_cpu(after_pid) - before

    loops = {"bounded": bounded_run, "in": lambda: check(folders, in_process=True) and 0.0,
             "autoconfig": lambda: [transformers.AutoConfig.from_pretrained(d) for d in folders] and 0.0}
    for loop in loops.values():
        loop()  # every config module imported, every cache warm, in both the caller and the child
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in loops}
    for _ in range(runs):
        for name, loop in loops.items():
            start, cpu = time.perf_counter(), time.process_time()
            children = loop() or 0.0
            times[name].append((time.perf_counter() - start, time.process_time() - cpu + children))
    return times


def _medians(times: dict[str, list[tuple[float, float]]]) -> dict[str, Any]:
    wall = {name: statistics.median(t[0] for t in runs) for name, runs in times.items()}
    cpu = {name: statistics.median(t[1] for t in runs) for name, runs in times.items()}
    out: dict[str, Any] = {}
    for name in times:
        out[f"{name}_wall_s"], out[f"{name}_cpu_s"] = round(wall[name], 3), round(cpu[name], 3)
    for num, den in (("bounded", "in"), ("bounded", "autoconfig"), ("in", "autoconfig")):
        out[f"{num}_over_{den}_wall"] = round(wall[num] / wall[den], 3)
        out[f"{num}_over_{den}_cpu"] = round(cpu[num] / cpu[den], 3)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--warm-runs", type=int, default=15)
    parser.add_argument("--corpus-runs", type=int, default=5, help="runs of each cold command over the corpus")
    parser.add_argument("--corpus-warm-runs", type=int, default=7, help="warm passes over the corpus, each way")
    parser.add_argument("--corpus-limit", type=int, default=0, help="the first N corpus folders (0: all)")
    parser.add_argument("--skip-corpus", action="store_true")
    args = parser.parse_args()
    load = os.getloadavg()

    times: dict[str, list[tuple[float, float]]] = {"in": [], "bounded": []}
    for _ in range(args.runs):
        for mode in ("in", "bounded"):
            times[mode].append(cold(mode))
    cold_in, cold_bounded = (statistics.median(t[0] for t in times[m]) for m in ("in", "bounded"))
    cpu_in, cpu_bounded = (statistics.median(t[1] for t in times[m]) for m in ("in", "bounded"))

    from draftguard.check.run import check

    same = [sorted((f.rule, f.key) for f in check(FILES, in_process=flag).findings) for flag in (True, False)]
    assert same[0] == same[1], "the bounded check must find what the in-process check finds"
    warm: dict[str, list[float]] = {"in": [], "bounded": []}
    for _ in range(args.warm_runs):
        for mode in ("in", "bounded"):
            start = time.perf_counter()
            check(FILES, in_process=mode == "in")
            warm[mode].append(time.perf_counter() - start)
    warm_in, warm_bounded = statistics.median(warm["in"]), statistics.median(warm["bounded"])
    out = {
        "files": len(FILES),
        "cold_in_process_s": round(cold_in, 3), "cold_bounded_s": round(cold_bounded, 3),
        "cold_ratio": round(cold_bounded / cold_in, 3),
        "cold_cpu_in_process_s": round(cpu_in, 3), "cold_cpu_bounded_s": round(cpu_bounded, 3),
        "cold_cpu_ratio": round(cpu_bounded / cpu_in, 3),
        "warm_in_process_ms": round(warm_in * 1000, 1), "warm_bounded_ms": round(warm_bounded * 1000, 1),
        "warm_ratio": round(warm_bounded / warm_in, 2),
        "warm_extra_ms_per_check": round((warm_bounded - warm_in) * 1000, 1),
        "runs": args.runs, "warm_runs": args.warm_runs,
    }
    if not args.skip_corpus:
        folders = corpus_folders(args.corpus_limit)
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
            json.dump(folders, handle)
        try:
            out["corpus"] = {"configs": len(folders), "runs": args.corpus_runs, "warm_runs": args.corpus_warm_runs,
                             "cold": _medians(corpus_cold(folders, handle.name, args.corpus_runs)),
                             "warm": _medians(corpus_warm(folders, args.corpus_warm_runs))}
        finally:
            os.unlink(handle.name)
    out["load_average"] = {"start": [round(x, 2) for x in load], "end": [round(x, 2) for x in os.getloadavg()]}
    print(json.dumps(out, indent=2))
    print(f"cold (a normal check of {len(FILES)} files, fresh process): bounded {cold_bounded:.2f} s vs in-process "
          f"{cold_in:.2f} s = {cold_bounded / cold_in:.3f}x wall, {cpu_bounded:.2f} vs {cpu_in:.2f} CPU-s = "
          f"{cpu_bounded / cpu_in:.3f}x CPU (goal <= 1.10)")
    print(f"warm (same process, again): bounded {warm_bounded * 1000:.0f} ms vs in-process {warm_in * 1000:.0f} ms "
          f"(+{(warm_bounded - warm_in) * 1000:.0f} ms a check call)")
    if "corpus" in out:
        corpus = out["corpus"]
        for how in ("cold", "warm"):
            m = corpus[how]
            print(f"corpus, {how} ({corpus['configs']} configs): bounded {m['bounded_cpu_s']} CPU-s, in-process "
                  f"{m['in_cpu_s']}, AutoConfig loop {m['autoconfig_cpu_s']}: bounded/in-process "
                  f"{m['bounded_over_in_cpu']}x CPU, {m['bounded_over_in_wall']}x wall"
                  f"{' (goal <= 1.10)' if how == 'cold' else ''}; bounded/AutoConfig "
                  f"{m['bounded_over_autoconfig_cpu']}x CPU, {m['bounded_over_autoconfig_wall']}x wall"
                  f"{' (goal <= 1.10)' if how == 'warm' else ''}; in-process/AutoConfig "
                  f"{m['in_over_autoconfig_cpu']}x CPU")
    load = out["load_average"]
    print(f"load average (1, 5, 15 min): {load['start']} at the start, {load['end']} at the end")


if __name__ == "__main__":
    main()
