"""Fakes of the network services draftguard talks to, served over real HTTP on loopback.

``fake_hub`` is a pytest fixture: a started ``FakeHub`` that this process's huggingface_hub uses,
with a per-test cache. Import it into a test module (or a conftest) to use it::

    from tests.fakes import fake_hub  # noqa: F401  (a fixture)

    def test_reads_config(fake_hub):
        fake_hub.add("acme/tiny", {"config.json": b'{"model_type": "qwen3"}'})
        ...
"""

from __future__ import annotations

from typing import Iterator

from tests.fakes.hub import FakeHub, Request, fake_hub_fixture, use_fake_hub

try:
    import pytest
except ImportError:  # the README's audit demo serves the fleet (tests.fakes.fleet) from the base install
    pytest = None

__all__ = ["FakeHub", "Request", "fake_hub", "use_fake_hub"]


if pytest is not None:
    @pytest.fixture
    def fake_hub(monkeypatch, tmp_path) -> Iterator[FakeHub]:
        """A fake Hugging Face Hub on loopback that huggingface_hub in this process talks to."""
        yield from fake_hub_fixture(monkeypatch, tmp_path)
