"""The deployment view: what an engine launch (a ``vllm serve`` script, a compose file, a Kubernetes
manifest, or one command line) will serve, asked of the engine itself where it is installed (the real
tier) and of that version's code as rules elsewhere (the light tier). docs/launch.md.

In: launch files (globs) and command lines, the engine specs asked for, the real engines.
Out: ``launch_report`` -> the ``Report`` (findings DG300-DG309 on the launch files' lines; bad files
are ``InputError``s with file and line).
"""

from __future__ import annotations

import glob
from pathlib import Path
from typing import Any

from draftguard.check.findings import InputError, Report
from draftguard.check.launch import reading
from draftguard.check.launch.check import check_launches
from draftguard.check.launch.sources import command_launches, read_launches
from draftguard.errors import BadInput

__all__ = ["launch_report", "launch_files"]


def launch_files(patterns: list[str]) -> list[str]:
    """The files the globs name, in order, each once; a pattern that matches nothing is kept as
    written, so that it is reported as missing."""
    out: list[str] = []
    for pattern in patterns:
        found = sorted(glob.glob(pattern, recursive=True)) if glob.has_magic(pattern) else [pattern]
        out += [f for f in found if f not in out]
    return out


def launch_report(files: list[str], commands: list[str], specs: list | None, real: Any,
                  report: Report | None = None, confine: Path | None = None) -> Report:
    """Every launch of ``files`` (globs) and ``commands`` checked into ``report`` (or a new one).
    ``confine`` (the Action's checkout): local model folders must resolve inside it."""
    report = report or Report(transformers_version="")
    named = [(f"--launch {i}" if len(commands) > 1 else "--launch", c) for i, c in enumerate(commands, 1)]
    sources: list[tuple[str, str | None]] = [(f, None) for f in launch_files(files)] + named
    with reading.confined(confine):  # what a launch names is read only inside the checkout
        for name, command in sources:
            try:
                launches = read_launches(name) if command is None else command_launches(command, name)
            except BadInput as exc:
                named = exc if exc.file else BadInput(f"{name}: {exc}", file=name, line=exc.line)  # a bound in shell
                report.errors.append(InputError.of(name, named))
                continue
            except Exception as exc:  # noqa: BLE001 (one file's failure is an error on it; the run goes on)
                report.errors.append(InputError.of(name, BadInput(reading.failure(name, exc), file=name)))
                continue
            check_launches(launches, specs, real, report, confine)
    return report
