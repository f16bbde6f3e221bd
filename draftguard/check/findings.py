"""Findings, the rules they come from, and the Report that every view renders.

In: nothing of draftguard's but ``errors.BadInput`` (``InputError.of``): plain data the checks fill (``Finding``, ``LayerAttention``,
``InputError``, ``TargetResult``) and the rule table ``RULES`` (DG0xx config, DG1xx drafters,
DG2xx engines, DG4xx across a repo's files).
Out: those dataclasses and ``Report``, with ``to_json()``, ``summary()`` and ``fails(fail_on)``;
the helpers ``show`` (a value in one short line) and ``attention_runs`` (layers grouped for views).
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field
from typing import Any

from draftguard.errors import BadInput


class Severity(str, enum.Enum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"

    @property
    def rank(self) -> int:
        return {"error": 2, "warning": 1, "info": 0}[self.value]


class _Absent:
    """A key that is not there: missing from config.json, or dropped by the config class."""

    _instance = None

    def __new__(cls):
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "<absent>"

    def __reduce__(self):
        return (_Absent, ())


ABSENT: Any = _Absent()


def is_int(value: Any) -> bool:
    """An int from JSON, not a bool (``True`` is an ``int`` to Python, never a count to a config)."""
    return isinstance(value, int) and not isinstance(value, bool)


def int_or_none(value: Any) -> int | None:
    """The whole number an event payload or a metric holds: an int, an integral float (vLLM's counters
    can be floats, 12.0), or the text of either; None for anything else. A fraction is None rather than
    cut: a pull request number of 3.5 must not become 3.

    Example::

        >>> int_or_none(7), int_or_none("12"), int_or_none(12.0), int_or_none(" 12.0 ")
        (7, 12, 12, 12)
        >>> int_or_none(None), int_or_none("x"), int_or_none(3.5), int_or_none(float("inf")), int_or_none(True)
        (None, None, None, None, None)
    """
    if is_int(value):
        return value
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            pass
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return int(number) if number.is_integer() else None  # NaN and infinity are not integers


def show(value: Any) -> str:
    """A config value as JSON for a message ("absent" for a missing key), cut to 80 characters.

    Example::

        >>> show(ABSENT), show({"rope_type": "yarn"}), len(show(list(range(100))))
        ('absent', '{"rope_type": "yarn"}', 80)
    """
    if value is ABSENT:
        return "absent"
    text = json.dumps(value, default=str)
    return text if len(text) <= 80 else text[:77] + "..."


@dataclass(frozen=True)
class Rule:
    """A rule and its facets, so a new rule is one record: ``blocks_acceptance`` (a drafter finding
    that makes a pair impossible to run: ``draftguard accept`` refuses it as bad input; False for one
    whose effect on acceptance the test is there to measure), ``group_text``
    (a finding that says "nothing is lost": text and markdown show them as one line per config, with
    this text) and ``rewrites_value`` (the config class hands the model code another value than the
    file's: what a diagnosis replays as a config rewrite)."""

    id: str
    name: str
    severity: Severity
    summary: str
    blocks_acceptance: bool | None = None  # decided for every drafter error (tests/test_rules_doc.py)
    group_text: str | None = None
    rewrites_value: bool = False


# Stable ids: never renumber, never reuse. docs/rules.md documents each with its fix, and a test
# keeps the two in step.
RULES: dict[str, Rule] = {
    r.id: r
    for r in [
        Rule("DG001", "value-overridden", Severity.ERROR,
             "An explicit value in config.json reaches the model code changed or dropped, and nothing "
             "else in the file asked for it.", rewrites_value=True),
        Rule("DG002", "contradictory-keys", Severity.ERROR,
             "Two keys in config.json set the same attribute to different values; one wins silently.",
             rewrites_value=True),
        Rule("DG003", "injected-default-contradicts", Severity.WARNING,
             "A key missing from config.json was filled with a class default that the file's other "
             "values contradict."),
        Rule("DG004", "window-injected", Severity.WARNING,
             "config.json sets no sliding window, but the class injected one that layers will use."),
        Rule("DG005", "sliding-layer-runs-full", Severity.ERROR,
             "Layers that config.json declares sliding_attention will run without a window."),
        Rule("DG006", "window-unused", Severity.WARNING,
             "config.json sets a sliding window, but no layer will use it."),
        Rule("DG007", "benign-rename", Severity.INFO,
             "A key was renamed or folded into another with its value kept.",
             group_text="{n} keys are renamed or folded into another key by the config class, with their values kept"),
        Rule("DG008", "intended-change", Severity.INFO,
             "A value changed because another key in config.json asked for it."),
        Rule("DG009", "corrected-by-class", Severity.INFO,
             "The config class changed a value on purpose and shows it: it says so while loading, or it "
             "writes the file's value back and reads a converted form of it."),
        Rule("DG010", "generation-setting", Severity.INFO,
             "A generation parameter in config.json is left to GenerationConfig, which rebuilds it from "
             "config.json with its value.",
             group_text=("{n} generation settings are left to GenerationConfig, which rebuilds them from "
                         "config.json with their values")),
        Rule("DG011", "unread-alias", Severity.WARNING,
             "config.json sets a key the class does not read, which transformers knows as another name of "
             "a field the class does read, and that field has another value."),
        Rule("DG012", "switch-left-out", Severity.WARNING,
             "config.json sets a value that the class keeps only behind a switch, and leaves the switch "
             "out (its default is off), so the value is dropped."),
        Rule("DG013", "engine-setting", Severity.INFO,
             "config.json sets a key the transformers model code does not read, which the serving engines "
             "read by name (model_max_length: the context length vLLM and SGLang serve)."),
        Rule("DG014", "composite-top-level-unread", Severity.ERROR,
             "A composite config states the language model's keys at the top level, while its class builds "
             "the language sub-config from defaults: the model runs with the defaults."),
        Rule("DG015", "window-unread-by-model-code", Severity.WARNING,
             "config.json sets a sliding window the class keeps but its transformers model code never "
             "reads: transformers runs full attention, while engines that read the key slide."),
        # Drafter against target (draftguard/check/drafter/).
        Rule("DG100", "checked-against-target", Severity.INFO,
             "Which target model a drafter was checked against, and what named it."),
        Rule("DG101", "layer-ids-invalid", Severity.ERROR,
             "The target layer ids are missing, not integers, repeated or not ascending.", blocks_acceptance=True),
        Rule("DG102", "layer-id-out-of-range", Severity.ERROR,
             "A target layer id (or aux id = id + 1) is outside the target's layers.", blocks_acceptance=True),
        Rule("DG103", "aux-id-reads-embeddings", Severity.ERROR,
             "An aux hidden-state id is 0, the embedding output, not a layer.", blocks_acceptance=True),
        Rule("DG104", "layer-id-forms-disagree", Severity.ERROR,
             "Target layer ids and aux ids (id + 1) are both given and name different layers.",
             blocks_acceptance=True),
        Rule("DG105", "num-target-layers-mismatch", Severity.ERROR,
             "num_target_layers is not the target's num_hidden_layers.",
             blocks_acceptance=False),
        Rule("DG106", "hidden-size-mismatch", Severity.ERROR,
             "The drafter's (target) hidden size is not the target's hidden_size.", blocks_acceptance=True),
        Rule("DG107", "vocab-size-mismatch", Severity.ERROR,
             "The drafter's vocab_size is not the target's.",
             blocks_acceptance=False),
        Rule("DG108", "head-dim-differs", Severity.WARNING,
             "Retired: no longer fires. A drafter's head_dim that differs from the target's is served by "
             "current engines."),
        Rule("DG109", "mask-token-invalid", Severity.ERROR,
             "The mask token id is missing, stated twice differently, or not below vocab_size.",
             blocks_acceptance=True),
        Rule("DG110", "mask-token-is-regular-token", Severity.ERROR,
             "The mask token id is an ordinary token of the target's tokenizer, not a special or added one.",
             blocks_acceptance=False),
        Rule("DG111", "block-size-unresolved", Severity.ERROR,
             "The drafter's block_size is missing or not an integer of at least 2.", blocks_acceptance=True),
        Rule("DG112", "block-size-conflict", Severity.ERROR,
             "block_size is stated twice with different values.", blocks_acceptance=True),
        Rule("DG113", "drafter-window-unused", Severity.ERROR,
             "A DFlash drafter sets a sliding window, but none of its layers resolves to sliding attention.",
             blocks_acceptance=False),
        Rule("DG114", "layer-ids-defaulted", Severity.WARNING,
             "An EAGLE-3 head names no target layers, so engines pick their default layers for it."),
        Rule("DG115", "layer-ids-shifted", Severity.WARNING,
             "The layer ids are the trainer's usual list moved by one: the +1 convention applied twice or not at all."),
        Rule("DG116", "mask-token-is-used-token", Severity.ERROR,
             "The mask token id is a token the target uses: its bos, eos or pad token.",
             blocks_acceptance=False),
        Rule("DG117", "engine-refuses", Severity.INFO,
             "An engine refuses this drafter in some configurations (vLLM's V1 runner: mixed sliding/full "
             "DFlash, DFlash2)."),
        Rule("DG118", "mtp-not-checked", Severity.INFO,
             "The model declares its own MTP heads; no drafter rule checks them yet."),
        Rule("DG119", "layer-ids-read-differently", Severity.WARNING,
             "vLLM and SGLang read an EAGLE-3 head's layer ids (top-level or in eagle_config) as different "
             "target layers."),
        Rule("DG120", "weights-unreadable", Severity.ERROR,
             "A safetensors header is corrupt, truncated or too large, or the index names missing shards.",
             blocks_acceptance=True),
        Rule("DG121", "fc-shape-mismatch", Severity.ERROR,
             "fc.weight's in-features are not len(target layer ids) x the target's hidden_size.",
             blocks_acceptance=True),
        Rule("DG122", "layer-count-mismatch", Severity.ERROR,
             "The weights hold a different number of decoder layers than num_hidden_layers.", blocks_acceptance=True),
        Rule("DG123", "attention-shape-mismatch", Severity.ERROR,
             "q/k/v projection shapes are not heads x head_dim (and hidden_size).", blocks_acceptance=True),
        Rule("DG124", "weights-dtype", Severity.INFO,
             "The dtype of the weights, and whether config.json agrees."),
        Rule("DG125", "not-fetched", Severity.INFO,
             "Weights or tokenizer files were not checked because the Hub could not be reached."),
        Rule("DG126", "no-config-class", Severity.INFO,
             "A drafter's model_type has no transformers config class: the drafter rules ran on its keys, "
             "the config rules only where an engine maps it onto a transformers class."),
        Rule("DG127", "verifier-local-path", Severity.WARNING,
             "The speculators verifier names a path on its author's machine, not a Hub repo id: the drafter "
             "is checked on its own."),
        Rule("DG130", "tokenizer-vocab-differs", Severity.ERROR,
             "The drafter and the target ship tokenizers with different vocabularies.",
             blocks_acceptance=False),
        Rule("DG131", "draft-vocab-mismatch", Severity.ERROR,
             "draft_vocab_size exceeds the target's vocab_size, or d2t, t2d, lm_head or embed_tokens "
             "shapes disagree with it.",
             blocks_acceptance=False),
        # Across a repo's files (draftguard/check/repo/): config.json against the checkpoint, the
        # family's router convention, the chat template against the stop tokens.
        Rule("DG400", "quant-ignore-unmatched", Severity.WARNING,
             "An entry of quantization_config's ignore list names no module of the checkpoint."),
        Rule("DG401", "quant-mtp-left-out", Severity.ERROR,
             "The MTP layers are stored unquantized while the rest is quantized and the ignore list leaves "
             "them out, or stored quantized while it names them: the MTP head does not load, acceptance collapses."),
        Rule("DG402", "quant-group-size", Severity.ERROR,
             "A quantization group (or block) size does not divide the in-features of the layers it quantizes."),
        Rule("DG403", "quant-scales-missing", Severity.ERROR,
             "A packed quantized weight has no scale tensor beside it."),
        Rule("DG404", "mtp-weights-missing", Severity.ERROR,
             "config.json declares MTP layers, and the checkpoint holds none of their tensors."),
        Rule("DG405", "tied-embeddings-disagree", Severity.ERROR,
             "tie_word_embeddings at the root and in text_config disagree (warning when the checkpoint "
             "holds an lm_head.weight)."),
        Rule("DG406", "lm-head-missing", Severity.ERROR,
             "The head is untied and the checkpoint holds no lm_head.weight: it is initialised at random."),
        Rule("DG407", "router-default", Severity.WARNING,
             "A MoE router setting the file leaves out gets a class default its family's checkpoints never use."),
        Rule("DG408", "stop-token-missing", Severity.ERROR,
             "The chat template ends turns with a token that no stop token names: the model never stops."),
        Rule("DG409", "stop-token-generation-only", Severity.INFO,
             "Only generation_config.json names the template's turn-end token: engines that skip it never stop."),
        Rule("DG410", "quant-config-missing", Severity.ERROR,
             "The checkpoint's tensors are stored quantized (scales, packed weights, FP8 or integer dtypes) "
             "and config.json has no quantization_config."),
        Rule("DG411", "router-class-defaults", Severity.ERROR,
             "The file states group-limited MoE routing (n_group, topk_group, a correction bias) under a class "
             "whose default topk_method reads none of it: the router serves other experts than in training."),
        # What an engine serves (draftguard/check/engines/, asked with --engine).
        Rule("DG200", "engine-refuses", Severity.ERROR,
             "An engine version will not serve this config or pair; its own words are quoted."),
        Rule("DG201", "engine-window-differs", Severity.ERROR,
             "An engine runs a layer without the window transformers gives it, or with one it does not."),
        Rule("DG202", "engine-max-len-differs", Severity.WARNING,
             "An engine serves a max_model_len other than the file's max_position_embeddings."),
        Rule("DG203", "engine-layers-read-differ", Severity.WARNING,
             "Engines or their model runners feed a drafter different target layers (error where the "
             "drafter states the layers it was trained on and a runner reads others)."),
        Rule("DG204", "engine-reads-pre-norm", Severity.WARNING,
             "A drafter reads the target's last layer, which engines feed before the final norm while "
             "training read it after."),
        Rule("DG205", "engine-dtype", Severity.INFO,
             "An engine runs the model in another dtype than config.json states (warning: float16 for a "
             "bfloat16 model, or engines that disagree)."),
        # A launch (draftguard/check/launch/, asked with --launch-file / --launch).
        Rule("DG300", "launch-refused", Severity.ERROR, "The engine refuses this launch; its own words are quoted."),
        Rule("DG301", "launch-context-past-trained", Severity.ERROR,
             "The launch serves more context than the model's config allows, forced by an environment variable."),
        Rule("DG302", "launch-context-rope-extended", Severity.INFO,
             "The launch serves past original_max_position_embeddings, through the config's RoPE scaling."),
        Rule("DG303", "launch-dtype-cast", Severity.INFO,
             "--dtype runs the weights in another dtype than config.json states (warning: float16 from bfloat16)."),
        Rule("DG304", "launch-method-mismatch", Severity.ERROR,
             "The speculative method asked for is not the drafter's format (EAGLE, EAGLE-3, DFlash, MTP)."),
        Rule("DG305", "launch-draft-shorter", Severity.WARNING,
             "The drafter was built for fewer positions than the launch serves."),
        Rule("DG306", "launch-tokens-past-block", Severity.WARNING,
             "num_speculative_tokens is more than a DFlash block drafts."),
        Rule("DG307", "launch-layers-read", Severity.INFO,
             "Which target layers this launch's model runner feeds the drafter (warning where they are not the "
             "drafter's own)."),
        Rule("DG308", "launch-override-undoes", Severity.WARNING,
             "A flag or override undoes a setting of the repo's config.json."),
        Rule("DG309", "launch-upgrade-breaks", Severity.WARNING,
             "A newer engine release refuses what this launch's pinned release takes: an option, a value, a "
             "speculative method (the first refusing release named)."),
    ]
}


@dataclass
class Finding:
    """One judged difference between config.json and what the model code reads."""

    rule: str
    severity: Severity
    key: str
    raw: Any
    resolved: Any
    file: str
    line: int | None
    message: str
    # The transformers versions it occurs under, when several were checked (the version matrix).
    versions: list[str] | None = None
    # Where the config class stored the value, when tracing found it elsewhere (a rename).
    moved_to: str | None = None

    def to_json(self) -> dict[str, Any]:
        out = {
            "rule": self.rule,
            "name": RULES[self.rule].name if self.rule in RULES else self.rule,
            "severity": self.severity.value,
            "key": self.key,
            "raw": _json_value(self.raw),
            "resolved": _json_value(self.resolved),
            "file": self.file,
            "line": self.line,
            "message": self.message,
        }
        if self.versions is not None:
            out["versions"] = list(self.versions)
        if self.moved_to is not None:
            out["moved_to"] = self.moved_to
        return out


def _json_value(value: Any) -> Any:
    return "<absent>" if value is ABSENT else value


@dataclass
class LayerAttention:
    """What one layer declares in config.json against what it will run."""

    index: int
    declared: str  # "sliding(2048)", "sliding(?)" or "full"
    effective: str

    @property
    def mismatch(self) -> bool:
        return self.declared != self.effective


def attention_runs(layers: list[LayerAttention]) -> list[tuple[str, str, str]]:
    """Consecutive layers with the same (declared, effective) pair, as (layers, declared, effective).

    Example::

        >>> attention_runs([LayerAttention(0, "full", "full"), LayerAttention(1, "full", "full"),
        ...                 LayerAttention(2, "sliding(4096)", "full")])
        [('0-1', 'full', 'full'), ('2', 'sliding(4096)', 'full')]
    """
    runs: list[tuple[int, int, str, str]] = []
    for layer in layers:
        if runs and runs[-1][2:] == (layer.declared, layer.effective) and runs[-1][1] == layer.index - 1:
            start, _, d, e = runs[-1]
            runs[-1] = (start, layer.index, d, e)
        else:
            runs.append((layer.index, layer.index, layer.declared, layer.effective))
    return [(str(a) if a == b else f"{a}-{b}", d, e) for a, b, d, e in runs]


@dataclass
class InputError:
    """Bad input: the target could not be checked. Exit code 2."""

    source: str
    message: str
    file: str | None = None
    line: int | None = None
    column: int | None = None
    key: str | None = None

    @classmethod
    def of(cls, source: str, exc: BadInput, file: str | None = None) -> "InputError":
        """The InputError a ``BadInput`` raised while checking ``source`` means (``file``: where, when
        the exception does not say)."""
        return cls(source=source, message=str(exc), file=exc.file or file, line=exc.line, column=exc.column,
                   key=exc.key)

    def location(self) -> str:
        parts = [self.file or self.source]
        if self.line is not None:
            parts.append(str(self.line))
            if self.column is not None:
                parts.append(str(self.column))
        where = ":".join(parts)
        return f"{where} (key `{self.key}`)" if self.key else where

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "file": self.file,
            "line": self.line,
            "column": self.column,
            "key": self.key,
            "message": self.message,
        }


