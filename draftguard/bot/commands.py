"""Slash commands in PR comments: ``/recheck`` and ``/ok-to-test``.

A command counts only when it stands alone on a line that renders: outside fenced or indented code,
block quotes and HTML comments, so quoting, hiding or discussing a command ("type `/recheck` to
rerun") never triggers it. Pure functions,
no I/O: the GitHub and Hub bots both use them.

In: a comment's body (``parse_commands``); a commenter's permission and user type (``may_command``).
Out: the commands found, in order (a list of str); whether that user may run them (bool).
"""

from __future__ import annotations

import re

RECHECK = "recheck"
OK_TO_TEST = "ok-to-test"
COMMANDS = (RECHECK, OK_TO_TEST)

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_COMMAND = re.compile(r"^/(recheck|ok-to-test)$")


def parse_commands(body: str | None) -> list[str]:
    """The commands in a comment body, in order, each once.

    A command must be the whole line (surrounding spaces allowed); lines inside fenced code blocks
    (```` ``` ```` or ``~~~``), indented code (4 spaces) and block quotes are ignored.

    Example::

        >>> parse_commands("LGTM\\n/recheck\\n")
        ['recheck']
        >>> parse_commands("```\\n/recheck\\n```\\nplease /recheck")
        []
        >>> parse_commands("/ok-to-test\\r\\n/recheck")
        ['ok-to-test', 'recheck']
        >>> parse_commands("<!--\\n/recheck\\n-->\\n> /ok-to-test")
        []
    """
    if not body:
        return []
    found: list[str] = []
    fence: str | None = None
    hidden = False  # inside an HTML comment, which renders as nothing
    for raw in body.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        if fence is None:
            raw, hidden = _visible(raw, hidden)
        opener = _FENCE.match(raw)
        if fence is not None:
            # A fence closes only with the same character, at least as long, and nothing after it.
            if opener and opener.group(1)[0] == fence[0] and len(opener.group(1)) >= len(fence) \
                    and not raw.strip().strip(fence[0]):
                fence = None
            continue
        if opener:
            fence = opener.group(1)
            continue
        if raw.startswith(("    ", "\t")) or raw.lstrip().startswith(">"):
            continue
        match = _COMMAND.match(raw.strip())
        if match and match.group(1) not in found:
            found.append(match.group(1))
    return found


def _visible(line: str, hidden: bool) -> tuple[str, bool]:
    """The text of a line outside HTML comments (``<!-- ... -->`` render as nothing, and may span
    lines), and whether a comment is still open at the line's end.

    Example::

        >>> _visible("a <!-- b --> c", False), _visible("<!-- open", False), _visible("still -->/x", True)
        (('a  c', False), ('', True), ('/x', False))
    """
    out = []
    while line:
        if hidden:
            end = line.find("-->")
            if end < 0:
                break
            line, hidden = line[end + 3:], False
        else:
            start = line.find("<!--")
            if start < 0:
                out.append(line)
                break
            out.append(line[:start])
            line, hidden = line[start + 4:], True
    return "".join(out), hidden


WRITE_PERMISSIONS = frozenset({"admin", "maintain", "write"})


def may_command(permission: str | None, user_type: str | None) -> bool:
    """Whether a commenter may run commands: a human with write, maintain or admin permission.

    Example::

        >>> may_command("write", "User"), may_command("read", "User"), may_command("admin", "Bot")
        (True, False, False)
    """
    return (user_type or "User") != "Bot" and (permission or "none") in WRITE_PERMISSIONS
