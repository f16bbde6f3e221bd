"""Reading repository files through an API, safely: the path checks and the refusals.

In: a repository path (from a pull request, or from settings). Out: the path, or ``UnreadableFile``;
a client's ``read_file`` raises ``FileTooLarge`` for a file over ``MAX_FILE_BYTES``. Both become an
error finding that fails the check, never "nothing to check". Used by the GitHub and Hub clients.
"""

from __future__ import annotations


class FileTooLarge(Exception):
    """A file the check needs is over the size the bot reads. It becomes an error finding that fails
    the check ("not checked: N MB, over the limit"), never "nothing to check"."""

    def __init__(self, path: str, size: int, limit: int):
        super().__init__(f"{path}: not checked: {size / 1e6:.1f} MB, over the limit of {limit / 1e6:.0f} MB")
        self.path, self.size, self.limit = path, size, limit


class UnreadableFile(Exception):
    """A path the check needs is not a regular file (a symlink out of the repo, a submodule)."""

    def __init__(self, path: str, why: str):
        super().__init__(f"{path}: not checked: {why}")
        self.path = path


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
        draftguard.bot.files.UnreadableFile: ../../user/repos: not checked: a path with '..', an empty or absolute part
    """
    parts = path.split("/")
    if (not path or path.startswith("/") or "\\" in path or any(p in ("", ".", "..") for p in parts)
            or any(ord(c) < 32 for c in path)):
        raise UnreadableFile(path, "a path with '..', an empty or absolute part")
    return path


__all__ = ["MAX_FILE_BYTES", "FileTooLarge", "UnreadableFile", "safe_repo_path"]
