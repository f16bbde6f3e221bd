"""Regenerate the figures the README and docs quote, each dated: one command.

Run:  python bench/figures.py [--only NAME,...] [--fast] [--out docs/figures.md]

With ``--only``, the sections of the other figures already in ``--out`` are kept as they were (they
keep their own dates). Each figure is one benchmark script of bench/ (each measures against its own baseline in the same
run), run in a fresh process; its report is written under a heading that says what it is, where it
is quoted, the date and the machine. ``--fast`` runs each with the fewest repeats and a small corpus
(what tests/test_bench_figures.py runs, so the command keeps working); its figures are not the ones
to quote. The README's and docs' numbers are copied from the full run's docs/figures.md by hand,
with its date.

Figures:
- real-configs: the light check on tests/data/real-configs (README "On real published configs",
  docs/performance.md): configs, families, resolvable, false alarms, warm rate against transformers.
- engines: what vLLM 0.32 and SGLang 0.5.23 serve differently, light tier (README "What the engines
  serve", docs/engines.md, docs/performance.md).
- drafter-rules: what the drafter rules add to a check's wall time (docs/performance.md, docs/drafters.md).
- check: the light check's cold and warm cost against a bare AutoConfig (README, docs/performance.md).
- gatherer: the audit's gatherer on Redis with 1k and 100k jobs pending, against the polling one it
  replaced (docs/audit.md "Gathering without polling"; needs redis-server).
- webhook: the GitHub bot under load, kill -9 and GitHub faults (README, docs/github-bot.md "Figures",
  docs/performance.md).
- audit: `draftguard audit` on the fake Hub's fleet with latency (docs/audit.md, docs/performance.md).
- acceptance: `draftguard accept` on the tiny fixtures, CPU (README, docs/acceptance.md, docs/performance.md).
- suite: the test suite's own time against its collection alone (bench/bench_suite.py).

Every section says the date and time (UTC), the machine, the load average before and after its run
(a figure taken on a busy machine says so), and the command.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "data" / "real-configs"
# A few real configs for --fast: a family with a window, one the check reads on its keys (no class),
# one that needs remote code.
FAST_CORPUS = ("qwen--qwen3-8b", "minimaxai--minimax-m3", "baichuan-inc--baichuan2-7b", "mistralai--mistral-7b-instruct-v0.3")

# name -> (where it is quoted, full arguments, fast arguments); "{corpus}" is the corpus folder.
FIGURES: dict[str, tuple[str, list[str], list[str]]] = {
    "real-configs": ("README (On real published configs), docs/performance.md",
                     ["bench/bench_real_configs.py", "--repeat", "3"],
                     ["bench/bench_real_configs.py", "--repeat", "1", "--corpus", "{corpus}"]),
    "engines": ("README (What the engines serve), docs/engines.md, docs/performance.md",
                ["bench/bench_engines.py", "--repeat", "5"], ["bench/bench_engines.py", "--repeat", "1"]),
    "drafter-rules": ("docs/performance.md, docs/drafters.md (Cost)", ["bench/bench_drafter_rules.py", "--runs", "7"],
                      ["bench/bench_drafter_rules.py", "--runs", "1"]),
    "check": ("README (Performance), docs/performance.md", ["bench/bench_check.py", "--runs", "9"],
              ["bench/bench_check.py", "--runs", "1", "--warm-configs", "20", "--skip-corpus-cli",
               "--corpus-repeat", "1", "--corpus", "{corpus}"]),
    "gatherer": ("docs/audit.md (Gathering without polling)", ["bench/bench_gatherer.py"],
                 ["bench/bench_gatherer.py", "--small", "100", "--large", "1000", "--seconds", "1"]),
    "webhook": ("README (Performance), docs/github-bot.md (Figures), docs/performance.md", ["bench/bench_webhooks.py"],
                ["bench/bench_webhooks.py", "--only", "load", "--rate", "20", "--seconds", "2"]),
    "audit": ("docs/audit.md, docs/performance.md", ["bench/bench_audit.py"],
              ["bench/bench_audit.py", "--copies", "1", "--skip-queue", "--skip-versions", "--skip-baselines",
               "--skip-rerun"]),
    "acceptance": ("README (Diagnose a collapse), docs/acceptance.md, docs/performance.md",
                   ["bench/bench_accept.py", "--repeats", "5"],
                   ["bench/bench_accept.py", "--repeats", "1", "--skip-runs"]),
    "suite": ("README (Quickstart's test run), docs/performance.md", ["bench/bench_suite.py", "tests"],
              ["bench/bench_suite.py", "tests/test_release.py", "--slowest", "3"]),
}
FAST_DEFAULT = ("real-configs", "check")  # --fast without --only: the quick ones


def fast_corpus(folder: Path) -> Path:
    """A small copy of the real-config corpus, for --fast."""
    for name in FAST_CORPUS:
        if (CORPUS / name).is_dir():
            shutil.copytree(CORPUS / name, folder / name)
    return folder


def load_average() -> str:
    """The machine's load average (1, 5, 15 minutes), as a figure's section states it."""
    try:
        return " / ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:  # not on this platform
        return "unknown"


def run_figure(name: str, fast: bool, corpus: Path) -> str:
    """One figure's section: heading, where quoted, date, machine, seconds, and the script's report."""
    quoted, full, quick = FIGURES[name]
    argv = [sys.executable, *(a.replace("{corpus}", str(corpus)) for a in (quick if fast else full))]
    load_before = load_average()
    start = time.monotonic()
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    seconds = time.monotonic() - start
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    machine = f"{platform.machine()}, {os.cpu_count()} CPU, Python {platform.python_version()}"
    head = [f"## {name}{' (fast mode: not for quoting)' if fast else ''}", "",
            f"Measured {when} on {machine} in {seconds:.0f} s: `python {' '.join(argv[1:])}`. "
            f"Load average (1, 5, 15 min) {load_before} before, {load_average()} after. "
            f"Quoted in: {quoted}.", "", ""]
    if done.returncode != 0:
        raise SystemExit(f"figures: {name} failed (exit {done.returncode}): {done.stderr.strip()[-500:]}")
    report = done.stdout.strip().replace(str(ROOT) + os.sep, "")  # paths from the repository, not this machine's
    return "\n".join(head) + report + "\n"


HEADER = ("# Figures\n\nRegenerated by `python bench/figures.py` (each section dated, with the load average "
          "around its run). The README and docs quote these.\n\n")


def split_sections(text: str) -> dict[str, str]:
    """A figures file's sections by figure name: each starts at its `## NAME` heading (a report's own
    `##` headings stay inside the figure's section)."""
    out: dict[str, str] = {}
    name = None
    for line in text.splitlines(keepends=True):
        heading = line[3:].strip().split(" (fast mode", 1)[0] if line.startswith("## ") else None
        if heading in FIGURES:
            name = heading
            out[name] = ""
        if name is not None:
            out[name] += line
    return out


