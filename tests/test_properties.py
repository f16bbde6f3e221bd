"""Random and malformed configs: the light check gives findings or bad input, never a crash."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from draftguard.check.findings import RULES, TargetResult
from draftguard.check.light import check_snapshot
from draftguard.snapshot import BadInput, Snapshot, key_lines, parse_json_object

KEYS = ["hidden_size", "num_attention_heads", "num_hidden_layers", "head_dim", "sliding_window",
        "use_sliding_window", "layer_types", "max_window_layers", "rope_theta", "rope_scaling",
        "rope_parameters", "torch_dtype", "dtype", "num_key_value_heads", "vocab_size", "n_embd", "n_head",
        "id2label", "text_config", "tie_word_embeddings", "eos_token_id", "auto_map", "dflash_config"]
MODEL_TYPES = ["qwen3", "qwen2", "llama", "gpt2", "mistral", "gemma2", "llava", "bert", "", "nope"]

scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8) | st.sampled_from(KEYS), inner, max_size=5),
    max_leaves=20,
)
layer_types = st.lists(st.sampled_from(["sliding_attention", "full_attention", "chunked", 3]), max_size=6)
configs = st.fixed_dictionaries(
    {"model_type": st.sampled_from(MODEL_TYPES) | st.text(max_size=8) | scalars},
    optional={
        **{key: json_values for key in KEYS},
        "num_hidden_layers": st.integers(min_value=-3, max_value=8) | json_values,
        "layer_types": layer_types | json_values,
        "sliding_window": st.integers(min_value=-1, max_value=4096) | json_values,
        "hidden_size": st.sampled_from([64, 128, 100]) | json_values,
    },
)


def snapshot_of(data: bytes) -> Snapshot:
    return Snapshot(source="prop", revision=None, files={"config.json": data}, display={"config.json": "prop/config.json"})


def assert_well_formed(result: TargetResult) -> None:
    for finding in result.findings:
        assert finding.rule in RULES
        assert finding.severity == RULES[finding.rule].severity
        assert finding.file == "prop/config.json"
        assert finding.message
    json.dumps([f.key for f in result.findings])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(configs)
def test_random_configs_give_findings_or_bad_input(raw):
    try:
        data = json.dumps(raw, indent=2).encode()
    except ValueError:
        return
    try:
        result = check_snapshot(snapshot_of(data))
    except BadInput as exc:
        assert str(exc) and exc.file == "prop/config.json"
        return
    assert_well_formed(result)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_malformed_bytes_are_bad_input_with_a_location(data):
    try:
        result = check_snapshot(snapshot_of(data))
    except BadInput as exc:
        assert exc.file == "prop/config.json"
        return
    assert_well_formed(result)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(max_size=10), json_values, max_size=8))
def test_key_lines_point_at_each_top_level_key(doc):
    text = json.dumps(doc, indent=2)
    lines = key_lines(text)
    for key in doc:
        line = text.splitlines()[lines[key] - 1]
        assert line.startswith("  " + json.dumps(key) + ":")
    assert json.dumps(parse_json_object(text.encode(), "x"), indent=2) == text


def test_a_config_parsed_again_is_a_fresh_copy_and_new_bytes_are_checked_again():
    """Snapshot.load_json skips the caps' walk for bytes that already passed it (the check parses a
    config three times), but each call still returns its own dict, and bytes put in afterwards
    (fix's edits) go through every check again."""
    snap = Snapshot(source="x", revision=None, files={"config.json": b'{"a": {"b": 1}}'}, display={})
    first = snap.load_json()
    first["a"]["b"] = 2
    assert snap.load_json() == {"a": {"b": 1}}
    snap.files["config.json"] = b'{"a": ' * 40 + b"1" + b"}" * 40
    try:
        snap.load_json()
    except BadInput as exc:
        assert "nested more than" in str(exc)
    else:
        raise AssertionError("new bytes nested past the cap were not refused")
