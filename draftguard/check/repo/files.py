"""The files beside config.json that the repo rules read, each read once and only as far as a rule
needs: generation_config.json, tokenizer_config.json (and chat_template.jinja), and the tensor names
of the checkpoint from ``model.safetensors.index.json`` or, for one file, its safetensors header.
Never weight bytes.

What is read: a file the surface put in the snapshot (a bot's or the audit's ``Snapshot.files``) is
used as is; a local folder's files are read from the folder, each under the size caps the check
already keeps (5 MB for JSON, ``weights.MAX_INDEX_BYTES`` for an index, ``weights.MAX_HEADER_BYTES``
for a header). A Hub snapshot is read only from what the surface fetched: the repo rules never add a
Hub request, so a clean check stays as fast and as offline as before (``fetched`` is how a bot or the
audit fetches them, within a byte budget; a safetensors file it fetched is a header-only copy).

In: a ``Snapshot``.
Out: ``RepoFiles``: ``json(name)`` (a dict or None), ``chat_template()`` (text or None),
``tensors()`` (``TensorNames``: names, the file shown, and dtypes where a header was read; None when
the checkpoint is not readable).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import struct

from draftguard.check.weights import INDEX_FILE, MAX_HEADER_BYTES, MAX_INDEX_BYTES, SINGLE_FILE, parse_header
from draftguard.errors import HeaderError
from draftguard.snapshot import MAX_CONFIG_BYTES, BadInput, Snapshot, parse_json_object

GENERATION_CONFIG = "generation_config.json"
TOKENIZER_CONFIG = "tokenizer_config.json"
CHAT_TEMPLATE_FILE = "chat_template.jinja"
_UNREAD = object()
MAX_SHARDS = 16  # shard headers read for dtypes: each a few MB at most, never weight bytes


def read_header(path: Path) -> dict[str, tuple[str, tuple[int, ...]]]:
    """A local safetensors file's header (names, dtypes, shapes), checked as safetensors checks it
    but for the weight bytes' presence: the repo rules never read them, and a header-only copy of a
    checkpoint (names, dtypes and shapes, no weights) is read like the real file."""
    with open(path, "rb") as f:
        prefix = f.read(8)
        if len(prefix) < 8:
            raise HeaderError("too short for a safetensors header")
        (length,) = struct.unpack("<Q", prefix)
        if length > MAX_HEADER_BYTES:
            raise HeaderError(f"the header length is {length:,} bytes")
        return header_of(prefix + f.read(length))


def header_of(data: bytes) -> dict[str, tuple[str, tuple[int, ...]]]:
    """The header of a safetensors file's first bytes (the length, then the header): a local file's, or
    a header-only copy a surface fetched by range reads (``fetched``)."""
    if len(data) < 8:
        raise HeaderError("too short for a safetensors header")
    (length,) = struct.unpack("<Q", data[:8])
    if length > MAX_HEADER_BYTES:
        raise HeaderError(f"the header length is {length:,} bytes")
    if len(data) < 8 + length:
        raise HeaderError("the header is truncated")
    return parse_header(data[8 : 8 + length])


@dataclass
class TensorNames:
    """The tensor names of a checkpoint, and where they were read (shown in findings)."""

    names: frozenset[str]
    file: str
    dtypes: dict[str, str] | None = None  # name -> dtype, when a header was read (not an index)


class RepoFiles:
    """The repo's other files, read lazily and once."""

    def __init__(self, snapshot: Snapshot):
        self.snapshot = snapshot
        self._cache: dict[str, Any] = {}

    def shown(self, name: str) -> str:
        if name in self.snapshot.display:
            return self.snapshot.display[name]
        if self.snapshot.is_hub:
            return f"{self.snapshot.source}@{self.snapshot.revision or 'main'}/{name}"
        return str(Path(self.snapshot.path_of("config.json")).parent / name)

    def raw(self, name: str, limit: int = MAX_CONFIG_BYTES) -> bytes | None:
        """A file's bytes: the snapshot's own, else a local folder's (under ``limit``), else None."""
        if name in self.snapshot.files:
            return self.snapshot.files[name]
        if self.snapshot.is_hub or not self.snapshot.local_dir:
            return None  # never a new Hub request
        path = Path(self.snapshot.local_dir) / name
        try:
            if not path.is_file() or path.stat().st_size > limit:
                return None
            return path.read_bytes()
        except OSError:
            return None

    def json(self, name: str) -> dict[str, Any] | None:
        """A JSON file as a dict, or None when absent or unreadable (another rule's business)."""
        if name not in self._cache:
            data = self.raw(name)
            try:
                self._cache[name] = parse_json_object(data, self.shown(name)) if data is not None else None
            except BadInput:
                self._cache[name] = None
        return self._cache[name]

    def chat_template(self) -> tuple[str, str] | None:
        """The chat template's text and the file it is in: chat_template.jinja, or tokenizer_config.json's
        ``chat_template`` (a string, or a list of named templates: the "default" one, else all joined)."""
        data = self.raw(CHAT_TEMPLATE_FILE)
        if data is not None:
            return data.decode("utf-8", "replace"), CHAT_TEMPLATE_FILE
        config = self.json(TOKENIZER_CONFIG) or {}
        template = config.get("chat_template")
        if isinstance(template, list):
            named = [t.get("template") for t in template if isinstance(t, dict) and isinstance(t.get("template"), str)]
            default = [t.get("template") for t in template if isinstance(t, dict) and t.get("name") == "default"]
            template = default[0] if default and isinstance(default[0], str) else "\n".join(named)
        return (template, TOKENIZER_CONFIG) if isinstance(template, str) and template else None

    def tensors(self) -> TensorNames | None:
        """The checkpoint's tensor names: the index's ``weight_map`` keys, else one local
        model.safetensors header. None when neither can be read."""
        cached = self._cache.get("__tensors__", _UNREAD)
        if cached is not _UNREAD:
            return cached
        found: TensorNames | None = None
        index = self.raw(INDEX_FILE, limit=MAX_INDEX_BYTES)
        if index is not None:
            try:
                weight_map = parse_json_object(index, self.shown(INDEX_FILE)).get("weight_map")
            except BadInput:
                weight_map = None
            if isinstance(weight_map, dict) and weight_map:
                found = TensorNames(frozenset(str(k) for k in weight_map), self.shown(INDEX_FILE),
                                    self._shard_dtypes(weight_map))
        elif SINGLE_FILE in self.snapshot.files or not self.snapshot.is_hub and self.snapshot.local_dir:
            fetched = self.snapshot.files.get(SINGLE_FILE)  # a header-only copy the surface fetched
            single = Path(self.snapshot.local_dir or ".") / SINGLE_FILE
            header = None
            if fetched is not None or single.is_file():
                try:
                    header = header_of(fetched) if fetched is not None else read_header(single)
                except (HeaderError, OSError):
                    header = None  # DG120 (the drafter rules) says what is wrong with it
                if header:
                    found = TensorNames(frozenset(header), self.shown(SINGLE_FILE),
                                        {name: dtype for name, (dtype, _) in header.items()})
        self._cache["__tensors__"] = found
        return found

    def _shard_dtypes(self, weight_map: dict[str, Any]) -> dict[str, str] | None:
        """The dtypes of the index's tensors, from the headers of the shards a local folder holds (the
        first ``MAX_SHARDS``; headers only). None when none is here (a Hub snapshot, a trimmed folder)."""
        fetched = {name: data for name, data in self.snapshot.files.items() if name.endswith(".safetensors")}
        if not fetched and (self.snapshot.is_hub or not self.snapshot.local_dir):
            return None
        dtypes: dict[str, str] = {}
        shards = sorted({str(v) for v in weight_map.values() if isinstance(v, str)})[:MAX_SHARDS]
        for shard in shards:
            path = Path(self.snapshot.local_dir or ".") / shard
            if "/" in shard or ".." in shard or shard not in fetched and (not self.snapshot.local_dir
                                                                          or not path.is_file()):
                continue
            try:
                header = header_of(fetched[shard]) if shard in fetched else read_header(path)
            except (HeaderError, OSError):
                continue  # DG120 (the drafter rules) says what is wrong with it
            dtypes.update({name: dtype for name, (dtype, _) in header.items()})
        return dtypes or None
