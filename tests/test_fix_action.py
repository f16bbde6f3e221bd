"""The Action's step summary carries the proven fixes of what fails, as a diff that applies to the
pull request's head (a real git checkout, `draftguard action` in a real process, the fake GitHub)."""

from __future__ import annotations

import re
import subprocess

import pytest

pytest.importorskip("github")

from tests.test_action import BASE_CONFIG, FIXED_CONFIG, HEAD_CONFIG, Checkout, add_pull, api, run_action  # noqa: E402,F401
from tests.test_bot import light_findings  # noqa: E402


def test_the_step_summary_shows_the_diff_that_fixes_the_head(tmp_path, api):  # noqa: F811 (the fixture)
    checkout = Checkout(tmp_path, {"README.md": "hi\n", "drafter/config.json": BASE_CONFIG})
    checkout.push({"drafter/config.json": HEAD_CONFIG})
    add_pull(api, checkout)
    run = run_action(tmp_path, checkout, api)
    assert run.code == 1, run.stderr
    assert "### draftguard fix" in run.summary
    assert "(ends DG001 on <code>sliding_window</code>, DG005 on <code>layer_types</code>)" in run.summary
    [diff] = re.findall(r"```diff\n(.*?)```", run.summary, re.S)
    assert '+  "use_sliding_window": true,' in diff.splitlines()
    # The diff applies to the head as it is, and leaves a file with no error or warning.
    subprocess.run(["git", "-C", str(checkout.dir), "apply", "-"], input=diff, text=True, check=True)
    fixed = (checkout.dir / "drafter" / "config.json").read_text()
    assert [f.rule for f in light_findings(fixed) if f.severity.value != "info"] == []


def test_a_passing_head_gets_no_fix_section(tmp_path, api):  # noqa: F811 (the fixture)
    checkout = Checkout(tmp_path, {"README.md": "hi\n", "drafter/config.json": BASE_CONFIG})
    checkout.push({"drafter/config.json": FIXED_CONFIG})
    add_pull(api, checkout)
    run = run_action(tmp_path, checkout, api)
    assert run.code == 0, run.stderr
    assert "### Light check" in run.summary and "draftguard fix" not in run.summary
