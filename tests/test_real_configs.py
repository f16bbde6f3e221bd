"""The real-config corpus (tests/data/real-configs) is well formed: every folder holds a JSON
config.json with a model_type and a SOURCE note that says where it came from, with no config twice.
scripts/refresh_real_configs.py --check runs the same validation from the command line."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "data" / "real-configs"
SCRIPT = ROOT / "scripts" / "refresh_real_configs.py"
FOLDERS = sorted(p for p in CORPUS.iterdir() if p.is_dir())

_spec = importlib.util.spec_from_file_location("refresh_real_configs", SCRIPT)
refresh = importlib.util.module_from_spec(_spec)
sys.modules["refresh_real_configs"] = refresh
_spec.loader.exec_module(refresh)

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.mark.parametrize("folder", FOLDERS, ids=[p.name for p in FOLDERS])
def test_every_corpus_folder_has_a_parseable_source_and_config_with_model_type(folder):
    note = refresh.check_folder(folder)
    assert note.url.startswith(f"https://raw.githubusercontent.com/{note.repo}/{note.commit}/")
    assert isinstance(json.loads((folder / "config.json").read_text())["model_type"], str)


def test_corpus_holds_no_config_twice():
    assert refresh.check_corpus(CORPUS) == []


def test_check_mode_passes_on_the_corpus_and_fetches_nothing():
    done = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert f"{len(FOLDERS)} folders, 0 problems" in done.stdout


@pytest.mark.parametrize("text, says", [
    (f"repo: a/b\ncommit: {COMMIT}\n", "missing key 'path'"),
    (f"repo: a/b\npath: x.json\ncommit: abc\n", "40 lowercase hex"),
    (f"repo: not-a-repo\npath: x.json\ncommit: {COMMIT}\n", "owner/name"),
    (f"repo: a/b\npath: ../x.json\ncommit: {COMMIT}\n", "relative"),
    (f"repo: a/b\npath: x.json\ncommit: {COMMIT}\nformat: mlc-preset\n", "needs key 'key'"),
    (f"repo: a/b\npath: x.json\ncommit: {COMMIT}\nsha: 1\n", "SOURCE:4: unknown key 'sha'"),
    (f"repo: a/b\nrepo: a/c\npath: x.json\ncommit: {COMMIT}\n", "given twice"),
    (f"repo a/b\npath: x.json\ncommit: {COMMIT}\n", "SOURCE:1: expected 'key: value'"),
    (f"repo: a/b\npath: x.json\ncommit: {COMMIT}\ndrop: a\n", "only to format mlc-preset"),
])
def test_malformed_source_notes_are_refused_with_line_and_key(text, says):
    with pytest.raises(refresh.SourceNoteError) as caught:
        refresh.parse_source(text)
    assert says in str(caught.value)


def test_check_mode_reports_a_folder_without_model_type_and_exits_2(tmp_path):
    good = tmp_path / "good"
    good.mkdir()
    (good / "config.json").write_text('{"model_type": "llama"}')
    (good / "SOURCE").write_text(f"repo: a/b\npath: c/config.json\ncommit: {COMMIT}\n")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "config.json").write_text('{"hidden_size": 8}')
    (bad / "SOURCE").write_text(f"repo: a/b\npath: d/config.json\ncommit: {COMMIT}\n")
    done = subprocess.run([sys.executable, str(SCRIPT), "--check", "--corpus", str(tmp_path)],
                          capture_output=True, text=True)
    assert done.returncode == 2
    assert "bad/config.json: no string model_type" in done.stderr
    assert "good" not in done.stderr


def test_mlc_preset_notes_list_the_keys_mlc_added():
    note = refresh.parse_source(f"repo: a/b\npath: p.py\ncommit: {COMMIT}\nformat: mlc-preset\nkey: x\n"
                                "drop: context_window_size, prefill_chunk_size\n")
    assert note.drop == ("context_window_size", "prefill_chunk_size")


def test_mlc_preset_entries_are_read_without_running_the_file():
    source = b"import os\nMODEL_PRESETS = {'x': {'model_type': 'llama', 'rope_scaling': None, 'use_cache': True}}\n"
    assert refresh.mlc_preset(source, "x") == {"model_type": "llama", "rope_scaling": None, "use_cache": True}
    with pytest.raises(KeyError):
        refresh.mlc_preset(source, "y")


def test_corpus_is_large_and_broad_enough_to_stand_for_real_repos():
    model_types = {json.loads((f / "config.json").read_text())["model_type"] for f in FOLDERS}
    assert len(FOLDERS) >= 200
    assert len(model_types) >= 60
    # Both rope idioms: 4.x rope_theta/rope_scaling and 5.x rope_parameters, top level or nested.
    texts = [(f / "config.json").read_text() for f in FOLDERS]
    assert sum('"rope_parameters"' in t for t in texts) >= 10
    assert sum('"rope_scaling"' in t for t in texts) >= 10
    # Encoder-decoder configs that carry generation settings (issue 12, mechanism 5).
    assert {"bart", "m2m_100", "whisper", "t5"} <= model_types
