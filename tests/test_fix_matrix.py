"""`draftguard fix --transformers 4.52.4,5.24.0`: every fix proven under both versions, and the
written file then passes `draftguard check` under both.

4.52.4 runs in the version-matrix environment that test_matrix.py installs once into the draftguard
cache (``$DRAFTGUARD_CACHE_DIR``, else ``~/.cache/draftguard``); 5.24.0 is the installed version.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from draftguard.check import environments, matrix
from draftguard.cli import main

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "qwen3-swa-drafter"
DRAFTERS = ROOT / "tests" / "data" / "real-drafters"
VERSIONS = "4.52.4,5.24.0"


@pytest.fixture(scope="module", autouse=True)
def old_env():
    cache = environments.cache_dir()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(environments.CACHE_ENV, str(cache))
        matrix.ensure_env("4.52.4", cache=cache)
        yield


@pytest.mark.parametrize("case, target", [
    (EXAMPLE, None),
    (DRAFTERS / "broken" / "vllm-40727-dflash-ids-plus-one", DRAFTERS / "targets" / "qwen3-8b"),
    (DRAFTERS / "specforge-qwen3-8b-eagle3", DRAFTERS / "targets" / "qwen3-8b"),
], ids=["incident", "dflash-shifted", "eagle3-no-ids"])
def test_every_fix_is_proven_under_both_versions_and_then_checks_clean(case, target, tmp_path, capsys):
    folder = tmp_path / "case"
    shutil.copytree(case, folder)
    extra = ["--target", str(target)] if target else []
    # Before: the check fails under both versions (or warns, for the drafters).
    assert main(["check", str(folder), "--transformers", VERSIONS, "--fail-on", "warning", *extra]) == 1
    assert main(["fix", str(folder), "--transformers", VERSIONS, "--write", *extra]) == 0, capsys.readouterr().err
    capsys.readouterr()
    assert main(["check", str(folder), "--transformers", VERSIONS, "--fail-on", "warning", *extra]) == 0, \
        capsys.readouterr().out
