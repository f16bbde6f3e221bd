"""The launch reader's bounds: what a launch file may make draftguard read, and how much work it may
cost, whoever wrote it (a pull request's author, on the Action's runner). docs/security.md, "Limits".

- Files (a launch file, the ``.env`` beside a compose file, a model folder and its config.json that a
  launch names) are read only as regular files; under a confinement root (the Action's checkout,
  ``confined``) only inside it: the path is resolved (symlinks followed) and must stay under the root,
  so a symlink to ``/proc/self/environ`` or a runner file is refused, never read. ``/proc``, ``/sys``,
  ``/dev`` and any ``.git`` folder (``.git/config`` holds the checkout's token) are refused everywhere,
  as are FIFOs, sockets and devices. The
  final open uses ``O_NOFOLLOW`` on the resolved path and reads at most the cap plus one byte.
- YAML (``compose``): aliases are counted while composing (at most ``MAX_YAML_ALIASES``), an alias
  to a node still being composed (a recursive structure) is refused, and the document, with every
  alias expanded, may hold at most ``MAX_YAML_NODES`` nodes: a billion-laughs file is an error in
  milliseconds.
- JSON options (``--speculative-config``): at most ``MAX_JSON_DEPTH`` levels, checked before parsing.

In: paths, text.
Out: ``read_bytes`` / ``dotenv_text`` / ``compose_all`` / ``json_depth_ok``, or ``BadInput`` naming the
file (and line).
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import stat
from pathlib import Path
from typing import Any, Iterator

import yaml

from draftguard.errors import BadInput
from draftguard.snapshot import line_past_depth

MAX_LAUNCH_BYTES = 1024 * 1024  # a launch file, a .env
MAX_YAML_ALIASES = 100
MAX_YAML_NODES = 100_000
MAX_JSON_DEPTH = 32
MAX_FOLDER_ENTRIES = 10_000  # entries of a model folder a launch names, looked at for links out
SPECIAL = (Path("/proc"), Path("/sys"), Path("/dev"))

_ROOT: contextvars.ContextVar[Path | None] = contextvars.ContextVar("draftguard_launch_root", default=None)


@contextlib.contextmanager
def confined(root: Path | str | None) -> Iterator[None]:
    """Within the block, files a launch names are read only inside ``root`` (None: anywhere but the
    special file systems)."""
    token = _ROOT.set(Path(os.path.realpath(root)) if root is not None else None)
    try:
        yield
    finally:
        _ROOT.reset(token)


def root() -> Path | None:
    return _ROOT.get()


def _shown(path: Path) -> str:
    """A path as a message may show it: relative to the root, never a place outside it."""
    base = _ROOT.get()
    try:
        return str(Path(os.path.realpath(path)).relative_to(base)) if base is not None else str(path)
    except ValueError:
        return path.name


def inside(path: Path | str) -> Path | None:
    """``path`` resolved, when it may be read (under the root, off the special file systems); else None.
    Says nothing about whether it exists."""
    real = Path(os.path.realpath(path))
    if any(real == s or real.is_relative_to(s) for s in SPECIAL) or ".git" in real.parts:
        return None  # /proc, /sys, /dev; a repository's .git (where actions/checkout keeps its token)
    base = _ROOT.get()
    if base is not None and not (real == base or real.is_relative_to(base)):
        return None
    return real


def check_folder(path: Path | str, shown: str, what: str, file: str | None = None, line: int | None = None) -> Path:
    """A model folder (or config file) a launch names, resolved: refused (BadInput naming ``shown``)
    when it leaves the root or is a special file, or when its config.json does."""
    real = inside(path)
    if real is None:
        raise BadInput(f"{shown}: the {what} is outside the checkout (or a system path), not read", file=file or shown,
                       line=line)
    config = real / "config.json" if real.is_dir() else real
    if os.path.lexists(config):
        target = inside(config)
        if target is None or not stat.S_ISREG(os.stat(target).st_mode):
            raise BadInput(f"{shown}: the {what}'s config.json is a link out of the checkout or not a regular "
                           "file, not read", file=file or shown, line=line)
    if real.is_dir():  # the check reads more of the folder (weights' headers, tokenizer files): none may leave
        for n, entry in enumerate(os.scandir(real)):
            if n >= MAX_FOLDER_ENTRIES:
                raise BadInput(f"{shown}: the {what}'s folder holds over {MAX_FOLDER_ENTRIES} entries, not read",
                               file=file or shown, line=line)
            if entry.is_symlink() and (inside(entry.path) is None or not os.path.isfile(entry.path)):
                raise BadInput(f"{shown}: the {what}'s {entry.name} is a link out of the checkout or to no regular "
                               "file, not read", file=file or shown, line=line)
    return real


def read_bytes(path: Path | str, shown: str, limit: int = MAX_LAUNCH_BYTES) -> bytes:
    """A regular file's bytes (at most ``limit``), or BadInput naming ``shown``: a file that resolves
    outside the root or onto /proc, /sys, /dev; a FIFO, socket or device; a file over ``limit``."""
    real = inside(path)
    if real is None:
        raise BadInput(f"{shown}: a link out of the checkout (or to a system file), not read", file=shown)
    try:
        fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise BadInput(f"{shown}: no such file", file=shown) from None
    except OSError as exc:
        raise BadInput(f"{shown}: cannot be read ({exc.strerror})", file=shown) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise BadInput(f"{shown}: not a regular file, not read", file=shown)
        if info.st_size > limit:
            raise BadInput(f"{shown}: {info.st_size / 1e6:.1f} MB, over the limit of {limit / 1e6:.1f} MB", file=shown)
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise BadInput(f"{shown}: over the limit of {limit / 1e6:.1f} MB", file=shown)
    return data


def dotenv_text(folder: Path) -> str | None:
    """The ``.env`` beside a compose file, read within the bounds; None when there is none."""
    path = folder / ".env"
    if not os.path.lexists(path):
        return None
    shown = _shown(folder) + "/.env" if _ROOT.get() is not None else str(path)
    return read_bytes(path, shown.removeprefix("./")).decode("utf-8", errors="replace")


# --- YAML ------------------------------------------------------------------------------------------------


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe composer, with aliases counted and recursive ones refused while composing."""

    def __init__(self, stream: str, path: str):
        super().__init__(stream)
        self._path = path
        self._aliases = 0
        self._open: list[str] = []

    def compose_node(self, parent: Any, index: Any) -> Any:  # noqa: D102 (PyYAML's hook)
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            self._aliases += 1
            if self._aliases > MAX_YAML_ALIASES:
                self._refuse(f"more than {MAX_YAML_ALIASES} YAML aliases", event.start_mark)
            if event.anchor in self._open:
                self._refuse(f"the alias *{event.anchor} refers to a node that contains it", event.start_mark)
            return super().compose_node(parent, index)
        event = self.peek_event()
        anchor = getattr(event, "anchor", None)
        if anchor is not None:
            self._open.append(anchor)
        try:
            return super().compose_node(parent, index)
        finally:
            if anchor is not None:
                self._open.pop()

    def _refuse(self, problem: str, mark: Any) -> None:
        line = mark.line + 1 if mark is not None else 1
        raise BadInput(f"{self._path}:{line}: {problem}, not read", file=self._path, line=line)


