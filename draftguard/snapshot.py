"""Snapshots: the raw files of a model repo at one revision, from a folder, a file or the Hub.

A Snapshot holds bytes, never parsed objects, so every check sees exactly what was committed.

In: a target (a folder, a config.json file, or a Hub repo id with an optional revision) and the file
names to read; Hub files come through the one Hub reader (``hub_access.fetch_file``), sized first.
Out: ``load_snapshot`` -> a ``Snapshot`` (bytes per file, display paths, ``load_json``, ``line_of``),
or ``BadInput`` naming the file (with line and column for invalid JSON).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from json.decoder import scanstring
from pathlib import Path
from typing import Any, Iterator, Mapping

from draftguard.errors import BadInput, FileTooLarge
from draftguard.hub_access import HubProblem, fetch_file, hub_problem

MAX_CONFIG_BYTES = 5 * 1024 * 1024
# Real configs nest 4 or 5 levels (text_config.rope_parameters); the checks walk values recursively,
# so a document nested deeper than this is refused with its line, before any check sees it.
MAX_JSON_DEPTH = 32
# The checks name each value by its dotted key path and copy the config a few times: what they cost
# grows with keys x path length, so both are bounded (the largest real configs, ImageNet-22k's
# id2label and label2id, hold about 44,000 keys; real paths are under 100 characters).
MAX_JSON_KEYS = 100_000
MAX_KEY_PATH = 256
CONFIG_NAME = "config.json"
SETTINGS_NAME = ".draftguard.yml"
# A change to any of these can change what a model runs (or how draftguard checks it), so the bot,
# the Hub bot and the Action check again when one changes.
MODEL_FILES = frozenset({
    "config.json", "model.safetensors.index.json", "tokenizer.json", "tokenizer_config.json",
    "special_tokens_map.json", "tokenizer.model", "generation_config.json",
    "chat_template.jinja",  # the turn-end token the stop-token rules (DG408, DG409) read, where it is
})
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


@dataclass
class Snapshot:
    """Raw files of one target.

    ``source`` is what the user named (a folder, a file, or a Hub repo id); ``display`` maps each file
    name to the path shown in findings and annotations.
    """

    source: str
    revision: str | None
    files: dict[str, bytes]
    display: dict[str, str]
    local_dir: str | None = None
    is_hub: bool = False
    # Hub reads: None uses the environment's token (HF_TOKEN), False reads anonymously. A repo named
    # by someone else's file (a pull request's verifier) is read with False: the bot's token reads
    # only the repos it is meant for, so a private repo's facts never reach a public comment.
    token: bool | None = None
    _lines: dict[str, "KeyLines"] = field(default_factory=dict, repr=False)
    _parsed: dict[str, bytes] = field(default_factory=dict, repr=False, compare=False)  # bytes that passed the caps

    def path_of(self, name: str) -> str:
        return self.display.get(name, name)

    def load_json(self, name: str = CONFIG_NAME) -> dict[str, Any]:
        """Parse a JSON file of the snapshot; raise BadInput with line and column when it is not a
        JSON object."""
        data = self.files[name]
        if self._parsed.get(name) is data:  # these very bytes passed every check: a fresh copy, parsed in C
            return json.loads(data.decode("utf-8-sig"))
        value = parse_json_object(data, self.path_of(name))
        self._parsed[name] = data
        return value

    def line_of(self, key: str, name: str = CONFIG_NAME) -> int | None:
        """Line of a dotted key (``rope_parameters.rope_type``) in the file, or of its nearest parent."""
        if name not in self._lines:
            self._lines[name] = key_lines(self.files[name].decode("utf-8", "replace"))
        lines = self._lines[name]
        while key:
            if key in lines:
                return lines[key]
            key = key.rpartition(".")[0]
        return None


def is_model_file(path: str) -> bool:
    """Whether a changed repo path (posix) is one the checks watch.

    Example::

        >>> is_model_file("drafter/config.json"), is_model_file("README.md"), is_model_file(".draftguard.yml")
        (True, False, True)
        >>> is_model_file("chat_template.jinja")
        True
    """
    return path == SETTINGS_NAME or path.rpartition("/")[2] in MODEL_FILES


def parse_json_object(data: bytes, display: str) -> dict[str, Any]:
    """Decode ``data`` as a JSON object, or raise BadInput naming the file, line and column."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise BadInput(f"{display} is not UTF-8 text (byte {exc.start})", file=display) from None
    if not text.strip():
        raise BadInput(f"{display}: empty file (invalid JSON: a config must be a JSON object)", file=display, line=1)
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadInput(
            f"{display}:{exc.lineno}:{exc.colno}: invalid JSON: {exc.msg}",
            file=display,
            line=exc.lineno,
            column=exc.colno,
        ) from None
    except RecursionError:
        raise BadInput(f"{display}: invalid JSON: nested too deeply", file=display) from None
    if not isinstance(value, dict):
        raise BadInput(
            f"{display}: the top level must be a JSON object, got {type(value).__name__}",
            file=display,
            line=1,
        )
    deepest, keys, longest = _shape(value)
    if deepest > MAX_JSON_DEPTH:
        line = line_past_depth(text, MAX_JSON_DEPTH) or 1
        raise BadInput(f"{display}:{line}: nested more than {MAX_JSON_DEPTH} levels deep; no model config is, "
                       "so it is not checked", file=display, line=line)
    if keys > MAX_JSON_KEYS or longest[0] > MAX_KEY_PATH:
        why = (f"{keys} keys, over {MAX_JSON_KEYS}" if keys > MAX_JSON_KEYS else
               f"a key path of {longest[0]} characters, over {MAX_KEY_PATH}")
        raise BadInput(f"{display}: {why}; no model config is that large, so it is not checked (the checks "
                       "name every value by its dotted key path)", file=display)
    return value


