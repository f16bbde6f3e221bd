"""The transformers version matrix: one config.json resolved under several transformers releases.

A repo is served by whatever transformers its users' engine pins, and the same config.json resolves
differently across releases (Qwen3's sliding-window gate arrived in 4.53; 5.x folds the RoPE keys).
So ``draftguard check --transformers 4.52.4,5.24.0`` resolves every target under each version and
merges the judgements into one Report: a finding shows once, with the versions it occurs in, and a
key x version table shows the resolved values that differ.

How it runs:

- each version lives in its own virtual environment under the cache dir (``DRAFTGUARD_CACHE_DIR``,
  else ``$XDG_CACHE_HOME/draftguard``, else ``~/.cache/draftguard``), keyed by version and Python,
  holding ``transformers==X`` and what it pulls, nothing else. uv builds it when it is on PATH, else
  ``python -m venv`` and pip. The version that draftguard itself runs with needs no environment.
- ``draftguard/check/resolver/`` (a standalone package, JSON over stdin/stdout) runs in that environment, one
  subprocess per version for all targets, all versions in parallel, each under a time limit.
- judging happens here, with the same ``fidelity.judge_config`` as the single-version check.

In: ``check_matrix(targets, versions, ...)``: target names (or fetched ``Snapshot`` objects) and
version strings; ``requested_versions`` reads ``--transformers`` or ``.draftguard.yml``.
Out: a ``Report`` whose ``matrix`` is a ``VersionMatrix`` (a column per version, a row per differing
key); a version that cannot run is an ``InputError`` in it; malformed versions raise ``BadInput``.
"""

from __future__ import annotations

import re
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from draftguard.check.drafter import check_drafter, layer_config
from draftguard.check.drafter.classless import classless_finding
from draftguard.check.repo import check_repo
from draftguard.check.environments import (
    CRASHED,
    DEFAULT_INSTALL_TIMEOUT,
    DEFAULT_RESOLVE_TIMEOUT,
    INSTALL_TIMEOUT_ENV,
    OK,
    RESOLVE_TIMEOUT_ENV,
    resolve_here,
    _timeout,
    ensure_env,
    parse_versions,
    run_resolver,
)
from draftguard.check.fidelity import judge_config, same, show
from draftguard.check.findings import (ABSENT, Finding, InputError, LayerAttention, Report, TargetResult,
                                      attention_runs)
from draftguard.errors import MatrixError
from draftguard.settings import load_settings
from draftguard.snapshot import BadInput, Snapshot, load_snapshot


# --- the matrix in the Report ------------------------------------------------------------------------


@dataclass
class VersionColumn:
    """How one transformers version went: ``status`` is ok, install failed, no network, crashed or
    timed out; ``detail`` says why when it is not ok."""

    version: str
    status: str = OK
    detail: str | None = None
    python: str | None = None
    install_seconds: float | None = None
    resolve_seconds: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "status": self.status,
            "detail": self.detail,
            "install_seconds": None if self.install_seconds is None else round(self.install_seconds, 2),
            "resolve_seconds": None if self.resolve_seconds is None else round(self.resolve_seconds, 2),
        }


@dataclass
class MatrixRow:
    """One key whose resolved value differs between versions. ``values`` maps each version that
    resolved to its value (ABSENT where the class dropped the key)."""

    file: str
    key: str
    raw: Any
    values: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        def plain(value: Any) -> Any:
            return "<absent>" if value is ABSENT else value

        return {"file": self.file, "key": self.key, "raw": plain(self.raw),
                "values": {v: plain(x) for v, x in self.values.items()}}


