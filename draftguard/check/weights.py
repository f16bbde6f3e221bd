"""Tensor names, shapes and dtypes of a checkpoint, from its safetensors headers only.

A safetensors file starts with an 8-byte little-endian header length, then that many bytes of JSON
describing every tensor. Reading those two is enough to check shapes against config.json, so a
drafter check never reads weight bytes: locally it reads the header (json + struct, no numpy, no
torch); on the Hub it asks the Hub reader's ``safetensors_metadata`` (huggingface_hub's), which
fetches headers with HTTP range requests. Sharded checkpoints are read through ``model.safetensors.index.json``.

A header that cannot be read is not an exception here: it becomes a ``WeightsProblem``, which the
drafter rules turn into a finding on that file.

In: a ``Snapshot`` (``read_weights``), a local safetensors path (``read_local_header``) or a header's
bytes (``parse_header``).
Out: ``Weights`` (each ``Tensor``'s dtype and shape, the files read, any ``WeightsProblem``), or None
when there is no safetensors checkpoint; ``BadInput`` only when the Hub cannot be reached.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from draftguard.errors import HeaderError
from draftguard.hub_access import hub_problem, safetensors_metadata
from draftguard.snapshot import BadInput, Snapshot, key_lines, parse_json_object

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
# The safetensors library refuses headers over 100 MB, but a 99 MB header cost 45 s and 1.2 GB to
# check (R12 of issue 25). The largest real headers are a few MB (a shard of thousands of tensors);
# huggingface_hub's get_safetensors_metadata refuses over 25 MB, and the local reader does the same.
# DRAFTGUARD_MAX_SAFETENSORS_HEADER (bytes) sets another limit, never above safetensors' own.
SAFETENSORS_MAX_HEADER = 100_000_000


def _max_header_bytes() -> int:
    try:
        wanted = int(os.environ.get("DRAFTGUARD_MAX_SAFETENSORS_HEADER") or 25_000_000)
    except ValueError:
        wanted = 25_000_000
    return max(1024, min(wanted, SAFETENSORS_MAX_HEADER))


MAX_HEADER_BYTES = _max_header_bytes()
MAX_INDEX_BYTES = 50 * 1024 * 1024
# Bytes per element, for checking that data_offsets match the shape (the safetensors spec's dtypes).
DTYPE_BYTES = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "F8_E8M0": 1,
    "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
    "I32": 4, "U32": 4, "F32": 4,
    "I64": 8, "U64": 8, "F64": 8,
}


@dataclass(frozen=True)
class Tensor:
    """One tensor as its header describes it."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    file: str  # the file shown in findings


@dataclass
class WeightsProblem:
    """A weights file that could not be read. ``line`` points into an index file when known."""

    file: str
    message: str
    line: int | None = None


@dataclass
class Weights:
    """Every tensor header of one checkpoint. ``files`` are the files read, as shown in findings."""

    tensors: dict[str, Tensor] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)
    problems: list[WeightsProblem] = field(default_factory=list)
    sharded: bool = False
    unreachable: str | None = None  # why the headers could not be fetched (offline), when they could not

    @classmethod
    def not_fetched(cls, file: str, why: str) -> "Weights":
        return cls(files=[file], unreachable=why)

    @property
    def dtypes(self) -> dict[str, int]:
        """How many tensors have each dtype."""
        counts: dict[str, int] = {}
        for tensor in self.tensors.values():
            counts[tensor.dtype] = counts.get(tensor.dtype, 0) + 1
        return counts


