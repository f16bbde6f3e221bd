"""The transformers versions an audit runs under: ``--transformers 4.57.1,latest``.

``latest`` is the newest release on the package index pip is configured with (``pip index
versions``), so the question "does the new transformers silently change our published configs?"
needs no version number typed in. Everything else goes through the version matrix's own
validation (``check.matrix.parse_versions``).

In: the ``--transformers`` option (or None) and the installed transformers version.
Out: ``audit_versions`` -> the versions, oldest first (the installed one alone when the option is
None), or ``BadInput`` for a malformed version or an index that cannot be asked.
"""

from __future__ import annotations

import re
import subprocess
import sys
from typing import Callable

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
    from draftguard.check.matrix import parse_versions

    if option is None:
        return [host]
    parts = [p.strip() for p in option.split(",") if p.strip()]
    if LATEST in parts:
        latest = (newest or newest_release)()
        parts = [latest if p == LATEST else p for p in parts]
    return parse_versions(parts)
