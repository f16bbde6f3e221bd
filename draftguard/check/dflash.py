"""Speculative-decoding drafters checked against their target model (rules DG101-DG199).

A drafter can resolve cleanly under transformers and still be wrong for its target: it reads the
wrong target layers, its sizes or vocabulary do not match, its mask token is an ordinary word, or
its weights do not have the shapes its config claims. This module recognises three drafter formats,
finds the target, and judges the pair.

Formats (``detect_drafter``):

- z-lab DFlash: ``architectures: ["DFlashDraftModel"]`` or a ``dflash_config``. Target layer ids in
  ``dflash_config.target_layer_ids``; ``block_size`` at the top level or in ``dflash_config``.
- speculators: ``speculators_model_type`` with a ``transformer_layer_config`` (the decoder layers'
  own config) and ``aux_hidden_state_layer_ids``, which store target layer id + 1.
- EAGLE-3: ``eagle_aux_hidden_state_layer_ids`` (also + 1: vLLM captures the hidden state entering
  layer ``id``).

Layer-id forms. The reference reads ``hidden_states[id + 1]``, because index 0 is the embedding
output; engines and the speculators format store that index, ``aux = id + 1``. So a target layer id
lies in [0, N) and an aux id in [1, N], where N is the target's ``num_hidden_layers``.

The target comes from ``--target``, else ``.draftguard.yml`` ``target:``, else the speculators
format's ``speculators_config.verifier.name_or_path``.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from draftguard.check.findings import RULES, Finding, TargetResult
from draftguard.check.weights import Tensor, Weights, is_unreachable, read_weights, unreachable_reason
from draftguard.snapshot import SETTINGS_NAME, BadInput, Snapshot, load_snapshot

TOKENIZER_FILE = "tokenizer.json"
TOKENIZER_CONFIG = "tokenizer_config.json"
# tokenizer.json of large vocabularies runs to tens of MB (Gemma's is 33 MB).
MAX_TOKENIZER_BYTES = 64 * 1024 * 1024
LAYER_CONFIG_KEY = "transformer_layer_config"
DFLASH_ARCHITECTURES = ("DFlashDraftModel",)


@dataclass(frozen=True)
class Stated:
    """A value as config.json states it, with its dotted key."""

    key: str
    value: Any


@dataclass
class DrafterFormat:
    """What ``detect_drafter`` found: the format and every key the rules read."""

    kind: str  # "dflash", "speculators-<type>" or "eagle3"
    layer_prefix: str = ""  # where the decoder layers' config lives: "" or "transformer_layer_config."
    target_ids: list[Stated] = field(default_factory=list)  # target layer ids, [0, N)
    aux_ids: list[Stated] = field(default_factory=list)  # hidden-state indices, id + 1, [1, N]
    block_sizes: list[Stated] = field(default_factory=list)
    mask_tokens: list[Stated] = field(default_factory=list)
    num_target_layers: Stated | None = None
    target_hidden: Stated | None = None
    verifier: str | None = None

    @property
    def is_dflash(self) -> bool:
        return self.kind in ("dflash", "speculators-dflash")

    @property
    def label(self) -> str:
        return {"dflash": "z-lab DFlash", "eagle3": "EAGLE-3"}.get(self.kind, self.kind.replace("-", " "))


def _get(raw: dict[str, Any], key: str) -> Any:
    node: Any = raw
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _stated(raw: dict[str, Any], keys: tuple[str, ...]) -> list[Stated]:
    return [Stated(k, _get(raw, k)) for k in keys if _get(raw, k) is not None]


def detect_drafter(raw: dict[str, Any]) -> DrafterFormat | None:
    """Recognise a drafter's config.json; None when it is not one.

    Example::

        >>> fmt = detect_drafter({"architectures": ["DFlashDraftModel"], "block_size": 16,
        ...                       "dflash_config": {"target_layer_ids": [1, 5], "mask_token_id": 9}})
        >>> fmt.kind, [s.key for s in fmt.target_ids], fmt.block_sizes[0].value
        ('dflash', ['dflash_config.target_layer_ids'], 16)
    """
    spec_type = raw.get("speculators_model_type")
    if isinstance(spec_type, str) and isinstance(raw.get(LAYER_CONFIG_KEY), dict):
        kind = f"speculators-{spec_type}"
        fmt = DrafterFormat(kind=kind, layer_prefix=LAYER_CONFIG_KEY + ".")
        fmt.aux_ids = _stated(raw, ("aux_hidden_state_layer_ids", "eagle_aux_hidden_state_layer_ids"))
        fmt.target_ids = _stated(raw, ("dflash_config.target_layer_ids", "target_layer_ids"))
        fmt.block_sizes = _stated(raw, ("block_size", "dflash_config.block_size", f"{LAYER_CONFIG_KEY}.block_size"))
        fmt.mask_tokens = _stated(raw, ("mask_token_id", "dflash_config.mask_token_id"))
        fmt.num_target_layers = next(iter(_stated(raw, ("num_target_layers",))), None)
        fmt.target_hidden = next(iter(_stated(raw, ("target_hidden_size",))), None)
        verifier = _get(raw, "speculators_config.verifier.name_or_path")
        fmt.verifier = verifier if isinstance(verifier, str) and verifier else None
        return fmt
    architectures = raw.get("architectures")
    is_dflash = isinstance(raw.get("dflash_config"), dict) or (
        isinstance(architectures, list) and any(a in DFLASH_ARCHITECTURES for a in architectures)
    )
    if is_dflash:
        fmt = DrafterFormat(kind="dflash")
        fmt.target_ids = _stated(raw, ("dflash_config.target_layer_ids", "target_layer_ids"))
        fmt.aux_ids = _stated(raw, ("eagle_aux_hidden_state_layer_ids", "aux_hidden_state_layer_ids"))
        fmt.block_sizes = _stated(raw, ("block_size", "dflash_config.block_size"))
        fmt.mask_tokens = _stated(raw, ("dflash_config.mask_token_id", "mask_token_id"))
        fmt.num_target_layers = next(iter(_stated(raw, ("num_target_layers",))), None)
        fmt.target_hidden = next(iter(_stated(raw, ("target_hidden_size",))), None)
        return fmt
    aux = _stated(raw, ("eagle_aux_hidden_state_layer_ids", "eagle_config.eagle_aux_hidden_state_layer_ids"))
    if aux:
        fmt = DrafterFormat(kind="eagle3", aux_ids=aux)
        fmt.target_hidden = next(iter(_stated(raw, ("target_hidden_size",))), None)
        return fmt
    return None


def layer_config(raw: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The part of a config.json that a transformers config class resolves, and its key prefix.

    The speculators format keeps the decoder layers' config in ``transformer_layer_config``, under
    a top-level ``model_type`` that transformers does not know; the layers default to Qwen3 (DFlash)
    or LLaMA (EAGLE-3), as in the speculators library.

    Example::

        >>> layer_config({"speculators_model_type": "dflash", "transformer_layer_config": {"hidden_size": 8}})
        ({'hidden_size': 8, 'model_type': 'qwen3'}, 'transformer_layer_config.')
    """
    fmt = detect_drafter(raw)
    if fmt is None or not fmt.layer_prefix:
        return raw, ""
    layers = dict(raw[LAYER_CONFIG_KEY])
    if "model_type" not in layers:
        layers["model_type"] = "llama" if fmt.kind == "speculators-eagle3" else "qwen3"
    return layers, fmt.layer_prefix


