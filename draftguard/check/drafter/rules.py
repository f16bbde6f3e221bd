"""The drafter rules every format shares (DG100-DG107, DG125, DG130), and the check's plumbing.

A format whose rules differ subclasses ``DrafterCheck`` in its own module (dflash.py, eagle.py) and
overrides the hooks: ``format_rules`` for its own rules, ``missing_ids`` for a config without layer
ids, ``canonical_ids`` for the ids its trainer would choose. Weight-shape rules are in weight_rules.py.

In: ``DrafterCheck(snapshot, raw, fmt, result, target, weights, layer_values)``: the drafter's
``Snapshot`` and raw config, its ``DrafterFormat`` and ``TargetResult``, the ``TargetModel`` (or None),
its ``Weights`` (or None) and its decoder config as resolved.
Out: ``run()`` -> the list of ``Finding`` for that drafter, each on a file and line.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from draftguard.check.drafter.detect import DrafterFormat, Stated, get_key
from draftguard.check.drafter.engines import shifted
from draftguard.check.drafter.files import TOKENIZER_FILE, TokenizerFiles, _is_int
from draftguard.check.drafter.target import TargetModel
from draftguard.check.drafter.weight_rules import WeightRules
from draftguard.check.findings import show as _show
from draftguard.check.findings import RULES, Finding, TargetResult
from draftguard.check.weights import Weights
from draftguard.errors import HubUnreachable
from draftguard.snapshot import SETTINGS_NAME, Snapshot


class DrafterCheck(WeightRules):
    """Judges one drafter snapshot. ``target`` may be None: then only the rules that need no target
    run (layer-id order, block size, mask token against the drafter's own vocab, weights)."""

    def __init__(self, snapshot: Snapshot, raw: dict[str, Any], fmt: DrafterFormat, result: TargetResult,
                 target: TargetModel | None, weights: Weights | None, layer_values: dict[str, Any]):
        self.snapshot, self.raw, self.fmt, self.result = snapshot, raw, fmt, result
        self.target, self.weights = target, weights
        self.layer_raw = get_key(raw, fmt.layer_prefix.rstrip(".")) if fmt.layer_prefix else raw
        self.values = layer_values  # the drafter's decoder config as its class resolves it
        self.drafter_tokenizer: TokenizerFiles | None = None
        self.findings: list[Finding] = []

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
        name = self.target.name
        # A local folder is shown as a path ("the target at models/target"), never "the target target".
        return f"the target at {name}" if Path(name).exists() else f"the target {name}"

    def run(self) -> list[Finding]:
        self.target_note()
        n_layers = self.layer_count()
        ids = self.layer_ids(n_layers)
        self.num_target_layers()
        self.sizes()
        self.format_rules(n_layers)
        if self.weights is not None:
            self.weight_shapes(ids)
        self.draft_vocab()
        self.tokenizers()
        self.not_fetched()
        return self.findings

    # hooks for the format modules

    def format_rules(self, count: tuple[int, str] | None) -> None:
        """The rules only this format has (mask token, block size, ...)."""

    def missing_ids(self, count: tuple[int, str] | None) -> None:
        """What to say when the config names no target layers. Formats that read none say nothing."""

    def canonical_ids(self, n: int) -> tuple[list[int], str] | None:
        """The target layer ids (0-based) this format's usual trainer picks for a target of ``n``
        layers, and who picks them; None when there is no such default."""
        return None

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
                         + f". The config rules ran from the cache. Fix: {HubUnreachable.hint}.",
                         file=self.result.file, line=None)

    def target_note(self) -> None:
        """DG100: which target the pair was judged against, so a reader can tell an inferred target."""
        if self.target is None:
            return
        origin = self.target.origin
        text = (f"Checked as {self.fmt.article} {self.fmt.label} drafter against the target {self.target.name} "
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
            self.missing_ids(count)
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
        self.shifted_ids(usable, count)
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
            valid = f"0-based target layer ids lie in [0, {n})"
            hint = (f" {first} is the aux id (layer + 1) of the last layer, so the list looks like aux ids "
                    "written where 0-based ids belong." if first == n else "")
            fix = "subtract 1 from every id" if first == n else "use the layer ids the drafter was trained with"
        else:
            valid = f"aux ids (layer + 1, with the embedding output at 0) lie in [1, {n}]"
            hint = (f" {first} is layer {n - 1} shifted by one twice." if first == n + 1 else "")
            fix = "subtract 1 from every id" if first == n + 1 else "use the ids the drafter was trained with"
        self.finding("DG102", stated.key, ids, None,
                     f"`{stated.key}` holds {_show(bad)}, but {why} and {valid}.{hint} An id past the end "
                     f"reads no layer: the engine fails to load the drafter or feeds it other features. "
                     f"Fix: {fix}, for this target.")

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

    def shifted_ids(self, usable: list[tuple[Stated, list[int], int]], count: tuple[int, str] | None) -> None:
        """DG115. Ids that are the trainer's usual list moved by one: the +1 hidden-state convention
        applied twice or not at all (vLLM PR #40727). Every id is in range, so nothing else flags it."""
        if count is None or not usable:
            return
        n, why = count
        canonical = self.canonical_ids(n)
        if canonical is None:
            return
        target_form, who = canonical
        for stated, ids, shift in usable:
            expected = [i + shift for i in target_form]
            step = shifted(ids, expected)
            if step is None:
                continue
            form = "aux ids (target layer + 1)" if shift else "0-based target layer ids"
            cause = ("the +1 hidden-state offset applied twice" if step > 0
                     else "the +1 hidden-state offset left out")
            self.finding("DG115", stated.key, ids, expected,
                         f"`{stated.key}` is {_show(ids)}: {who} would give {_show(expected)} here ({why}, "
                         f"{form}), and every id is one {'higher' if step > 0 else 'lower'}. That is the "
                         f"pattern of {cause} (vLLM PR #40727): the drafter then reads the layer next to the one "
                         f"it was trained on, and acceptance drops with no error. Fix: if the drafter was trained "
                         f"with the usual layers, set `{stated.key}` to {_show(expected)}; if it really was "
                         "trained on these, nothing to do.")
            return

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
        # The key that holds the target's vocabulary: `vocab_size` for most trainers, `target_vocab_size`
        # where `vocab_size` is the draft vocabulary (speculators' Eagle3Deepspeed heads).
        named = self.vocab_keys()[0]
        key, vocab = named if named is not None else (self.layer_key("vocab_size"), None)
        if _is_int(vocab) and _is_int(t_vocab) and vocab != t_vocab:
            self.finding("DG107", key, vocab, t_vocab,
                         f"`{key}` is {vocab}, but {self.target_name} has vocab_size = "
                         f"{t_vocab}. The drafter's logits come from the target's lm_head and its tokens from "
                         "the target's embeddings, so token ids must mean the same in both. Fix: set "
                         f"`{key.rpartition('.')[2]}` to {t_vocab}, or use the target the drafter was trained for.")
        # DG108 (head_dim differs) is retired: current vLLM (PR #45181 pads mixed KV page sizes) and SGLang
        # serve head_dim-128 drafters on head_dim-256 Qwen3.6 targets (z-lab/dflash#52), an MLA drafter's
        # head_dim is qk_rope_head_dim, not a head size, and no engine version where it breaks was pinned.

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


def _yaml_key_line(path: str, key: str) -> int | None:
    try:
        return _yaml_line_in(Path(path).read_text(encoding="utf-8", errors="replace"), key)
    except OSError:
        return None


def _yaml_line_in(text: str, key: str) -> int | None:
    # GitHub's lines (only \n ends one), not splitlines(): a U+2028 would move the annotation down.
    return next((i for i, line in enumerate(text.split("\n"), 1) if re.match(rf"{re.escape(key)}\s*:", line)), None)