@dataclass
class VersionMatrix:
    """The per-version view of a Report: which versions ran, and the values that differ."""

    versions: list[str]
    columns: list[VersionColumn] = field(default_factory=list)
    rows: list[MatrixRow] = field(default_factory=list)
    # file -> the version whose effective attention the target's attention view shows (the newest
    # that resolved it); the other versions' show in the table's "(effective attention)" row.
    attention_from: dict[str, str] = field(default_factory=dict)

    def column(self, version: str) -> VersionColumn:
        return next(c for c in self.columns if c.version == version)

    def table(self) -> tuple[list[str], list[list[str]]]:
        """The key x version table as text cells, for the text and markdown views: a header of
        file (when there are several), key, config.json and one column per version, then one row per
        differing key. A version that did not run says why in its header; its cells are "-"."""
        header = ["file", "key", "config.json"] + [
            c.version if c.status == OK else f"{c.version} ({c.status})" for c in self.columns
        ]
        body = [
            [row.file, row.key, _cell(row.raw, row.key == ATTENTION_ROW)] + [
                _cell(row.values[c.version], row.key == ATTENTION_ROW) if c.version in row.values else "-"
                for c in self.columns
            ]
            for row in self.rows
        ]
        if len({row.file for row in self.rows}) <= 1:  # one file: the column would only repeat it
            header, body = header[1:], [row[1:] for row in body]
        return header, body

    def to_json(self) -> dict[str, Any]:
        return {
            "versions": self.versions,
            "columns": [c.to_json() for c in self.columns],
            "rows": [r.to_json() for r in self.rows],
        }


def _cell(value: Any, described: bool) -> str:
    return value if described and isinstance(value, str) else show(value)


def check_matrix(
    targets: Iterable[str],
    versions: Iterable[str],
    *,
    revision: str | None = None,
    trust_remote_code: bool = False,
    cache: Path | None = None,
    progress: Callable[[str], None] | None = None,
    resolve_timeout: float | None = None,
    install_timeout: float | None = None,
    drafter_target: str | None = None,
    snapshots: Iterable[Snapshot] = (),
    drafter_rules: bool = True,
    host_in_process: bool = False,
    drafter: Callable[[Snapshot, TargetResult], list[Finding]] | None = None,
) -> Report:
    """Check every target under every transformers version into one Report with a ``matrix``.
    Raises BadInput, before any work, for malformed versions or time limits.

    Raises:
        BadInput: A version or a time limit is malformed (nothing has run yet).

    A version that cannot be installed or whose resolver fails becomes an InputError naming it (exit 2)
    and a column that says why; the other versions' results are still in the Report. Drafters are also
    checked against their target model, once (those rules do not depend on the version), as in
    ``check.run.check``.

    ``snapshots`` are checked after ``targets``: snapshots the caller already fetched.
    ``drafter_rules=False`` leaves the drafter rules to the caller; ``drafter`` (``check.run``'s drafter
    step: the surface's way to read a target) runs them in place of ``check_drafter``. ``host_in_process`` resolves
    under draftguard's own transformers in this process instead of a resolver process (the audit,
    which resolves many small batches and has transformers imported already).

    Example::

        >>> from draftguard.check.environments import host_transformers_version
        >>> report = check_matrix(["examples/qwen3-swa-drafter"], [host_transformers_version()])
        >>> sorted({f.rule for f in report.findings})
        ['DG001', 'DG005']
    """
    versions = parse_versions(versions)
    timeout = resolve_timeout or _timeout(RESOLVE_TIMEOUT_ENV, DEFAULT_RESOLVE_TIMEOUT)
    install_timeout = install_timeout or _timeout(INSTALL_TIMEOUT_ENV, DEFAULT_INSTALL_TIMEOUT)
    report = Report(transformers_version=", ".join(versions))
    matrix = VersionMatrix(versions=versions, columns=[VersionColumn(v) for v in versions])
    report.matrix = matrix

    loaded: list[tuple[Snapshot, dict[str, Any], str]] = []
    for target in [*targets, *snapshots]:
        try:
            snapshot = target if isinstance(target, Snapshot) else load_snapshot(target, revision)
            # A speculators-format drafter keeps its decoder config in transformer_layer_config.
            loaded.append((snapshot, *layer_config(snapshot.load_json())))
        except BadInput as exc:
            report.errors.append(InputError.of(target.source if isinstance(target, Snapshot) else target, exc))
    configs = [
        {
            "raw": raw,
            "trust_remote_code": trust_remote_code,
            "pretrained": snap.local_dir if not snap.is_hub else snap.source,
            "revision": snap.revision,
        }
        for snap, raw, _ in loaded
    ]

    def run(column: VersionColumn) -> list[dict[str, Any]] | None:
        try:
            python, column.install_seconds = ensure_env(
                column.version, cache=cache, progress=progress, install_timeout=install_timeout
            )
            column.python = python
            if not configs:
                return []
            started = time.monotonic()
            if host_in_process and python == sys.executable:
                results = resolve_here(configs)
            else:
                results = run_resolver(python, configs, timeout=timeout)
            column.resolve_seconds = time.monotonic() - started
            return results
        except MatrixError as exc:
            column.status, column.detail = exc.status, str(exc)
            return None
        except OSError as exc:  # the environment's interpreter vanished or cannot be run
            column.status, column.detail = CRASHED, f"the resolver could not be started ({exc})"
            return None

    with ThreadPoolExecutor(max_workers=len(versions)) as pool:
        outcomes = dict(zip(versions, pool.map(run, matrix.columns)))

    for column in matrix.columns:
        if column.status != OK:
            named = re.match(rf"transformers {re.escape(column.version)}[ :]", column.detail or "")
            report.errors.append(InputError(
                source=f"transformers=={column.version}",
                message=column.detail if named else f"transformers {column.version}: {column.detail}",
                key="transformers",
            ))
    fetched: dict = {}  # target models fetched once per run, however many drafters name them
    drafter = drafter or (lambda snapshot, result: check_drafter(
        snapshot, result, target=drafter_target, trust_remote_code=trust_remote_code, cache=fetched))
    for index, (snapshot, raw, prefix) in enumerate(loaded):
        per_version = {v: outcomes[v][index] for v in versions if outcomes[v] is not None}
        result = _judge_target(snapshot, raw, prefix, per_version, matrix, report)
        if result is None:
            continue
        report.targets.append(result)
        if not drafter_rules:
            continue
        try:
            result.findings.extend(drafter(snapshot, result))
        except BadInput as exc:
            report.errors.append(InputError.of(snapshot.source, exc))
    return report


