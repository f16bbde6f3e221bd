"""docs/rules.md documents every rule the code can emit, under its id, name and severity."""

import re
from pathlib import Path

import pytest

from draftguard.check.findings import RULES, Severity

DOC = (Path(__file__).resolve().parents[1] / "docs" / "rules.md").read_text()


def test_every_rule_is_documented_with_its_name_and_severity():
    headings = dict(re.findall(r"^### (DG\d{3}) (.+)$", DOC, flags=re.M))
    for rule in RULES.values():
        assert rule.id in headings, f"{rule.id} missing from docs/rules.md"
        assert headings[rule.id] == f"{rule.name} ({rule.severity.value})"


def test_no_documented_rule_is_unknown_to_the_code():
    for rule_id in re.findall(r"^### (DG\d{3})", DOC, flags=re.M):
        assert rule_id in RULES


# Every "Real example: `<corpus folder>`, key `<key>`." in docs/rules.md names a published config of
# tests/data/real-configs that gets that rule on that key today; "Real example of no warning" one that
# does not. So the documented classifications cannot drift from what the code does.
CORPUS = Path(__file__).resolve().parents[1] / "tests" / "data" / "real-configs"
_SECTIONS = re.split(r"^### ", DOC, flags=re.M)
EXAMPLES = [
    (section.split()[0], negative == " of no warning", folder, key)
    for section in _SECTIONS if re.match(r"DG\d{3} ", section)
    for negative, folder, key in re.findall(r"Real example( of no warning)?: `([^`]+)`, key `([^`]+)`", section)
]


def test_the_new_classifications_each_cite_a_real_example():
    cited = {rule for rule, _, _, _ in EXAMPLES}
    assert {"DG003", "DG007", "DG008", "DG009", "DG010"} <= cited
    assert len(EXAMPLES) >= 15


@pytest.mark.parametrize("rule, negative, folder, key", EXAMPLES, ids=[f"{r}-{f}-{k}" for r, _, f, k in EXAMPLES])
def test_documented_real_example_gets_that_rule_on_that_key(rule, negative, folder, key):
    from draftguard.check.light import check_snapshot
    from draftguard.check.repo import check_repo
    from draftguard.snapshot import load_snapshot

    assert (CORPUS / folder / "config.json").is_file(), f"docs/rules.md cites {folder}, which is not in the corpus"
    snapshot = load_snapshot(str(CORPUS / folder))
    result = check_snapshot(snapshot)
    found = {(f.rule, f.key) for f in result.findings + check_repo(snapshot, result.values)}
    if negative:
        assert (rule, key) not in found
    else:
        assert (rule, key) in found, f"{folder}: {sorted(found)}"


def test_every_drafter_error_has_decided_whether_it_blocks_the_acceptance_test():
    # Issue 25: rules carry their facets, so a new rule is one record; `draftguard accept` refuses
    # exactly the drafter errors that say so, and a new one cannot be left undecided.
    from draftguard.runner.cli import FATAL_RULES

    drafter_errors = [r for r in RULES.values() if r.id.startswith("DG1") and r.severity == Severity.ERROR]
    assert [r.id for r in drafter_errors if r.blocks_acceptance is None] == []
    assert FATAL_RULES == {r.id for r in drafter_errors if r.blocks_acceptance}
    assert {"DG101", "DG106", "DG121"} <= FATAL_RULES and "DG130" not in FATAL_RULES
