"""Issue 42, the bound without its cost: work the check did that no answer needs, taken out without
changing an answer. Behaviour, not timing: each test fails where the waste comes back or where the
shortcut would answer differently from the long way.
"""

from __future__ import annotations

import json
import typing
from pathlib import Path

import pytest
from huggingface_hub import dataclasses as strict
from transformers import PretrainedConfig

from draftguard.check.light import check_snapshot
from draftguard.check.engines.specs import parse_engines
from draftguard.check.run import check
from draftguard.report.engines import render_engines_section
from draftguard.check.resolver.tracing import class_voice
from draftguard.snapshot import key_lines, load_snapshot

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "data" / "real-configs"


def test_a_config_with_sub_configs_is_built_without_writing_them_as_json(monkeypatch):
    # huggingface_hub's union check wrote the whole text_config / vision_config into an error that a
    # later arm of `dict | PreTrainedConfig | None` threw away: 2 renderings per LLaVA check before
    rendered: list[str] = []
    real_repr = PretrainedConfig.__repr__

    def counted(self):
        rendered.append(type(self).__name__)
        return real_repr(self)

    monkeypatch.setattr(PretrainedConfig, "__repr__", counted)
    result = check_snapshot(load_snapshot(str(CORPUS / "llava-hf--llava-1.5-7b-hf")))
    assert result.config_class == "LlavaConfig" and result.values["text_config"]["__config__"] == "LlamaConfig"
    assert rendered == []


class _Sub(dict):
    pass


UNIONS = [
    (dict | None, {"a": 1}), (dict | None, None), (dict | None, 3), (int | str, True), (int | None, True),
    (bool | int, True), (float | None, 3), (list[int] | None, [1, 2]), (list[int] | None, ["x"]),
    (typing.Optional[dict], _Sub()), (typing.Union[int, str], 2.5), (typing.Literal["a", "b"] | int, "c"),
    (typing.Any | None, object()), (tuple[int, int] | None, (1, 2)), (tuple[int, int] | None, (1,)),
]


def _outcome(expected: typing.Any, value: typing.Any) -> str:
    try:
        strict.type_validator("field", value, expected)
    except TypeError as exc:
        return f"TypeError: {exc}"
    return "passes"


# Ids the same in every process (pytest-xdist's workers must collect the same names): a bare object() by its type.
@pytest.mark.parametrize("expected, value", UNIONS, ids=[
    f"{t}={v!r}" if type(v).__repr__ is not object.__repr__ else f"{t}=<{type(v).__name__}>" for t, v in UNIONS])
def test_the_quick_union_check_passes_and_fails_as_huggingface_hubs_own(expected, value):
    long_way = _outcome(expected, value)
    with class_voice(None):
        quick = _outcome(expected, value)
    assert quick == long_way
    assert _outcome(expected, value) == long_way  # put back after the block


def test_the_resolved_values_cross_the_pipe_only_for_a_caller_that_reads_them():
    # no report view shows them, and they were two thirds of every answer the child wrote and the
    # caller parsed; the launch check and the audit read them, and ask
    folder = str(CORPUS / "llava-hf--llava-1.5-7b-hf")
    plain, kept = check([folder]), check([folder], values=True)
    assert plain.targets[0].values is None and check([folder], in_process=True).targets[0].values is None
    assert kept.targets[0].values["text_config"]["__config__"] == "LlamaConfig"
    assert [f.to_json() for f in plain.targets[0].findings] == [f.to_json() for f in kept.targets[0].findings]
    # the engine section shows transformers' windows from them: kept where there are engine views
    mistral = check([str(ROOT / "tests" / "data" / "healthy" / "mistral-7b-v0.1.json")],
                    engines=parse_engines("sglang==0.5.23"))
    assert mistral.targets[0].values["sliding_window"] == 4096
    assert "sliding(4096) at layers 0-31" in render_engines_section(mistral)


def test_key_lines_reads_nested_keys_list_items_escapes_and_repeats_in_one_pass():
    # strings and brackets found by one search rather than a scanner step per value (half the time
    # a finding's line cost); what each key maps to is as before
    text = ('{"a": "x\\"y\\": {", "b": {\n "c": [1, {"d": 2},\n [{"e": "}"}]],\n "f": {}},\n'
            '"a\\u002eb": {"g": 1}, "b": {"h": [true, null, -1.5e3]\n}, "k": [\n{"c": 1}]}')
    lines = key_lines(text)
    assert dict(lines) == {"a": 1, "b": 1, "b.c": 2, "b.c.d": 2, "b.c.e": 3, "b.f": 4, "a.b": 5, "a.b.g": 5,
                           "b.h": 5, "k": 6, "k.c": 7}
    assert json.loads(text)["a"] == 'x"y": {'
