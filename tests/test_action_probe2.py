"""The second probe (issue 25) of the Action, run as the runner runs it: a real `python -m
draftguard action` process on a git checkout, talking to the fake GitHub. Each test failed before
its fix (docs/security.md, "Probes")."""

from __future__ import annotations

from pathlib import Path

from tests.test_action import BASE_CONFIG, HEAD_CONFIG, REPO, Checkout, add_pull, api, git, run_action  # noqa: F401


def workflow_commands(text: str) -> list[str]:
    """The workflow commands a runner would act on in ``text``, as it reads them: every line that
    starts with ``::``, except between ``::stop-commands::<token>`` and ``::<token>::``."""
    issued, stopped = [], None
    for line in text.splitlines():
        if stopped is not None:
            if line == f"::{stopped}::":
                stopped = None
            continue
        if line.startswith("::stop-commands::"):
            stopped = line[len("::stop-commands::"):]
        elif line.startswith("::"):
            issued.append(line)
    return issued


def test_a_folder_name_with_newlines_prints_no_workflow_command_in_acceptance_mode(tmp_path, api):
    checkout = Checkout(tmp_path, {".draftguard.yml": "target: acme/target\nmin_acceptance_length: 2.0\n"})
    evil = "d\n::add-mask::ghp_x\n::error::pwned\n::stop-commands::zz\nx"
    folder = checkout.dir / evil
    folder.mkdir()
    (folder / "config.json").write_text(HEAD_CONFIG)
    git(checkout.dir, "add", "-A")
    git(checkout.dir, "commit", "-q", "-m", "drafter")
    checkout.head = git(checkout.dir, "rev-parse", "HEAD").strip()
    add_pull(api, checkout)
    run = run_action(tmp_path, checkout, api, mode="acceptance", comment="false")
    assert "Traceback" not in run.stderr
    said = workflow_commands(run.stdout) + workflow_commands(run.stderr)
    assert said, run.stdout + run.stderr  # the run said something (an error: the target cannot be read offline)
    for line in said:
        assert not line.startswith(("::add-mask::", "::stop-commands::", "::error::pwned")), line
    assert all(line.startswith(("::error ", "::warning ", "::notice ")) for line in said), said


def test_an_unreachable_base_never_applies_the_pull_requests_own_settings(tmp_path, api):
    import shutil
    import subprocess

    origin = Checkout(tmp_path, {".draftguard.yml": "fail_on: error\n", "drafter/config.json": BASE_CONFIG})
    origin.push({".draftguard.yml": "fail_on: never\n", "drafter/config.json": HEAD_CONFIG})
    shallow = tmp_path / "shallow"
    subprocess.run(["git", "clone", "-q", "--depth", "1", "--branch", "feature", f"file://{origin.dir}", str(shallow)],
                   check=True, capture_output=True)
    shutil.rmtree(origin.dir)  # the base cannot be fetched
    clone = Checkout.__new__(Checkout)
    clone.dir, clone.base, clone.head = shallow, origin.base, origin.head
    add_pull(api, clone)
    run = run_action(tmp_path, clone, api, comment="false")
    assert "could not be fetched" in run.summary, run.stdout + run.stderr
    # B8: the pull request's `fail_on: never` passed it with 2 errors; the defaults fail it.
    assert run.code == 1 and "fail on: error" in run.summary
    assert "the pull request's own copy is never applied" in run.summary


def test_the_light_check_reads_nothing_of_the_runner_outside_the_checkout(tmp_path, api):
    import json
    import os

    from tests.test_bot import _speculators_drafter
    from tests.test_bot_probe2 import SECRET_TARGET, _leaks

    # A model folder on the runner, outside the checkout (another job's, a cache).
    secret = tmp_path / "runner-models" / "private-77B"
    secret.mkdir(parents=True)
    (secret / "config.json").write_text(json.dumps(SECRET_TARGET))
    checkout = Checkout(tmp_path, {"README.md": "hi"})
    checkout.push({"by-path/config.json": _speculators_drafter(str(secret))})
    os.symlink(secret / "config.json", checkout.dir / "linked.json")
    (checkout.dir / "by-link").mkdir()
    os.symlink(secret / "config.json", checkout.dir / "by-link" / "config.json")
    git(checkout.dir, "add", "-A")
    git(checkout.dir, "commit", "-q", "-m", "links")
    checkout.head = git(checkout.dir, "rev-parse", "HEAD").strip()
    add_pull(api, checkout)
    run = run_action(tmp_path, checkout, api, comment="false")
    assert "Traceback" not in run.stderr, run.stderr
    report = Path(run.outputs["report-json"]).read_text()
    assert _leaks(run.summary + run.stdout + report) == [], run.summary
    assert "outside the repository" in run.summary and "symlink out of the repository" in run.summary
    assert run.code in (1, 2)


def test_acceptance_mode_runs_no_test_for_a_drafter_the_backends_do_not_run(tmp_path, api):
    # The Action ran `draftguard accept` for a head its backends did not run (and the bot queued
    # nothing for it): both ask DrafterFormat.acceptance_testable. EAGLE-3 heads run now (issue 33);
    # a P-EAGLE head and an MTP model (real configs, tests/data/real-drafters) do not, and the
    # summary and the comment say why in plain words.
    data = Path(__file__).resolve().parent / "data" / "real-drafters"
    checkout = Checkout(tmp_path, {".draftguard.yml": "target: acme/target\nmin_acceptance_length: 2.0\n"})
    checkout.push({"peagle/config.json": (data / "specforge-qwen3-8b-peagle" / "config.json").read_text(),
                   "mtp/config.json": (data / "mtp-minimax-m2.7" / "config.json").read_text()})
    add_pull(api, checkout)
    run = run_action(tmp_path, checkout, api, mode="acceptance")
    assert run.code == 0 and run.outputs["verdict"] == "skipped", run.stdout + run.stderr
    assert "draftguard: " not in run.stdout  # no accept command was started
    assert "P-EAGLE heads draft in parallel" in run.summary
    assert "MTP heads are not run" in run.summary
    [comment] = api.comments_on(REPO, 7)
    assert "mtp/config.json: MTP heads are not run" in comment["body"]
