"""The light check of one snapshot under the installed transformers. CPU only, no torch, no network
but the Hub fetch. ``check.run.check`` runs it for every surface, with the drafter and engine rules.

In: one ``Snapshot`` for ``check_snapshot``.
Out: one ``TargetResult``, raising ``BadInput`` for input that cannot be checked.
"""

from __future__ import annotations

from draftguard.check import resolver
from draftguard.check.drafter.classless import classless_finding, engine_alias, is_readable_drafter
from draftguard.check.drafter.detect import layer_config
from draftguard.check.fidelity import judge_config
from draftguard.check.findings import ABSENT, RULES, Finding, TargetResult
from draftguard.check.weights import read_weights
from draftguard.snapshot import BadInput, Snapshot, load_snapshot  # noqa: F401  (the doctest uses it)


def check_snapshot(
    snapshot: Snapshot, *, trust_remote_code: bool = False, version: str | None = None, trace: bool = True
) -> TargetResult:
    """Resolve one snapshot's config.json and judge it. Raises BadInput for input that cannot be
    checked (invalid JSON, no or unknown model_type, values the class rejects).

    ``trace=False`` skips gathering the class's evidence about changed values (benchmarks use it as
    the baseline); the judgements then fall back to what the resolved values alone show.

    Example::

        >>> result = check_snapshot(load_snapshot("examples/qwen3-swa-drafter"))
        >>> sorted({f.rule for f in result.findings})
        ['DG001', 'DG005']
    """
    # A speculators-format drafter keeps its decoder config in transformer_layer_config: judge that.
    raw, prefix = layer_config(snapshot.load_json())
    line_of = (lambda key, name="config.json": snapshot.line_of(prefix + key, name)) if prefix else snapshot.line_of
    shown = snapshot.path_of("config.json")
    version = version or resolver.transformers_version()
    note: Finding | None = None
    try:
        node = resolver.resolve(
            raw,
            trust_remote_code=trust_remote_code,
            pretrained=snapshot.local_dir if not snapshot.is_hub else snapshot.source,
            revision=snapshot.revision,
            trace=trace,
        )
    except resolver.ResolveError as exc:
        key = prefix + exc.key if exc.key else None
        line = snapshot.line_of(key) if key else None
        where = f"{shown}:{line}" if line else shown
        # A drafter: its rules read keys, so a model_type transformers lacks is said, not refused.
        alias, node = engine_alias(raw), None
        if alias is not None and is_readable_drafter(snapshot.load_json(), exc.kind):
            try:
                node = resolver.resolve({**raw, "model_type": alias[0]}, trust_remote_code=False, trace=trace)
            except resolver.ResolveError:
                alias = None
        note = classless_finding(snapshot.load_json(), raw, exc.kind, exc.key, version, file=shown, line=line,
                                 alias=alias if node is not None else None)
        if note is None:
            raise BadInput(f"{where}: {exc}", file=shown, line=line, key=key) from None
        if node is None:
            note.key = prefix + note.key
            return TargetResult(source=snapshot.source, file=shown, revision=snapshot.revision,
                                model_type=note.raw if isinstance(note.raw, str) else None, config_class=None,
                                findings=[note], values=dict(raw))
        raw = {**raw, "model_type": alias[0]}
    findings, attention = judge_config(raw, node, version=version, file=shown, line_of=line_of)
    if note is not None:
        findings.insert(0, note)
    if not prefix:
        findings = _head_dim_against_weights(snapshot, raw, node["values"], findings, version)
    for finding in findings:
        finding.key = prefix + finding.key
    return TargetResult(
        source=snapshot.source,
        file=shown,
        revision=snapshot.revision,
        model_type=raw.get("model_type") if isinstance(raw.get("model_type"), str) else None,
        config_class=node["__config__"],
        findings=findings,
        attention=attention,
        values=node["values"],
    )


def _head_dim_against_weights(
    snapshot: Snapshot, raw: dict, values: dict, findings: list[Finding], version: str
) -> list[Finding]:
    """A head_dim the file leaves to the class's default, set against the weights where they can be
    read: the first layer's q_proj holds num_attention_heads x head_dim rows. A mismatch is certain
    (DG123, error); a match settles a DG003 warning (dropped). Hub weights are fetched only to settle
    a warning, so a clean check stays offline."""
    head_dim, heads = values.get("head_dim"), values.get("num_attention_heads")
    if "head_dim" in raw or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (head_dim, heads)):
        return findings
    if all(isinstance(values.get(k), int) for k in ("qk_nope_head_dim", "qk_rope_head_dim")):
        return findings  # MLA (DeepSeek-V2/V3, Kimi): q_proj is heads x (nope + rope); head_dim is the rope part
    warned = [f for f in findings if f.rule == "DG003" and f.key == "head_dim"]
    if snapshot.is_hub and not warned:
        return findings

    try:
        weights = read_weights(snapshot)
    except BadInput:  # the Hub cannot be reached: the warning stands on the class's evidence
        return findings
    if weights is None:
        return findings
    q_proj = sorted((name for name in weights.tensors if name.endswith("layers.0.self_attn.q_proj.weight")), key=len)
    if not q_proj or len(weights.tensors[q_proj[0]].shape) != 2:
        return findings
    tensor = weights.tensors[q_proj[0]]
    rows = tensor.shape[0]
    if rows == heads * head_dim:
        return [f for f in findings if f not in warned]  # the weights were trained with the default
    rest = [f for f in findings if f not in warned]
    line = snapshot.line_of("num_attention_heads")
    rest.append(Finding(
        rule="DG123", severity=RULES["DG123"].severity, key="head_dim", raw=ABSENT, resolved=head_dim,
        file=snapshot.path_of("config.json"), line=line,
        message=(
            f"`head_dim` is not in config.json, so the class uses {head_dim} (transformers {version}), but "
            f"`{q_proj[0]}` in {tensor.file} has {rows} rows: {heads} heads x {rows / heads:g}, not "
            f"{heads} x {head_dim}. The model cannot load these weights as configured. Fix: add "
            f"\"head_dim\": {rows // heads if rows % heads == 0 else rows / heads}."
        ),
    ))
    return rest