# --- the target -----------------------------------------------------------------------------------


@dataclass
class TargetModel:
    """The target's config values (resolved by its transformers class), where they came from,
    and its tokenizer when it ships one."""

    name: str
    origin: str  # "--target", ".draftguard.yml" or the speculators verifier key
    snapshot: Snapshot
    values: dict[str, Any]
    tokenizer: "TokenizerFiles | None" = None

    def value(self, key: str) -> Any:
        return self.values.get(key)

    @property
    def shown(self) -> str:
        return self.snapshot.path_of("config.json")


def _text_values(node: dict[str, Any]) -> dict[str, Any]:
    """The values that describe the decoder stack: the top level, or ``text_config`` of a
    multimodal target (Qwen3.5, LLaVA), whose hidden states the drafter reads."""
    values = node.get("values", {})
    text = values.get("text_config")
    if "num_hidden_layers" not in values and isinstance(text, dict) and "values" in text:
        return text["values"]
    return values


def _split_revision(name: str) -> tuple[str, str | None]:
    if "@" in name and not Path(name).exists():
        repo, _, revision = name.rpartition("@")
        return repo, revision or None
    return name, None


def load_target(name: str, origin: str, *, base: Path | None = None, trust_remote_code: bool = False,
                allow_local: bool = True) -> TargetModel:
    """Fetch a target's config.json (a folder or a Hub repo id, ``owner/name@revision`` allowed)
    and resolve it. Raises BadInput, naming where the target came from, when it cannot be read.

    ``allow_local=False`` (the bots, where the name comes from repository content) accepts only a
    Hub repo id and never reads the host's files, even when a folder of that name exists."""
    from draftguard.snapshot import CONFIG_NAME, _hub

    if not allow_local:
        _require_hub_id(name, origin)
        repo, _, revision = name.partition("@")
        try:
            snapshot = _hub(repo, revision or None, (CONFIG_NAME,))
        except BadInput as exc:
            raise BadInput(f"target from {origin}: {exc}", file=exc.file, line=exc.line, key=exc.key) from None
        return _resolved_target(name, origin, snapshot, trust_remote_code)
    if base is not None and not Path(name).is_absolute() and (base / name).exists():
        name = os.path.normpath(base / name)
    repo, revision = _split_revision(name)
    try:
        snapshot = load_snapshot(repo, revision)
    except BadInput as exc:
        hint = "" if origin == "--target" else " (or pass --target with a local folder of the target)"
        raise BadInput(f"target from {origin}: {exc}{hint}", file=exc.file, line=exc.line, key=exc.key) from None
    return _resolved_target(name, origin, snapshot, trust_remote_code)


# Exactly owner/name (optionally @revision): a Hub repo, never something the host could read.
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*(@[\w./-]+)?$")


def _require_hub_id(name: str, origin: str) -> None:
    repo = name.partition("@")[0]
    if not _HUB_ID.match(name) or ".." in repo or repo.endswith((".", "-")):
        raise BadInput(f"target from {origin}: {name!r} is not a Hub repo id (owner/name); only Hub "
                       "targets are read here, so name one in `target:` of .draftguard.yml")


def _resolved_target(name: str, origin: str, snapshot: Snapshot, trust_remote_code: bool) -> TargetModel:
    from draftguard.check import resolver

    raw = snapshot.load_json()
    try:
        node = resolver.resolve(raw, trust_remote_code=trust_remote_code,
                                pretrained=snapshot.local_dir if not snapshot.is_hub else snapshot.source,
                                revision=snapshot.revision)
        values = _text_values(node)
    except resolver.ResolveError:
        # A target that transformers cannot resolve can still be compared by its raw values.
        text = raw.get("text_config")
        values = text if "num_hidden_layers" not in raw and isinstance(text, dict) else raw
    return TargetModel(name=name, origin=origin, snapshot=snapshot, values=values, tokenizer=TokenizerFiles(snapshot))


