"""A repository's rule settings (``.draftguard.yml``'s ``rules:`` and ``ignore:``) applied to a Report,
in one place every surface shares: ``check.run.check`` calls it for the CLI, the Action, both bots and
the audit alike.

In: a ``Report``, the ``Settings`` read from the repository's .draftguard.yml, and the folder the
findings' files are relative to (``root``: the settings file's folder for a local check; None where
the files are already named from the repository root, as the bots and the Action name them).
Out: the Report with each rule set ``off`` or matched by an ``ignore`` entry taken out and each other
rule's severity set as asked, and one line per setting that changed something in ``Report.silenced``
("1 finding silenced by .draftguard.yml:4: ..."); ``validate(settings)`` raises ``BadInput`` naming
the line and the nearest rule for a rule the settings name that does not exist.
"""

from __future__ import annotations

import os
from collections import Counter

from draftguard.check.findings import RULES, Finding, Report, Severity
from draftguard.check.rule_docs import nearest_rules
from draftguard.errors import BadInput
from draftguard.settings import Settings

_BY_NAME: dict[str, list[str]] = {}
for _rule in RULES.values():
    _BY_NAME.setdefault(_rule.name, []).append(_rule.id)


def rule_ids(name: str) -> list[str]:
    """The ids a settings entry names: an id (any case) or a rule name; [] when none."""
    if name.upper() in RULES:
        return [name.upper()]
    return list(_BY_NAME.get(name, []))


def validate(settings: Settings) -> None:
    """Raise BadInput for a rule in ``rules:`` or ``ignore:`` that no rule has, naming its line and
    the rule it most likely meant.

    Example::

        >>> from draftguard.settings import parse_settings
        >>> validate(parse_settings("rules: {DG012: off}\\n"))
        >>> validate(parse_settings("rules:\\n  value-overriden: warning\\n"))
        Traceback (most recent call last):
        ...
        draftguard.errors.BadInput: .draftguard.yml:2: `rules`: no rule `value-overriden`; did you mean `value-overridden`?
    """
    named = [(rule, "rules", settings.lines.get(f"rules.{rule}")) for rule in settings.rules]
    named += [(entry.rule, "ignore", entry.line) for entry in settings.ignore]
    for rule, where_key, line in named:
        if rule_ids(rule):
            continue
        source = settings.source or ".draftguard.yml"
        near = [n.split()[-1] if n[:2] == "DG" and " " in n else n for n in nearest_rules(rule)]
        hint = f"; did you mean `{near[0]}`?" if near else f" (rules are DG001-{max(RULES)} or their names)"
        raise BadInput(f"{source}:{line or 1}: `{where_key}`: no rule `{rule}`{hint}", file=source, line=line,
                       key=where_key)


def apply(report: Report, settings: Settings | None, root: str | None = None) -> Report:
    """Apply ``settings``' rules and exceptions to ``report`` in place (and return it)."""
    if settings is None or not (settings.rules or settings.ignore):
        return report
    kept, lines = apply_findings([f for t in report.targets for f in t.findings], settings, root)
    ids = {id(f) for f in kept}
    for target in report.targets:
        target.findings = [f for f in target.findings if id(f) in ids]
    report.silenced.extend(lines)
    return report


