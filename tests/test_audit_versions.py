"""``--transformers ...,latest``: the newest release on the package index pip is configured with,
asked of a PEP 503 index on loopback (and of a closed port, for "offline")."""

from __future__ import annotations

import socket

import pytest

from draftguard.audit.versions import audit_versions, newest_release
from draftguard.snapshot import BadInput
from tests.test_matrix import _offline_installer_env, fake_index  # noqa: F401  (a fixture)


def test_latest_is_the_newest_release_on_the_configured_index(fake_index, monkeypatch):  # noqa: F811
    _offline_installer_env(monkeypatch, fake_index)
    assert newest_release() == "4.52.4"  # the only release that index knows
    assert audit_versions("5.24.0,latest", "5.24.0") == ["4.52.4", "5.24.0"]


def test_latest_without_an_index_is_bad_input_that_says_what_to_do(monkeypatch):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    _offline_installer_env(monkeypatch, f"http://127.0.0.1:{port}/simple/")
    with pytest.raises(BadInput, match="--transformers latest: the package index could not be asked .*give a "
                                       "version number instead"):
        audit_versions("latest", "5.24.0")


def test_a_malformed_version_is_refused_before_anything_runs():
    with pytest.raises(BadInput, match="is not a transformers version"):
        audit_versions("5.24.0,newest", "5.24.0")


def test_audit_compares_two_releases_of_one_engine_as_it_compares_transformers(tmp_path):
    """`audit --engine vllm==0.32.0,vllm==0.33.0`: Kolibri 1, which vLLM 0.33.0 added, is refused by 0.32.0's
    light tier (its registry and transformers 5.19.0 have neither the architecture nor the model type)
    and served by 0.33.0's: a regression between the engine's releases, recorded and listed."""
    from tests.audit_helpers import REPO_ROOT, run_audit_process
    from tests.fakes.fleet import build_fleet
    from tests.fakes.hub import FakeHub

    config = REPO_ROOT / "tests" / "data" / "engine-releases" / "kolibri1" / "config.json"
    with FakeHub() as hub:
        build_fleet(hub, copies=1, corpus=False)  # its routes answer model_info without a revision
        hub.add("aleph/kolibri", {"config.json": config.read_bytes()})
        repos = tmp_path / "repos.txt"
        repos.write_text("aleph/kolibri\n")
        run = run_audit_process(hub, tmp_path, str(repos), "--no-progress", "--engine", "vllm==0.32.0,vllm==0.33.0")
    record = run.records["aleph/kolibri"]
    assert record["engines"] == ["vllm==0.32.0", "vllm==0.33.0"]
    [regression] = [r for r in record["regressions"] if r["rule"] == "DG200"]
    assert regression["present"] == ["vLLM 0.32.0"] and regression["absent"] == ["vLLM 0.33.0"]
    [refusal] = [f for f in record["findings"] if f["rule"] == "DG200"]
    assert "vLLM 0.32.0" in refusal["message"] and "kolibri1" in refusal["message"]
    assert "| aleph/kolibri | DG200 |" in (run.out / "audit.md").read_text()