def find_target(snapshot: Snapshot, fmt: DrafterFormat, explicit: str | None, *,
                allow_local: bool = True) -> tuple[str, str, Path | None] | None:
    """Which target to check against: ``--target``, then ``.draftguard.yml``, then the speculators
    verifier. Returns (name, origin, folder that relative names are relative to).

    ``allow_local=False`` (the bots) reads no settings from the host and raises BadInput when the
    name is not a Hub repo id (owner/name), so repository content cannot point at the host's files."""
    if not allow_local:
        found = (explicit, "--target") if explicit else (
            (fmt.verifier, "speculators_config.verifier.name_or_path") if fmt.verifier else None)
        if found is None:
            return None
        _require_hub_id(*found)
        return found[0], found[1], None
    if explicit:
        return explicit, "--target", None
    if snapshot.is_hub:
        found = _hub_settings_target(snapshot)
        if found is not None:
            return found
    if not snapshot.is_hub and snapshot.local_dir:
        from draftguard.settings import load_settings

        settings = load_settings(snapshot.local_dir)
        if settings.target:
            return settings.target, str(Path(snapshot.local_dir) / SETTINGS_NAME), Path(snapshot.local_dir)
    if fmt.verifier:
        base = Path(snapshot.local_dir) if not snapshot.is_hub and snapshot.local_dir else None
        return fmt.verifier, "speculators_config.verifier.name_or_path", base
    return None


def _hub_settings_target(snapshot: Snapshot) -> tuple[str, str, None] | None:
    """``target:`` of a Hub drafter's own .draftguard.yml, at the drafter's revision.

    The file is optional: absent, or not fetched because the Hub is out of reach (offline with
    nothing cached), the target comes from elsewhere and the check goes on. Its text is kept in the
    snapshot so that DG100 can point at the `target:` line. The name must be a Hub repo id: a file
    in someone's Hub repo must not make this host read its own folders."""
    from draftguard.settings import MAX_SETTINGS_BYTES, parse_settings

    shown = f"{snapshot.source}@{snapshot.revision or 'main'}/{SETTINGS_NAME}"
    try:
        data = read_optional(snapshot, SETTINGS_NAME, MAX_SETTINGS_BYTES)
    except HubUnreachable:
        return None
    if data is None:
        return None
    settings = parse_settings(data.decode("utf-8", errors="replace"), shown)
    if not settings.target:
        return None
    _require_hub_id(settings.target, shown)
    snapshot.files[SETTINGS_NAME] = data
    snapshot.display[SETTINGS_NAME] = shown
    return settings.target, shown, None


# --- files beside config.json ---------------------------------------------------------------------


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
    from huggingface_hub import hf_hub_download
    from huggingface_hub import errors as hf_errors

    shown = f"{snapshot.source}@{snapshot.revision or 'main'}/{name}"
    try:
        path = Path(hf_hub_download(snapshot.source, name, revision=snapshot.revision))
    except Exception as exc:
        if is_unreachable(exc):  # before EntryNotFoundError: "not cached, offline" subclasses it
            raise HubUnreachable(f"{shown} ({unreachable_reason(exc)})") from None
        if isinstance(exc, hf_errors.EntryNotFoundError):
            return None
        if isinstance(exc, hf_errors.HfHubHTTPError):
            status = exc.response.status_code if exc.response is not None else "?"
            raise BadInput(f"{shown}: the Hub answered HTTP {status}", file=shown) from None
        if isinstance(exc, OSError):
            raise BadInput(f"{shown}: could not fetch from the Hub: {exc.__class__.__name__}", file=shown) from None
        raise
    if path.stat().st_size > limit:
        return None
    return path.read_bytes()


class HubUnreachable(Exception):
    """An optional file that could not be fetched because the Hub cannot be reached."""



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
                self.unreachable.append(str(exc))
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


