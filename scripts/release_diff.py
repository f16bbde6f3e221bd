"""What a new engine release changes for real launches and configs: the findings of the launch files and the
real configs in tests/data under one release against another, as markdown (the scheduled engine-releases
workflow puts it in its pull request's body).

    python scripts/release_diff.py vllm 0.33.0 0.34.0 [--launches-only] [--out diff.md]

Each launch file is judged under each release (``--engine`` overrides the pins, so both are judged alike);
each real config gets that release's engine view (light tier). A finding present under one release and not
the other is listed with its file, line, rule and message. Exit 0 always (the diff is for a reviewer).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

# the corpus is local: a Hub model a real launch names is not fetched (its launch is an input error, alike
# under both releases)
os.environ.setdefault("HF_HUB_OFFLINE", "1")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from draftguard.check.engines.specs import parse_engines  # noqa: E402
from draftguard.check.launch import launch_report  # noqa: E402
from draftguard.check.run import check  # noqa: E402

LAUNCHES = [ROOT / "tests" / "data" / "launch", ROOT / "tests" / "data" / "real-launch"]
CONFIGS = ROOT / "tests" / "data" / "real-configs"


def _launch_findings(version: str, engine: str) -> set[tuple[str, int, str, str, str]]:
    files = sorted(str(p) for folder in LAUNCHES for p in folder.rglob("*")
                   if p.is_file() and p.name not in ("SOURCE.md", ".env") and not p.name.endswith(".md"))
    report = launch_report(files, [], parse_engines(f"{engine}=={version}"), None)
    found = {(Path(f.file).name, f.line or 0, f.rule, f.severity.value, f.message.split(": ", 1)[-1])
             for f in report.findings}
    return found | {(Path(e.file or "").name, e.line or 0, "error", "input", e.message) for e in report.errors}


def _config_findings(version: str, engine: str) -> set[tuple[str, int, str, str, str]]:
    folders = sorted(str(p.parent) for p in CONFIGS.glob("*/config.json"))
    report = check(folders, engines=parse_engines(f"{engine}=={version}"))
    return {(Path(f.file).parent.name, f.line or 0, f.rule, f.severity.value, f.message.split(": ", 1)[-1])
            for f in report.findings if f.rule.startswith("DG2")}


def diff(engine: str, old: str, new: str, launches_only: bool = False) -> str:
    out = [f"## {engine} {old} -> {new}: what changes for the real launches and configs in tests/data", ""]
    sections = [("Launch files", _launch_findings)] + ([] if launches_only else [("Real configs", _config_findings)])
    for title, read in sections:
        before, after = read(old, engine), read(new, engine)
        gone, came = sorted(before - after), sorted(after - before)
        out.append(f"### {title}: {len(came)} new, {len(gone)} gone")
        out += [f"- new under {new}: `{f}`:{line} {rule} ({level}): {msg[:300]}" for f, line, rule, level, msg in came]
        out += [f"- gone under {new}: `{f}`:{line} {rule} ({level}): {msg[:300]}" for f, line, rule, level, msg in gone]
        out.append("")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("engine", choices=["vllm", "sglang"])
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("--launches-only", action="store_true")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    text = diff(args.engine, args.old, args.new, args.launches_only)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