def _shape(value: Any) -> tuple[int, int, tuple[int, str]]:
    """How deep a decoded JSON value nests (1 for a flat object), how many keys it holds, and its
    longest dotted key path (length, path), without recursion; stops early past a limit."""
    deepest, keys, longest = 0, 0, (0, "")
    stack: list[tuple[Any, int, str]] = [(value, 1, "")]
    while stack:
        item, level, path = stack.pop()
        deepest = max(deepest, level)
        if deepest > MAX_JSON_DEPTH or keys > MAX_JSON_KEYS or longest[0] > MAX_KEY_PATH:
            break
        if isinstance(item, dict):
            keys += len(item)
            for key, child in item.items():
                dotted = f"{path}.{key}" if path else key
                if len(dotted) > longest[0]:
                    longest = (len(dotted), dotted)
                if isinstance(child, (dict, list)):
                    stack.append((child, level + 1, dotted))
        elif isinstance(item, list):
            stack.extend((child, level + 1, path) for child in item if isinstance(child, (dict, list)))
    return deepest, keys, longest


def line_past_depth(text: str, limit: int) -> int | None:
    """The line of the first bracket that opens level ``limit + 1`` (strings skipped), or None where
    the text nests at most ``limit`` deep; linear, no recursion, no decoding.

    Example::

        >>> line_past_depth('{"a": [1, {"b": 2}]}', 3), line_past_depth('{"a": [[1]]}', 2)
        (None, 1)
    """
    level, line, in_string, escaped = 0, 1, False, False
    for ch in text:
        if ch == "\n":
            line += 1
        if in_string:
            escaped, in_string = (not escaped and ch == "\\"), in_string and (escaped or ch != '"')
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            level += 1
            if level > limit:
                return line
        elif ch in "]}":
            level -= 1
    return None


