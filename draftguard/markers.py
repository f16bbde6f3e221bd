"""The hidden markers draftguard writes into what it posts, and how it knows its own posts again.

The hosts find the sticky comment and their replies by these markers, the comment renderer writes
them, and the Hub's webhook route ignores a comment that carries one (the bot's own). They sit here,
below all of them, so that a host client needs nothing of the comment's rendering.

The audit's discussions on the Hub carry one too (``AUDIT``), found again on later runs by it.

In: a comment body; a comment id for a reply's marker.
Out: ``PREFIX`` (every marker starts with it), ``STICKY``, ``REPLY`` (a format with the answered
comment's id), ``AUDIT``, ``is_sticky(body)``, ``is_audit(body)``. Imports nothing.

Example::

    >>> is_sticky(STICKY + "\\n## draftguard"), is_sticky("quoting " + STICKY), is_sticky(None)
    (True, False, False)
    >>> all(m.startswith(PREFIX) for m in (STICKY, REPLY.format(7), AUDIT))
    True
    >>> is_audit(AUDIT + "\\ndraftguard audited"), is_audit("a note on " + AUDIT), is_audit(STICKY)
    (True, False, False)
"""

from __future__ import annotations

PREFIX = "<!-- draftguard:"
STICKY = "<!-- draftguard:sticky -->"
REPLY = "<!-- draftguard:reply:{} -->"
AUDIT = "<!-- draftguard:audit -->"


def is_sticky(body: str | None) -> bool:
    """Whether a comment body is draftguard's sticky comment (it starts with the hidden marker)."""
    return bool(body) and body.lstrip().startswith(STICKY)


def is_audit(body: str | None) -> bool:
    """Whether a discussion's first comment is the audit's (it starts with the hidden marker; a text
    that only quotes the marker is someone's note, never edited or closed by the audit)."""
    return bool(body) and body.lstrip().startswith(AUDIT)