def parse_header(head: bytes, file_size: int | None = None) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Parse the JSON header that follows the 8-byte length, and check it as safetensors does.

    ``head`` is the header bytes without the length prefix. With ``file_size``, tensor offsets must
    fit in the file. Returns ``{name: (dtype, shape)}``; raises HeaderError saying what is wrong.

    Raises:
        HeaderError: The header is not JSON, or a tensor's dtype, shape or offsets are wrong.

    Example::

        >>> parse_header(b'{"fc.weight": {"dtype": "BF16", "shape": [2, 3], "data_offsets": [0, 12]}}')
        {'fc.weight': ('BF16', (2, 3))}
    """
    try:
        header = json.loads(head.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise HeaderError(f"the header is not valid JSON ({exc.__class__.__name__})") from None
    if not isinstance(header, dict):
        raise HeaderError("the header is not a JSON object")
    tensors: dict[str, tuple[str, tuple[int, ...]]] = {}
    end_of_data = 0
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if not isinstance(info, dict):
            raise HeaderError(f"tensor `{name}` has no dtype/shape/data_offsets entry")
        dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
        if not isinstance(dtype, str) or dtype not in DTYPE_BYTES:
            raise HeaderError(f"tensor `{name}` has an unknown dtype {dtype!r}")
        if not isinstance(shape, list) or not all(_is_count(d) for d in shape):
            raise HeaderError(f"tensor `{name}` has an invalid shape {shape!r}")
        if (
            not isinstance(offsets, list) or len(offsets) != 2 or not all(_is_count(o) for o in offsets)
            or offsets[0] > offsets[1]
        ):
            raise HeaderError(f"tensor `{name}` has invalid data_offsets {offsets!r}")
        elements = 1
        for d in shape:
            elements *= d
        if offsets[1] - offsets[0] != elements * DTYPE_BYTES[dtype]:
            raise HeaderError(
                f"tensor `{name}` ({dtype} {shape}) spans {offsets[1] - offsets[0]} bytes, not "
                f"{elements * DTYPE_BYTES[dtype]}"
            )
        end_of_data = max(end_of_data, offsets[1])
        tensors[name] = (dtype, tuple(shape))
    if file_size is not None and 8 + len(head) + end_of_data > file_size:
        raise HeaderError(
            f"the file is truncated: its header describes {8 + len(head) + end_of_data} bytes, the file "
            f"has {file_size}"
        )
    return tensors


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def read_local_header(path: Path) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Read one local safetensors file's header, and only its header.

    Example::

        >>> import tempfile, os
        >>> head = b'{"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}'
        >>> with tempfile.NamedTemporaryFile(suffix=".safetensors", delete=False) as f:
        ...     _ = f.write(struct.pack("<Q", len(head)) + head + bytes(4))
        >>> read_local_header(Path(f.name))
        {'w': ('F32', (1,))}
        >>> os.unlink(f.name)
    """
    size = path.stat().st_size
    with open(path, "rb") as f:
        prefix = f.read(8)
        if len(prefix) < 8:
            raise HeaderError(f"the file is {len(prefix)} bytes, too short for a safetensors header")
        (length,) = struct.unpack("<Q", prefix)
        if length > MAX_HEADER_BYTES:
            raise HeaderError(
                f"the header length is {length:,} bytes, over the {MAX_HEADER_BYTES / 1_000_000:g} MB that "
                "draftguard reads (real headers are a few MB: a corrupt file, or not safetensors; "
                "DRAFTGUARD_MAX_SAFETENSORS_HEADER sets another limit)"
            )
        if 8 + length > size:
            raise HeaderError(f"the file is truncated: the header claims {length:,} bytes, the file has {size - 8:,}")
        head = f.read(length)
    return parse_header(head, file_size=size)


def read_weights(snapshot: Snapshot) -> Weights | None:
    """The tensor headers of a snapshot's checkpoint: local files or the Hub. None when the snapshot
    has no safetensors checkpoint (``model.safetensors`` or its index).

    Unreadable files become ``problems``.

    Raises:
        BadInput: The Hub cannot be reached.
    """
    if snapshot.is_hub:
        return _hub_weights(snapshot)
    if snapshot.local_dir is None:
        return None
    return _local_weights(Path(snapshot.local_dir), snapshot)


def _shown(snapshot: Snapshot, name: str) -> str:
    if snapshot.is_hub:
        return f"{snapshot.source}@{snapshot.revision or 'main'}/{name}"
    return str(Path(snapshot.display.get("config.json", "config.json")).parent / name)


def _local_weights(folder: Path, snapshot: Snapshot) -> Weights | None:
    single, index = folder / SINGLE_FILE, folder / INDEX_FILE
    if single.is_file():
        weights = Weights()
        _add_local_file(weights, single, _shown(snapshot, SINGLE_FILE))
        return weights
    if not index.is_file():
        return None
    weights = Weights(sharded=True)
    shown_index = _shown(snapshot, INDEX_FILE)
    shards = _index_shards(index, shown_index, weights)
    for shard, line in shards.items():
        path = folder / shard
        shown = _shown(snapshot, shard)
        if not path.is_file():
            weights.problems.append(WeightsProblem(
                shown_index, f"the index names shard `{shard}`, which is not in the folder", line
            ))
            continue
        _add_local_file(weights, path, shown)
    return weights


def _add_local_file(weights: Weights, path: Path, shown: str) -> None:
    weights.files.append(shown)
    try:
        header = read_local_header(path)
    except HeaderError as exc:
        weights.problems.append(WeightsProblem(shown, f"unreadable safetensors header: {exc}"))
        return
    except OSError as exc:
        weights.problems.append(WeightsProblem(shown, f"cannot read the file ({exc.__class__.__name__})"))
        return
    for name, (dtype, shape) in header.items():
        weights.tensors[name] = Tensor(name, dtype, shape, shown)