def _judge_target(
    snapshot: Snapshot, raw: dict[str, Any], prefix: str, per_version: dict[str, dict[str, Any]],
    matrix: VersionMatrix, report: Report,
) -> TargetResult | None:
    shown = snapshot.path_of("config.json")
    line_of = (lambda key, name="config.json": snapshot.line_of(prefix + key, name)) if prefix else snapshot.line_of
    nodes: dict[str, dict[str, Any]] = {}
    failed: dict[tuple[str, str | None], list[str]] = {}
    messages: dict[tuple[str, str | None], str] = {}
    for version, result in per_version.items():
        if "error" in result:
            error = result["error"]
            key = error.get("key")
            group = (error.get("kind", "error"), prefix + key if key else None)
            failed.setdefault(group, []).append(version)
            messages[group] = str(error.get("message", "the config class rejected the file"))
        else:
            nodes[version] = result
    notes: list[Finding] = []
    for (kind, key), bad in failed.items():
        line = snapshot.line_of(key) if key else None
        where = f"{shown}:{line}" if line else shown
        text = messages[(kind, key)]
        # A drafter no version has a class for: its rules read keys, so that is said (DG126). Where another
        # version resolves it, the versions that cannot stay errors: a regression users of them meet.
        note = None if nodes else classless_finding(snapshot.load_json(), raw, kind, key,
                                                    _span(bad, matrix.versions), file=shown, line=line)
        if note is not None:
            notes.append(note)
            continue
        report.errors.append(InputError(
            source=snapshot.source,
            message=f"{where}: under transformers {_span(bad, matrix.versions)}: {text}",
            file=shown, line=line, key=key,
        ))
    if not nodes:
        model_type = raw.get("model_type") if isinstance(raw.get("model_type"), str) else None
        return TargetResult(source=snapshot.source, file=shown, revision=snapshot.revision, model_type=model_type,
                            config_class=None, findings=notes, values=dict(raw)) if notes else None

    judged: dict[str, tuple[list[Finding], list[LayerAttention]]] = {
        version: judge_config(raw, node, version=version, file=shown, line_of=line_of)
        for version, node in nodes.items()
    }
    for findings_, _ in judged.values():
        for finding in findings_:
            finding.key = prefix + finding.key
    flat = {version: _flatten(node["values"], prefix) for version, node in nodes.items()}
    findings = notes + _merge_findings(judged, flat, matrix.versions)
    matrix.rows.extend(_rows(shown, _flatten(raw, prefix), flat, findings, {v: a for v, (_, a) in judged.items()}))
    newest = list(nodes)[-1]
    matrix.attention_from[shown] = newest
    findings += check_repo(snapshot, nodes[newest]["values"])  # the repo rules, with the newest version's values
    return TargetResult(
        source=snapshot.source,
        file=shown,
        revision=snapshot.revision,
        model_type=raw.get("model_type") if isinstance(raw.get("model_type"), str) else None,
        config_class=nodes[newest]["__config__"],
        findings=findings,
        attention=judged[newest][1],
    )


