"""The Hub bot opens a Hub pull request with the proven fix of main's config, only when the repo's
.draftguard.yml turns it on (off by default), and never twice. Real huggingface_hub (create_commit
with create_pr) against the fake Hub, driven by signed webhooks to the real app."""

from __future__ import annotations

import base64
import json
import re

import pytest

pytest.importorskip("starlette")
pytest.importorskip("huey")

from tests.fakes.fleet import install_routes  # noqa: E402
from tests.test_bot_hub import BOT, BROKEN_CONFIG, REPO, Bot, content_payload  # noqa: E402


def _commit_routes(h, method, segs, query, raw, answer, error, authorized) -> bool:
    """POST /api/models/{repo}/preupload/{rev} and /commit/{rev}?create_pr=1, as huggingface_hub 2.4's
    create_commit calls them: every file regular (no LFS); a commit with create_pr opens a pull request
    whose refs/pr/N holds main's files with the committed ones."""
    fake = h.fake
    if method != "POST" or len(segs) < 5 or segs[0] != "models" or segs[3] not in ("preupload", "commit"):
        return False
    if not authorized:
        error(401, "Invalid credentials in Authorization header")
        return True
    repo = f"{segs[1]}/{segs[2]}"
    if segs[3] == "preupload":
        files = json.loads(raw)["files"]
        answer(200, {"files": [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False} for f in files]})
        return True
    lines = [json.loads(line) for line in raw.splitlines() if line.strip()]
    header = next(item["value"] for item in lines if item["key"] == "header")
    added = {item["value"]["path"]: base64.b64decode(item["value"]["content"]) for item in lines if item["key"] == "file"}
    if query.get("create_pr") != ["1"]:
        error(403, "the bot only opens pull requests")
        return True
    num = 1 + max([n for (r, n) in fake.discussions if r == repo] or [0])
    sha = fake.open_pr(repo, num, {**fake._files_at(repo, "main")[1], **added}, author=fake.user,
                       title=header["summary"])
    fake.discussions[(repo, num)]["events"][0]["data"]["latest"]["raw"] = header.get("description", "")
    answer(200, {"commitUrl": f"{fake.endpoint}/{repo}/commit/{sha}", "commitOid": sha,
                 "pullRequestUrl": f"{fake.endpoint}/{repo}/discussions/{num}"})
    return True


def _fix_prs(bot):
    return [d for (r, _), d in bot.hub.discussions.items() if r == REPO and d["pr"] and d["author"] == BOT]


@pytest.fixture
def hub_bot(monkeypatch, tmp_path):
    with Bot(monkeypatch, tmp_path, settings=b"fix_pull_request: true\n") as b:
        install_routes(b.hub)
        b.hub.routes.append(_commit_routes)
        yield b


def test_a_push_to_main_with_a_fixable_config_gets_one_fix_pull_request(hub_bot):
    bot = hub_bot
    new = bot.hub.push(REPO, {"README.md": b"hi", ".draftguard.yml": b"fix_pull_request: true\n",
                              "drafter/config.json": BROKEN_CONFIG}, "main")
    assert bot.post(content_payload("refs/heads/main", new, old=bot.main)).status_code == 202
    bot.settle()
    [pr] = _fix_prs(bot)
    assert pr["title"].startswith("draftguard fix: make config.json mean what the model reads")
    body = pr["events"][0]["data"]["latest"]["raw"]
    assert '+  "use_sliding_window": true,' in body and "DG001 on <code>sliding_window</code>" in body
    fixed = bot.hub._files_at(REPO, f"refs/pr/{pr['num']}")[1]["drafter/config.json"].decode()
    # The one line a maintainer would write, in its sorted place; every other line as it was.
    lines = BROKEN_CONFIG.decode().splitlines()
    at = lines.index('  "use_cache": true,') + 1
    assert fixed.splitlines() == lines[:at] + ['  "use_sliding_window": true,'] + lines[at:]
    # The same head announced again (a retry, a replayed delivery): no second pull request.
    again = bot.hub.push(REPO, {"README.md": b"hello", ".draftguard.yml": b"fix_pull_request: true\n",
                                "drafter/config.json": BROKEN_CONFIG}, "main")
    assert bot.post(content_payload("refs/heads/main", again, old=new)).status_code == 202
    forced = bot.hub.push(REPO, {".draftguard.yml": b"fix_pull_request: true\n", "drafter/config.json": BROKEN_CONFIG},
                          "main")
    assert bot.post(content_payload("refs/heads/main", forced, old="d" * 40)).status_code == 202
    bot.settle()
    assert "fails" in bot.queue.get(f"hub:{REPO}@main:{forced}").result  # checked again, the fix found again
    assert len(_fix_prs(bot)) == 1


def test_off_by_default(monkeypatch, tmp_path):
    with Bot(monkeypatch, tmp_path) as bot:
        install_routes(bot.hub)
        bot.hub.routes.append(_commit_routes)
        new = bot.hub.push(REPO, {"README.md": b"hi", "drafter/config.json": BROKEN_CONFIG}, "main")
        assert bot.post(content_payload("refs/heads/main", new, old=bot.main)).status_code == 202
        bot.settle()
        assert _fix_prs(bot) == []
        assert not [r for r in bot.hub.requests if r.repo == "api" and r.method == "POST"]


def test_the_setting_is_a_boolean_and_other_keys_still_refuse_one():
    from draftguard.settings import BadInput, parse_settings

    assert parse_settings("fix_pull_request: true\n").fix_pull_request is True
    assert parse_settings("").fix_pull_request is False
    for text, key in [("fix_pull_request: 'yes'\n", "fix_pull_request"), ("fail_on: true\n", "fail_on")]:
        with pytest.raises(BadInput, match=f"`{key}` must be"):
            parse_settings(text)


