"""The light tier reads a config as the engines read the config object: through the class's attribute_map
aliases (GPT-2, GPT-J: n_head, n_layer, n_positions). Before, those models had no head size, KV heads or
layers in vLLM's light view. The real tier agrees (tests/test_engines_vllm.py, every real target)."""

from __future__ import annotations

from pathlib import Path

import pytest

from draftguard.check.engines import parse_engines
from draftguard.check.run import check as check_targets

REAL = Path(__file__).resolve().parent / "data" / "real-configs"


@pytest.mark.parametrize("name, head, kv, layers", [("openai-community--gpt2", 64, 12, 12),
                                                     ("eleutherai--gpt-j-6b", 256, 16, 28)])
def test_heads_and_layers_through_the_aliases(name, head, kv, layers):
    report = check_targets([str(REAL / name)], engines=parse_engines("vllm==0.32.0"))
    [view] = report.targets[0].engine_views
    assert (view.head_size, view.num_kv_heads) == (head, kv)
    assert view.windows == [None] * layers