def _merge_findings(
    judged: dict[str, tuple[list[Finding], list[LayerAttention]]],
    flat: dict[str, dict[str, Any]],
    all_versions: list[str],
) -> list[Finding]:
    """One finding per (rule, key, change), with the versions it occurs in. Its message names them,
    and what the model reads on the versions where it does not occur."""
    groups: dict[tuple[str, str, str, str], list[tuple[str, Finding]]] = {}
    for version, (findings, _) in judged.items():
        for finding in findings:
            ident = (finding.rule, finding.key, show(finding.raw), show(finding.resolved))
            groups.setdefault(ident, []).append((version, finding))
    ran = list(judged)
    merged = []
    for group in groups.values():
        versions = [v for v, _ in group]
        finding = group[-1][1]  # the newest version's wording
        span = _span(versions, all_versions)
        message = finding.message.replace(f"transformers {group[-1][0]}", f"transformers {span}")
        others = [v for v in ran if v not in versions]
        merged.append(Finding(
            rule=finding.rule, severity=finding.severity, key=finding.key, raw=finding.raw,
            resolved=finding.resolved, file=finding.file, line=finding.line, message=message,
            versions=versions, moved_to=finding.moved_to,
        ))
        if others:
            merged[-1].message += " " + _elsewhere(merged[-1], others, flat, all_versions)
    return merged


def _elsewhere(finding: Finding, others: list[str], flat: dict[str, dict[str, Any]], all_versions: list[str]) -> str:
    """"Not on 4.52.4, where the model reads 2048." for the versions where the finding is absent."""
    reads: dict[str, list[str]] = {}
    if not same(flat[finding.versions[-1]].get(finding.key, ABSENT), finding.resolved):
        # The finding's "resolved" is a description (effective attention), not the key's value.
        return f"Not on transformers {_span(others, all_versions)}."
    for version in others:
        value = flat[version].get(finding.key, ABSENT)
        if not same(value, finding.resolved):
            reads.setdefault(show(value), []).append(version)
    if len(reads) == 1 and sum(map(len, reads.values())) == len(others):
        (value, _), = reads.items()
        return f"Not on transformers {_span(others, all_versions)}, where the model reads {value}."
    return f"Not on transformers {_span(others, all_versions)}."