# --- B4 of issue 32: one pull request per fix, superseded ones closed, a maintainer's "no" kept -----

SETTINGS_ON = b"fix_pull_request: true\n"


def _push_main(bot, files, old):
    new = bot.hub.push(REPO, {".draftguard.yml": SETTINGS_ON, **files}, "main")
    assert bot.post(content_payload("refs/heads/main", new, old=old)).status_code == 202
    bot.settle()
    return new


def _variant(**changes) -> bytes:
    """BROKEN_CONFIG (its fix: add use_sliding_window) with other values changed: the same fix."""
    return json.dumps(dict(json.loads(BROKEN_CONFIG), **changes), indent=2).encode()


def _close_as_maintainer(bot, num, who="alice"):
    d = bot.hub.discussions[(REPO, num)]
    d["status"] = "closed"
    d["events"].append(bot.hub._event("status-change", who, {"status": "closed"}))


def _status(bot, num):
    return bot.hub.discussions[(REPO, num)]["status"]


def test_the_same_fix_after_other_changes_opens_no_second_pull_request(hub_bot):
    # Before: the title named a digest of the whole fixed file, so any other change to the file (or
    # any push touching it) opened another pull request holding the same one-line fix.
    bot = hub_bot
    first = _push_main(bot, {"README.md": b"hi", "drafter/config.json": BROKEN_CONFIG}, bot.main)
    second = _push_main(bot, {"README.md": b"hello", "drafter/config.json": _variant(vocab_size=151936)}, first)
    _push_main(bot, {"README.md": b"hello", "drafter/config.json": _variant(vocab_size=151936, rms_norm_eps=1e-05)},
               second)
    [pr] = _fix_prs(bot)
    assert pr["status"] == "open"


def test_a_new_fix_closes_the_fix_pull_request_it_supersedes(hub_bot):
    bot = hub_bot
    first = _push_main(bot, {"drafter/config.json": BROKEN_CONFIG}, bot.main)
    [old] = _fix_prs(bot)
    # main now breaks a second config too: one fix of both files replaces the first.
    second = _push_main(bot, {"drafter/config.json": _variant(vocab_size=151936), "other/config.json": BROKEN_CONFIG},
                        first)
    prs = {pr["num"]: pr for pr in _fix_prs(bot)}
    assert len(prs) == 2
    new = max(prs)
    assert _status(bot, old["num"]) == "closed" and _status(bot, new) == "open"
    notes = [e["data"]["latest"]["raw"] for e in bot.hub.comments_on(REPO, old["num"], author=BOT)]
    assert any(f"Superseded by #{new}" in n for n in notes), notes
    fixed = bot.hub._files_at(REPO, f"refs/pr/{new}")[1]
    assert all(b'"use_sliding_window": true' in fixed[p] for p in ("drafter/config.json", "other/config.json"))
    # A maintainer fixes both by hand: the open fix pull request is closed, nothing new opened.
    fine = json.dumps(dict(json.loads(BROKEN_CONFIG), use_sliding_window=True), indent=2).encode()
    _push_main(bot, {"drafter/config.json": fine, "other/config.json": fine}, second)
    assert len(_fix_prs(bot)) == 2 and _status(bot, new) == "closed"
    assert any("needs no fix" in e["data"]["latest"]["raw"] for e in bot.hub.comments_on(REPO, new, author=BOT))


def test_a_fix_pull_request_maintainers_closed_is_never_opened_again(hub_bot):
    bot = hub_bot
    first = _push_main(bot, {"drafter/config.json": BROKEN_CONFIG}, bot.main)
    [pr] = _fix_prs(bot)
    _close_as_maintainer(bot, pr["num"])
    second = _push_main(bot, {"README.md": b"x", "drafter/config.json": _variant(vocab_size=151936)}, first)
    forced = bot.hub.push(REPO, {".draftguard.yml": SETTINGS_ON, "drafter/config.json": BROKEN_CONFIG}, "main")
    assert bot.post(content_payload("refs/heads/main", forced, old="d" * 40)).status_code == 202
    bot.settle()
    assert second and [p["num"] for p in _fix_prs(bot)] == [pr["num"]] and _status(bot, pr["num"]) == "closed"
    # A different fix is a new question: it gets its pull request.
    _push_main(bot, {"drafter/config.json": BROKEN_CONFIG, "other/config.json": BROKEN_CONFIG}, forced)
    assert len(_fix_prs(bot)) == 2


def test_the_fix_pull_request_text_escapes_what_the_file_chose(hub_bot):
    # Issue 32: paths, keys and values went into the description as they were: a folder named
    # "<img src=x onerror=alert(1)>@mona" put HTML and a mention in the bot's pull request.
    bot = hub_bot
    path = "<img src=x onerror=alert(1)>@mona [link](javascript:alert(1))/config.json"
    _push_main(bot, {path: BROKEN_CONFIG}, bot.main)
    [pr] = _fix_prs(bot)
    body = pr["events"][0]["data"]["latest"]["raw"]
    outside = re.sub(r"(`{3,})diff\n.*?\n\1", "", body, flags=re.S)  # a fenced diff renders as text
    assert "<img" not in outside and "@mona" not in outside and "](" not in outside, outside
    assert "&lt;img src=x onerror=alert(1)&gt;@&#8203;mona" in outside
    assert "```diff\n--- a/<img" in body  # the diff keeps the path exactly, inside its fence
