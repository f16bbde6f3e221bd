"""The figure scripts keep running: bench/bench_real_configs.py crashed on a corpus config that the
check reads without a transformers class (`KeyError: 'minimax_m3'`, issue 35); bench/figures.py
regenerates every quoted figure, and its fast mode runs here."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT / "tests" / "data" / "real-configs"


def _bench(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def test_bench_real_configs_times_a_corpus_with_a_config_transformers_has_no_class_for(tmp_path, capsys):
    # Failed before the fix with KeyError: 'minimax_m3' (the check reads it; transformers has no class).
    for name in ("minimaxai--minimax-m3", "qwen--qwen3-8b"):
        if (REAL / name).is_dir():
            shutil.copytree(REAL / name, tmp_path / name)
    assert (tmp_path / "minimaxai--minimax-m3").is_dir()
    bench = _bench("bench_real_configs")
    assert bench.main(["--corpus", str(tmp_path), "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    assert "warm configs/s, transformers from_dict alone" in out


def test_the_figures_command_runs_in_its_fast_mode(tmp_path):
    import subprocess

    out = tmp_path / "figures.md"
    done = subprocess.run([sys.executable, "bench/figures.py", "--fast", "--out", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    text = out.read_text()
    assert "## real-configs (fast mode" in text and "## check (fast mode" in text
    assert "Measured 20" in text and "false-alarm rate" in text
    # Each section is dated with its time and states the machine's load around its run (issue 42).
    import re

    heads = re.findall(r"^Measured (\d{4}-\d\d-\d\d \d\d:\d\d UTC) .*?Load average \(1, 5, 15 min\) "
                       r"([\d.]+ / [\d.]+ / [\d.]+) before, ([\d.]+ / [\d.]+ / [\d.]+) after\.", text, re.M)
    assert len(heads) == 2, text[:2000]


def test_every_figure_names_a_script_that_exists():
    figures = _bench("figures")
    # The README's and docs' other figures have their scripts here too (issue 42).
    assert {"webhook", "audit", "acceptance", "suite"} <= set(figures.FIGURES)
    for name, (quoted, full, fast) in figures.FIGURES.items():
        assert (ROOT / full[0]).is_file() and full[0] == fast[0] and quoted, name


def test_the_gatherer_benchmark_runs_in_its_fast_mode(tmp_path):
    import subprocess

    if shutil.which("redis-server") is None:
        import pytest

        pytest.skip("redis-server is not installed")
    out = tmp_path / "figures.md"
    done = subprocess.run([sys.executable, "bench/figures.py", "--fast", "--only", "gatherer", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    report = out.read_text()
    assert "| blocking pop (now) | gatherer CPU s |" in report and "| poll every job (before) | Redis commands |" in report


def test_the_suites_time_is_measured_against_its_collection(capsys):
    bench = _bench("bench_suite")
    code = bench.main(["tests/test_release.py::test_the_changelog_has_an_entry_for_this_version", "--slowest", "2"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "| tests collected | 1 |" in out
    assert "baseline: collection alone" in out and "| pytest's summary | 1 passed in" in out


def test_only_replaces_its_own_sections_and_keeps_the_others():
    # `--only` wrote a file of its sections alone: docs/figures.md lost every other figure (the check's
    # and the drafter rules' sections were gone from it). The shipped file's sections survive a merge.
    figures = _bench("figures")
    shipped = (ROOT / "docs" / "figures.md").read_text()
    before = figures.split_sections(shipped)
    assert "real-configs" in before and "## Light check on the real-config corpus" in before["real-configs"]
    new = "## suite\n\nMeasured now.\n\n## The suite's own time\n\n| measure | value |\n"
    merged = figures.merge_sections(shipped, {"suite": new})
    after = figures.split_sections(merged)
    assert {k: v.rstrip("\n") for k, v in before.items()} == {k: after[k].rstrip("\n") for k in before}
    assert after["suite"].rstrip("\n") == new.rstrip("\n")
    assert list(after) == [name for name in figures.FIGURES if name in after]  # FIGURES' order
