"""SARIF 2.1.0, as GitHub code scanning reads it (``draftguard check --format sarif``).

In: a ``Report`` and the folder the files' paths are made relative to (the repository root).
Out: ``render_sarif`` -> the SARIF log as JSON text: one run whose ``tool.driver.rules`` holds every
rule (id, name, short and full description, help as text and markdown from docs/rules.md, a
``helpUri`` to its section, the default level) and whose ``results`` hold one result per finding at
or above the level asked (``warning`` by default; ``info`` adds the notes) (rule, level, message, the file relative to the root and the key's line, a fingerprint that survives
line moves); a file that could not be checked is an error notification of the invocation.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any
from urllib.parse import quote

from draftguard import HOME, __version__
from draftguard.check.findings import RULES, Finding, Report, Rule, Severity
from draftguard.check.rule_docs import anchor, rule_sections

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
# Where a rule's documentation is read on the web: the home's docs on its default branch (a release tag
# would name a tag before the release workflow has made it).
DOCS_URL = f"{HOME}/blob/main/docs/rules.md"
_LEVEL = {"error": "error", "warning": "warning", "info": "note"}


def _rule(rule: Rule) -> dict[str, Any]:
    section = rule_sections().get(rule.id, rule.summary)
    body = section.split("\n", 1)[1].strip() if section.startswith("###") else section
    return {
        "id": rule.id,
        "name": rule.name,
        "shortDescription": {"text": f"{rule.id} {rule.name}"},
        "fullDescription": {"text": rule.summary},
        "help": {"text": body, "markdown": body},
        "helpUri": f"{DOCS_URL}#{anchor(rule)}",
        "defaultConfiguration": {"level": _LEVEL[rule.severity.value]},
        "properties": {"tags": ["model-config", rule.id[:3] + "xx"]},
    }


def relative_uri(path: str, root: str) -> str:
    """A file's URI relative to the root (``/`` between folders, escaped), as code scanning matches
    it to the repository's files.

    Example::

        >>> relative_uri("examples/a b/config.json", "/nowhere")
        'examples/a%20b/config.json'
    """
    if os.path.exists(path):
        path = os.path.relpath(os.path.abspath(path), os.path.abspath(root))
    path = path.replace(os.sep, "/")
    return quote(path[2:] if path.startswith("./") else path, safe="/@")


def _location(file: str, line: int | None, root: str) -> dict[str, Any]:
    return {"physicalLocation": {"artifactLocation": {"uri": relative_uri(file, root), "uriBaseId": "%SRCROOT%"},
                                 "region": {"startLine": line or 1}}}


def _result(finding: Finding, index: dict[str, int], root: str) -> dict[str, Any]:
    uri = relative_uri(finding.file, root)
    # Stable across line moves and message rewording: the rule, the file and the key.
    fingerprint = hashlib.sha256(f"{finding.rule}|{uri}|{finding.key}".encode()).hexdigest()[:32]
    result: dict[str, Any] = {
        "ruleId": finding.rule,
        "level": _LEVEL[finding.severity.value],
        "message": {"text": f"`{finding.key}`: {finding.message}" if finding.key else finding.message},
        "locations": [_location(finding.file, finding.line, root)],
        "partialFingerprints": {"draftguardFinding/v1": fingerprint},
    }
    if finding.rule in index:
        result["ruleIndex"] = index[finding.rule]
    return result


SARIF_LEVELS = ("error", "warning", "info")  # --sarif-level: the least severe finding a log carries


def sarif_log(report: Report, root: str = ".", level: str = "warning") -> dict[str, Any]:
    """The SARIF log of a report, as a dict: the findings at or above ``level`` (``warning`` by
    default: info findings are notes no one acts on in code scanning, carried only when asked)."""
    floor = Severity(level).rank
    rules = list(RULES.values())
    index = {rule.id: i for i, rule in enumerate(rules)}
    notifications = [
        {"level": "error", "message": {"text": e.message},
         "locations": [_location(e.file or e.source, e.line, root)]}
        for e in report.errors
    ]
    run: dict[str, Any] = {
        "tool": {"driver": {
            "name": "draftguard", "version": __version__, "semanticVersion": __version__,
            "informationUri": HOME,
            "rules": [_rule(rule) for rule in rules],
        }},
        "originalUriBaseIds": {"%SRCROOT%": {"description": {"text": "The repository root."}}},
        "invocations": [{"executionSuccessful": not report.errors, "toolExecutionNotifications": notifications}],
        "results": [_result(f, index, root) for f in report.findings if f.severity.rank >= floor],
        "properties": {"transformersVersion": report.transformers_version, "silenced": list(report.silenced)},
    }
    return {"$schema": SARIF_SCHEMA, "version": "2.1.0", "runs": [run]}


def render_sarif(report: Report, root: str = ".", level: str = "warning") -> str:
    """``sarif_log`` as indented JSON text."""
    return json.dumps(sarif_log(report, root, level), indent=2) + "\n"