def load_snapshot(target: str, revision: str | None = None, names: tuple[str, ...] = (CONFIG_NAME,)) -> Snapshot:
    """Read a target's files: a folder holding config.json, a config.json file, or a Hub repo id.

    Example::

        >>> snap = load_snapshot("examples/qwen3-swa-drafter")
        >>> snap.load_json()["model_type"]
        'qwen3'
    """
    path = Path(target)
    if path.is_dir():
        return _local(target, path, names, revision)
    if path.is_file():
        return _local(target, path.parent, names, revision, first=path)
    if path.exists():
        raise BadInput(f"{target}: not a folder or a config.json file", file=target)
    looks_local = target.startswith((".", "/", "~")) or target.endswith(".json") or target.count("/") != 1
    if not looks_local and _REPO_ID.match(target):
        return hub_snapshot(target, revision, names)
    raise BadInput(
        f"{target}: no such file or folder, and not a Hub repo id (owner/name)", file=target
    )


def _read_limited(path: Path, display: str) -> bytes:
    size = path.stat().st_size
    if size > MAX_CONFIG_BYTES:
        raise BadInput(
            f"{display} is {size / 1e6:.1f} MB; config files over {MAX_CONFIG_BYTES // (1024 * 1024)} MB "
            "are refused (is this a weights file?)",
            file=display,
        )
    return path.read_bytes()


def _local(target: str, folder: Path, names: tuple[str, ...], revision: str | None, first: Path | None = None) -> Snapshot:
    files: dict[str, bytes] = {}
    display: dict[str, str] = {}
    wanted = list(names)
    if first is not None:
        # A file named directly is the config, whatever its name.
        wanted = [CONFIG_NAME] + [n for n in names if n != CONFIG_NAME]
    for name in wanted:
        file = first if (first is not None and name == CONFIG_NAME) else folder / name
        shown = target if (first is not None and name == CONFIG_NAME) else str(Path(target) / name)
        display[name] = shown
        if file.is_file():
            files[name] = _read_limited(file, shown)
    if CONFIG_NAME not in files:
        # Name the folder that was given, not the config.json path that does not exist.
        raise BadInput(f"{target}: no config.json in this folder", file=target)
    return Snapshot(source=target, revision=revision, files=files, display=display, local_dir=str(folder))


def hub_snapshot(repo_id: str, revision: str | None, names: tuple[str, ...], token: bool | None = None) -> Snapshot:
    """A Hub repo's files at a revision, through the one Hub reader (``hub_access.fetch_file``): each
    sized before it is downloaded, config.json required, the others optional. ``token`` False reads
    without the environment's token (a repo someone else's file named). Raises BadInput in one line."""
    files: dict[str, bytes] = {}
    display: dict[str, str] = {}
    shown_rev = revision or "main"
    local_dir = None
    for name in names:
        shown = f"{repo_id}@{shown_rev}/{name}"
        display[name] = shown
        try:
            files[name], path = fetch_file(repo_id, name, revision, limit=MAX_CONFIG_BYTES, token=token, shown=shown)
        except FileTooLarge as exc:
            said = " (is this a weights file?)" if exc.downloaded else ", and it was not downloaded"
            raise BadInput(f"{shown} is {exc.size / 1e6:.1f} MB; config files over {MAX_CONFIG_BYTES // (1024 * 1024)} "
                           f"MB are refused{said}", file=shown) from None
        except Exception as exc:
            problem = hub_problem(exc)
            if problem is None and not isinstance(exc, OSError):
                raise
            if problem is not None and problem.kind == "entry-not-found" and name != CONFIG_NAME:
                continue
            raise BadInput(_hub_failure(problem, exc, repo_id, shown, shown_rev), file=shown) from None
        local_dir = str(path.parent)
    return Snapshot(source=repo_id, revision=revision, files=files, display=display, local_dir=local_dir, is_hub=True,
                    token=token)


