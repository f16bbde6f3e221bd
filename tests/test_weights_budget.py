"""The model weights the repository ships stay under 5 MB in all: the tests build or carry their
tiny models, and a clone must stay small. Counted as git stores them: each distinct blob once (the
faulty copies whose weights equal the healthy ones share one blob, and a symlinked shard is a link)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".npz")
BUDGET = 5_000_000


def weight_blobs(root: Path) -> dict[str, int]:
    """blob id -> size, for every tracked weights file that is a regular file (not a symlink)."""
    listing = subprocess.run(["git", "ls-files", "-s", "-z"], cwd=root, capture_output=True, check=True).stdout
    blobs = {}
    for entry in listing.decode().split("\0"):
        if not entry:
            continue
        meta, path = entry.split("\t", 1)
        mode, blob, _ = meta.split()
        if mode != "120000" and path.endswith(WEIGHT_SUFFIXES):
            blobs[blob] = 0
    if not blobs:
        return {}
    sizes = subprocess.run(["git", "cat-file", "--batch-check=%(objectname) %(objectsize)"], cwd=root,
                           input="\n".join(blobs).encode(), capture_output=True, check=True).stdout.decode()
    return {line.split()[0]: int(line.split()[1]) for line in sizes.splitlines()}


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="not a git checkout")
def test_the_shipped_weights_stay_under_five_megabytes():
    blobs = weight_blobs(ROOT)
    assert blobs, "no weights file is tracked: the listing is wrong"
    total = sum(blobs.values())
    assert total < BUDGET, f"the shipped weights are {total / 1e6:.2f} MB (budget {BUDGET / 1e6:.0f} MB)"


def test_the_count_takes_a_shared_blob_once_and_skips_links(tmp_path):
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    run = lambda *a: subprocess.run(["git", *a], cwd=tmp_path, check=True, capture_output=True)  # noqa: E731
    run("init", "-q")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "model.safetensors").write_bytes(b"x" * 1000)
    (tmp_path / "b" / "model.safetensors").write_bytes(b"x" * 1000)  # the same blob
    (tmp_path / "c.safetensors").symlink_to("a/model.safetensors")
    (tmp_path / "d.bin").write_bytes(b"y" * 10)
    (tmp_path / "notes.txt").write_bytes(b"z" * 99999)
    run("add", "-A")
    assert sorted(weight_blobs(tmp_path).values()) == [10, 1000]