# --- the rules ------------------------------------------------------------------------------------


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class DrafterCheck:
    """Judges one drafter snapshot. ``target`` may be None: then only the rules that need no target
    run (layer-id order, block size, mask token against the drafter's own vocab, weights)."""

    def __init__(self, snapshot: Snapshot, raw: dict[str, Any], fmt: DrafterFormat, result: TargetResult,
                 target: TargetModel | None, weights: Weights | None, layer_values: dict[str, Any]):
        self.snapshot, self.raw, self.fmt, self.result = snapshot, raw, fmt, result
        self.target, self.weights = target, weights
        self.layer_raw = _get(raw, fmt.layer_prefix.rstrip(".")) if fmt.layer_prefix else raw
        self.values = layer_values  # the drafter's decoder config as its class resolves it
        self.drafter_tokenizer: TokenizerFiles | None = None
        self.findings: list[Finding] = []

    # helpers

    def finding(self, rule: str, key: str, raw: Any, resolved: Any, message: str,
                file: str | None = None, line: int | None = None) -> None:
        self.findings.append(Finding(
            rule=rule, severity=RULES[rule].severity, key=key, raw=raw, resolved=resolved,
            file=file or self.result.file,
            line=line if file else self.snapshot.line_of(key),
            message=message,
        ))

    def layer_key(self, key: str) -> str:
        return self.fmt.layer_prefix + key

    def drafter(self, key: str) -> Any:
        """A value of the drafter's decoder config: resolved when the class gave one, else raw."""
        value = self.values.get(key)
        return value if value is not None else (self.layer_raw or {}).get(key)

    def target_value(self, key: str) -> Any:
        return self.target.value(key) if self.target else None

    @property
    def target_name(self) -> str:
        assert self.target is not None
        return f"the target {self.target.name}"

    def run(self) -> list[Finding]:
        self.target_note()
        n_layers = self.layer_count()
        ids = self.layer_ids(n_layers)
        self.num_target_layers()
        self.sizes()
        self.mask_token()
        if self.fmt.is_dflash:
            self.block_size()
            self.window()
        if self.weights is not None:
            self.weight_shapes(ids)
        self.draft_vocab()
        self.tokenizers()
        self.not_fetched()
        return self.findings

    def not_fetched(self) -> None:
        """DG125: what could not be checked because the Hub was out of reach, said rather than skipped."""
        missing = []
        if self.weights is not None and self.weights.unreachable:
            missing.append(f"safetensors headers of {self.weights.files[0]} ({self.weights.unreachable})")
        for tokenizer in (self.target.tokenizer if self.target else None, self.drafter_tokenizer):
            if tokenizer is not None:
                missing.extend(tokenizer.unreachable)
        if missing:
            self.finding("DG125", "config.json", None, None,
                         "Not checked, because the Hub could not be reached: " + "; ".join(missing)
                         + ". The config rules ran from the cache. Fix: run again online.",
                         file=self.result.file, line=None)

    def target_note(self) -> None:
        """DG100: which target the pair was judged against, so a reader can tell an inferred target."""
        if self.target is None:
            return
        origin = self.target.origin
        text = (f"Checked as a {self.fmt.label} drafter against the target {self.target.name} "
                f"({self.target.shown}), named by {origin}.")
        if origin.endswith(SETTINGS_NAME):
            hub_text = self.snapshot.files.get(SETTINGS_NAME) if self.snapshot.is_hub else None
            line = (_yaml_line_in(hub_text.decode("utf-8", "replace"), "target") if hub_text is not None
                    else _yaml_key_line(origin, "target"))
            self.finding("DG100", "target", self.target.name, self.target.shown, text, file=origin, line=line)
        elif origin == "--target":
            self.finding("DG100", "--target", self.target.name, self.target.shown, text, file=self.result.file,
                         line=None)
        else:
            self.finding("DG100", origin, self.target.name, self.target.shown, text)

    # target layers

    def layer_count(self) -> tuple[int, str] | None:
        """N, and what it comes from: the target's num_hidden_layers, else num_target_layers."""
        n = self.target_value("num_hidden_layers")
        if _is_int(n):
            return n, f"{self.target_name} has {n} layers"
        stated = self.fmt.num_target_layers
        if stated is not None and _is_int(stated.value) and stated.value > 0:
            return stated.value, f"`num_target_layers` is {stated.value}"
        return None

    def layer_ids(self, count: tuple[int, str] | None) -> list[int] | None:
        """DG101-DG104. Returns the target-form ids when they are usable, for the fc check."""
        forms: list[tuple[Stated, int]] = [(s, 0) for s in self.fmt.target_ids] + [(s, 1) for s in self.fmt.aux_ids]
        if not forms:
            if self.fmt.is_dflash:
                key = "aux_hidden_state_layer_ids" if self.fmt.layer_prefix else "dflash_config.target_layer_ids"
                self.finding("DG101", key, None, None,
                             f"This {self.fmt.label} drafter does not say which target layers it reads "
                             f"(no `{key}`). Engines then fall back to their own default layers, which are "
                             f"not the ones the drafter was trained on. Fix: add `{key}`.")
            return None
        usable: list[tuple[Stated, list[int], int]] = []
        for stated, shift in forms:
            ids = stated.value
            if not isinstance(ids, list) or not ids or not all(_is_int(i) for i in ids):
                self.finding("DG101", stated.key, ids, None,
                             f"`{stated.key}` must be a non-empty list of integers, got {_show(ids)}.")
                continue
            if len(set(ids)) != len(ids) or ids != sorted(ids):
                dupes = sorted({i for i in ids if ids.count(i) > 1})
                what = f"repeats {', '.join(map(str, dupes))}" if dupes else "is not in ascending order"
                self.finding("DG101", stated.key, ids, None,
                             f"`{stated.key}` {what}: {_show(ids)}. The drafter's `fc` concatenates the target's "
                             "hidden states in this order, so a repeat or a swap feeds it other features than "
                             "it was trained on. Fix: list each target layer once, ascending, as in training.")
                continue
            usable.append((stated, ids, shift))
            self.range_of(stated, ids, shift, count)
        self.forms_agree(usable)
        for stated, ids, shift in usable:
            if shift == 0:
                return ids
        return [i - 1 for i in usable[0][1]] if usable else None

    def range_of(self, stated: Stated, ids: list[int], shift: int, count: tuple[int, str] | None) -> None:
        if shift == 1 and 0 in ids:
            self.finding("DG103", stated.key, ids, None,
                         f"`{stated.key}` holds 0. These ids index the target's hidden states with the "
                         "embedding output at 0 (aux id = target layer id + 1), so 0 feeds the drafter the "
                         "token embeddings instead of a layer's output. Fix: add 1 to every id if the list "
                         "was written as target layer ids.")
        low = shift
        if count is None:
            bad = [i for i in ids if i < low and not (shift == 1 and i == 0)]  # 0 is DG103's
            if bad:
                self.finding("DG102", stated.key, ids, None,
                             f"`{stated.key}` holds {_show(bad)}, below {low}: no target layer has that id. "
                             "Fix: use the layer ids the drafter was trained with.")
            return
        n, why = count
        high = n - 1 + shift
        bad = [i for i in ids if i < low or i > high]
        if shift == 1:
            bad = [i for i in bad if i != 0]  # DG103 says it
        if not bad:
            return
        first = bad[0]
        if shift == 0:
            hint = (
                f" {first} = {n} is one past the last layer: it looks like an aux id (target layer id + 1). "
                "The reference reads hidden_states[id + 1], so store target layer ids, 0-based."
                if first == n else ""
            )
            convention = (f"Target layer ids are 0-based layer numbers in [0, {n}); the drafter reads "
                          f"hidden_states[id + 1].")
        else:
            hint = (f" {first} = {n + 1} looks like a target layer id shifted twice." if first == n + 1 else "")
            convention = (f"Aux ids index the target's hidden states, embedding output at 0, so they lie in "
                          f"[1, {n}] (target layer id + 1).")
        self.finding("DG102", stated.key, ids, None,
                     f"`{stated.key}` holds {_show(bad)}, out of range: {why}. {convention}{hint} "
                     "Fix: use the layer ids the drafter was trained with, for this target.")

    def forms_agree(self, usable: list[tuple[Stated, list[int], int]]) -> None:
        if len(usable) < 2:
            return
        first, first_ids, first_shift = usable[0]
        base = [i - first_shift for i in first_ids]
        for stated, ids, shift in usable[1:]:
            if [i - shift for i in ids] != base:
                expected = [i + shift for i in base]
                self.finding("DG104", stated.key, ids, expected,
                             f"`{stated.key}` is {_show(ids)} but `{first.key}` is {_show(first_ids)}; "
                             f"{'aux ids are target layer ids + 1, so ' if shift != first_shift else ''}"
                             f"`{stated.key}` should be {_show(expected)}. Engines read one of the two and the "
                             "reference the other, so they disagree on which layers feed the drafter. "
                             "Fix: make both forms name the same layers.")

    def num_target_layers(self) -> None:
        stated, n = self.fmt.num_target_layers, self.target_value("num_hidden_layers")
        if stated is None or not _is_int(n) or stated.value == n:
            return
        self.finding("DG105", stated.key, stated.value, n,
                     f"`num_target_layers` is {_show(stated.value)}, but {self.target_name} has "
                     f"num_hidden_layers = {n}. The drafter was made for another target, or the value was "
                     "copied; its layer ids then point at other layers. Fix: pair the drafter with the target "
                     f"it was trained on, or set `num_target_layers` to {n}.")

    # sizes

    def sizes(self) -> None:
        if self.target is None:
            return
        t_hidden, t_vocab, t_head = (self.target_value(k) for k in ("hidden_size", "vocab_size", "head_dim"))
        if self.fmt.target_hidden is not None and _is_int(self.fmt.target_hidden.value):
            key, hidden = self.fmt.target_hidden.key, self.fmt.target_hidden.value
            what = "the target hidden size the drafter's `fc` expects"
        else:
            key, hidden = self.layer_key("hidden_size"), self.drafter("hidden_size")
            what = "the drafter's hidden size; the format requires the target's, because the drafter embeds " \
                   "tokens with the target's embed_tokens and drafts through its lm_head"
        if _is_int(hidden) and _is_int(t_hidden) and hidden != t_hidden:
            self.finding("DG106", key, hidden, t_hidden,
                         f"`{key}` is {hidden} ({what}), but {self.target_name} has hidden_size = {t_hidden}. "
                         "Fix: pair the drafter with its own target, or correct the size.")
        vocab = self.drafter("vocab_size")
        if _is_int(vocab) and _is_int(t_vocab) and vocab != t_vocab:
            self.finding("DG107", self.layer_key("vocab_size"), vocab, t_vocab,
                         f"`{self.layer_key('vocab_size')}` is {vocab}, but {self.target_name} has vocab_size = "
                         f"{t_vocab}. The drafter's logits come from the target's lm_head and its tokens from "
                         "the target's embeddings, so token ids must mean the same in both. Fix: set "
                         f"`vocab_size` to {t_vocab}, or use the target the drafter was trained for.")
        head = self.drafter("head_dim")
        if _is_int(head) and _is_int(t_head) and head != t_head:
            self.finding("DG108", self.layer_key("head_dim"), head, t_head,
                         f"`{self.layer_key('head_dim')}` is {head}, the target's head_dim is {t_head}. The "
                         "reference runs this, but engines that size one KV cache for target and drafter "
                         "may not. Fix: none needed if the drafter was trained so; check your engine.")

    # mask token

    def mask_token(self) -> None:
        if not self.fmt.is_dflash:
            return
        vocab_values = [(self.drafter("vocab_size"), "the drafter's vocab_size")]
        if self.target is not None:
            vocab_values.append((self.target_value("vocab_size"), f"{self.target_name}'s vocab_size"))
        masks = self.fmt.mask_tokens
        if not masks:
            key = "mask_token_id" if self.fmt.layer_prefix else "dflash_config.mask_token_id"
            self.finding("DG109", key, None, None,
                         f"This {self.fmt.label} drafter has no `{key}`. Every drafted block is [anchor, mask, "
                         "...], so an engine without it fills the block with some other token. Fix: add the "
                         "mask token id the drafter was trained with.")
            return
        if len({json.dumps(m.value) for m in masks}) > 1:
            self.finding("DG109", masks[1].key, masks[1].value, masks[0].value,
                         f"`{masks[1].key}` is {_show(masks[1].value)} but `{masks[0].key}` is "
                         f"{_show(masks[0].value)}. Fix: state the mask token once.")
        stated = masks[0]
        mask = stated.value
        if not _is_int(mask) or mask < 0:
            self.finding("DG109", stated.key, mask, None, f"`{stated.key}` must be a token id >= 0, got {_show(mask)}.")
            return
        for vocab, what in vocab_values:
            if _is_int(vocab) and mask >= vocab:
                self.finding("DG109", stated.key, mask, vocab,
                             f"`{stated.key}` is {mask}, not below {what} ({vocab}): the embedding lookup of "
                             "every drafted block goes out of range. Fix: use the mask token id the drafter "
                             "was trained with, for this target's vocabulary.")
                return
        tokenizer = self.target.tokenizer if self.target is not None else None
        # Cheapest first: tokenizer_config.json's added tokens settle most masks without tokenizer.json.
        if tokenizer is None or mask in tokenizer.added(config_only=True) or mask in tokenizer.added():
            return
        token = tokenizer.token_of(mask)
        if token is not None:
            self.finding("DG110", stated.key, mask, token,
                         f"`{stated.key}` is {mask}, which {self.target_name}'s tokenizer ({tokenizer.shown()}) "
                         f"maps to the ordinary token {token!r}, not a special or added token. The drafter "
                         "cannot tell a masked slot from that word, and acceptance collapses (a wrong mask "
                         "token measured tau 1.14 against 4.00 healthy). Fix: use the special token the "
                         "drafter was trained with.")

    # block size

    def block_size(self) -> None:
        sizes = self.fmt.block_sizes
        if not sizes:
            self.finding("DG111", "block_size", None, None,
                         "The drafter states no `block_size` (at the top level or in `dflash_config`), so the "
                         "number of tokens it drafts per step cannot be resolved; engines guess. Fix: add "
                         "\"block_size\" with the size the drafter was trained with.")
            return
        for stated in sizes:
            if not _is_int(stated.value) or stated.value < 2:
                self.finding("DG111", stated.key, stated.value, None,
                             f"`{stated.key}` must be an integer of at least 2 (the anchor plus one drafted "
                             f"token), got {_show(stated.value)}.")
                return
        first = sizes[0]
        for stated in sizes[1:]:
            if stated.value != first.value:
                self.finding("DG112", stated.key, stated.value, first.value,
                             f"`{stated.key}` is {stated.value} but `{first.key}` is {first.value}. Readers "
                             "take one or the other, so the engine and the reference may draft blocks of "
                             "different sizes. Fix: state the block size once, or make both agree.")

    # effective attention, from the fidelity engine's view

    def window(self) -> None:
        """DG113. The fidelity engine's DG005 already covers layers declared sliding that run full;
        this covers the drafter that gives a window but whose resolved layers hold no sliding layer at
        all (layer types derived from max_window_layers), which DG006 rates only a warning."""
        layers = self.result.attention
        raw_window = (self.layer_raw or {}).get("sliding_window")
        if not layers or not _is_int(raw_window) or (self.layer_raw or {}).get("use_sliding_window") is False:
            return
        if any(layer.declared.startswith("sliding") for layer in layers):
            return  # declared sliding layers are DG005's, whatever their effective window
        if any(layer.effective.startswith("sliding") for layer in layers):
            return
        key = self.layer_key("sliding_window")
        self.finding("DG113", key, raw_window, f"full attention at layers 0-{len(layers) - 1}",
                     f"The drafter sets `sliding_window` {raw_window}, but every one of its {len(layers)} "
                     "layers resolves to full attention (no `layer_types`, and Qwen-style configs slide only "
                     "from `max_window_layers` on). A DFlash drafter with a window was trained to slide; run "
                     "without one it attends over the whole context and its acceptance drops. Fix: list each "
                     "layer in `layer_types`, with \"sliding_attention\" where it was trained to slide.")

    # weights

    def weight_shapes(self, ids: list[int] | None) -> None:
        weights = self.weights
        assert weights is not None
        if weights.unreachable:
            return  # said by DG125
        for problem in weights.problems:
            self.finding("DG120", Path(problem.file).name, None, None,
                         f"{problem.file}: {problem.message}. Fix: re-save the checkpoint (safetensors "
                         "save_file) and commit every file the index names.",
                         file=problem.file, line=problem.line)
        tensors = _strip_prefix(weights.tensors)
        if not tensors:
            return
        self.fc_shape(tensors, ids)
        self.layers_in_weights(tensors)
        self.attention_shapes(tensors)
        self.dtype_note(weights)

    def fc_shape(self, tensors: dict[str, Tensor], ids: list[int] | None) -> None:
        fc = tensors.get("fc.weight")
        if fc is None or len(fc.shape) != 2:
            return
        n_ids = len(ids) if ids else (3 if self.fmt.kind == "eagle3" else None)
        t_hidden = self.target_value("hidden_size")
        source = f"{self.target_name}'s hidden_size" if self.target is not None else ""
        if not _is_int(t_hidden):
            t_hidden = self.fmt.target_hidden.value if self.fmt.target_hidden else self.drafter("hidden_size")
            source = "the drafter's hidden_size" if not self.fmt.target_hidden else "`target_hidden_size`"
        if n_ids is None or not _is_int(t_hidden) or t_hidden <= 0:
            return  # a non-positive size is reported by the size rules; nothing to divide by here
        expected_in = n_ids * t_hidden
        hidden = self.drafter("hidden_size")
        ids_key = (self.fmt.target_ids or self.fmt.aux_ids)[0].key if (self.fmt.target_ids or self.fmt.aux_ids) else "hidden_size"
        if fc.shape[1] != expected_in:
            guess = f" ({fc.shape[1] // t_hidden} layers' worth)" if fc.shape[1] % t_hidden == 0 else ""
            self.finding("DG121", ids_key, list(fc.shape), [hidden, expected_in],
                         f"`fc.weight` in {fc.file} has {fc.shape[1]} in-features{guess}, but the config reads "
                         f"{n_ids} target layers x {source} {t_hidden} = {expected_in}. The weights were trained "
                         "for other target layers or another target. Fix: make the layer ids match the ones "
                         "the checkpoint was trained with.")
        elif _is_int(hidden) and fc.shape[0] != hidden:
            self.finding("DG121", self.layer_key("hidden_size"), list(fc.shape), [hidden, expected_in],
                         f"`fc.weight` in {fc.file} projects to {fc.shape[0]}, but the drafter's hidden_size is "
                         f"{hidden}. Fix: set `hidden_size` to the checkpoint's.")

    def layers_in_weights(self, tensors: dict[str, Tensor]) -> None:
        found = _layer_indices(tensors)
        n = self.drafter("num_hidden_layers")
        if not found or not _is_int(n) or len(found) == n:
            return
        key = self.layer_key("num_hidden_layers")
        self.finding("DG122", key, n, len(found),
                     f"`{key}` is {n}, but the weights hold {len(found)} decoder layers "
                     f"(layers.{min(found)} to layers.{max(found)}). The engine builds {n} layers and "
                     f"{'leaves some randomly initialised' if n > len(found) else 'ignores trained ones'}. "
                     "Fix: set `num_hidden_layers` to the checkpoint's layer count.")

    def attention_shapes(self, tensors: dict[str, Tensor]) -> None:
        heads, kv_heads = self.drafter("num_attention_heads"), self.drafter("num_key_value_heads")
        head_dim, hidden = self.drafter("head_dim"), self.drafter("hidden_size")
        if not _is_int(kv_heads):
            kv_heads = heads
        if not (_is_int(heads) and _is_int(head_dim)):
            return
        expected = {"q_proj": heads * head_dim, "k_proj": kv_heads * head_dim, "v_proj": kv_heads * head_dim}
        check_in = self.fmt.is_dflash and _is_int(hidden)  # EAGLE-3's first layer reads 2 x hidden
        bad: list[str] = []
        for name, tensor in sorted(tensors.items()):
            for proj, out in expected.items():
                if name.endswith(f"self_attn.{proj}.weight") and len(tensor.shape) == 2:
                    if tensor.shape[0] != out or (check_in and tensor.shape[1] != hidden):
                        want = [out, hidden] if check_in else [out, tensor.shape[1]]
                        bad.append(f"{name} is {list(tensor.shape)}, expected {want}")
        if not bad:
            return
        key = self.layer_key("head_dim") if "head_dim" in (self.layer_raw or {}) else self.layer_key("num_attention_heads")
        self.finding("DG123", key, bad[0], None,
                     f"Attention weights do not match the config: {bad[0]}"
                     + (f" (and {len(bad) - 1} more)" if len(bad) > 1 else "")
                     + f". The config gives num_attention_heads {heads}, num_key_value_heads {kv_heads}, "
                     f"head_dim {head_dim}, hidden_size {hidden}. Loading fails, or the heads are split "
                     "differently from training. Fix: set these to the checkpoint's values.")

    def dtype_note(self, weights: Weights) -> None:
        dtypes = weights.dtypes
        text = ", ".join(f"{d} ({n} tensors)" for d, n in sorted(dtypes.items(), key=lambda kv: -kv[1]))
        stated = (self.layer_raw or {}).get("dtype", (self.layer_raw or {}).get("torch_dtype", self.raw.get("torch_dtype")))
        key = self.layer_key("dtype") if "dtype" in (self.layer_raw or {}) else self.layer_key("torch_dtype")
        names = {"BF16": "bfloat16", "F16": "float16", "F32": "float32"}
        agree = stated is None or any(names.get(d) == str(stated).replace("torch.", "") for d in dtypes)
        note = "" if agree else f"; config.json says {stated}, so the engine casts on load"
        where = weights.files[0] if len(weights.files) == 1 else f"{len(weights.files)} files"
        self.finding("DG124", key, stated, sorted(dtypes),
                     f"Weights ({where}) are {text}{note}.")

    # reduced draft vocabulary

    def draft_vocab(self) -> None:
        """DG131. A drafter that drafts over ``draft_vocab_size`` tokens of the target's vocabulary,
        mapped back by ``d2t`` (draft id -> target id) and ``t2d`` (target id -> in the draft vocab),
        as speculators and EAGLE-3 save them. Tensor shapes come from the headers only."""
        stated = next(iter(_stated(self.raw, ("draft_vocab_size", self.layer_key("draft_vocab_size")))), None)
        if stated is None:
            return
        key, draft = stated.key, stated.value
        if not _is_int(draft) or draft < 1:
            self.finding("DG131", key, draft, None,
                         f"`{key}` must be a positive integer (the rows of the drafter's lm_head), got {_show(draft)}.")
            return
        full, whose = self.target_value("vocab_size"), f"{self.target_name}'s vocab_size" if self.target else ""
        if not _is_int(full):
            full, whose = self.drafter("vocab_size"), f"the drafter's `{self.layer_key('vocab_size')}`"
        if not _is_int(full):
            full = None
        if full is not None and draft > full:
            self.finding("DG131", key, draft, full,
                         f"`{key}` is {draft}, above {whose} ({full}). The draft vocabulary is a subset of the "
                         "target's (d2t maps each draft id to a target id), so it cannot be larger. Fix: set "
                         "`draft_vocab_size` to the rows of the trained lm_head, for this target.")
        if self.weights is None or self.weights.unreachable:
            return  # no checkpoint, or DG125 says it was not read
        tensors = _strip_prefix(self.weights.tensors)
        if not tensors:
            return
        d2t, t2d = _tensor(tensors, "d2t"), _tensor(tensors, "t2d")
        head, embed = _tensor(tensors, "lm_head.weight"), _tensor(tensors, "embed_tokens.weight")
        faults: list[tuple[Tensor, list[int], str]] = []
        if d2t is not None and d2t.shape != (draft,):
            faults.append((d2t, [draft], f"one target id per draft token, [{key}]"))
        if t2d is not None and full is not None and t2d.shape != (full,):
            faults.append((t2d, [full], f"one flag per target token, [{whose}]"))
        if head is not None and len(head.shape) == 2 and head.shape[0] != draft:
            faults.append((head, [draft, head.shape[1]], f"its rows are the draft vocabulary, `{key}`"))
        if embed is not None and full is not None and len(embed.shape) == 2 and embed.shape[0] != full:
            faults.append((embed, [full, embed.shape[1]],
                           f"the drafter embeds target token ids, so its rows are {whose}; only the head is reduced"))
        for tensor, expected, why in faults:
            self.finding("DG131", key, list(tensor.shape), expected,
                         f"`{tensor.name}` in {tensor.file} has shape {list(tensor.shape)}, expected {expected} "
                         f"({why}). Engines index it with the other size and fail to load, or map drafted "
                         f"tokens to the wrong target ids. Fix: ship the tensors saved with this `{key}` "
                         f"({draft}), built for this target's vocabulary.")
        if d2t is None and head is not None and full is not None and draft < full and head.shape[0] == draft:
            self.finding("DG131", key, draft, full,
                         f"`{key}` is {draft}, below {whose} ({full}), and `{head.name}` in {head.file} drafts "
                         f"over {draft} tokens, but the checkpoint has no `d2t` to map draft ids to target ids. "
                         "Engines then read draft ids as target ids (vLLM expects full-vocabulary logits and "
                         "fails). Fix: ship the `d2t` and `t2d` tensors saved with the drafter.")

    # tokenizers

    def tokenizers(self) -> None:
        if self.target is None or self.target.tokenizer is None:
            return
        drafter_tok, target_tok = TokenizerFiles(self.snapshot), self.target.tokenizer
        self.drafter_tokenizer = drafter_tok
        mine = drafter_tok.raw(TOKENIZER_FILE)
        if mine is None or mine == target_tok.raw(TOKENIZER_FILE):
            return  # none shipped, or the same bytes: nothing to compare
        differ = _vocab_difference(drafter_tok, target_tok)
        if differ is None:
            return
        self.finding("DG130", TOKENIZER_FILE, None, None,
                     f"The drafter's tokenizer ({drafter_tok.shown()}) and {self.target_name}'s "
                     f"({target_tok.shown()}) differ: {differ}. The drafter's token ids then mean other "
                     "tokens to the target, and drafts are rejected. Fix: ship the target's tokenizer "
                     "files unchanged, or none.",
                     file=drafter_tok.shown(), line=None)


