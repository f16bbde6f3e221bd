"""docs/rules.md documents every rule the code can emit, under its id, name and severity."""

import re
from pathlib import Path

from draftguard.check.findings import RULES

DOC = (Path(__file__).resolve().parents[1] / "docs" / "rules.md").read_text()


def test_every_rule_is_documented_with_its_name_and_severity():
    headings = dict(re.findall(r"^### (DG\d{3}) (.+)$", DOC, flags=re.M))
    for rule in RULES.values():
        assert rule.id in headings, f"{rule.id} missing from docs/rules.md"
        assert headings[rule.id] == f"{rule.name} ({rule.severity.value})"


def test_no_documented_rule_is_unknown_to_the_code():
    for rule_id in re.findall(r"^### (DG\d{3})", DOC, flags=re.M):
        assert rule_id in RULES
