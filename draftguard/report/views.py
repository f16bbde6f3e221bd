"""Helpers shared by every view of a Report, so a finding reads the same everywhere.

In: ``Finding`` objects (and a Report's counts).
Out: display items (``display_items``: findings, with benign DG007/DG010 ones folded into one
``FindingGroup``), findings with each symptom after its cause (``causes_first``), whether a rule
compares a config value with what the model code reads (``is_config_value_rule``), a finding's
location and change as text, and the summary line.
"""

from __future__ import annotations

from dataclasses import dataclass

from draftguard.check.findings import RULES, Finding, Severity, show

# Findings that say "nothing is lost": text and markdown show them as one line per config and rule,
# so a clean modern config reads clean. The json view keeps every finding.
GROUPED_RULES = tuple(r.id for r in RULES.values() if r.group_text)
_GROUP_TEXT = {r.id: r.group_text for r in RULES.values() if r.group_text}


@dataclass
class FindingGroup:
    """Several benign findings of one rule in one file, shown as one line."""

    rule: str
    file: str
    findings: list[Finding]

    @property
    def severity(self) -> Severity:
        return self.findings[0].severity

    @property
    def keys(self) -> list[str]:
        return [f.key for f in self.findings]

    @property
    def line(self) -> int | None:
        lines = [f.line for f in self.findings if f.line]
        return min(lines) if lines else None

    @property
    def message(self) -> str:
        text = _GROUP_TEXT.get(self.rule, "{n} findings: " + RULES[self.rule].summary.rstrip("."))
        return text.format(n=len(self.findings)) + " (`--format json` lists each)."


def display_items(findings: list[Finding]) -> list[Finding | FindingGroup]:
    """Findings in display order, with the benign ones of each file and rule folded into one group
    where there are two or more. A group takes the place of its first member.

    Example::

        >>> f = lambda key: Finding("DG007", Severity.INFO, key, 1, 1, "config.json", None, "")
        >>> [item.keys for item in display_items([f("a"), f("b")])]
        [['a', 'b']]
    """
    groups: dict[tuple[str, str], list[Finding]] = {}
    for f in findings:
        if f.rule in GROUPED_RULES:
            groups.setdefault((f.file, f.rule), []).append(f)
    out: list[Finding | FindingGroup] = []
    placed: set[tuple[str, str]] = set()
    for f in findings:
        ident = (f.file, f.rule)
        if ident in groups and len(groups[ident]) > 1:
            if ident not in placed:
                placed.add(ident)
                out.append(FindingGroup(f.rule, f.file, groups[ident]))
        else:
            out.append(f)
    return out


# A symptom whose message sends the reader to another finding ("see the `sliding_window` finding"):
# the rule, and the key (beside its own, in the same nested config) of the finding it follows from.
_CAUSE_KEY = {"DG005": "sliding_window"}


def causes_first(findings: list[Finding]) -> list[Finding]:
    """The findings in the same order, except that a symptom comes right after the finding on its
    cause's key in the same file, so the reference it makes has already been read.

    Example::

        >>> f = lambda rule, key: Finding(rule, Severity.ERROR, key, 1, 1, "config.json", None, "")
        >>> [x.rule for x in causes_first([f("DG005", "layer_types"), f("DG001", "sliding_window")])]
        ['DG001', 'DG005']
    """
    out = list(findings)
    for symptom in [f for f in findings if f.rule in _CAUSE_KEY]:
        prefix = symptom.key.rpartition(".")[0]
        cause_key = (prefix + "." if prefix else "") + _CAUSE_KEY[symptom.rule]
        causes = [i for i, f in enumerate(out) if f.file == symptom.file and f.key == cause_key and f is not symptom]
        if causes and causes[-1] > out.index(symptom):
            out.remove(symptom)
            out.insert(causes[-1], symptom)  # the cause moved up by one: this lands right after it
    return out


def is_config_value_rule(rule: str) -> bool:
    """Whether a rule compares a config.json value with what the model code reads (DG001-DG099),
    rather than a drafter with its target or its weights (DG100 and up).

    Example::

        >>> is_config_value_rule("DG001"), is_config_value_rule("DG124")
        (True, False)
    """
    return rule.startswith("DG0")


def location(finding: Finding) -> str:
    return f"{finding.file}:{finding.line}" if finding.line else finding.file


def change(finding: Finding) -> str:
    return f"{show(finding.raw)} -> {show(finding.resolved)}"


def summary_line(counts: dict[str, int], targets: int, errors: int) -> str:
    parts = [f"{counts['error']} error(s)", f"{counts['warning']} warning(s)", f"{counts['info']} info"]
    text = ", ".join(parts) + f" in {targets} config(s)"
    if errors:
        text += f"; {errors} target(s) could not be checked"
    return text
