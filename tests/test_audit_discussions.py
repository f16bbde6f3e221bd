"""``draftguard audit --open-discussions``: a dry run by default; with ``post``, one marked discussion
per failing repo, found again and edited on later runs (never a second one), closed when the repo is
clean, reopened when it breaks again. Real huggingface_hub against the fake Hub's discussion API."""

from __future__ import annotations

from draftguard.audit.discussions import MARKER, TITLE
from tests.audit_helpers import REPO_ROOT, run_audit_process
from tests.fakes.fleet import build_fleet
from tests.fakes.hub import FakeHub

TOKEN = "hf_audit_bot_token"


def _audit_discussions(hub: FakeHub) -> dict[str, list[dict]]:
    found: dict[str, list[dict]] = {}
    for (repo, _), d in hub.discussions.items():
        if d["title"] == TITLE:
            found.setdefault(repo, []).append(d)
    return found


def test_dry_run_says_what_it_would_post_and_posts_nothing(tmp_path):
    with FakeHub() as hub:
        fleet = build_fleet(hub, copies=1, corpus=False)
        repo_list = fleet.list_file(tmp_path / "repos.txt")
        run = run_audit_process(hub, tmp_path, str(repo_list), "--no-progress", "--open-discussions")
        assert run.rc == 1
        assert "faults/qwen3-window-drafter: would open discussion" in run.stdout
        assert MARKER in run.stdout and "DG005" in run.stdout
        assert "broken/gated-llama" not in run.stdout  # not its owner's fault
        assert "broken/no-config" not in run.stdout  # not a model config repo: nothing to tell
        assert hub.discussions == {}
        refused = run_audit_process(hub, tmp_path, str(repo_list), "--open-discussions", "post")
        assert refused.rc == 2 and "needs HF_TOKEN" in refused.stderr


def test_one_discussion_per_failing_repo_across_runs_edited_closed_and_reopened(tmp_path):
    with FakeHub() as hub:
        hub.token = TOKEN
        fleet = build_fleet(hub, copies=1, corpus=False)
        repo_list = fleet.list_file(tmp_path / "repos.txt")

        def audit(*extra: str):
            return run_audit_process(hub, tmp_path, str(repo_list), "--no-progress", "--open-discussions", "post",
                                     *extra, HF_TOKEN=TOKEN)

        first = audit()
        records = first.records
        failing = {r for r, rec in records.items() if rec["status"] == "failing"}
        assert set(fleet.faults) <= failing
        opened = _audit_discussions(hub)
        assert set(opened) == failing
        assert all(len(ds) == 1 for ds in opened.values())
        body = opened["faults/shifted-layer-drafter"][0]["events"][0]["data"]["latest"]["raw"]
        assert body.startswith(MARKER) and "DG102" in body

        second = audit("--full")  # checked again from scratch: same findings, nothing to write
        assert second.rc == 1
        again = _audit_discussions(hub)
        assert {r: len(ds) for r, ds in again.items()} == {r: 1 for r in failing}
        assert all(d["events"][0]["data"].get("numEdits", 0) == 0 for ds in again.values() for d in ds)
        assert "would" not in second.stdout and "open discussion" not in second.stdout

        # The owner fixes one repo: its discussion is closed, with a comment saying so.
        fixed = "faults/qwen3-window-drafter"
        hub.push(fixed, {"config.json": (REPO_ROOT / "tests/data/healthy/qwen3-8b.json").read_bytes()})
        third = audit()
        assert f"{fixed}: close discussion" in third.stdout
        [discussion] = _audit_discussions(hub)[fixed]
        assert discussion["status"] == "closed"
        assert "clean now" in discussion["events"][-2]["data"]["latest"]["raw"]

        # It breaks again: the same discussion is reopened and its text edited, never a second one.
        hub.push(fixed, {"config.json": (REPO_ROOT / "examples/qwen3-swa-drafter/config.json").read_bytes()})
        fourth = audit()
        assert f"{fixed}: reopen discussion" in fourth.stdout
        [discussion] = _audit_discussions(hub)[fixed]
        assert discussion["status"] == "open"
        assert discussion["events"][0]["data"]["numEdits"] == 1  # new commit sha in the text
        assert all(len(ds) == 1 for ds in _audit_discussions(hub).values())


def test_the_discussion_carries_the_proven_fix_as_a_diff(tmp_path):
    with FakeHub() as hub:
        fleet = build_fleet(hub, copies=1, corpus=False)
        repo_list = fleet.list_file(tmp_path / "repos.txt")
        run = run_audit_process(hub, tmp_path, str(repo_list), "--no-progress", "--open-discussions")
        record = run.records["faults/qwen3-window-drafter"]
        assert [line for line in record["fix"].splitlines() if line[:1] in "+-" and line[:3] not in ("+++", "---")] \
            == ['+  "use_sliding_window": true,']
        window = run.stdout[run.stdout.index("faults/qwen3-window-drafter: would open discussion"):]
        assert "```diff\n--- a/" in window and '+  "use_sliding_window": true,' in window
        # A repo whose errors have no safe fix (the shifted ids need the target's files) shows no diff.
        assert run.records["faults/shifted-layer-drafter"]["fix"] is None


def test_a_discussion_that_only_quotes_the_marker_is_never_taken_for_the_audits(tmp_path):
    """The audit finds its discussion again by the marker its first comment starts with
    (draftguard.markers.AUDIT). A note by the same account, under the same title, that quotes the
    marker is someone's text: before, any first comment containing it was taken, edited over and
    later closed."""
    with FakeHub() as hub:
        hub.token = TOKEN
        fleet = build_fleet(hub, copies=1, corpus=False)
        repo = "faults/qwen3-window-drafter"
        note = f"Why the audit's discussions start with `{MARKER}`: see the docs."
        hub.discussions[(repo, 1)] = {
            "num": 1, "title": TITLE, "author": hub.user, "status": "open", "base": "main", "pr": False,
            "created": "2026-11-30T05:00:00.000Z",
            "events": [hub._event("comment", hub.user, {"edited": False, "hidden": False, "numEdits": 0,
                                                        "latest": {"raw": note, "html": ""}})]}
        repo_list = tmp_path / "repos.txt"
        repo_list.write_text(repo + "\n")
        run = run_audit_process(hub, tmp_path, str(repo_list), "--no-progress", "--open-discussions", "post",
                                HF_TOKEN=TOKEN)
        assert run.rc == 1, run.stderr
        assert f"{repo}: open discussion" in run.stdout
        [hand, audit] = sorted(_audit_discussions(hub)[repo], key=lambda d: d["num"])
        assert hand["events"][0]["data"]["latest"]["raw"] == note and hand["events"][0]["data"]["numEdits"] == 0
        assert audit["events"][0]["data"]["latest"]["raw"].startswith(MARKER)