def _vocab_difference(a: TokenizerFiles, b: TokenizerFiles) -> str | None:
    """How two tokenizers' vocabularies (with added tokens) differ, or None when they do not."""
    a_vocab, b_vocab = a.vocab(), b.vocab()
    if a_vocab is None or b_vocab is None:
        return None
    a_all = {**a_vocab, **{c: i for i, (c, _) in a.added().items()}}
    b_all = {**b_vocab, **{c: i for i, (c, _) in b.added().items()}}
    if a_all == b_all:
        return None
    for token, i in a_all.items():
        if b_all.get(token) != i:
            other = b_all.get(token)
            return (f"token {token!r} is id {i} in the drafter's and "
                    + (f"id {other} in the target's" if other is not None else "absent from the target's"))
    return f"{len(a_all)} tokens against {len(b_all)}"


_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")
_PREFIXES = ("model.", "drafter.", "draft_model.")


def _strip_prefix(tensors: dict[str, Tensor]) -> dict[str, Tensor]:
    """Checkpoints saved from a wrapper prefix every name ("model.fc.weight"); match on the rest."""
    for prefix in _PREFIXES:
        if tensors and all(name.startswith(prefix) for name in tensors):
            return {name[len(prefix):]: t for name, t in tensors.items()}
    return tensors


