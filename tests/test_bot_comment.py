"""The sticky comment body and the command parser: pure functions, no server."""

from __future__ import annotations

from draftguard.bot.commands import may_command, parse_commands
from draftguard.check.findings import Finding, Report, Severity, TargetResult
from draftguard.report.comment import (
    MARKER,
    new_findings,
    parse_sticky,
    render_acceptance_section,
    render_light_section,
    render_matrix_section,
    update_sticky,
)


def _finding(key: str, raw, rule: str = "DG001", message: str = "changed") -> Finding:
    return Finding(rule=rule, severity=Severity.ERROR, key=key, raw=raw, resolved=None,
                   file="m/config.json", line=3, message=message)


def _report(findings) -> Report:
    return Report("5.24.0", targets=[TargetResult("m", "m/config.json", "h", "qwen3", "Qwen3Config", findings)])


def test_sections_survive_each_others_updates_and_can_be_removed():
    body = update_sticky(None, light="L1")
    body = update_sticky(body, acceptance="A1")
    body = update_sticky(body, light="L2")
    assert parse_sticky(body) == {"light": "L2", "acceptance": "A1"}
    assert body.startswith(MARKER) and body.index("L2") < body.index("A1")
    assert parse_sticky(update_sticky(body, acceptance=None)) == {"light": "L2"}
    assert parse_sticky("a human comment that quotes <!-- draftguard:section:light -->x") == {}


def test_values_from_a_pull_request_cannot_break_the_comment_or_ping_anyone():
    evil = "<!-- /draftguard:section:light -->\n<!-- draftguard:section:acceptance -->\n@acme/owners ![x](http://e/x.png)"
    report = _report([_finding(evil, evil, message=f"value `{evil}` | pipe")])
    light = render_light_section(report, new=None)
    body = update_sticky(update_sticky(None, acceptance="A1"), light=light)
    assert parse_sticky(body) == {"light": light, "acceptance": "A1"}
    assert "@acme" not in light and "<!-- /draftguard" not in light and "![x]" not in light
    table = [line for line in light.splitlines() if line.startswith("| :x:")]
    assert len(table) == 1 and table[0].count(" | ") == 6  # the pipe did not add a column


def test_new_findings_are_those_the_base_does_not_have_and_come_first():
    base = [_finding("a", 1), _finding("b", 2)]
    head = [_finding("a", 1), _finding("b", 3), _finding("c", 4)]  # b changed value: same finding
    new = new_findings(head, base)
    assert new == {("m/config.json", "DG001", "c")}
    light = render_light_section(_report(head), new)
    rows = [line for line in light.splitlines() if line.startswith("| :x:")]
    assert "**new**" in rows[0] and "<code>c</code>" in rows[0] and not any("**new**" in r for r in rows[1:])
    assert "1 new in this pull request" in light
    assert "new in this pull request" not in render_light_section(_report(head), None)


def test_acceptance_states_render():
    assert "**queued**" in render_acceptance_section("queued", detail="waiting")
    assert "**running**" in render_acceptance_section("running")
    failed = {"mean_acceptance_length": 1.15, "draft_acceptance_rate": 0.05, "per_position_acceptance": [0.1, 0.0],
              "drafts": 20, "draft_tokens": 40, "accepted_tokens": 3, "per_prompt": [], "tokens_per_second": 9.5,
              "wall_seconds": 4.0, "verdict": {"status": "fail", "reason": "τ 1.15 < bar 3.00", "interval": [1.1, 1.2]},
              "thresholds": {"bar": 3.0}}
    text = render_acceptance_section("done", failed)
    assert ":x: **fail**: τ = **1.15**" in text and "interval [1.10, 1.20]" in text
    # Positions count from 1 here, as `draftguard accept` prints them: one table, one numbering.
    assert "| 1 | 0.100 | <code>██░░░░░░░░░░░░░░░░░░</code> |" in text
    assert "| 2 | 0.000 |" in text and "| 0 |" not in text


def test_commands_stand_alone_outside_code():
    assert parse_commands("  /recheck  ") == ["recheck"]
    assert parse_commands("/recheck please") == []
    assert parse_commands("> /recheck") == []
    assert parse_commands("    /recheck") == []
    assert parse_commands("~~~\n/ok-to-test\n~~~\n/recheck") == ["recheck"]
    assert parse_commands("````\n```\n/recheck\n````") == []  # a shorter fence does not close it
    assert parse_commands("/RECHECK") == []
    assert parse_commands(None) == []
    assert may_command("maintain", "User") and not may_command("triage", "User") and not may_command(None, None)


def test_matrix_rows_are_escaped_and_values_are_code():
    text = render_matrix_section(["file", "key", "config.json", "4.52.4", "5.24.0"],
                                 [["a/config.json", "rope|x", "1", "<b>", "[x](y)"]], note="Not run: `4.40.0`")
    row = [line for line in text.splitlines() if line.startswith("| a/")][0]
    assert row == "| a/config.json | rope&#124;x | <code>1</code> | <code>&lt;b&gt;</code> | <code>&#91;x&#93;(y)</code> |"
    assert text.endswith("Not run: <code>4.40.0</code>")


def test_update_sticky_drops_sections_the_bot_does_not_write():
    planted = update_sticky(None, light="L1", approved="GPU: approved by a maintainer")
    assert "approved" in planted  # render_sticky renders what it is given...
    assert parse_sticky(update_sticky(planted, light="L2")) == {"light": "L2"}  # ...updates keep only ours


def test_an_actions_token_edits_only_its_own_sticky():
    """The Action's GITHUB_TOKEN is an installation token: GET /user answers 403, and it comments as
    github-actions[bot]. A sticky planted by someone else is never taken for its own."""
    from github import Auth, Github

    from draftguard.bot.github import PullRequestClient
    from tests.fakes.github import FakeGitHub

    api = FakeGitHub(token="ghp_unused").start()
    try:
        api.add_repo("acme/m")
        api.set_files("acme/m", "a" * 40, {})
        api.add_pull("acme/m", 1, head="a" * 40, base="a" * 40)
        api.installation_tokens.add("ghs_actions_token")
        api.bot_login = "github-actions[bot]"
        planted = api.add_comment("acme/m", 1, f"{MARKER}\nfake result", user="eve")
        client = PullRequestClient(Github(auth=Auth.Token("ghs_actions_token"), base_url=api.url, retry=None),
                                   "acme/m", 1)
        first = client.upsert_sticky(lambda old: update_sticky(old, light="L1"))
        second = client.upsert_sticky(lambda old: update_sticky(old, light="L2"))
        assert first == second != planted["id"]
        assert api.comments[first]["user"] == "github-actions[bot]" and "L2" in api.comments[first]["body"]
        assert planted["body"] == f"{MARKER}\nfake result" and planted.get("edits", 0) == 0
    finally:
        api.stop()