def _index_shards(index: Path, shown: str, weights: Weights) -> dict[str, int | None]:
    """The shard files an index names, with the line of the first tensor that points at each."""
    weights.files.append(shown)
    if index.stat().st_size > MAX_INDEX_BYTES:
        weights.problems.append(WeightsProblem(shown, f"the index file is over {MAX_INDEX_BYTES // 2**20} MB"))
        return {}
    data = index.read_bytes()
    try:
        parsed = parse_json_object(data, shown)
    except BadInput as exc:
        weights.problems.append(WeightsProblem(shown, str(exc), exc.line))
        return {}
    weight_map = parsed.get("weight_map")
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        weights.problems.append(WeightsProblem(shown, "`weight_map` must map tensor names to shard file names", 1))
        return {}
    lines = None
    shards: dict[str, int | None] = {}
    for tensor, shard in weight_map.items():
        if shard in shards:
            continue
        if Path(shard).is_absolute() or ".." in Path(shard).parts:
            weights.problems.append(WeightsProblem(shown, f"shard `{shard}` is not a file inside the folder"))
            continue
        if lines is None:
            lines = key_lines(data.decode("utf-8", "replace"))
        shards[shard] = lines.get(f"weight_map.{tensor}")
    return shards


def _hub_weights(snapshot: Snapshot) -> Weights | None:
    try:  # the snapshot's token only: a repo someone else's file named is read without the host's
        meta = safetensors_metadata(snapshot.source, snapshot.revision, snapshot.token)
    except Exception as exc:  # sorted by _hub_failure; anything unknown is re-raised there
        return _hub_failure(snapshot, exc)
    if meta is None:
        return None  # no safetensors checkpoint in the repo
    weights = Weights(sharded=meta.sharded)
    if meta.sharded:
        weights.files.append(_shown(snapshot, INDEX_FILE))
    for name, file_meta in sorted(meta.files_metadata.items()):
        shown = _shown(snapshot, name)
        weights.files.append(shown)
        for tensor, info in file_meta.tensors.items():
            weights.tensors[tensor] = Tensor(tensor, str(info.dtype), tuple(int(d) for d in info.shape), shown)
    return weights


def _hub_failure(snapshot: Snapshot, exc: Exception) -> Weights | None:
    """What a failed read of the safetensors headers means for the check: a problem with the repo's
    files (a finding), no network (checked without weights), or bad input."""
    single = _shown(snapshot, SINGLE_FILE)
    if isinstance(exc, HeaderError):  # huggingface_hub could not parse a header
        shown = _shown(snapshot, _file_in_message(str(exc)) or SINGLE_FILE)
        return Weights(files=[shown], problems=[WeightsProblem(shown, _hub_parse_message(str(exc)))])
    problem = hub_problem(exc)  # the one reading of the Hub's errors
    if problem is not None and problem.unread:
        # Offline, or the Hub does not answer: the config may still come from the cache, so the
        # check goes on and says that the weights were not read.
        return Weights.not_fetched(single, problem.why_unread)
    if problem is not None and problem.kind == "entry-not-found":
        # file_exists found the index, so a missing file now is a shard the index names.
        index = _shown(snapshot, INDEX_FILE)
        return Weights(sharded=True, files=[index], problems=[WeightsProblem(
            index, f"the index names shard `{_missing_from_url(exc)}`, which is not in the repo at this revision"
        )])
    if problem is not None:
        raise BadInput(f"{single}: {problem.message} (reading safetensors headers)", file=single) from None
    if isinstance(exc, (TypeError, ValueError, KeyError)):  # a header whose entries are not the format's
        return Weights(files=[single], problems=[
            WeightsProblem(single, f"unreadable safetensors header ({exc.__class__.__name__})")
        ])
    if isinstance(exc, OSError):
        raise BadInput(f"{single}: could not read safetensors headers from the Hub ({exc.__class__.__name__})",
                       file=single) from None
    raise exc


def _file_in_message(message: str) -> str | None:
    # huggingface_hub names the file as "... header for 'model-00001-of-00002.safetensors' (repo ...)".
    start = message.find("header for '")
    if start < 0:
        return None
    start += len("header for '")
    end = message.find("'", start)
    return message[start:end] if end > start else None


def _hub_parse_message(message: str) -> str:
    reason = message.split("):", 1)[-1].strip() if "):" in message else message
    return f"unreadable safetensors header: {reason.split('. Please')[0]}"


def _missing_from_url(exc: Exception) -> str:
    response = getattr(exc, "response", None)
    url = str(response.url) if response is not None and response.url is not None else ""
    tail = url.split("/resolve/", 1)[-1]
    return unquote(tail.split("/", 1)[-1]) if "/" in tail else "?"
