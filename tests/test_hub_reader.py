"""The one Hub reader (draftguard/hub_access.py): the client is made there, files are sized before any
download, a token reads only the repos it is meant for, and huggingface_hub's errors are read in one
place, whatever surface meets them. Real huggingface_hub over HTTP against the loopback fake Hub."""

from __future__ import annotations

import ast
import json
import struct
from pathlib import Path

import pytest

from draftguard.audit.discussions import POST, sync_discussions
from draftguard.audit.record import RepoRecord
from draftguard.check.drafter.files import TOKENIZER_FILE, TokenizerFiles
from draftguard.errors import FileTooLarge, HostRefused
from draftguard.hosts.hub import hub_refusal
from draftguard.hub_access import fetch_file, hub_api, hub_problem, safetensors_metadata
from draftguard.snapshot import load_snapshot
from tests.fakes import fake_hub  # noqa: F401  (fake_hub is a fixture)
from tests.fakes.fleet import install_routes
from tests.fakes.hub import Fault
from tests.fakes import raised as _raised

PACKAGE = Path(__file__).resolve().parents[1] / "draftguard"
CONFIG = b'{"model_type": "qwen3", "hidden_size": 64}'
# Modules that may import huggingface_hub themselves: the reader; the runner's weights download; the
# Hub host's discussion API.
IMPORTERS = {"hub_access.py", "runner/dflash_model.py", "hosts/hub.py"}


def _safetensors() -> bytes:
    header = json.dumps({"w": {"dtype": "F16", "shape": [2], "data_offsets": [0, 4]}}).encode()
    return struct.pack("<Q", len(header)) + header + b"\0" * 4


def test_only_the_reader_imports_huggingface_hub():
    """snapshot, check/, audit/ and the bot's fix PRs reach the Hub through the one reader."""
    found = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            if any(n == "huggingface_hub" or n.startswith("huggingface_hub.") for n in names):
                found.add(str(path.relative_to(PACKAGE)))
    assert found <= IMPORTERS, sorted(found - IMPORTERS)


def test_a_file_over_the_limit_is_refused_before_a_byte_is_downloaded(fake_hub):
    fake_hub.add("acme/big", {"config.json": CONFIG, "tokenizer.json": b"x" * 5000})
    with pytest.raises(FileTooLarge) as refused:
        fetch_file("acme/big", "tokenizer.json", None, limit=4000)
    assert refused.value.size == 5000 and not refused.value.downloaded
    assert [r.method for r in fake_hub.requests_for("acme/big", "tokenizer.json")] == ["HEAD"]
    data, _ = fetch_file("acme/big", "tokenizer.json", None, limit=6000)
    assert data == b"x" * 5000


def test_an_anonymous_read_never_uses_the_environments_token(fake_hub, monkeypatch):
    fake_hub.token = "hf_bot_token"
    fake_hub.add("acme/private", {"config.json": CONFIG, "model.safetensors": _safetensors()})
    fake_hub.private.add("acme/private")
    monkeypatch.setenv("HF_TOKEN", "hf_bot_token")
    assert fetch_file("acme/private", "config.json", None, limit=10_000)[0] == CONFIG  # the token's own read
    # The same file, cached by the read above, is not served to a read without the token.
    problem = hub_problem(_raised(lambda: fetch_file("acme/private", "config.json", None, limit=10_000, token=False)))
    assert problem is not None and problem.kind == "not-found" and problem.refused
    assert list(safetensors_metadata("acme/private", None).files_metadata) == ["model.safetensors"]
    assert safetensors_metadata("acme/private", None, token=False) is None  # no checkpoint it may see


def test_an_optional_file_the_hub_answers_429_to_is_said_as_such(fake_hub):
    """A tokenizer.json the Hub rate-limits was reported as "the Hub cannot be reached
    (LocalEntryNotFoundError)": huggingface_hub wraps the 429 in LocalEntryNotFoundError, and the
    drafter rules' reader took that class for no network."""
    fake_hub.add("acme/limited", {"config.json": CONFIG, TOKENIZER_FILE: b"{}"})
    # Every request for it answers 429 asking for no wait, so huggingface_hub's own retries take no time.
    fake_hub.file_faults.append(Fault("*", f"acme/limited/resolve/.*/{TOKENIZER_FILE}", 429, 100, retry_after=0))
    tokenizer = TokenizerFiles(load_snapshot("acme/limited"))
    assert tokenizer.raw(TOKENIZER_FILE) is None
    [said] = tokenizer.unreachable
    assert "acme/limited@main/tokenizer.json" in said and "HTTP 429" in said and "cannot be reached" not in said


def test_offline_and_not_cached_is_read_as_offline(fake_hub, monkeypatch):
    """Offline mode with the file not in the cache: no answer, not worth retrying, and the check goes on
    without the file (the drafter rules' reader used to test class names for this)."""
    from huggingface_hub import constants

    fake_hub.add("acme/o", {"config.json": CONFIG})
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    problem = hub_problem(_raised(lambda: fetch_file("acme/o", "config.json", None, limit=10_000)))
    assert problem is not None and problem.kind == "offline" and problem.unread and not problem.transient


def test_a_refusal_is_the_hubs_answer_to_this_call_only(fake_hub):
    fake_hub.add("acme/gone", {"config.json": CONFIG})
    fake_hub.private.add("acme/gone")
    refused = _raised(lambda: fetch_file("acme/gone", "config.json", None, limit=10_000, token=False))
    assert hub_refusal(refused) == (401, "Unauthorized")
    try:  # an error of draftguard's own raised while handling one is not the Hub refusing the bot
        try:
            raise refused
        except Exception:
            raise ValueError("a finding about a repo the pull request named") from None
    except ValueError as own:
        assert hub_refusal(own) is None


@pytest.mark.parametrize("host, fix, not_said", [("Hub", "HF_TOKEN", "App"), ("GitHub", "install the App", "HF_TOKEN")])
def test_a_host_refusal_says_that_hosts_fix(host, fix, not_said):
    """The hint was the GitHub App's on both hosts: a Hub bot has no App to install."""
    text = str(HostRefused(host, "acme/x", 404, "Not Found"))
    assert text.startswith(f"{host} answered 404 (Not Found) for acme/x")
    hint = text.split(". Hint: ", 1)[1]
    assert fix in hint and not_said not in hint


def test_a_hub_that_drops_the_connection_while_discussions_sync_is_said_per_repo(fake_hub):
    """huggingface_hub's HTTP stack raises its own errors for a dropped connection, which are not
    OSError: ``audit --open-discussions post`` ended in a traceback instead of saying the repo's
    discussion was not written and going on to the next."""
    for repo in ("acme/drop", "acme/fine"):
        fake_hub.add(repo, {"config.json": CONFIG})

    def drop(h, method, segs, query, raw, answer, error, authorized) -> bool:
        if segs[:3] == ["models", "acme", "drop"]:
            h.close_connection = True  # closed without a word, as a Hub behind a failing proxy
            return True
        return False

    fake_hub.routes.append(drop)
    install_routes(fake_hub)
    records = [RepoRecord(repo=r, repo_id=r, revision=None, sha="a" * 40) for r in ("acme/drop", "acme/fine")]
    said: list[str] = []
    fake_hub.token = "hf_audit_token"
    actions = sync_discussions(records, POST, say=said.append, api=hub_api("hf_audit_token", fake_hub.endpoint))
    assert [a.repo for a in actions] == ["acme/fine"]  # the next repo was still synced
    assert len(said) == 1 and said[0].startswith("acme/drop: discussion not written (the Hub cannot be reached"), said
