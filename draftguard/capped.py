"""Answers read under caps: what a bounded child (``draftguard.bounded``) or a resolver process
writes back is parsed only when it is at most ``limit`` bytes and ``MAX_DEPTH`` levels deep, the
depth counted before ``json`` parses it.

In: bytes of JSON.
Out: ``read_json`` -> the value, or ValueError naming the cap; ``size_text`` (how a message names
an amount); ``MAX_ANSWER``, ``MAX_DEPTH``.
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable

MAX_ANSWER = 16 * 2**20  # bytes of one answer the caller reads, at most
MAX_DEPTH = 64  # nesting of one answer, at most
_NOT_SYNTAX = bytes(b for b in range(256) if b not in b'"[]{}')
_PAIR = re.compile(rb"\[\]|\{\}")  # an innermost pair of brackets


def size_text(amount: int) -> str:
    """1500000000 -> "1.5 GB"."""
    for unit, scale in (("GB", 10**9), ("MB", 10**6), ("KB", 10**3)):
        if amount >= scale:
            return f"{amount / scale:.3g} {unit}"
    return f"{amount} bytes"


def read_json(data: bytes, object_hook: Callable[[dict], Any] | None = None, limit: int = MAX_ANSWER) -> Any:
    """Parse one answer: at most ``limit`` bytes and ``MAX_DEPTH`` levels. Raises ValueError.

    Example::

        >>> read_json(b'{"a": [1, 2]}')
        {'a': [1, 2]}
        >>> read_json(b"[" * 70 + b"]" * 70)
        Traceback (most recent call last):
        ...
        ValueError: nested deeper than 64 levels
    """
    if len(data) > limit:
        raise ValueError(f"over {size_text(limit)}")
    # Depth, counted before parsing, in passes of C code (no Python step per token): escaped
    # backslashes, then escaped quotes out (each quote left opens or closes a string), every byte
    # but a quote or a bracket out, the strings out (every other piece between quotes: brackets in
    # them are text); then each pass takes away the innermost pairs, so the passes are the depth.
    # Brackets that never pair are no JSON, refused here too: json would recurse into an unclosed
    # "[[[[..." past the interpreter's depth (a RecursionError, not this ValueError).
    if data.count(b"[") + data.count(b"{") <= MAX_DEPTH:  # no deeper than its brackets: most answers
        return json.loads(data, object_hook=object_hook)
    syntax = (data.replace(b"\\\\", b"").replace(b'\\"', b"") if b"\\" in data else data).translate(None, _NOT_SYNTAX)
    brackets = b"".join(syntax.split(b'"')[::2]) if b'"' in syntax else syntax
    depth = 0
    while brackets:
        inner = _PAIR.sub(b"", brackets)
        if len(inner) == len(brackets):
            raise ValueError("not JSON: its brackets do not pair")
        depth += 1
        if depth > MAX_DEPTH:
            raise ValueError(f"nested deeper than {MAX_DEPTH} levels")
        brackets = inner
    return json.loads(data, object_hook=object_hook)
