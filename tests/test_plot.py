"""``accept --plot``: the per-position chart, drawn from the result (matplotlib is in the test extras)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")
matplotlib = pytest.importorskip("matplotlib")

from draftguard.cli import main  # noqa: E402

MODELS = Path(__file__).resolve().parent / "fixtures" / "models"
BAR_COLOUR = (0x3B, 0x7D, 0xD8)  # render.plot_per_position's bars


def bar_heights(png: Path) -> list[int]:
    """Pixel height of each bar, left to right, read back from the image."""
    import numpy as np
    from matplotlib import image

    rgb = (image.imread(str(png))[..., :3] * 255).round().astype(int)
    blue = (np.abs(rgb - np.array(BAR_COLOUR)).sum(-1) <= 6)
    columns = blue.sum(0)
    heights, run = [], []
    for h in list(columns) + [0]:
        if h:
            run.append(int(h))
        elif run:
            heights.append(max(run))
            run = []
    return heights


def test_plot_draws_one_bar_per_position_as_high_as_its_rate(tmp_path, capsys):
    png = tmp_path / "positions.png"
    code = main(["accept", "--target", str(MODELS / "target"), "--drafter", str(MODELS / "drafter-layers-off"),
                 "--prompts", str(MODELS / "prompts.jsonl"), "--num-prompts", "6", "--max-new-tokens", "32",
                 "--quiet", "--format", "json", "--plot", str(png), "--settings", str(tmp_path)])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rates = out["per_position_acceptance"]
    heights = bar_heights(png)
    assert len(heights) == len(rates) == 3
    # The axis runs 0..1 over the same pixels for every bar: height / rate is one constant.
    drawn = [h for h, r in zip(heights, rates) if r > 0.05]
    scale = [h / r for h, r in zip(heights, rates) if r > 0.05]
    assert len(drawn) >= 2 and max(scale) / min(scale) < 1.1, (heights, rates)
