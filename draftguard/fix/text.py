"""Edits to a JSON file's text that leave every untouched byte as it was.

A fix must read like the line a maintainer would write: key order, indentation (tabs, two or four
spaces, one compact line), line endings (LF or CRLF), a byte-order mark and the trailing newline all
stay. So nothing here re-serialises the document: a scanner finds where each member and element
sits in the text, and an edit replaces, inserts or removes just those characters, spelling a new
member with the separators that its object already uses.

In: the file's text (``str``, as decoded from UTF-8, a BOM kept) and ``Edit`` objects: set a dotted
key to a value (added when missing), or remove a key.
Out: ``apply_edits(text, edits)`` -> the edited text; ``EditError`` when a key's parent is missing or
is not an object (the caller turns that into "no safe fix"); ``lines(text)``: the file's lines as git
and GitHub count them.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from json.decoder import scanstring
from typing import Any, Callable

from draftguard.errors import EditError

_WS = re.compile(r"[ \t\n\r]*")
_SCALAR = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][-+]?\d+)?|true|false|null|NaN|-?Infinity")


@dataclass(frozen=True)
class Edit:
    """Set ``key`` (dotted) to ``value``, adding it when missing, or remove it (``remove=True``).
    ``near`` names a sibling key to place a new member beside when the object is not sorted."""

    key: str
    value: Any = None
    remove: bool = False
    near: str | None = None

    def describe(self) -> str:
        if self.remove:
            return f"remove `{self.key}`"
        return f"set `{self.key}` to {json.dumps(self.value)}"


@dataclass
class Node:
    """Where a value sits in the text: [start, end), and its members (objects) or items (arrays)."""

    start: int
    end: int
    kind: str  # "object", "array" or "scalar"
    # object: (key, key_start, value) in order; array: values in order
    members: list[tuple[str, int, "Node"]] = field(default_factory=list)
    items: list["Node"] = field(default_factory=list)


def parse(text: str) -> Node:
    """The value tree of a JSON text that ``json.loads`` accepts, with positions."""
    start = 1 if text.startswith("\ufeff") else 0
    node, _ = _value(text, _WS.match(text, start).end())
    return node


def _value(text: str, pos: int) -> tuple[Node, int]:
    ch = text[pos: pos + 1]
    if ch == "{":
        return _container(text, pos, Node(pos, pos, "object"), "}", _member)
    if ch == "[":
        return _container(text, pos, Node(pos, pos, "array"), "]", _item)
    if ch == '"':
        end = scanstring(text, pos + 1)[1]
        return Node(pos, end, "scalar"), end
    end = _SCALAR.match(text, pos).end()
    if end == pos:
        raise EditError(f"not JSON at character {pos}")
    return Node(pos, end, "scalar"), end


def _container(text: str, pos: int, node: Node, close: str,
               read: Callable[[str, int, Node], int]) -> tuple[Node, int]:
    """An object or array from its opening bracket at ``pos``: ``read`` adds one member or item to
    ``node`` and returns where it ends; commas between them, ``close`` after the last."""
    pos = _WS.match(text, pos + 1).end()
    if text[pos: pos + 1] != close:
        while True:
            pos = _WS.match(text, read(text, _WS.match(text, pos).end(), node)).end()
            if text[pos: pos + 1] != ",":
                break
            pos += 1
    node.end = pos + 1
    return node, pos + 1


def _member(text: str, pos: int, node: Node) -> int:
    key_start = pos
    key, pos = scanstring(text, pos + 1)
    pos = _WS.match(text, pos).end() + 1  # the colon
    value, pos = _value(text, _WS.match(text, pos).end())
    node.members.append((key, key_start, value))
    return pos


def _item(text: str, pos: int, node: Node) -> int:
    value, pos = _value(text, pos)
    node.items.append(value)
    return pos



def lines(text: str, *, keepends: bool = False) -> list[str]:
    """The lines of ``text`` as git and GitHub count them: only ``\\n`` ends a line (a ``\\r`` before it
    is part of the ending). Not ``str.splitlines()``, which also ends a line at U+2028, U+2029, U+0085
    and \\x0b-\\x0c, \\x1c-\\x1e: a config may hold those raw inside a string, and a suggestion placed by
    that count lands on the wrong line of the file GitHub shows (B1 of issue 32).

    Example::

        >>> lines('{"a": "x\\u2028y",\\r\\n "b": 1}\\n')
        ['{"a": "x\\u2028y",', ' "b": 1}']
        >>> lines('a\\r\\nb', keepends=True)
        ['a\\r\\n', 'b']
    """
    out = text.split("\n")
    if keepends:
        out = [line + "\n" for line in out[:-1]] + [out[-1]]
    else:
        out = [line[:-1] if line.endswith("\r") else line for line in out]
    return out[:-1] if out[-1] == "" else out


def _find(root: Node, path: list[str]) -> Node | None:
    node = root
    for part in path:
        if node.kind != "object":
            return None
        found = [value for key, _, value in node.members if key == part]
        if not found:
            return None
        node = found[-1]  # json.loads keeps the last of repeated keys
    return node


def apply_edits(text: str, edits: list[Edit]) -> str:
    """``text`` with each edit made in turn, every other character kept.

    Example::

        >>> text = '{\\n  "a": 1,\\n  "c": [1, 2]\\n}\\n'
        >>> print(apply_edits(text, [Edit("b", True), Edit("c", [0, 2])]), end="")
        {
          "a": 1,
          "b": true,
          "c": [0, 2]
        }
        >>> apply_edits('{"a":1,"b":2}', [Edit("a", remove=True)])
        '{"b":2}'
    """
    for edit in edits:
        text = _apply(text, edit)
    return text


def _apply(text: str, edit: Edit) -> str:
    root = parse(text)
    path = edit.key.split(".")
    parent = _find(root, path[:-1])
    if parent is None or parent.kind != "object":
        raise EditError(f"`{'.'.join(path[:-1]) or 'the top level'}` is not an object in the file")
    name = path[-1]
    index = next((i for i in range(len(parent.members) - 1, -1, -1) if parent.members[i][0] == name), None)
    if edit.remove:
        if index is None:
            return text
        return _remove(text, parent, index)
    if index is not None:
        return _replace(text, parent.members[index][2], edit.value)
    return _insert(text, parent, name, edit.value, edit.near)


def _replace(text: str, node: Node, value: Any) -> str:
    """Replace a value; a list of the same length, or an object with the same keys, is replaced item
    by item so its own layout (one per line, or one line) stays."""
    old = json.loads(text[node.start:node.end])
    if node.kind == "array" and isinstance(value, list) and len(value) == len(node.items) and node.items:
        for item, new in sorted(zip(node.items, value), key=lambda pair: -pair[0].start):
            if json.loads(text[item.start:item.end]) != new or type(json.loads(text[item.start:item.end])) is not type(new):
                text = _replace(text, item, new)
        return text
    if node.kind == "object" and isinstance(value, dict) and isinstance(old, dict) and list(old) == list(value):
        for key, _, item in sorted(node.members, key=lambda member: -member[1]):
            text = _replace(text, item, value[key]) if old[key] != value[key] else text
        return text
    return text[:node.start] + _spell(text, value) + text[node.end:]


def _spell(text: str, value: Any) -> str:
    """A new value on one line, with the separators the file's own one-line lists and members use."""
    root = parse(text)
    return json.dumps(value, ensure_ascii=False, separators=(_item_comma(text, root), _colon(text, root)))


