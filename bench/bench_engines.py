"""The engine's view (``draftguard check --engine``): what each tier costs, and how many real configs an
engine serves differently from the file.

Run:  python bench/bench_engines.py [--repeat 5] [--vllm-python PATH [--sglang-path DIR]] [--json]

- Light tier, warm, in one process over tests/data/real-configs: the baseline in the same run is the
  light check itself (``check_snapshot``, which the engine tier follows); then the engine tier alone
  (the views of vLLM 0.32.0 and SGLang 0.5.23 and their findings) on the same resolved results. Median
  of --repeat passes; reported as ms per config and as a share of the baseline. Target: <= 10 ms per
  config.
- Real tier (with --vllm-python, an interpreter that has vLLM): one worker process, as one
  ``draftguard check --engine`` call makes; cold = start plus the first config, warm = each further
  config (median, p90, max). Targets: <= 30 s for one config, <= 1 s per further config.
- SGLang's own ModelConfig (with --sglang-path): its import, then per config (median, p90).
- Counts, by mechanism and engine: configs whose served max length, per-layer windows or dtype is not
  the file's (light tier; the real tier's where it ran).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from draftguard.check.engines import parse_engines, views_for  # noqa: E402
from draftguard.check.engines.light import declared_dtype  # noqa: E402
from draftguard.check.engines.rules import judge_views  # noqa: E402
from draftguard.check.light import check_snapshot  # noqa: E402
from draftguard.snapshot import BadInput, load_snapshot  # noqa: E402

SPECS = parse_engines("vllm==0.32.0,sglang==0.5.23")


def corpus() -> list[Path]:
    return sorted(p.parent for p in (ROOT / "tests" / "data" / "real-configs").glob("*/config.json"))


def light(folders: list[Path], repeat: int) -> dict:
    checked = []
    for folder in folders:  # warm-up, outside the clock: every family's class imported once
        try:
            snap = load_snapshot(str(folder))
            checked.append((snap, check_snapshot(snap)))
        except BadInput:
            continue
    base, tier = [], []
    for _ in range(repeat):
        start = time.perf_counter()
        for snap, _ in checked:
            check_snapshot(snap)
        base.append(time.perf_counter() - start)
        start = time.perf_counter()
        for snap, result in checked:
            raw = snap.load_json()
            views = [v for spec in SPECS for v in views_for(spec, raw, result, None, None)]
            judge_views(views, raw, result, snap.line_of)
        tier.append(time.perf_counter() - start)
    n = len(checked)
    counts: Counter = Counter()  # configs per (mechanism, engine)
    for snap, result in checked:
        raw = snap.load_json()
        views = [v for spec in SPECS for v in views_for(spec, raw, result, None, None)]
        stated = declared_dtype(raw)
        for f in judge_views(views, raw, result, snap.line_of):
            if f.rule in ("DG201", "DG202"):
                for v in views:
                    if v.engine in f.message:
                        counts[({"DG201": "windows", "DG202": "max length"}[f.rule], v.engine)] += 1
        for v in views:
            if v.dtype is not None and v.dtype != stated:
                counts[("dtype cast", v.engine)] += 1
        if len({v.dtype for v in views if v.dtype is not None}) > 1:
            counts[("dtype: engines disagree", "both")] += 1
    return {"configs": n, "baseline_ms_per_config": 1000 * statistics.median(base) / n,
            "engine_tier_ms_per_config": 1000 * statistics.median(tier) / n,
            "share_of_baseline": statistics.median(tier) / statistics.median(base),
            "configs_served_differently": {f"{m} ({e})": c for (m, e), c in sorted(counts.items())}}


def real(folders: list[Path], python: str) -> dict:
    import os

    os.environ["DRAFTGUARD_VLLM_PYTHON"] = python
    from draftguard.check.engines.real import RealEngines

    engines = RealEngines.find(SPECS[:1])
    times, answered = [], 0
    start = time.perf_counter()
    for folder in folders:
        t = time.perf_counter()
        got = engines.views(SPECS[0], str(folder), None, None)
        times.append(time.perf_counter() - t)
        answered += got is not None
        engines.failed.pop(SPECS[0], None)
    total = time.perf_counter() - start
    engines.close()
    warm = sorted(times[1:])
    return {"configs": len(folders), "answered": answered, "cold_first_config_s": times[0],
            "warm_median_s": statistics.median(warm), "warm_p90_s": warm[int(0.9 * (len(warm) - 1))],
            "warm_max_s": warm[-1], "total_s": total}


def sglang(folders: list[Path], python: str, path: str) -> dict:
    """SGLang's own ModelConfig over the corpus in one worker: start (its import) and per config."""
    from draftguard.check.engines.real import SGLANG_PROBE, _Worker

    start = time.perf_counter()
    worker = _Worker(python, SGLANG_PROBE, path)
    started = time.perf_counter() - start
    times, answered = [], 0
    try:
        for folder in folders:
            t = time.perf_counter()
            answered += isinstance(worker.ask({"model": str(folder)}), list)
            times.append(time.perf_counter() - t)
    finally:
        worker.close()
    times.sort()
    return {"configs": len(folders), "answered": answered, "start_s": started,
            "median_ms": 1000 * statistics.median(times), "p90_ms": 1000 * times[int(0.9 * (len(times) - 1))]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--vllm-python")
    parser.add_argument("--sglang-path", help="a folder holding SGLang's wheel installed --no-deps "
                        "(run with --vllm-python's interpreter, which has torch and transformers)")
    parser.add_argument("--limit", type=int, default=0, help="real tier: only the first N configs")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    folders = corpus()
    out = {"light": light(folders, args.repeat)}
    if args.vllm_python:
        out["real"] = real(folders[: args.limit] if args.limit else folders, args.vllm_python)
    if args.sglang_path and args.vllm_python:
        out["sglang"] = sglang(folders, args.vllm_python, args.sglang_path)
    if args.json:
        print(json.dumps(out, indent=2))
        return
    lt = out["light"]
    print(f"light tier: {lt['configs']} configs; baseline (the light check) {lt['baseline_ms_per_config']:.2f} ms/config; "
          f"engine tier {lt['engine_tier_ms_per_config']:.3f} ms/config ({lt['share_of_baseline']:.1%} of the baseline)")
    for key, count in lt["configs_served_differently"].items():
        print(f"  {key}: {count} configs")
    if "real" in out:
        r = out["real"]
        print(f"real tier (vLLM): {r['answered']}/{r['configs']} answered; cold {r['cold_first_config_s']:.1f} s; warm "
              f"median {r['warm_median_s']:.2f} s, p90 {r['warm_p90_s']:.2f} s, max {r['warm_max_s']:.2f} s")
    if "sglang" in out:
        g = out["sglang"]
        print(f"SGLang ModelConfig: {g['answered']}/{g['configs']} answered; start {g['start_s']:.1f} s; per config "
              f"median {g['median_ms']:.1f} ms, p90 {g['p90_ms']:.1f} ms")


if __name__ == "__main__":
    main()
