"""Benchmark of the transformers version matrix: wall time of a check with N cached versions vs one.

Run:  python bench/bench_matrix.py [--runs 7] [--versions 5.24.0,4.52.4,4.57.6,4.53.3]

Each run is `draftguard check examples/qwen3-swa-drafter --transformers V1,...,VN --format json` in a
fresh process, for N = 1 .. len(versions), the first N versions of the list. The runs are interleaved
(N=1, N=2, ..., N=1, N=2, ...) so machine noise hits every N alike. The baseline in the same run is
N = 1; the figure is the median wall time added per extra version, (t(N) - t(1)) / (N - 1), with a
target of at most 1.5 s. The plain light check (no --transformers) is measured beside them.

On a shared machine other load inflates wall times, so the fastest run (min) is reported beside the
median, and the CPU seconds (user + sys of the whole process tree) show the intrinsic cost of each
extra version whatever else runs: wall time per extra version approaches CPU / cores when the cores
are free.

Environments are installed before timing (first installs are reported, not timed into the figure).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

from timing import timed  # bench/timing.py: sys.path[0] is this folder when run as a script

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "qwen3-swa-drafter"
TARGET_PER_VERSION_S = 1.5


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--versions", default="5.24.0,4.52.4,4.57.6,4.53.3",
                        help="comma-separated; N = 1 uses the first, N = k the first k")
    args = parser.parse_args()

    from draftguard.check import environments, matrix

    versions = [v.strip() for v in args.versions.split(",") if v.strip()]
    installs = {}
    for version in versions:  # not timed: the figure is about cached environments
        _, took = matrix.ensure_env(version, progress=matrix.stderr_progress)
        installs[version] = None if took is None else round(took, 1)

    draftguard = [sys.executable, "-m", "draftguard", "check", str(EXAMPLE), "--format", "json"]
    commands = {"light check (no --transformers)": draftguard}
    for n in range(1, len(versions) + 1):
        commands[f"N={n}"] = draftguard + ["--transformers", ",".join(versions[:n])]
    for cmd in commands.values():  # warm the page cache
        timed(cmd)
    walls: dict[str, list[float]] = {name: [] for name in commands}
    cpus: dict[str, list[float]] = {name: [] for name in commands}
    load_before = os.getloadavg()[0]
    for _ in range(args.runs):
        for name, cmd in commands.items():
            wall, cpu = timed(cmd)
            walls[name].append(wall)
            cpus[name].append(cpu)
    median = {name: statistics.median(t) for name, t in walls.items()}
    fastest = {name: min(t) for name, t in walls.items()}
    cpu = {name: statistics.median(t) for name, t in cpus.items()}

    def added(table: dict[str, float], n: int) -> float | None:
        return None if n == 1 else round((table[f"N={n}"] - table["N=1"]) / (n - 1), 3)

    per_n = {}
    for n in range(1, len(versions) + 1):
        per_n[n] = {
            "versions": versions[:n],
            "median_s": round(median[f"N={n}"], 3),
            "min_s": round(fastest[f"N={n}"], 3),
            "cpu_s": round(cpu[f"N={n}"], 3),
            "ratio_to_one_version": round(median[f"N={n}"] / median["N=1"], 3),
            "added_per_extra_version_s": added(median, n),
            "added_per_extra_version_min_s": added(fastest, n),
            "added_cpu_per_extra_version_s": added(cpu, n),
        }
    worst = max((v["added_per_extra_version_s"] for v in per_n.values() if v["added_per_extra_version_s"] is not None),
                default=None)
    result = {
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
        "runs": args.runs,
        "cache_dir": str(environments.cache_dir()),
        "installed_now_s": installs,
        "load_average_1min": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "light_check_median_s": round(median["light check (no --transformers)"], 3),
        "light_check_min_s": round(fastest["light check (no --transformers)"], 3),
        "by_number_of_versions": per_n,
        "worst_added_per_extra_version_s": worst,
        "target_added_per_extra_version_s": TARGET_PER_VERSION_S,
        "meets_target": worst is not None and worst <= TARGET_PER_VERSION_S,
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
