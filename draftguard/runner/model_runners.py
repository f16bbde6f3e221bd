"""vLLM's two model runners as ``draftguard accept --model-runner both`` compares them.

vLLM 0.32 has a V1 and a V2 model runner (``VLLM_USE_V2_MODEL_RUNNER``; unset, vLLM picks V2 where
Triton is installed and the config needs nothing V2 lacks, ``VllmConfig.use_v2_model_runner``), and
they read an EAGLE-3 head's aux layer ids differently: V1 reads ``eagle_config``'s list when the top
level has none, V2 never does and falls back to its default (2, N//2, N-3)
(``check.drafter.engines.eagle3_readings``). With ``--model-runner both`` each runner is one config
"view" of the acceptance cells (``runs.run_cells``): vLLM runs each in its own engine process with the
variable set, and the reference feeds the head the aux layers each runner would, so the runner
comparison runs on CPU too, where vLLM refuses V2 ("Model Runner V2 requires Triton").

In: the drafter's and the target's config.json (folders or Hub ids), the drafting method.
Out: ``RunnerReading`` per runner (``runner_readings``): the aux ids it feeds the head, and why.
Plain Python: no torch, no vLLM.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from draftguard.check.drafter.engines import eagle3_readings
from draftguard.snapshot import BadInput, load_snapshot

RUNNERS = ("v1", "v2")
RUNNER_TEXT = {"v1": "V1 model runner", "v2": "V2 model runner"}
NESTED_KEY = "eagle_config.eagle_aux_hidden_state_layer_ids"


@dataclass
class RunnerReading:
    """The aux ids (vLLM's: 0 is the embedding output, N the last layer's output) one runner feeds the
    drafter, and what it read to get them."""

    runner: str
    aux_ids: list[int]
    how: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def target_layers(target: str) -> int:
    """The target's number of layers, from its config.json (or its ``text_config``).

    Example::

        >>> target_layers("tests/fixtures/vllm-models/target")
        3
    """
    raw = load_snapshot(target).load_json()
    text = raw.get("text_config") if isinstance(raw.get("text_config"), dict) else raw
    n = text.get("num_hidden_layers", raw.get("num_hidden_layers"))
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise BadInput(f"{target}/config.json: `num_hidden_layers` must be a positive int, got {n!r}",
                       file=f"{target}/config.json", key="num_hidden_layers")
    return n


def int_list(value: Any) -> list[int] | None:
    """``value`` as a non-empty list of ints, or None when it is not one."""
    if isinstance(value, list) and value and all(isinstance(i, int) and not isinstance(i, bool) for i in value):
        return list(value)
    return None


def runner_readings(drafter: str, target: str, method: str) -> dict[str, RunnerReading]:
    """What vLLM 0.32's V1 and V2 runners feed the drafter, keyed "v1" and "v2".

    EAGLE-3: ``eagle3_readings`` (top-level list, ``eagle_config``'s, the default). DFlash: both read
    ``dflash_config.target_layer_ids`` + 1, except that V1 lets ``eagle_config``'s list override it.

    Example::

        >>> r = runner_readings("tests/fixtures/vllm-models/eagle3", "tests/fixtures/vllm-models/target", "eagle3")
        >>> r["v1"].aux_ids, r["v2"].aux_ids
        ([1, 2, 3], [1, 2, 3])
    """
    raw = load_snapshot(drafter).load_json()
    n = target_layers(target)
    eagle = raw.get("eagle_config") if isinstance(raw.get("eagle_config"), dict) else {}
    top, nested = int_list(raw.get("eagle_aux_hidden_state_layer_ids")), int_list(eagle.get("eagle_aux_hidden_state_layer_ids"))
    if method == "eagle3":
        readings = eagle3_readings(top, nested, n, None)  # one reading where both runners agree, else V1, V2
        v1, v2 = readings[0], readings[-1]
        return {"v1": RunnerReading("v1", [i + 1 for i in v1.layers], v1.how),
                "v2": RunnerReading("v2", [i + 1 for i in v2.layers], v2.how)}
    block = raw.get("dflash_config") if isinstance(raw.get("dflash_config"), dict) else {}
    layer_ids = int_list(block.get("target_layer_ids"))
    base = (top, "reads `eagle_aux_hidden_state_layer_ids` as aux ids") if top else (
        ([i + 1 for i in layer_ids], "reads `dflash_config.target_layer_ids` + 1") if layer_ids else
        (None, "finds no layer ids"))
    v1 = (nested, f"reads `{NESTED_KEY}` {nested} over `dflash_config.target_layer_ids`") if (nested and not top) else base
    return {"v1": RunnerReading("v1", list(v1[0] or []), v1[1]), "v2": RunnerReading("v2", list(base[0] or []), base[1])}


def readings_differ(readings: dict[str, RunnerReading]) -> bool:
    return sorted(readings["v1"].aux_ids) != sorted(readings["v2"].aux_ids)
