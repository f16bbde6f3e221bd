"""The Hub bot opens a Hub pull request with the proven fix of main's config, only when the repo's
.draftguard.yml turns it on (off by default), and never twice. Real huggingface_hub (create_commit
with create_pr) against the fake Hub, driven by signed webhooks to the real app."""

from __future__ import annotations

import base64
import json

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
    assert '+  "use_sliding_window": true,' in body and "DG001 on `sliding_window`" in body
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
