"""Files beside config.json that the drafter rules read: tokenizer files and other optional files,
locally or on the Hub, fetched and decoded only as far as a rule needs.

In: a ``Snapshot`` and a file name (``read_optional``), or the bytes of tokenizer.json and
tokenizer_config.json (``TokenizerFiles.from_bytes``).
Out: the file's bytes or None when absent or over the limit; ``TokenizerFiles`` (vocabulary, added
tokens, bos/eos/pad ids); ``HubUnreachable`` when the Hub is out of reach, ``BadInput`` for an HTTP error.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from draftguard.check.findings import is_int as _is_int
from draftguard.errors import FileTooLarge, HubUnreachable
from draftguard.hub_access import fetch_file, hub_problem
from draftguard.snapshot import BadInput, Snapshot

TOKENIZER_FILE = "tokenizer.json"
TOKENIZER_CONFIG = "tokenizer_config.json"
GENERATION_CONFIG = "generation_config.json"
# tokenizer.json of large vocabularies runs to tens of MB (Gemma's is 33 MB).
MAX_TOKENIZER_BYTES = 64 * 1024 * 1024


def read_optional(snapshot: Snapshot, name: str, limit: int = MAX_TOKENIZER_BYTES) -> bytes | None:
    """Bytes of an optional file of the snapshot (local or Hub), or None when there is none.

    Unlike config.json these can be large (tokenizer.json), so the limit is the caller's."""
    if snapshot.is_hub:
        return _hub_optional(snapshot, name, limit)
    if not snapshot.local_dir:
        return None
    path = Path(snapshot.local_dir) / name
    if not path.is_file() or path.stat().st_size > limit:
        return None
    return path.read_bytes()


def _hub_optional(snapshot: Snapshot, name: str, limit: int) -> bytes | None:
    """An optional file of a Hub snapshot, with the snapshot's token, through the one Hub reader: None
    when the repo has none or it is over ``limit`` (sized first, never downloaded then)."""
    shown = f"{snapshot.source}@{snapshot.revision or 'main'}/{name}"
    try:
        return fetch_file(snapshot.source, name, snapshot.revision, limit=limit, token=snapshot.token, shown=shown)[0]
    except FileTooLarge:
        return None
    except Exception as exc:
        problem = hub_problem(exc)
        if problem is not None and (problem.unread or problem.transient):
            # offline with the file not cached, no network, or a Hub that asks to come back later: the
            # rules that need the file say so (DG125), the others run
            raise HubUnreachable(f"{shown} ({problem.why_unread})") from None
        if problem is not None and problem.kind == "entry-not-found":
            return None
        if problem is not None:
            raise BadInput(f"{shown}: {problem.message}", file=shown) from None
        if isinstance(exc, OSError):
            raise BadInput(f"{shown}: could not fetch from the Hub: {exc.__class__.__name__}", file=shown) from None
        raise


_JSON = json.JSONDecoder()


def _member(text: str, key: str, start: int = 0) -> Any:
    """The JSON value of the first ``"key":`` at or after ``start``, decoded alone.

    tokenizer.json runs to tens of MB, mostly BPE merges; decoding only the member a rule needs
    keeps the check within its time budget. Callers validate the result and fall back to a full
    parse when it is not what they expect."""
    match = re.compile(r'"%s"\s*:\s*' % re.escape(key)).search(text, start)
    if match is None:
        return None
    try:
        return _JSON.raw_decode(text, match.end())[0]
    except (ValueError, RecursionError):
        return None


def _added_tokens(entries: Any) -> dict[int, tuple[str, bool]]:
    added: dict[int, tuple[str, bool]] = {}
    if isinstance(entries, list):  # tokenizer.json: [{"id": 3, "content": "<m>", "special": true}]
        for token in entries:
            if isinstance(token, dict) and _is_int(token.get("id")):
                added[token["id"]] = (str(token.get("content")), bool(token.get("special")))
    elif isinstance(entries, dict):  # tokenizer_config.json: {"3": {"content": "<m>", "special": true}}
        for key, token in entries.items():
            if str(key).isdigit() and isinstance(token, dict):
                added[int(key)] = (str(token.get("content")), bool(token.get("special")))
    return added


def _vocab(value: Any) -> dict[str, int] | None:
    if isinstance(value, dict) and set(map(type, value.values())) <= {int}:
        return value
    if isinstance(value, list) and all(isinstance(p, list) and p for p in value):
        return {str(p[0]): i for i, p in enumerate(value)}  # Unigram: [[piece, score], ...], id = index
    return None


