"""The test suite's own time: `pytest` over tests/ (or the paths given) in a fresh process, against a
baseline in the same run: the same pytest collecting the same tests without running them (the
imports and collection every run pays).

Run:  python bench/bench_suite.py [PATH...] [--slowest 10]

Reports the wall time of the run and of the collection, the counts pytest gives (passed, failed,
skipped...), and the slowest tests by pytest's own durations. A failing test is reported, not hidden:
the exit code is pytest's.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _pytest(args: list[str]) -> tuple[float, subprocess.CompletedProcess]:
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], cwd=ROOT,
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    return time.monotonic() - start, done


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="*", default=["tests"])
    parser.add_argument("--slowest", type=int, default=10)
    args = parser.parse_args(argv)
    collect_s, collected = _pytest(["--collect-only", "-q", *args.paths])
    count = re.search(r"(\d+) tests? collected", collected.stdout)
    run_s, done = _pytest(["-q", f"--durations={args.slowest}", "--durations-min=0", *args.paths])
    summary = next((line.strip("= ") for line in reversed(done.stdout.splitlines()) if " in " in line
                    and re.search(r"\d+ (passed|failed|error|skipped)", line)), "no summary")
    print("## The suite's own time\n")
    print("| measure | value |\n|---|---|")
    print(f"| paths | {' '.join(args.paths)} |")
    print(f"| tests collected | {count.group(1) if count else '?'} |")
    print(f"| baseline: collection alone (`pytest --collect-only`) | {collect_s:.1f} s |")
    print(f"| the run (`pytest -q`) | {run_s:.1f} s |")
    print(f"| the run over its collection | {run_s / collect_s:.1f}x |" if collect_s else "")
    print(f"| pytest's summary | {summary} |")
    durations = re.findall(r"^([\d.]+)s (call|setup|teardown)\s+(\S+)", done.stdout, re.M)
    if durations:
        print(f"\n### Slowest {len(durations)} (pytest --durations)\n\n| seconds | phase | test |\n|---|---|---|")
        for seconds, phase, test in durations:
            print(f"| {float(seconds):.1f} | {phase} | `{test}` |")
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
