"""Random drafter/target pairs: the drafter rules give findings or bad input, never a crash.

The pair starts healthy (tests/test_dflash.py) and gets random values for the keys the rules read
(sizes, layer ids, mask token, block size) on either side, and random shapes for `fc.weight`.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors.numpy import save_file

from draftguard.check.findings import RULES
from draftguard.check.run import check as check_targets
from tests.test_dflash import make_pair

SIZES = st.integers(min_value=-2, max_value=70) | st.none() | st.text(max_size=3) | st.floats(allow_nan=False)
IDS = st.lists(st.integers(min_value=-2, max_value=6) | st.text(max_size=2), max_size=5) | st.integers() | st.none()
DRAFTER_KEYS = {
    "hidden_size": SIZES, "vocab_size": SIZES, "head_dim": SIZES, "num_target_layers": SIZES,
    "block_size": SIZES, "num_hidden_layers": st.integers(min_value=0, max_value=3),
    "dflash_config": st.fixed_dictionaries({}, optional={"target_layer_ids": IDS, "mask_token_id": SIZES,
                                                         "block_size": SIZES}),
}
TARGET_KEYS = {"hidden_size": SIZES, "vocab_size": SIZES, "num_hidden_layers": st.integers(min_value=0, max_value=8)}


def edits(keys):
    return st.fixed_dictionaries({}, optional=keys)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(edits(DRAFTER_KEYS), edits(TARGET_KEYS),
       st.none() | st.tuples(st.integers(min_value=1, max_value=40), st.integers(min_value=1, max_value=200)))
def test_random_pairs_give_findings_or_bad_input(drafter_edit, target_edit, fc_shape):
    with tempfile.TemporaryDirectory() as tmp:
        drafter, target = make_pair(Path(tmp))  # healthy weights; the configs are edited after
        for folder, edit in ((drafter, drafter_edit), (target, target_edit)):
            config = json.loads((folder / "config.json").read_text())
            config.update(edit)
            (folder / "config.json").write_text(json.dumps(config, indent=2))
        if fc_shape is not None:
            save_file({"fc.weight": np.zeros(fc_shape, dtype=np.float16)}, str(drafter / "model.safetensors"))
        report = check_targets([str(drafter)], drafter_target=str(target))
    for finding in report.findings:
        assert finding.rule in RULES and finding.message
    for error in report.errors:
        assert error.message
    json.dumps(report.to_json(), default=str)
