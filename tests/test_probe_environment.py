"""The probes' launch environment: set for the block, then put back exactly (unset stays unset),
also when the block raises. Both workers (vLLM's and SGLang's) read a launch under it."""

import os

import pytest

from draftguard.check.engines.vllm_probe import launch_environment


def test_a_launch_environment_is_set_inside_and_restored_after(monkeypatch):
    monkeypatch.setenv("DG_TEST_KEPT", "before")
    monkeypatch.delenv("DG_TEST_NEW", raising=False)
    with launch_environment({"DG_TEST_KEPT": "during", "DG_TEST_NEW": "1"}):
        assert os.environ["DG_TEST_KEPT"] == "during" and os.environ["DG_TEST_NEW"] == "1"
    assert os.environ["DG_TEST_KEPT"] == "before" and "DG_TEST_NEW" not in os.environ


def test_a_launch_environment_is_restored_when_the_block_raises(monkeypatch):
    monkeypatch.delenv("DG_TEST_NEW", raising=False)
    with pytest.raises(ValueError), launch_environment({"DG_TEST_NEW": "1"}):
        raise ValueError("the engine refused")
    assert "DG_TEST_NEW" not in os.environ
