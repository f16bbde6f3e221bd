"""The deployment view (``draftguard check --launch-file``): what a launch costs per tier.

Run:  python bench/bench_launch.py --vllm-python PATH [--sglang-site DIR] [--repeat 5] [--json]

- Light tier, warm, in one process: every launch of tests/data/launch (vLLM) read, its models resolved
  and judged (``check_launch`` without an engine): median ms per launch. It is the baseline in the same
  run.
- Real tier: one worker, as one ``draftguard check --launch-file`` call starts it. Cold = the worker's
  start plus the first launch (the whole first answer a user waits for); warm = each further launch
  (median, max over --repeat passes), and the warm cost as a multiple of the light tier's.
  Targets (issue 31): cold <= 30 s, warm <= 2 s.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from draftguard.check.engines import parse_engines  # noqa: E402
from draftguard.check.engines.real import PYTHON_ENV, SGLANG_SITE_ENV, RealEngines  # noqa: E402
from draftguard.check.launch import launch_files  # noqa: E402
from draftguard.check.launch.check import check_launch  # noqa: E402
from draftguard.check.launch.sources import read_launches  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vllm-python", required=True)
    parser.add_argument("--sglang-site")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    launches = [launch for file in launch_files([str(ROOT / "tests/data/launch/*")]) for launch in read_launches(file)]
    specs = parse_engines("vllm==0.32.0,sglang==0.5.23")
    light = []
    for _ in range(args.repeat):
        for launch in launches:
            start = time.perf_counter()
            check_launch(launch, specs, None)
            light.append(time.perf_counter() - start)
    os.environ[PYTHON_ENV] = args.vllm_python
    if args.sglang_site:
        os.environ[SGLANG_SITE_ENV] = args.sglang_site
    real = RealEngines.find(specs)
    start = time.perf_counter()
    first = check_launch(launches[0], specs, real)
    cold = time.perf_counter() - start
    assert first.launch_view.tier == "engine", real.failed
    warm = []
    for _ in range(args.repeat):
        for launch in launches:
            start = time.perf_counter()
            check_launch(launch, specs, real)
            warm.append(time.perf_counter() - start)
    real.close()
    out = {"launches": len(launches), "light_ms_median": round(statistics.median(light) * 1000, 1),
           "real_cold_s": round(cold, 2), "real_warm_s_median": round(statistics.median(warm), 3),
           "real_warm_s_max": round(max(warm), 3),
           "warm_over_light": round(statistics.median(warm) / statistics.median(light), 1)}
    print(json.dumps(out) if args.json else "\n".join(f"{k}: {v}" for k, v in out.items()))


if __name__ == "__main__":
    main()
