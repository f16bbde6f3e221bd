"""The GitHub bot offers each proven fix as a suggested change: a pull-request review comment with a
```suggestion block on the config.json line, on the fake GitHub over HTTP (PyGithub through
base_url), driven by signed webhooks to the real app, as tests/test_bot.py drives it."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("starlette")
pytest.importorskip("huey")
pytest.importorskip("github")

from tests.fakes.github import pr_payload  # noqa: E402
from tests.test_bot import BASE, HEAD, HEAD2, REPO, Bot  # noqa: E402

EXAMPLE = open("examples/qwen3-swa-drafter/config.json", encoding="utf-8").read()
NEW = "e" * 40  # a head that adds the incident's drafter as a new file


@pytest.fixture
def bot(tmp_path):
    with Bot(tmp_path) as b:
        b.api.set_files(REPO, NEW, {"README.md": "hi", "drafter/config.json": b.api.repos[REPO].commits[BASE]["drafter/config.json"],
                                    "swa/config.json": EXAMPLE})
        b.api.add_pull(REPO, 8, head=NEW, base=BASE, author="alice")
        yield b


def _suggestions(bot, number):
    return [c for c in bot.api.review_comments_on(REPO, number) if "```suggestion" in c["body"]]


def test_the_incident_fix_is_a_one_click_suggestion_on_the_right_line(bot):
    assert bot.post("pull_request", pr_payload(REPO, 8, NEW, BASE)).status_code == 202
    bot.settle()
    [comment] = _suggestions(bot, 8)
    lines = EXAMPLE.splitlines()
    use_cache = lines.index('  "use_cache": true,') + 1
    assert comment["path"] == "swa/config.json" and comment["side"] == "RIGHT"
    assert comment["line"] == use_cache and comment["start_line"] is None
    block = comment["body"].split("```suggestion\n", 1)[1].split("\n```", 1)[0]
    assert block == '  "use_cache": true,\n  "use_sliding_window": true,'
    assert "DG001 on <code>sliding_window</code>" in comment["body"] and "DG005 on <code>layer_types</code>" in comment["body"]
    [review] = [r for r in bot.api.reviews if r["number"] == 8]
    assert review["commit_id"] == NEW and review["event"] == "COMMENT"
    # Committing the suggestion gives a file the check passes.
    fixed = "\n".join(lines[:use_cache - 1] + block.split("\n") + lines[use_cache:])
    from tests.test_bot import light_findings

    assert [f.rule for f in light_findings(fixed) if f.severity.value != "info"] == []
    # The unchanged config beside it is not the pull request's: no suggestion there.
    assert {c["path"] for c in bot.api.review_comments_on(REPO, 8)} == {"swa/config.json"}


def test_a_suggestion_is_never_posted_twice_across_pushes_and_replays(bot):
    bot.post("pull_request", pr_payload(REPO, 8, NEW, BASE))
    bot.settle()
    bot.post("pull_request", pr_payload(REPO, 8, NEW, BASE, action="synchronize"))
    bot.settle()
    bot.post("pull_request", pr_payload(REPO, 8, NEW, BASE, action="reopened"))
    bot.settle()
    assert len(_suggestions(bot, 8)) == 1
    assert len([r for r in bot.api.reviews if r["number"] == 8]) == 1


def test_a_fix_outside_the_changed_lines_goes_into_the_review_body_as_a_diff(bot):
    # PR 7's head drops `use_sliding_window` at the end of the file; the fix goes beside
    # `sliding_window`, which GitHub will not take a review comment on: the diff is in the body.
    bot.post("pull_request", pr_payload(REPO, 7, HEAD, BASE))
    bot.settle()
    assert _suggestions(bot, 7) == []
    [review] = [r for r in bot.api.reviews if r["number"] == 7]
    assert '```diff\n--- a/drafter/config.json\n+++ b/drafter/config.json' in review["body"]
    assert '+  "use_sliding_window": true,' in review["body"]
    bot.post("pull_request", pr_payload(REPO, 7, HEAD, BASE, action="synchronize"))
    bot.settle()
    assert len([r for r in bot.api.reviews if r["number"] == 7]) == 1


def test_a_clean_head_gets_no_review(bot):
    bot.api.add_pull(REPO, 9, head=HEAD2, base=BASE, author="alice")
    bot.post("pull_request", pr_payload(REPO, 9, HEAD2, BASE))
    bot.settle()
    assert [r for r in bot.api.reviews if r["number"] == 9] == []
    assert json.loads(bot.api.repos[REPO].commits[HEAD2]["drafter/config.json"])["use_sliding_window"] is True


def test_a_token_that_may_not_review_leaves_the_sticky_comment_and_the_check(bot, caplog):
    bot.api.fail("POST", r"/pulls/8/reviews$", "forbidden", times=5)
    bot.post("pull_request", pr_payload(REPO, 8, NEW, BASE))
    bot.settle()
    assert bot.api.review_comments_on(REPO, 8) == []
    assert "sliding_window" in bot.sticky(8)["body"]
    [job] = [j for j in bot.queue.jobs() if j.number == 8]
    assert job.state == "done" and job.result.startswith("done:")


def _commit_suggestion(text: str, comment: dict) -> str:
    """The file after a maintainer commits ``comment``'s suggestion, as GitHub applies it: its lines
    are the text split at ``\\n`` (and nothing else), lines start_line..line replaced by the block."""
    block = comment["body"].split("```suggestion\n", 1)[1].split("\n```", 1)[0]
    lines = text.split("\n")
    start = comment["start_line"] or comment["line"]
    return "\n".join(lines[:start - 1] + block.split("\n") + lines[comment["line"]:])


@pytest.mark.parametrize("sep", ["\u2028", "\u2029", "\u0085"])
def test_a_line_separator_inside_a_json_string_does_not_shift_the_suggestion(tmp_path, sep):
    # B1 of issue 32: U+2028 inside a string is valid JSON (json.dumps(ensure_ascii=False) writes it
    # raw), one line for GitHub (only \n ends a line), two for str.splitlines(). The suggestion went
    # one line low: committing it replaced `vocab_size` with `use_cache`, and the file lost it. (\x0b,
    # \x0c and \x1c-\x1e split lines for splitlines() too, but JSON allows them raw nowhere.)
    text = EXAMPLE.replace('  "model_type": "qwen3",\n',
                           '  "model_type": "qwen3",\n  "_name_or_path": "org/drafter' + sep + 'v2",\n')
    assert json.loads(text)["_name_or_path"] == f"org/drafter{sep}v2"
    with Bot(tmp_path) as b:
        b.api.set_files(REPO, NEW, {"README.md": "hi", "swa/config.json": text})
        b.api.add_pull(REPO, 8, head=NEW, base=BASE, author="alice")
        b.post("pull_request", pr_payload(REPO, 8, NEW, BASE))
        b.settle()
        [comment] = _suggestions(b, 8)
    assert comment["line"] == text.split("\n").index('  "use_cache": true,') + 1
    fixed = json.loads(_commit_suggestion(text, comment))
    assert fixed["vocab_size"] == 248320 and fixed["use_sliding_window"] is True
    assert fixed["_name_or_path"] == f"org/drafter{sep}v2"