def merge_sections(old: str, new: dict[str, str]) -> str:
    r"""The figures file with ``new`` sections in place of their old ones, the others kept as they were
    (``--only`` regenerates some figures without dropping the rest), in FIGURES' order.

    Example::

        >>> old = HEADER + "## check\n\nold check\n\n## suite\n\nold suite\n"
        >>> merged = merge_sections(old, {"check": "## check\n\nnew check\n"})
        >>> "new check" in merged and "old suite" in merged and "old check" not in merged
        True
    """
    sections = {**split_sections(old), **new}
    return HEADER + "\n".join(sections[name].rstrip("\n") + "\n" for name in FIGURES if name in sections)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", help=f"comma-separated figures (of {', '.join(FIGURES)})")
    parser.add_argument("--fast", action="store_true", help="fewest repeats, small corpus (the test's mode)")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "figures.md")
    args = parser.parse_args(argv)
    names = args.only.split(",") if args.only else list(FAST_DEFAULT if args.fast else FIGURES)
    unknown = [n for n in names if n not in FIGURES]
    if unknown:
        print(f"figures: no figure {unknown[0]!r} (figures: {', '.join(FIGURES)})", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="draftguard-figures-") as tmp:
        corpus = fast_corpus(Path(tmp)) if args.fast else CORPUS
        sections = []
        for name in names:
            print(f"figures: {name}...", file=sys.stderr)
            sections.append(run_figure(name, args.fast, corpus))
    kept = args.out.read_text(encoding="utf-8") if args.only and args.out.is_file() else ""
    args.out.write_text(merge_sections(kept, dict(zip(names, sections))), encoding="utf-8")
    print(f"figures: wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
