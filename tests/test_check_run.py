"""The one check entry (draftguard/check/run.py) that the CLI, the Action, the bots, the audit and fix
call: light or matrix by ``versions``, the drafter rules by the surface's own target lookup."""

from __future__ import annotations

from pathlib import Path

import pytest

from draftguard.check import resolver
from draftguard.check.drafter import load_target
from draftguard.check.run import check
from draftguard.snapshot import BadInput, Snapshot, load_snapshot

PAIR = Path(__file__).resolve().parent.parent / "examples" / "dflash-pair"
DRAFTER, TARGET = str(PAIR / "drafter"), str(PAIR / "target")
MODES = [pytest.param(None, id="light"), pytest.param("installed", id="matrix")]


def _versions(mode):
    return [resolver.transformers_version()] if mode else None


@pytest.mark.parametrize("mode", MODES)
def test_drafter_rules_off_means_the_config_rules_alone_in_both_modes(mode):
    """The bots' matrix section and the audit ask for the table alone: before, the matrix ran the
    drafter rules anyway (reading the target a drafter names), and dropped their findings."""
    on = check([DRAFTER], versions=_versions(mode), drafter_target=TARGET)
    off = check([DRAFTER], versions=_versions(mode), drafter_target=TARGET, drafter_rules=False)
    assert {"DG100", "DG117"} <= {f.rule for f in on.findings}
    assert not any(f.rule.startswith("DG1") for f in off.findings) and off.errors == []
    assert (off.matrix is None) == (mode is None)


@pytest.mark.parametrize("mode", MODES)
def test_a_target_lookup_is_the_only_way_a_drafters_target_is_read(mode):
    asked = []

    def lookup(snapshot, fmt):
        asked.append((snapshot.path_of("config.json"), fmt.family))
        return load_target(TARGET, "the test's lookup")

    snapshot = load_snapshot(DRAFTER)
    report = check([snapshot], versions=_versions(mode), target_lookup=lookup)
    assert asked == [(snapshot.path_of("config.json"), "dflash")]
    assert {"DG100", "DG117"} <= {f.rule for f in report.findings}
    # No lookup answer: the rules that need the target stay quiet, and nothing else reads one.
    quiet = check([snapshot], versions=_versions(mode), target_lookup=lambda s, f: None)
    assert not {"DG100", "DG117"} & {f.rule for f in quiet.findings}


def test_a_failed_lookup_is_an_input_error_or_the_surfaces_note():
    def gone(snapshot, fmt):
        raise BadInput("acme/gone: no such repo", file="acme/gone")

    report = check([DRAFTER], target_lookup=gone)
    assert report.targets == [] and [e.message for e in report.errors] == ["acme/gone: no such repo"]
    told = []
    report = check([DRAFTER], target_lookup=gone, drafter_failed=lambda s, exc: told.append(str(exc)))
    assert told == ["acme/gone: no such repo"] and report.errors == [] and len(report.targets) == 1


@pytest.mark.parametrize("mode", MODES)
def test_a_snapshot_read_over_an_api_is_shown_by_its_repo_path(mode):
    data = (Path(__file__).resolve().parent.parent / "examples" / "qwen3-swa-drafter" / "config.json").read_bytes()
    snapshot = Snapshot(source="acme/m@abc", revision="abc", files={"config.json": data},
                        display={"config.json": "drafter/config.json"})
    report = check([snapshot, "no/such/folder/here"], versions=_versions(mode))
    assert {f.file for f in report.findings} == {"drafter/config.json"}
    assert [e.source for e in report.errors] == ["no/such/folder/here"]