def apply_findings(findings: list[Finding], settings: Settings | None,
                   root: str | None = None) -> tuple[list[Finding], list[str]]:
    """The findings ``settings`` keep (severities set as ``rules:`` asks) and one line per setting that
    changed something. ``apply`` runs this over a Report; the audit over a repo's findings."""
    if settings is None or not (settings.rules or settings.ignore):
        return list(findings), []
    validate(settings)
    levels = {rule_id: level for name, level in settings.rules.items() for rule_id in rule_ids(name)}
    lines = {rule_id: settings.line_of(f"rules.{name}") for name in settings.rules for rule_id in rule_ids(name)}
    off: Counter = Counter()
    changed: Counter = Counter()
    ignored: dict[int, list[Finding]] = {}
    kept = []
    for finding in findings:
        level = levels.get(finding.rule)
        entry = _ignored_by(finding, settings, root)
        if entry is not None:
            ignored.setdefault(entry, []).append(finding)
        elif level == "off":
            off[finding.rule] += 1
        else:
            if level is not None and level != finding.severity.value:
                finding.severity = Severity(level)
                changed[finding.rule] += 1
            kept.append(finding)
    said = []
    for index, found in sorted(ignored.items()):
        entry = settings.ignore[index]
        what = ", ".join(sorted({f"{f.rule} on `{f.key}`" for f in found}))
        said.append(f"{_n(len(found))} silenced by {_at(settings, entry.line)} ({what}): {entry.reason}")
    for rule_id, n in sorted(off.items()):
        said.append(f"{_n(n)} silenced by {lines[rule_id]} ({rule_id} {RULES[rule_id].name}: off)")
    for rule_id, n in sorted(changed.items()):
        said.append(f"{_n(n)} of {rule_id} set to {levels[rule_id]} by {lines[rule_id]}")
    return kept, said


def _n(count: int) -> str:
    return f"{count} finding{'s' if count != 1 else ''}"


def _at(settings: Settings, line: int | None) -> str:
    source = settings.source or ".draftguard.yml"
    return f"{source}:{line}" if line else source


def _ignored_by(finding: Finding, settings: Settings, root: str | None) -> int | None:
    """The index of the first ``ignore`` entry that matches the finding, else None."""
    path = _relative(finding.file, root)
    for index, entry in enumerate(settings.ignore):
        if finding.rule in rule_ids(entry.rule) and entry.covers(path, finding.key):
            return index
    return None


def _relative(file: str, root: str | None) -> str:
    """A finding's file as a path from the repository root, with / between folders."""
    if root is not None and os.path.exists(file):
        file = os.path.relpath(os.path.abspath(file), root)
    file = file.replace(os.sep, "/")
    return file[2:] if file.startswith("./") else file


def selected_ids(selectors: list[str], option: str) -> set[str]:
    """The rule ids a ``--select``/``--ignore`` list names: ids (``DG005``), names
    (``sliding-layer-runs-full``) and id prefixes (``DG3``: every DG3xx; ``DG``: all), each item
    comma-separated or repeated. Raises BadInput naming the option and the nearest rule for an item
    that names none.

    Example::

        >>> sorted(selected_ids(["DG00", "value-overridden"], "--select"))[:3], len(selected_ids(["DG3"], "--select")) > 1
        (['DG001', 'DG002', 'DG003'], True)
    """
    out: set[str] = set()
    for item in (part.strip() for selector in selectors for part in selector.split(",")):
        if not item:
            continue
        ids = rule_ids(item)
        if not ids and item.upper().startswith("DG") and (item[2:].isdigit() or item[2:] == ""):
            ids = [rule_id for rule_id in RULES if rule_id.startswith(item.upper())]
        if not ids:
            near = nearest_rules(item)
            hint = f"; did you mean {near[0]}?" if near else f" (rules are DG001-{max(RULES)}, their names or id prefixes such as DG3)"
            raise BadInput(f"{option}: no rule `{item}`{hint}", key=option)
        out.update(ids)
    return out


def select(report: Report, select: list[str], ignore: list[str]) -> Report:
    """Keep only the findings of the rules ``select`` names (every rule when empty), less those
    ``ignore`` names (``check --select/--ignore``, as ruff reads them), in place; returns ``report``."""
    if not select and not ignore:
        return report
    keep = selected_ids(select, "--select") if select else set(RULES)
    keep -= selected_ids(ignore, "--ignore") if ignore else set()
    left_out = 0
    for target in report.targets:
        left_out += sum(f.rule not in keep for f in target.findings)
        target.findings = [f for f in target.findings if f.rule in keep]
    if left_out:
        asked = " and ".join(o for o, v in (("--select", select), ("--ignore", ignore)) if v)
        report.silenced.append(f"{_n(left_out)} left out by {asked}")
    return report
