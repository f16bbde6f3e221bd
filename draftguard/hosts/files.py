"""Reading repository files through an API, safely: the path checks and the refusals.

In: a repository path (from a pull request, or from settings).
Out: the path, or ``UnreadableFile``; a client's ``read_file`` raises ``FileTooLarge`` for a file over
``MAX_FILE_BYTES``. Both become an error finding that fails the check, never "nothing to check".
Used by the GitHub and Hub clients.
"""

from __future__ import annotations

from draftguard.errors import FileTooLarge, UnreadableFile


MAX_FILE_BYTES = 5 * 1024 * 1024  # config files only; anything bigger is not what we check


def safe_repo_path(path: str) -> str:
    """A repository path the API may be asked for: relative, no ``..`` or empty segments, no
    backslashes or control characters. Anything else raises UnreadableFile.

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


__all__ = ["MAX_FILE_BYTES", "FileTooLarge", "UnreadableFile", "safe_repo_path"]
