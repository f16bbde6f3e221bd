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

__all__ = ["FakeHub", "Request", "acceptance_result", "fake_hub", "raised", "use_fake_hub"]


def acceptance_result(tau_counts=(10, 8, 6)) -> dict:
    """An AcceptanceResult's JSON, as a GPU worker's ``draftguard accept`` gives it: a pass at
    τ 3.40 by default, with the tokens accepted at each draft position given."""
    from draftguard.runner.result import AcceptanceResult, PromptResult, Thresholds, Verdict

    p = PromptResult.from_counts(0, drafts=10, draft_tokens=30, accepted_tokens=sum(tau_counts),
                                 accepted_per_position=list(tau_counts), new_tokens=34)
    return AcceptanceResult.from_prompts([p], wall_seconds=1.0, verdict=Verdict("pass", "τ 3.40 ≥ bar 3.00"),
                                         thresholds=Thresholds(min_acceptance_length=3.0, bar=3.0)).to_dict()


def raised(call) -> BaseException:
    """What ``call()`` raised (as a surface meets it); AssertionError when it did not fail."""
    try:
        call()
    except Exception as exc:
        return exc
    raise AssertionError("the call did not fail")


if pytest is not None:
    @pytest.fixture
    def fake_hub(monkeypatch, tmp_path) -> Iterator[FakeHub]:
        """A fake Hugging Face Hub on loopback that huggingface_hub in this process talks to."""
        yield from fake_hub_fixture(monkeypatch, tmp_path)
