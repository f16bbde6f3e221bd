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


def test_every_figure_names_a_script_that_exists():
    figures = _bench("figures")
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
