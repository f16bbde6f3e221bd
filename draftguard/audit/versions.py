"""The transformers versions an audit runs under: ``--transformers 4.57.1,latest``.

``latest`` is the newest release on the package index pip is configured with (``pip index
versions``), so the question "does the new transformers silently change our published configs?"
needs no version number typed in. Everything else goes through the version matrix's own
validation (``check.matrix.parse_versions``).

In: the ``--transformers`` option (or None) and the installed transformers version; for
``engine_regressions``, the engine findings per ``--engine`` release.
Out: ``audit_versions`` -> the versions, oldest first (the installed one alone when the option is
None), or ``BadInput`` for a malformed version or an index that cannot be asked;
``engine_regressions`` -> the findings one release of an engine makes and another does not.
"""

from __future__ import annotations

import re
import subprocess
import sys
from typing import Any, Callable

from draftguard.audit.record import Regression
from draftguard.check.engines.specs import sort_key
from draftguard.check.matrix import parse_versions
from draftguard.snapshot import BadInput

LATEST = "latest"


def newest_release(timeout: float = 60.0) -> str:
    """The newest transformers release on the package index. Raises BadInput when the index cannot
    be asked (offline), naming what to do instead."""
    command = [sys.executable, "-m", "pip", "index", "versions", "transformers", "--disable-pip-version-check",
               "--no-input"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BadInput(f"--transformers latest: the package index could not be asked ({exc.__class__.__name__}); "
                       "give a version number instead", key="transformers") from None
    match = re.search(r"^transformers \(([^)]+)\)", done.stdout, re.M)
    if done.returncode != 0 or not match:
        last = (done.stderr.strip().splitlines() or ["no answer"])[-1]
        raise BadInput(f"--transformers latest: the package index could not be asked ({last}); give a version "
                       "number instead", key="transformers")
    return match.group(1)


def audit_versions(option: str | None, host: str, *, newest: Callable[[], str] | None = None) -> list[str]:
    """The versions to audit under, oldest first: the installed one when ``option`` is None.

    Example::

        >>> audit_versions("5.24.0, latest", "5.24.0", newest=lambda: "5.25.0")
        ['5.24.0', '5.25.0']
        >>> audit_versions(None, "5.24.0")
        ['5.24.0']
    """
    if option is None:
        return [host]
    parts = [p.strip() for p in option.split(",") if p.strip()]
    if LATEST in parts:
        latest = (newest or newest_release)()
        parts = [latest if p == LATEST else p for p in parts]
    return parse_versions(parts)


def engine_regressions(found: dict[Any, list[Any]]) -> list[Any]:
    """Engine findings present under some releases of one engine and absent under others (``--engine
    vllm==0.32.0,vllm==0.33.0``), as the matrix compares transformers releases. ``found`` maps each
    ``EngineSpec`` to the findings its light tier made; info findings are left out, as for transformers.

    Example::

        >>> from types import SimpleNamespace as NS
        >>> from draftguard.check.engines.specs import parse_engines
        >>> old, new = parse_engines("vllm==0.32.0,vllm==0.33.0")
        >>> refusal = NS(rule="DG200", key="architectures", severity=NS(value="error"))
        >>> [(r.present, r.absent) for r in engine_regressions({old: [], new: [refusal]})]
        [(['vLLM 0.33.0'], ['vLLM 0.32.0'])]
    """
    out: list[Any] = []
    for name in sorted({spec.name for spec in found}):
        specs = sorted((s for s in found if s.name == name), key=lambda s: sort_key(s.version))
        if len(specs) < 2:
            continue
        seen: dict[tuple[str, str], Any] = {}
        for spec in specs:
            for finding in found[spec]:
                if finding.severity.value != "info":
                    seen.setdefault((finding.rule, finding.key), finding)
        for (rule, key), finding in sorted(seen.items()):
            present = [s.shown for s in specs if any((f.rule, f.key) == (rule, key) for f in found[s])]
            absent = [s.shown for s in specs if s.shown not in present]
            if absent:
                out.append(Regression(rule, key, finding.severity.value, present, absent,
                                      f"{rule} on {key} under {', '.join(present)}, not under {', '.join(absent)}"))
    return out