class TokenizerFiles:
    """A snapshot's tokenizer.json and tokenizer_config.json, read and decoded only as far as a
    rule needs: the added tokens first (small), the vocabulary only when the mask token is not
    among them, and nothing when a drafter's tokenizer.json is byte-identical to its target's.

    Example::

        >>> tok = TokenizerFiles.from_bytes(b'{"added_tokens": [{"id": 2, "content": "<m>", "special": true}],'
        ...                                 b' "model": {"vocab": {"a": 0, "b": 1}}}')
        >>> tok.added(), tok.vocab()
        ({2: ('<m>', True)}, {'a': 0, 'b': 1})
    """

    def __init__(self, snapshot: Snapshot | None):
        self.snapshot = snapshot
        self._files: dict[str, bytes | None] = {}
        self._added: dict[int, tuple[str, bool]] | None = None
        self._vocab: dict[str, int] | None | bool = False  # False: not decoded yet
        self.unreachable: list[str] = []  # files not fetched because the Hub could not be reached

    @classmethod
    def from_bytes(cls, tokenizer_json: bytes | None, tokenizer_config: bytes | None = None) -> "TokenizerFiles":
        files = cls(None)
        files._files = {TOKENIZER_FILE: tokenizer_json, TOKENIZER_CONFIG: tokenizer_config}
        return files

    def raw(self, name: str) -> bytes | None:
        if name not in self._files:
            limit = MAX_TOKENIZER_BYTES if name == TOKENIZER_FILE else 8 * 1024 * 1024
            try:
                self._files[name] = read_optional(self.snapshot, name, limit) if self.snapshot else None
            except HubUnreachable as exc:
                self._files[name] = None
                self.unreachable.append(exc.args[0])  # the file and why; DG125 gives the hint once
        return self._files[name]

    def shown(self, name: str = TOKENIZER_FILE) -> str:
        if self.snapshot is None:
            return name
        if self.snapshot.is_hub:
            return f"{self.snapshot.source}@{self.snapshot.revision or 'main'}/{name}"
        return str(Path(self.snapshot.path_of("config.json")).parent / name)

    def _text(self) -> str | None:
        data = self.raw(TOKENIZER_FILE)
        return data.decode("utf-8", "replace") if data is not None else None

    def added(self, *, config_only: bool = False) -> dict[int, tuple[str, bool]]:
        """Added and special tokens by id. ``config_only`` reads just tokenizer_config.json."""
        config = self.raw(TOKENIZER_CONFIG)
        from_config: dict[int, tuple[str, bool]] = {}
        if config is not None:
            from_config = _added_tokens(_member(config.decode("utf-8", "replace"), "added_tokens_decoder"))
        if config_only:
            return from_config
        if self._added is None:
            text = self._text()
            self._added = {**from_config, **(_added_tokens(_member(text, "added_tokens")) if text else {})}
        return self._added

    def vocab(self) -> dict[str, int] | None:
        """The model's vocabulary (token -> id), or None without a readable tokenizer.json."""
        if self._vocab is False:
            self._vocab = None
            text = self._text()
            if text is not None:
                model = re.compile(r'"model"\s*:\s*\{').search(text)
                self._vocab = _vocab(_member(text, "vocab", model.start())) if model else None
                if self._vocab is None:  # an unusual layout: decode it all
                    try:
                        data = json.loads(text)
                    except (ValueError, RecursionError):
                        data = None
                    model_node = data.get("model") if isinstance(data, dict) else None
                    self._vocab = _vocab(model_node.get("vocab")) if isinstance(model_node, dict) else None
        return self._vocab  # type: ignore[return-value]

    def token_of(self, token_id: int) -> str | None:
        """The ordinary vocabulary token with this id, if there is one."""
        data = self.raw(TOKENIZER_FILE)
        if data is None:
            return None
        model = re.compile(rb'"model"\s*:\s*\{').search(data)
        vocab_at = re.compile(rb'"vocab"\s*:\s*\{').search(data, model.start()) if model else None
        if vocab_at is not None and not re.compile(rb":\s*%d\s*[,}]" % token_id).search(data, vocab_at.end()):
            # A {token: id} vocabulary where no value is this id: no need to decode megabytes of JSON.
            return None
        vocab = self.vocab()
        if not vocab:
            return None
        for token, i in vocab.items():
            if i == token_id:
                return token
        return None

    def special_ids(self) -> dict[str, int]:
        """The bos, eos and pad token ids that tokenizer_config.json names (``bos_token`` and so on,
        as text or as ``{"content": ...}``), resolved through the added tokens."""
        config = self.raw(TOKENIZER_CONFIG)
        if config is None:
            return {}
        text = config.decode("utf-8", "replace")
        by_content = {content: i for i, (content, _) in self.added(config_only=True).items()}
        found: dict[str, int] = {}
        for role in ("bos", "eos", "pad"):
            value = _member(text, f"{role}_token")
            if isinstance(value, dict):
                value = value.get("content")
            if isinstance(value, str) and value in by_content:
                found[role] = by_content[value]
        return found