@dataclass
class TargetResult:
    """The check of one target: a folder, a config.json file, or a Hub repo."""

    source: str
    file: str
    revision: str | None
    model_type: str | None
    config_class: str | None
    findings: list[Finding] = field(default_factory=list)
    attention: list[LayerAttention] = field(default_factory=list)
    # What the model code reads (the resolver node's values), for rules that need it after the
    # fidelity check (the drafter rules). Not part of the json view.
    values: dict[str, Any] | None = field(default=None, repr=False)
    # What each engine asked for (--engine) serves: check.engines.EngineView objects.
    engine_views: list[Any] = field(default_factory=list, repr=False)

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "file": self.file,
            "revision": self.revision,
            "model_type": self.model_type,
            "config_class": self.config_class,
            "attention": [
                {"layer": a.index, "declared": a.declared, "effective": a.effective} for a in self.attention
            ],
            **({"engines": [v.to_json() for v in self.engine_views]} if self.engine_views else {}),
        }


@dataclass
class Report:
    """Everything one run found. The terminal, json, markdown and annotation views all render this."""

    transformers_version: str
    targets: list[TargetResult] = field(default_factory=list)
    errors: list[InputError] = field(default_factory=list)
    # A check.matrix.VersionMatrix when several transformers versions were checked, else None.
    matrix: Any = None
    # What .draftguard.yml's `rules:` and `ignore:` changed (check.policy): one line each, e.g.
    # "1 finding silenced by .draftguard.yml:4 (DG001 on `sliding_window`: reason)".
    silenced: list[str] = field(default_factory=list)

    @property
    def findings(self) -> list[Finding]:
        """All findings, errors first, then by file and line."""
        found = [f for t in self.targets for f in t.findings]
        return sorted(found, key=lambda f: (-f.severity.rank, f.file, f.line or 0, f.key))

    def summary(self) -> dict[str, int]:
        counts = {s.value: 0 for s in Severity}
        for f in self.findings:
            counts[f.severity.value] += 1
        return counts

    def fails(self, fail_on: str) -> bool:
        """True when a finding is at or above ``fail_on`` (error, warning or never)."""
        if fail_on == "never":
            return False
        bar = Severity(fail_on).rank
        return any(f.severity.rank >= bar for f in self.findings)

    def to_json(self) -> dict[str, Any]:
        return {
            "transformers_version": self.transformers_version,
            "summary": self.summary(),
            "findings": [f.to_json() for f in self.findings],
            "targets": [t.to_json() for t in self.targets],
            "errors": [e.to_json() for e in self.errors],
            **({"matrix": self.matrix.to_json()} if self.matrix is not None else {}),
            **({"silenced": list(self.silenced)} if self.silenced else {}),
        }
