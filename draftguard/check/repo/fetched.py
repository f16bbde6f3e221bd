"""The files beside a config.json that the repo rules read, fetched where there is no checkout (the
Hub bot, the GitHub bot, the audit), within one byte budget per config. ``files.RepoFiles`` never adds
a request of its own: what is fetched here is what the repo rules see.

Fetched, in this order, each only when the folder has it: generation_config.json,
tokenizer_config.json, chat_template.jinja (the stop-token rules, DG408/DG409),
model.safetensors.index.json (the tensor names: MTP, quantization and tied-head rules, DG400-DG406), the
quantization files an engine reads when config.json names no scheme (DG410), and, for a checkpoint
with no index, the header of model.safetensors by two HTTP range requests: the 8-byte length, then the
JSON header alone, never a weight byte. The header is kept as a header-only copy (length + header), which
``files.RepoFiles`` reads as it reads the local file.

Budget: every byte read counts against ``budget``; a file is asked for with at most what is left, so a
file over it is never downloaded. A read the budget stops is a note ("not read: ..."), and the rules
that needed it stay silent, as they do for a file that is not there.

In: config.json's bytes, the folder (repo path, "" for the root), ``read(path, max_bytes)`` (bytes, None
when absent; raises ``FileTooLarge`` over ``max_bytes``), optionally ``read_range(path, start, end)``
(bytes ``start..end`` inclusive, None when absent) and ``sizes`` (repo path -> size, from a listing:
files not in it are not asked for).
Out: ``RepoRead``: ``files`` (name -> bytes, to put in the ``Snapshot``), ``spent`` (bytes), ``notes``.
"""

from __future__ import annotations

import json
import posixpath
import struct
from dataclasses import dataclass, field
from typing import Any, Callable

from draftguard.check.repo.checkpoint import QUANT_FILES
from draftguard.check.repo.files import CHAT_TEMPLATE_FILE, GENERATION_CONFIG, TOKENIZER_CONFIG
from draftguard.check.weights import INDEX_FILE, MAX_HEADER_BYTES, MAX_INDEX_BYTES, SINGLE_FILE
from draftguard.errors import FileTooLarge
from draftguard.snapshot import MAX_CONFIG_BYTES

Reader = Callable[[str, int], "bytes | None"]
RangeReader = Callable[[str, int, int], "bytes | None"]

# What one config's other files may cost, all together: enough for the tokenizer files and the index of
# a model of a few hundred layers (Llama 3.1 70B's index is 59 KB, its tokenizer_config.json 52 KB).
REPO_BYTES = 4 * 1024 * 1024


@dataclass
class RepoRead:
    """What was fetched for one config: the files (name -> bytes), the bytes spent, and notes on what
    the budget left unread."""

    files: dict[str, bytes] = field(default_factory=dict)
    spent: int = 0
    notes: list[str] = field(default_factory=list)


def wanted(raw: Any) -> bool:
    """Whether the repo rules read anything beside this config.json: not for a drafter's head (the
    drafter rules judge it) nor for a file that is not a JSON object."""
    return isinstance(raw, dict) and "speculators_model_type" not in raw and "transformer_layer_config" not in raw


def _declares_quantization(raw: dict[str, Any]) -> bool:
    text = raw.get("text_config")
    return isinstance(raw.get("quantization_config"), dict) or (
        isinstance(text, dict) and isinstance(text.get("quantization_config"), dict))


def fetch_repo_files(config: bytes, folder: str, read: Reader, read_range: RangeReader | None = None, *,
                     budget: int = REPO_BYTES, sizes: dict[str, int] | None = None) -> RepoRead:
    """Fetch what the repo rules read beside ``folder``'s config.json (module docstring).

    Example::

        >>> files = {"generation_config.json": b'{"eos_token_id": 2}'}
        >>> got = fetch_repo_files(b'{"model_type": "llama"}', "", lambda p, n: files.get(p))
        >>> sorted(got.files), got.spent
        (['generation_config.json'], 19)
    """
    out = RepoRead()
    try:
        raw = json.loads(config)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return out  # the config rules say why
    if not wanted(raw):
        return out

    def path(name: str) -> str:
        return posixpath.join(folder, name) if folder else name

    def listed(name: str) -> bool:
        return sizes is None or path(name) in sizes

    def get(name: str, limit: int) -> bytes | None:
        left = budget - out.spent
        size = sizes.get(path(name)) if sizes is not None else None
        if size is not None and size > limit:
            return None  # over what the rules read of such a file: the check reads it as absent
        if size is not None and size > left:
            out.notes.append(_over(path(name), size, budget))
            return None
        try:
            data = read(path(name), min(limit, left))
        except FileTooLarge as exc:
            if exc.size <= limit:
                out.notes.append(_over(path(name), exc.size, budget))
            return None
        if data is None:
            return None
        out.spent += len(data)
        out.files[name] = data
        return data

    for name in (GENERATION_CONFIG, TOKENIZER_CONFIG, CHAT_TEMPLATE_FILE):
        if listed(name):
            get(name, MAX_CONFIG_BYTES)
    index = get(INDEX_FILE, MAX_INDEX_BYTES) if listed(INDEX_FILE) else None
    if index is None and read_range is not None and listed(SINGLE_FILE):
        header = _header(path(SINGLE_FILE), read_range, budget, out)
        if header is not None:
            out.files[SINGLE_FILE] = header
    if not _declares_quantization(raw) and (INDEX_FILE in out.files or SINGLE_FILE in out.files):
        for name in QUANT_FILES:  # DG410 reads them: a scheme named there is not missing
            if listed(name):
                get(name, MAX_CONFIG_BYTES)
    return out


def _over(shown: str, size: int, budget: int) -> str:
    return (f"{shown}: not read: {size / 1024:.0f} KB would pass the {budget / 1024:.0f} KB this config's other "
            "files may take; the repo rules that read it did not run")


def _header(shown: str, read_range: RangeReader, budget: int, out: RepoRead) -> bytes | None:
    """A safetensors file's length prefix and header by two range reads (bytes 0-7, then the header
    alone: never a weight byte, however small the file), as a header-only copy; None when the file is
    absent, its header unreadable (the drafter rules judge it) or over the budget (a note)."""
    if budget - out.spent < 8:
        out.notes.append(f"{shown}: header not read: the {budget / 1024:.0f} KB this config's other files may "
                         "take are spent")
        return None
    prefix = read_range(shown, 0, 7)
    if prefix is None or len(prefix) < 8:
        return None
    out.spent += len(prefix)
    (length,) = struct.unpack("<Q", prefix)
    if length > MAX_HEADER_BYTES or length == 0:
        return None  # the drafter rules say what is wrong with it
    if length > budget - out.spent:
        out.notes.append(_over(f"{shown} (its header)", 8 + length, budget))
        return None
    header = read_range(shown, 8, 7 + length)
    if header is None:
        return None
    out.spent += len(header)
    return prefix + header if len(header) == length else None
