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