def _span(versions: list[str], all_versions: list[str]) -> str:
    """Versions as runs over the requested list: "4.53.3 to 5.24.0" for three or more neighbours,
    else a plain list. All of them reads as "all checked versions" would hide which ones."""
    index = sorted(all_versions.index(v) for v in versions if v in all_versions)
    runs: list[list[int]] = []
    for i in index:
        if runs and runs[-1][-1] == i - 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    parts = []
    for run in runs:
        if len(run) >= 3:
            parts.append(f"{all_versions[run[0]]} to {all_versions[run[-1]]}")
        else:
            parts.extend(all_versions[i] for i in run)
    if len(parts) <= 1:
        return "".join(parts)
    return ", ".join(parts[:-1]) + " and " + parts[-1]


def _flatten(values: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Dotted keys to leaf values: nested configs and plain dicts are walked, lists kept whole."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, dict) and "__config__" in value:
            out.update(_flatten(value["values"], f"{prefix}{key}."))
        elif isinstance(value, dict) and value:
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[prefix + key] = value
    return out


ATTENTION_ROW = "(effective attention)"


def _rows(
    file: str, raw_flat: dict[str, Any], flat: dict[str, dict[str, Any]], findings: list[Finding],
    attention: dict[str, list[LayerAttention]],
) -> list[MatrixRow]:
    """Keys of config.json (and keys a finding names) whose resolved values are not the same in
    every version. Attributes the file never mentions differ by the hundred between releases
    (generation defaults, output flags) and say nothing about this repo, so they are left out."""
    wanted = list(raw_flat) + [f.key for f in findings if f.key not in raw_flat]
    rows = []
    for key in dict.fromkeys(wanted):
        values = {v: values_.get(key, ABSENT) for v, values_ in flat.items()}
        first = next(iter(values.values()))
        if len(values) > 1 and not all(same(first, x) for x in values.values()):
            rows.append(MatrixRow(file, key, raw_flat.get(key, ABSENT), values))
    runs = {v: _attention_text(layers) for v, layers in attention.items()}
    if len(set(runs.values())) > 1:
        rows.append(MatrixRow(file, ATTENTION_ROW, _attention_text(attention[next(iter(attention))], declared=True), runs))
    return rows


def _attention_text(layers: list[LayerAttention], declared: bool = False) -> str:
    if not layers:
        return "n/a"
    runs = attention_runs(layers)
    return "; ".join(f"{span}: {d if declared else e}" for span, d, e in runs)


def requested_versions(option: str | None, folder: str | Path = ".") -> list[str] | None:
    """The versions a check asked for: ``--transformers V1,V2``, else the ``transformers:`` list of
    ``.draftguard.yml`` in ``folder``, else None (check under the installed version only).
    Raises BadInput for a malformed version or settings file.

    Raises:
        BadInput: A version or the settings file is malformed.

    Example::

        >>> requested_versions("5.24.0, 4.52.4")
        ['4.52.4', '5.24.0']
    """
    if option is not None:
        return parse_versions([part for part in option.split(",") if part.strip()] or [option])

    settings = load_settings(folder)
    if not settings.transformers:
        return None
    source = settings.source or ".draftguard.yml"
    try:
        return parse_versions(settings.transformers, source=source)
    except BadInput as exc:
        line = _line_of_key(Path(source), "transformers")
        raise BadInput(str(exc).replace(f"{source}:", f"{source}:{line}:", 1) if line else str(exc),
                       file=source, line=line, key="transformers") from None


def _line_of_key(path: Path, key: str) -> int | None:
    import yaml  # yaml: only a .draftguard.yml pays its import

    try:
        root = yaml.compose(path.read_text(encoding="utf-8", errors="replace"), Loader=yaml.SafeLoader)
    except (OSError, yaml.YAMLError):
        return None
    if isinstance(root, yaml.MappingNode):
        for key_node, _ in root.value:
            if key_node.value == key:
                return key_node.start_mark.line + 1
    return None


def stderr_progress(text: str) -> None:
    """Progress lines for first installs; stderr, so json and markdown on stdout stay clean."""
    # One write per line: versions install in parallel threads.
    sys.stderr.write(f"draftguard: {text}\n")
    sys.stderr.flush()