def _tensor(tensors: dict[str, Tensor], name: str) -> Tensor | None:
    """A tensor by name, or by a name that ends with it: EAGLE-3 checkpoints mix bare (``d2t``) and
    prefixed (``model.embed_tokens.weight``) names, which _strip_prefix leaves as they are."""
    found = tensors.get(name)
    if found is None:
        found = next((t for n, t in sorted(tensors.items()) if n.endswith("." + name)), None)
    return found


def _layer_indices(tensors: dict[str, Tensor]) -> set[int]:
    found = set()
    for name in tensors:
        match = _LAYER.search(name)
        if match:
            found.add(int(match.group(1)))
    return found


def _yaml_key_line(path: str, key: str) -> int | None:
    try:
        return _yaml_line_in(Path(path).read_text(encoding="utf-8", errors="replace"), key)
    except OSError:
        return None


def _yaml_line_in(text: str, key: str) -> int | None:
    return next((i for i, line in enumerate(text.splitlines(), 1) if re.match(rf"{re.escape(key)}\s*:", line)), None)


def _show(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 80 else text[:77] + "..."


# --- entry point for the light check --------------------------------------------------------------


def check_drafter(snapshot: Snapshot, result: TargetResult, *, target: str | None = None,
                  trust_remote_code: bool = False, cache: dict[str, TargetModel] | None = None) -> list[Finding]:
    """The drafter rules for one checked snapshot, against its target when one is known.

    Returns [] for a config that is not a drafter, unless ``target`` was given explicitly, which is
    bad input (BadInput): a drafter check asked for and silently skipped would pass a broken pair.
    Raises BadInput when the target cannot be fetched. ``cache`` keeps fetched targets for one run
    of several drafters.

    Example::

        >>> from draftguard.check.light import check_snapshot
        >>> snap = load_snapshot("examples/qwen3-swa-drafter")
        >>> check_drafter(snap, check_snapshot(snap))  # no target, weights or tokenizer: nothing to say
        []
    """
    from draftguard.check import resolver

    raw = snapshot.load_json()
    fmt = detect_drafter(raw)
    shown = snapshot.path_of("config.json")
    if fmt is None:
        if target:
            raise BadInput(
                f"{shown}: --target {target} was given, but this config.json is not a drafter (no "
                "dflash_config, DFlashDraftModel architecture, speculators_model_type or "
                "eagle_aux_hidden_state_layer_ids); check drafters and targets separately.",
                file=shown,
            )
        return []
    where = find_target(snapshot, fmt, target)
    target_model = None
    if where is not None:
        name, origin, base = where
        cache = {} if cache is None else cache
        cache_key = str(base / name) if base is not None and (base / name).exists() else name
        target_model = cache.get(cache_key)
        if target_model is None:
            # A Hub drafter's own .draftguard.yml names Hub targets only (checked in find_target).
            hub_named = snapshot.is_hub and origin == snapshot.display.get(SETTINGS_NAME)
            target_model = load_target(name, origin, base=base, trust_remote_code=trust_remote_code,
                                       allow_local=not hub_named)
            cache[cache_key] = target_model
    values = result.values
    if values is None:  # a result made elsewhere (the version matrix): resolve the same way
        layers_raw, _ = layer_config(raw)
        try:
            values = resolver.resolve(layers_raw, trust_remote_code=trust_remote_code,
                                      pretrained=snapshot.local_dir if not snapshot.is_hub else snapshot.source,
                                      revision=snapshot.revision)["values"]
        except resolver.ResolveError:
            values = {}
    weights = read_weights(snapshot)
    return DrafterCheck(snapshot, raw, fmt, result, target_model, weights, values).run()
