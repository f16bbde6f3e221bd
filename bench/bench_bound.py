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
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

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
ok = done.returncode in (0, 1) and not json.loads(done.stdout or '{"errors": [1]}')["errors"]
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--warm-runs", type=int, default=15)
    args = parser.parse_args()

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
    print(json.dumps(out, indent=2))
    print(f"cold (a normal check of {len(FILES)} files, fresh process): bounded {cold_bounded:.2f} s vs in-process "
          f"{cold_in:.2f} s = {cold_bounded / cold_in:.3f}x wall, {cpu_bounded:.2f} vs {cpu_in:.2f} CPU-s = "
          f"{cpu_bounded / cpu_in:.3f}x CPU (goal <= 1.10)")
    print(f"warm (same process, again): bounded {warm_bounded * 1000:.0f} ms vs in-process {warm_in * 1000:.0f} ms "
          f"(+{(warm_bounded - warm_in) * 1000:.0f} ms a check call)")


if __name__ == "__main__":
    main()
