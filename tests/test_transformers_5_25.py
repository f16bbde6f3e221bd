"""transformers 5.25.0 ignores `_attn_implementation` in config.json (a class attribute no longer read from the
file). Where the model soft-caps its scores (Gemma 2), only eager attention applies the cap, so the file's
"eager" being dropped changes the outputs: a warning under 5.25.0, and still the info it was under 5.24.0.
The real configs are Google's and Microsoft's (tests/data/real-configs, SOURCE in each folder's notes)."""

from __future__ import annotations

import json
from pathlib import Path

from draftguard.cli import main

REAL = Path(__file__).resolve().parent / "data" / "real-configs"
VERSIONS = "5.24.0,5.25.0"


def run(capsys, folder: str | Path) -> list[dict]:
    code = main(["check", str(REAL / folder), "--transformers", VERSIONS, "--format", "json"])
    out = capsys.readouterr()
    assert code in (0, 1), out.err
    return json.loads(out.out)["findings"]


def test_a_softcapping_model_that_loses_eager_attention_is_warned(capsys):
    found = run(capsys, "google--gemma-2-27b-it")
    [dropped] = [f for f in found if f["key"] == "_attn_implementation"]
    assert (dropped["rule"], dropped["severity"], dropped["line"]) == ("DG001", "warning", 33)
    assert "attn_logit_softcapping 50" in dropped["message"] and "5.25.0" in dropped["message"]
    assert "Not on transformers 5.24.0" in dropped["message"]


def test_no_warning_without_softcapping_or_without_eager(capsys, tmp_path):
    # "eager" pinned, soft-capping off: private state, as before
    raw = json.loads((REAL / "google--gemma-2-27b-it" / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**raw, "attn_logit_softcapping": None,
                                                       "final_logit_softcapping": None}, indent=2))
    found = run(capsys, tmp_path)
    assert [f["severity"] for f in found if f["key"] == "_attn_implementation"] in ([], ["info"])
    # soft-capping, but the file pins no kernel: nothing is dropped
    found = run(capsys, "google--gemma-2-9b-it")
    assert [f for f in found if f["key"].endswith("_attn_implementation")] == []
