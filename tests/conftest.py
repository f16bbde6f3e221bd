"""Test-wide hooks: the tests marked ``vllm`` run vLLM's CPU build for real, and only where it is
installed (``scripts/test.sh`` runs them in ``.venv-vllm``); elsewhere they are skipped, saying why."""

from __future__ import annotations

import importlib.util
import os

import pytest


def vllm_skip_reason() -> str | None:
    """Why the tests marked vllm cannot run in this interpreter, or None when they can."""
    if os.environ.get("DRAFTGUARD_SKIP_VLLM") == "1":
        return "DRAFTGUARD_SKIP_VLLM=1"
    if importlib.util.find_spec("vllm") is None:
        return "vLLM's CPU build is not installed in this venv; scripts/test.sh runs these in .venv-vllm"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = vllm_skip_reason()
    if reason is None:
        return
    for item in items:
        if item.get_closest_marker("vllm") is not None:
            item.add_marker(pytest.mark.skip(reason=reason))