def _hub_failure(problem: HubProblem | None, exc: BaseException, repo_id: str, shown: str, revision: str) -> str:
    """The one line a failed Hub read of ``shown`` says, from the one reading of the error."""
    if problem is None:
        return f"{shown}: could not fetch from the Hub: {exc.__class__.__name__}"
    if problem.kind == "entry-not-found":
        return f"{shown}: the repo has no config.json at this revision"
    if problem.kind == "gated":
        return f"{repo_id}: gated repo; accept its terms on the Hub and set HF_TOKEN"
    if problem.kind == "not-found":
        return f"{repo_id}: repo not found on the Hub, or private (set HF_TOKEN to read private repos)"
    if problem.kind == "revision-not-found":
        return f"{repo_id}: revision {revision!r} not found"
    if problem.unread:
        return (f"{shown}: the Hub cannot be reached and this file is not in the local cache "
                "(fetch it once while online, or check a local folder)")
    return f"{shown}: {problem.message}"


# --- key positions -------------------------------------------------------------------------------
# The json module gives no positions, and the source-map packages on PyPI are unmaintained. This
# scanner runs only on text json.loads already accepted, and only when a finding needs a line.

_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"([ \t\n\r]*:)?|[{}\[\]]', re.DOTALL)  # a string (a key: colon), a bracket


class KeyLines(Mapping[str, int]):
    """Where each key of a JSON document is, as a tree of keys: ``lines["a.b"]`` is the line of the
    key ``b`` inside ``a``. A tree, not a map of dotted paths, so that its size is that of the
    document: a 100 KB key with 8,000 children cost 800 MB as dotted strings (B5 of issue 25). A key
    that holds dots itself (``weight_map``'s tensor names) is found too: the longest match first."""

    def __init__(self) -> None:
        self._root: dict[str, list] = {}  # key -> [line, its children or None]

    def __getitem__(self, key: str) -> int:
        found = self._find(self._root, key)
        if found is None:
            raise KeyError(key)
        return found

    def _find(self, node: dict[str, list], rest: str) -> int | None:
        entry = node.get(rest)
        if entry is not None:
            return entry[0]
        i = rest.find(".")
        while i != -1:
            entry = node.get(rest[:i])
            if entry is not None and entry[1]:
                found = self._find(entry[1], rest[i + 1:])
                if found is not None:
                    return found
            i = rest.find(".", i + 1)
        return None

    def __iter__(self) -> Iterator[str]:
        stack = [("", self._root)]
        while stack:
            prefix, node = stack.pop()
            for key, (_, children) in node.items():
                yield prefix + key
                if children:
                    stack.append((prefix + key + ".", children))

    def __len__(self) -> int:
        return sum(1 for _ in self)


def key_lines(text: str) -> KeyLines:
    """Map each dotted key path of a JSON document to the 1-based line of its key.

    Example::

        >>> dict(key_lines('{\\n "a": {\\n  "b": 1}}'))
        {'a': 2, 'a.b': 3}
    """
    out = KeyLines()
    at, line = 0, 1  # keys are met in order: the last position counted, and its line
    stack: list[dict[str, list]] = []  # the nodes of the containers open around the current one
    node, key = out._root, None  # where the current container's keys go; the key whose value comes next
    try:
        # Only strings (a key when a colon follows) and brackets matter; numbers and words are passed
        # over by the search itself, and a list's items put their keys in the list's own node.
        for token in _TOKEN.finditer(text):
            start, first = token.start(), text[token.start()]
            if first == '"':
                if token.group(1) is None:
                    key = None  # a string value
                    continue
                name = text[start + 1:token.start(1) - 1]
                if "\\" in name:
                    name = scanstring(text, start + 1)[0]
                key = node.get(name)
                if key is None:
                    line += text.count("\n", at, start)
                    at = start
                    key = node[name] = [line, None]
            elif first in "{[":
                stack.append(node)
                if key is not None:
                    if key[1] is None:
                        key[1] = {}
                    node = key[1]
                key = None
            else:
                node, key = stack.pop(), None
    except (ValueError, IndexError):
        pass  # positions are a convenience; findings keep line None
    return out
