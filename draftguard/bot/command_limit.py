"""How many commands (``/recheck``, ``/ok-to-test``, the Re-run button) one person may run on one pull
request per hour, on every host: each one runs a forced check, and on GitHub a stranger's gets a reply,
so without a limit anyone can make the bot work and write as often as they comment.

In: the ``Queue`` (its store keeps one counter per pull request and author, changed by atomic swaps, so
workers in several processes count together), who ran the command, and the limit
(``DRAFTGUARD_COMMANDS_PER_HOUR``, 6 by default; 0 turns the limit off).
Out: ``take(queue, key, limit)`` -> a ``Taken``: whether this command may run, and whether it is the
first one over the limit in this hour (answered once with a note; later ones are dropped quietly).

Example::

    >>> import tempfile
    >>> from draftguard.jobs import Queue
    >>> q = Queue(f"sqlite:///{tempfile.mkdtemp()}/q.db")
    >>> [take(q, "github:acme/m#1:eve", 2) for _ in range(4)]
    [Taken(ok=True, tell=False, count=1), Taken(ok=True, tell=False, count=2), Taken(ok=False, tell=True, count=3), Taken(ok=False, tell=False, count=4)]
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, Mapping

DEFAULT_PER_HOUR = 6
DEFAULT_PER_PR_HOUR = 20
WINDOW = 3600.0


@dataclass(frozen=True)
class Taken:
    ok: bool  # the command may run
    tell: bool  # the first one over the limit this hour: say so, once
    count: int  # commands by this person on this pull request in this window, this one included


def limit_from_env(env: Mapping[str, str] | None = None) -> int:
    """``DRAFTGUARD_COMMANDS_PER_HOUR`` (6 when unset; 0 turns the limit off)."""
    env = os.environ if env is None else env
    raw = (env.get("DRAFTGUARD_COMMANDS_PER_HOUR") or "").strip()
    return int(raw) if raw.isdigit() else DEFAULT_PER_HOUR


def pr_limit_from_env(env: Mapping[str, str] | None = None) -> int:
    """``DRAFTGUARD_COMMANDS_PER_PR_HOUR``: commands on one pull request per hour, whoever runs them
    (20 when unset; 0 turns it off). Each new account gets its own per-person count; this one does not
    grow with the accounts."""
    env = os.environ if env is None else env
    raw = (env.get("DRAFTGUARD_COMMANDS_PER_PR_HOUR") or "").strip()
    return int(raw) if raw.isdigit() else DEFAULT_PER_PR_HOUR


def take(queue: Any, who: str, limit: int, window: float = WINDOW) -> Taken:
    """Count one command by ``who`` (``source:repo#number:author``) in the current window (it starts
    at that person's first command there, and lasts ``window`` seconds)."""
    if limit <= 0:
        return Taken(True, False, 0)
    key = f"commands:{who.lower()}"
    while True:  # a compare-and-swap loop: two workers counting at once both count
        now = time.time()
        old = queue.peek(key)
        start, count = now, 0
        if old is not None:
            first, _, n = old.decode().partition(" ")
            if float(first) + window > now:
                start, count = float(first), int(n)
        new = f"{start!r} {count + 1}".encode()
        if (queue.put_if_empty(key, new) if old is None else queue.swap(key, old, new)):
            count += 1
            return Taken(count <= limit, count == limit + 1, count)


def note_pr(by: str, command: str, limit: int, window: float = WINDOW) -> str:
    """The one reply to the first command over the pull request's limit (all authors together)."""
    return (f"@{by}, {limit} commands have been run on this pull request in the last {window / 60:.0f} minutes, "
            f"the most for one pull request; this {command} was not run, and further ones in the next hour are "
            "ignored without a reply. A new push is still checked.")


def note(by: str, command: str, limit: int, window: float = WINDOW) -> str:
    """The one reply to the first command over the limit."""
    return (f"@{by}, you have run {limit} commands on this pull request in the last {window / 60:.0f} minutes, "
            f"the most one person may; this {command} was not run, and further ones in the next hour are "
            "ignored without a reply. A new push is still checked.")
