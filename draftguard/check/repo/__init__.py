"""Repo-level rules (DG400-DG409): what breaks across a repo's files while each file alone looks
fine. config.json against the checkpoint's tensor names (quantization ignore lists, group sizes and
scales; MTP layers; tied embeddings), MoE router settings a class default fills in against the
family's convention, and the chat template's turn-end token against every stop token.

They read config.json, generation_config.json, tokenizer_config.json (its chat template, or
chat_template.jinja), model.safetensors.index.json and safetensors headers: names, shapes, dtypes,
never weight bytes (``files``). ``check.run`` runs them for every surface, after the config rules.

In: a ``Snapshot``, and the values its config class resolved (``TargetResult.values``).
Out: ``check_repo(...)`` -> a list of ``Finding`` (none for a file that is not a model config).
"""

from __future__ import annotations

from typing import Any

from draftguard.check.findings import RULES, Finding, Severity
from draftguard.check.repo.composite import composite_top_level
from draftguard.check.repo.checkpoint import mtp_weights, quantization, tied_embeddings
from draftguard.check.repo.conventions import router_class_defaults, router_defaults
from draftguard.check.repo.files import RepoFiles
from draftguard.check.repo.stops import stop_tokens
from draftguard.snapshot import BadInput, Snapshot

__all__ = ["check_repo"]


def check_repo(snapshot: Snapshot, values: dict[str, Any] | None) -> list[Finding]:
    """The repo rules' findings on one snapshot (its config.json already judged by the config rules).

    Example::

        >>> from draftguard.snapshot import load_snapshot
        >>> check_repo(load_snapshot("examples/qwen3-swa-drafter"), {})
        []
    """
    try:
        raw = snapshot.load_json()
    except BadInput:
        return []  # the config rules said why
    if "speculators_model_type" in raw or "transformer_layer_config" in raw:
        return []  # a drafter's head: the drafter rules judge it against its target
    files = RepoFiles(snapshot)
    found: list[Finding] = []
    shown = snapshot.path_of("config.json")

    def emit(rule: str, key: str, raw_value: Any, resolved: Any, message: str, *, file: str | None = None,
             line_key: str | None = None, warning: bool = False) -> None:
        severity = Severity.WARNING if warning and RULES[rule].severity == Severity.ERROR else RULES[rule].severity
        found.append(Finding(rule=rule, severity=severity, key=key, raw=raw_value, resolved=resolved,
                             file=file or shown, line=None if file else snapshot.line_of(line_key or key),
                             message=message))

    values = values or {}
    composite_top_level(raw, values, emit)
    quantization(raw, files, emit)
    mtp_weights(raw, files, emit)
    tied_embeddings(raw, values, files, emit)
    router_defaults(raw, values, emit)
    tensors = files.tensors()
    router_class_defaults(raw, values, tensors.names if tensors else None, emit)
    stop_tokens(raw, files, emit)
    return found
