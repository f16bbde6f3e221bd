"""Engine releases as data: what judging one launch under every known release costs, and what the data weighs.

Run:  python bench/bench_releases.py [--repeat 5] [--json]

- Baseline, in the same run: one launch checked whole under one release (``check_launch``: its flags read,
  its model's config resolved in the bounded child, the light view judged), warm, median ms.
- Every release: the same launch's light view under each known vLLM release (its flags read by that
  release's parser data, the view and the findings judged, the upgrade notes to the newest; the target's and
  the drafter's configs read once, as a check does),
  warm, total ms over all releases, and that total as a multiple of the baseline. Goal (issue 39): <= 1 s.
- Cold: the first read of the release data in a fresh process (import + parse of every release file).
- Size: the release data files as shipped (bytes on disk, and deflated as the wheel stores them).
  Goal: <= 2 MB in the wheel.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from draftguard.check.engines import releases  # noqa: E402
from draftguard.check.engines.specs import parse_engines  # noqa: E402
from draftguard.check.drafter.detect import detect_drafter  # noqa: E402
from draftguard.check.launch.check import _draft_ref, _read, check_launch, resolve_model, upgrade_notes  # noqa: E402
from draftguard.check.launch.flags import read_flags  # noqa: E402
from draftguard.check.launch.judge import judge  # noqa: E402
from draftguard.check.launch.light import vllm_view  # noqa: E402
from draftguard.check.launch.sources import read_launches  # noqa: E402

LAUNCH = ROOT / "tests" / "data" / "launch" / "serve-healthy.sh"
DATA = ROOT / "draftguard" / "check" / "engines" / "data"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    [launch] = read_launches(str(LAUNCH))
    versions = releases.known("vllm")
    newest = parse_engines(f"vllm=={versions[-1]}")
    check_launch(launch, newest)  # warm: imports, the resolver child, caches
    one = []
    for _ in range(args.repeat):
        start = time.perf_counter()
        check_launch(launch, newest)
        one.append(time.perf_counter() - start)
    every = []
    for _ in range(args.repeat):
        start = time.perf_counter()
        flags = read_flags(launch, versions[-1])
        target = resolve_model(flags.model.text, flags.model.line, launch, None, "model")
        raw, values = _read(target)
        ref = _draft_ref(flags)
        draft_raw, draft_values = _read(resolve_model(ref[0], ref[1], launch, ref[2], "drafter"))
        fmt = detect_drafter(draft_raw)
        env = {k: v for k, (v, _) in launch.env.items()}
        for version in versions:
            [spec] = parse_engines(f"vllm=={version}")
            flags = read_flags(launch, version)
            view = vllm_view(flags, env, raw, values, draft_raw, draft_values, spec.shown, version)
            judge(view, launch, flags, raw, values, draft_raw, draft_values, fmt)
            if version != versions[-1]:
                upgrade_notes(launch, flags, spec, newest[0])
        every.append(time.perf_counter() - start)
    cold = subprocess.run([sys.executable, "-c", "import time; t = time.perf_counter(); "
                           "from draftguard.check.engines import releases; "
                           "[releases.facts(e, v) for e in ('vllm', 'sglang') for v in releases.known(e)]; "
                           "print(time.perf_counter() - t)"], capture_output=True, text=True, cwd=ROOT, check=True)
    files = sorted((DATA / "releases").glob("*.json")) + sorted(DATA.glob("*.json"))
    raw_bytes = sum(p.stat().st_size for p in files)
    deflated = sum(len(zlib.compress(p.read_bytes(), 6)) for p in files)
    result = {
        "releases": {"vllm": len(versions), "sglang": len(releases.known("sglang"))},
        "one_release_check_ms": round(statistics.median(one) * 1000, 1),
        "every_release_view_ms": round(statistics.median(every) * 1000, 1),
        "every_vs_one": round(statistics.median(every) / statistics.median(one), 2),
        "cold_data_read_ms": round(float(cold.stdout) * 1000, 1),
        "data_bytes": raw_bytes, "data_deflated_bytes": deflated,
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"one launch, checked whole under one release (baseline): {result['one_release_check_ms']} ms (median, warm)")
    print(f"its light view under all {len(versions)} vLLM releases: {result['every_release_view_ms']} ms "
          f"({result['every_vs_one']}x the baseline; goal <= 1000 ms)")
    print(f"first read of every release's data in a fresh process: {result['cold_data_read_ms']} ms")
    print(f"release and registry data: {raw_bytes / 1e6:.2f} MB on disk, {deflated / 1e6:.2f} MB deflated in the "
          "wheel (goal <= 2 MB)")


if __name__ == "__main__":
    main()
