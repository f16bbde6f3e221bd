"""Safetensors headers, locally and through the Hub: shapes without weight bytes, and bad files."""

from __future__ import annotations

import json
import struct
import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `tests.fakes` under plain `pytest` too

from draftguard.check.weights import (  # noqa: E402
    INDEX_FILE, MAX_HEADER_BYTES, HeaderError, parse_header, read_local_header, read_weights,
)
from draftguard.snapshot import BadInput, load_snapshot  # noqa: E402
from tests.fakes import FakeHub, fake_hub  # noqa: E402,F401  (fake_hub is a fixture)

CONFIG = b'{"model_type": "qwen3"}'


def saved(path: Path, tensors: dict[str, tuple[tuple[int, ...], str]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file({name: np.zeros(shape, dtype=dtype) for name, (shape, dtype) in tensors.items()}, str(path))
    return path


def raw_file(path: Path, header: bytes, data: bytes = b"", length: int | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(struct.pack("<Q", len(header) if length is None else length) + header + data)
    return path


def folder(tmp_path: Path) -> Path:
    (tmp_path / "config.json").write_bytes(CONFIG)
    return tmp_path


# --- local headers --------------------------------------------------------------------------------


def test_local_header_gives_names_dtypes_and_shapes(tmp_path):
    path = saved(tmp_path / "m.safetensors", {"fc.weight": ((4, 8), "float16"), "norm.weight": ((4,), "float32")})
    assert read_local_header(path) == {"fc.weight": ("F16", (4, 8)), "norm.weight": ("F32", (4,))}


def test_only_the_header_is_read(tmp_path):
    # A sparse 2 GB file: reading its tensors would take seconds and memory; the header is a few bytes.
    head = json.dumps({"w": {"dtype": "BF16", "shape": [32768, 32768], "data_offsets": [0, 2 * 32768 * 32768]}}).encode()
    path = raw_file(tmp_path / "big.safetensors", head)
    with open(path, "r+b") as f:
        f.truncate(8 + len(head) + 2 * 32768 * 32768)
    assert read_local_header(path) == {"w": ("BF16", (32768, 32768))}


@pytest.mark.parametrize(
    "header, data, length, message",
    [
        (b"", b"", 0, "not valid JSON"),
        (b"{not json", b"", None, "not valid JSON"),
        (b"[1, 2]", b"", None, "not a JSON object"),
        (b'{"w": {"dtype": "F99", "shape": [1], "data_offsets": [0, 4]}}', bytes(4), None, "unknown dtype"),
        (b'{"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}}', bytes(4), None, "invalid shape"),
        (b'{"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}}', bytes(4), None, "spans 4 bytes, not 8"),
        (b'{"w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 0]}}', bytes(4), None, "invalid data_offsets"),
        (b'{"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}', bytes(4), None, "truncated"),
        (b'{"w": 1}', b"", None, "no dtype/shape"),
        (b'{"w": {}}', b"", 10**6, "truncated"),
        (b"{}", b"", MAX_HEADER_BYTES + 1, "over the 25 MB"),
        (b"{}", b"", 30_000_000, "over the 25 MB"),  # R12 of issue 25: 99 MB headers cost 45 s and 1.2 GB
    ],
    ids=["empty", "not-json", "not-object", "dtype", "shape", "size", "offsets", "short-data", "entry",
         "header-past-end", "header-too-long", "header-30-mb"],
)
def test_corrupt_headers_say_what_is_wrong(tmp_path, header, data, length, message):
    path = raw_file(tmp_path / "bad.safetensors", header, data, length)
    with pytest.raises(HeaderError, match=message):
        read_local_header(path)


def test_file_shorter_than_the_length_prefix(tmp_path):
    path = tmp_path / "tiny.safetensors"
    path.write_bytes(b"\x01\x02")
    with pytest.raises(HeaderError, match="too short"):
        read_local_header(path)


def test_header_agrees_with_the_safetensors_library(tmp_path):
    from safetensors import safe_open

    path = saved(tmp_path / "m.safetensors", {"a": ((3, 5), "float16"), "b": ((7,), "int64"), "c": ((), "float32")})
    with safe_open(str(path), framework="numpy") as f:
        expected = {k: (f.get_slice(k).get_dtype(), tuple(f.get_slice(k).get_shape())) for k in f.keys()}
    assert read_local_header(path) == expected


def test_parse_header_skips_metadata():
    head = b'{"__metadata__": {"format": "pt"}, "w": {"dtype": "U8", "shape": [], "data_offsets": [0, 1]}}'
    assert parse_header(head) == {"w": ("U8", ())}


# --- a snapshot's checkpoint ----------------------------------------------------------------------


def test_folder_without_weights_has_none(tmp_path):
    assert read_weights(load_snapshot(str(folder(tmp_path)))) is None


def test_sharded_checkpoint_is_read_through_its_index(tmp_path):
    root = folder(tmp_path)
    saved(root / "model-00001-of-00002.safetensors", {"fc.weight": ((2, 4), "float16")})
    saved(root / "model-00002-of-00002.safetensors", {"norm.weight": ((2,), "float16")})
    (root / INDEX_FILE).write_text(json.dumps({"metadata": {}, "weight_map": {
        "fc.weight": "model-00001-of-00002.safetensors", "norm.weight": "model-00002-of-00002.safetensors"}}))
    weights = read_weights(load_snapshot(str(root)))
    assert weights is not None and weights.sharded and weights.problems == []
    assert {n: t.shape for n, t in weights.tensors.items()} == {"fc.weight": (2, 4), "norm.weight": (2,)}
    assert weights.tensors["norm.weight"].file.endswith("model-00002-of-00002.safetensors")
    assert weights.dtypes == {"F16": 2}


def test_index_naming_a_missing_shard_points_at_its_line(tmp_path):
    root = folder(tmp_path)
    saved(root / "a.safetensors", {"fc.weight": ((2, 4), "float16")})
    (root / INDEX_FILE).write_text(json.dumps(
        {"weight_map": {"fc.weight": "a.safetensors", "norm.weight": "b.safetensors"}}, indent=2))
    weights = read_weights(load_snapshot(str(root)))
    assert weights is not None and set(weights.tensors) == {"fc.weight"}
    [problem] = weights.problems
    assert "`b.safetensors`" in problem.message and problem.file.endswith(INDEX_FILE)
    assert '"norm.weight"' in (root / INDEX_FILE).read_text().splitlines()[problem.line - 1]


@pytest.mark.parametrize("index, message", [
    ("{bad", "invalid JSON"),
    ('{"weight_map": ["a"]}', "`weight_map` must map"),
    ('{"weight_map": {"w": "../../etc/passwd"}}', "not a file inside the folder"),
])
def test_bad_index_is_a_problem_not_a_crash(tmp_path, index, message):
    root = folder(tmp_path)
    (root / INDEX_FILE).write_text(index)
    weights = read_weights(load_snapshot(str(root)))
    assert weights is not None and message in weights.problems[0].message


def test_corrupt_local_file_becomes_a_problem(tmp_path):
    root = folder(tmp_path)
    raw_file(root / "model.safetensors", b"{}", length=2**40)
    weights = read_weights(load_snapshot(str(root)))
    assert weights is not None and weights.tensors == {}
    assert "over the 25 MB" in weights.problems[0].message


# --- the Hub --------------------------------------------------------------------------------------


def test_hub_single_file_reads_one_ranged_header(tmp_path, fake_hub):
    path = saved(tmp_path / "m.safetensors", {"fc.weight": ((4, 8), "float16")})
    fake_hub.add("acme/d", {"config.json": CONFIG, "model.safetensors": path.read_bytes()})
    weights = read_weights(load_snapshot("acme/d"))
    assert weights is not None and weights.tensors["fc.weight"].shape == (4, 8)
    assert weights.tensors["fc.weight"].file == "acme/d@main/model.safetensors"
    sent = fake_hub.requests_for("acme/d", ".safetensors")
    assert [(r.method, r.range is not None) for r in sent] == [("HEAD", False), ("GET", True)]


def test_hub_revision_is_respected(tmp_path, fake_hub):
    old = saved(tmp_path / "old.safetensors", {"fc.weight": ((4, 8), "float16")}).read_bytes()
    new = saved(tmp_path / "new.safetensors", {"fc.weight": ((4, 12), "float16")}).read_bytes()
    fake_hub.add("acme/d", {"config.json": CONFIG, "model.safetensors": new})
    fake_hub.add("acme/d", {"config.json": CONFIG, "model.safetensors": old}, revision="v1")
    weights = read_weights(load_snapshot("acme/d", "v1"))
    assert weights is not None and weights.tensors["fc.weight"].shape == (4, 8)


def test_hub_sharded_checkpoint(tmp_path, fake_hub):
    a = saved(tmp_path / "a.safetensors", {"fc.weight": ((2, 4), "float16")}).read_bytes()
    b = saved(tmp_path / "b.safetensors", {"norm.weight": ((2,), "float16")}).read_bytes()
    index = json.dumps({"weight_map": {"fc.weight": "a.safetensors", "norm.weight": "b.safetensors"}}).encode()
    fake_hub.add("acme/s", {"config.json": CONFIG, INDEX_FILE: index, "a.safetensors": a, "b.safetensors": b})
    weights = read_weights(load_snapshot("acme/s"))
    assert weights is not None and weights.sharded and set(weights.tensors) == {"fc.weight", "norm.weight"}
    assert all(r.range for r in fake_hub.requests_for("acme/s", ".safetensors") if r.method == "GET")


def test_hub_index_naming_a_missing_shard(tmp_path, fake_hub):
    a = saved(tmp_path / "a.safetensors", {"fc.weight": ((2, 4), "float16")}).read_bytes()
    index = json.dumps({"weight_map": {"fc.weight": "a.safetensors", "norm.weight": "b.safetensors"}}).encode()
    fake_hub.add("acme/s", {"config.json": CONFIG, INDEX_FILE: index, "a.safetensors": a})
    weights = read_weights(load_snapshot("acme/s"))
    assert weights is not None and "`b.safetensors`" in weights.problems[0].message


def test_hub_corrupt_header(tmp_path, fake_hub):
    fake_hub.add("acme/c", {"config.json": CONFIG, "model.safetensors": struct.pack("<Q", 10) + b"{not json}"})
    weights = read_weights(load_snapshot("acme/c"))
    assert weights is not None and "unreadable safetensors header" in weights.problems[0].message
    assert weights.problems[0].file == "acme/c@main/model.safetensors"


def test_hub_without_safetensors(fake_hub):
    fake_hub.add("acme/n", {"config.json": CONFIG})
    assert read_weights(load_snapshot("acme/n")) is None


def test_hub_server_error_is_bad_input(tmp_path, fake_hub):
    path = saved(tmp_path / "m.safetensors", {"fc.weight": ((4, 8), "float16")})
    fake_hub.add("acme/e", {"config.json": CONFIG, "model.safetensors": path.read_bytes()})
    snapshot = load_snapshot("acme/e")
    fake_hub.status[("acme/e", "model.safetensors")] = 403
    with pytest.raises(BadInput, match="HTTP 403"):
        read_weights(snapshot)


def test_fake_hub_serves_ranges_and_errors_like_the_hub(fake_hub):
    from huggingface_hub import hf_hub_download
    from huggingface_hub import errors as hf_errors

    sha = fake_hub.add("acme/r", {"config.json": CONFIG})
    assert Path(hf_hub_download("acme/r", "config.json", revision=sha)).read_bytes() == CONFIG
    with pytest.raises(hf_errors.EntryNotFoundError):
        hf_hub_download("acme/r", "missing.json")
    with pytest.raises(hf_errors.RevisionNotFoundError):
        hf_hub_download("acme/r", "config.json", revision="nope")
    with pytest.raises(hf_errors.RepositoryNotFoundError):
        hf_hub_download("acme/none", "config.json")
    assert isinstance(fake_hub, FakeHub)


def test_hub_out_of_reach_is_reported_not_fatal(tmp_path, fake_hub):
    path = saved(tmp_path / "m.safetensors", {"fc.weight": ((4, 8), "float16")})
    fake_hub.add("acme/o", {"config.json": CONFIG, "model.safetensors": path.read_bytes()})
    snapshot = load_snapshot("acme/o")
    fake_hub.stop()  # connection refused from now on
    weights = read_weights(snapshot)
    assert weights is not None and weights.tensors == {} and weights.problems == []
    assert weights.unreachable is not None and "cannot be reached" in weights.unreachable


# --- the repo rules read names only, under the same bounds (issue 34) -------------------------------


def test_the_repo_rules_read_tensor_names_from_one_header_and_nothing_else(tmp_path):
    from draftguard.check.repo.files import RepoFiles

    path = saved(tmp_path / "model.safetensors", {"model.embed_tokens.weight": ((8, 4), "float16")})
    (tmp_path / "config.json").write_bytes(CONFIG)
    with open(path, "r+b") as f:  # a sparse tail: reading the tensors would read it, the header does not
        f.seek(0, 2)
        f.truncate(f.tell() + 1)
    found = RepoFiles(load_snapshot(str(tmp_path))).tensors()
    assert found is not None and found.names == {"model.embed_tokens.weight"} and found.dtypes == {
        "model.embed_tokens.weight": "F16"}


def test_the_repo_rules_skip_a_header_over_the_bound_and_an_oversized_index(tmp_path):
    from draftguard.check.repo import check_repo
    from draftguard.check.repo.files import RepoFiles

    raw_file(tmp_path / "model.safetensors", b"{}", length=MAX_HEADER_BYTES + 1)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", "architectures": ["LlamaForCausalLM"],
                                                      "tie_word_embeddings": False}))
    assert RepoFiles(load_snapshot(str(tmp_path))).tensors() is None
    assert check_repo(load_snapshot(str(tmp_path)), {"tie_word_embeddings": False}) == []
    index = tmp_path / "model.safetensors.index.json"
    with open(index, "wb") as f:  # over weights.MAX_INDEX_BYTES: never read
        f.truncate(51 * 1024 * 1024)
    assert RepoFiles(load_snapshot(str(tmp_path))).tensors() is None