def compose_all(text: str, path: str) -> list[Any]:
    """Every YAML document's node tree, within the alias and node budgets. Raises yaml.YAMLError for
    invalid YAML, BadInput (file, line) for a file past a budget."""
    loader = _BoundedLoader(text, path)
    docs = []
    try:
        while loader.check_node():
            doc = loader.get_node()
            if doc is not None:
                docs.append(doc)
    finally:
        loader.dispose()
    total = sum(_expanded_size(doc, {}) for doc in docs)
    if total > MAX_YAML_NODES:
        raise BadInput(f"{path}: its YAML aliases expand to more than {MAX_YAML_NODES:,} nodes, not read",
                       file=path, line=1)
    return docs


def _expanded_size(node: Any, seen: dict[int, int]) -> int:
    """Nodes in ``node``'s tree with every alias expanded (memoized per node: linear in the composed
    graph, which has no cycles once composed under ``_BoundedLoader``); saturates past the budget."""
    stack: list[tuple[Any, bool]] = [(node, False)]
    while stack:
        cur, done = stack.pop()
        if done:
            size = 1 + sum(seen[id(c)] for c in _children(cur))
            seen[id(cur)] = min(size, MAX_YAML_NODES + 1)
            continue
        if id(cur) in seen:
            continue
        seen[id(cur)] = 0  # being sized (a cycle cannot happen: the loader refuses recursive aliases)
        stack.append((cur, True))
        stack.extend((c, False) for c in _children(cur) if id(c) not in seen)
    return seen[id(node)]


def _children(node: Any) -> list[Any]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


# --- JSON ------------------------------------------------------------------------------------------------


def json_depth_ok(text: str, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether ``text``'s brackets (outside strings) nest at most ``limit`` deep; linear, no recursion."""
    return line_past_depth(text, limit) is None


def failure(shown: str, exc: BaseException) -> str:
    """The error a launch file gets for an unexpected failure while it was read or checked: the kind of
    failure only (an exception's text may quote what it read)."""
    if isinstance(exc, RecursionError):
        return f"{shown}: nested too deep to be read, not checked"
    if isinstance(exc, MemoryError):
        return f"{shown}: too large to be read, not checked"
    return f"{shown}: could not be checked ({exc.__class__.__name__})"