def _item_comma(text: str, root: Node) -> str:
    """", " or ",": what the file's first one-line array with two items puts between them."""
    stack = [root]
    while stack:
        node = stack.pop(0)
        if node.kind == "array" and len(node.items) >= 2:
            between = text[node.items[0].end:node.items[1].start]
            if "\n" not in between:
                return between if "," in between else ", "
        stack.extend(value for _, _, value in node.members)
        stack.extend(node.items)
    return ", "


def _insert(text: str, parent: Node, name: str, value: Any, near: str | None) -> str:
    """A new member, placed where the file's order puts it: in its sorted place when the object's
    keys are sorted (from some member on), else right after ``near``, else last."""
    colon = _colon(text, parent)
    member = json.dumps(name, ensure_ascii=False) + colon + _spell(text, value)
    if not parent.members:
        return text[:parent.start + 1] + member + text[parent.start + 1:]
    keys = [key for key, _, _ in parent.members]
    after = _sorted_place(keys, name)
    if after is None:
        after = max((i for i, key in enumerate(keys) if key == near), default=len(keys) - 1)
    sep = _separator(text, parent)
    if after < 0:  # before the first member
        first = parent.members[0][1]
        return text[:first] + member + sep + text[first:]
    end = parent.members[after][2].end
    return text[:end] + sep + member + text[end:]


def _sorted_place(keys: list[str], name: str) -> int | None:
    """The index of the member a new key goes after, when the keys are sorted from some member on
    (save_pretrained sorts them; some files put model_type or architectures first) and the new key
    falls inside that sorted run; None otherwise."""
    start = len(keys) - 1
    while start > 0 and keys[start - 1] <= keys[start]:
        start -= 1
    run = keys[start:]
    if (len(run) < 3 and start > 0) or len(run) < 2 or name < run[0]:
        return None
    return start + sum(1 for key in run if key < name) - 1


def _colon(text: str, parent: Node) -> str:
    """What sits between a key and its value in this object (else in the file's top object)."""
    if not parent.members:
        root = parse(text)
        return _colon(text, root) if root.members else ": "
    _, key_start, value = parent.members[0]
    return text[scanstring(text, key_start + 1)[1]:value.start]


def _separator(text: str, parent: Node) -> str:
    """What the object puts between two members: a comma and the newline and indentation of its
    members (``,\\n    ``, ``,\\r\\n\\t``), or ``, `` / ``,`` on one line."""
    if len(parent.members) >= 2:
        between = text[parent.members[0][2].end:parent.members[1][1]]
        return "," + between.split(",", 1)[1] if "," in between else between
    lead = text[parent.start + 1:parent.members[0][1]]
    if "\n" in lead:
        return "," + lead
    return ", " if _colon(text, parent).endswith(" ") else ","


def _remove(text: str, parent: Node, index: int) -> str:
    """Drop a member and one separator: the one after it, or before it for the last member."""
    _, key_start, value = parent.members[index]
    if index + 1 < len(parent.members):
        return text[:key_start] + text[parent.members[index + 1][1]:]
    if index > 0:
        return text[:parent.members[index - 1][2].end] + text[value.end:]
    return text[:parent.start + 1] + text[_WS.match(text, value.end).end():]
