"""Reading repository files through an API, safely: the path checks and the refusals.

In: a repository path (from a pull request, or from settings).
Out: the path, or ``UnreadableFile``; a client's ``read_file`` raises ``FileTooLarge`` for a file over
``MAX_FILE_BYTES``. Both become an error finding that fails the check, never "nothing to check".
Used by the GitHub and Hub clients.
"""

from __future__ import annotations

import os
from typing import Mapping

from draftguard.errors import FileTooLarge, UnreadableFile


MAX_FILE_BYTES = 5 * 1024 * 1024  # config files only; anything bigger is not what we check


def max_drafter_bytes(env: "Mapping[str, str] | None" = None) -> int:
    """What the GPU path downloads of one drafter folder at most, all files together (R8 of issue 25):
    ``DRAFTGUARD_MAX_DRAFTER_BYTES``, else 32 GiB (drafters of the largest targets are a few GB).

    Example::

        >>> max_drafter_bytes({}), max_drafter_bytes({"DRAFTGUARD_MAX_DRAFTER_BYTES": "1000"})
        (34359738368, 1000)
    """
    value = (os.environ if env is None else env).get("DRAFTGUARD_MAX_DRAFTER_BYTES")
    try:
        return int(value) if value else 32 * 1024**3
    except ValueError:
        return 32 * 1024**3


def safe_repo_path(path: str) -> str:
    """A repository path the API may be asked for: relative, no ``..`` or empty segments, no
    backslashes or control characters. Anything else raises UnreadableFile.

    Raises:
        UnreadableFile: The path could reach outside the repository.

    Example::

        >>> safe_repo_path("drafter/config.json")
        'drafter/config.json'
        >>> safe_repo_path("../../user/repos")
        Traceback (most recent call last):
        ...
        draftguard.errors.UnreadableFile: ../../user/repos: not checked: a path with '..', an empty or absolute part
    """
    parts = path.split("/")
    if (not path or path.startswith("/") or "\\" in path or any(p in ("", ".", "..") for p in parts)
            or any(ord(c) < 32 for c in path)):
        raise UnreadableFile(path, "a path with '..', an empty or absolute part")
    return path


__all__ = ["MAX_FILE_BYTES", "FileTooLarge", "UnreadableFile", "max_drafter_bytes", "safe_repo_path"]
