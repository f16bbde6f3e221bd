"""tests/fixtures/built_once.py: a fixture trained at test time is built once per checkout, also when two
test processes (scripts/test.sh's two passes, side by side) ask for it at the same moment."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")  # the key holds torch's version

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "fixtures"))
import built_once  # noqa: E402

BUILDER = """
import sys, time
from pathlib import Path
sys.path.insert(0, {fixtures!r})
import built_once

def build(out, tag):
    with open({log!r}, "a") as f:
        f.write("build\\n")
    time.sleep(1.5)  # long enough that the second process asks while the first builds
    (out / "a").mkdir(parents=True)
    (out / "a" / "config.json").write_text(tag)
    return {{"healthy": out / "a"}}

got = built_once.once("demo", build, sys.argv[1])
print(got["healthy"], got["healthy"].joinpath("config.json").read_text())
"""


def test_two_processes_asking_at_once_build_it_once_and_both_read_it(tmp_path, monkeypatch):
    log = tmp_path / "builds.log"
    script = tmp_path / "ask.py"
    script.write_text(BUILDER.format(fixtures=str(HERE / "fixtures"), log=str(log)))
    env = {"DRAFTGUARD_FIXTURE_CACHE": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin"}
    procs = [subprocess.Popen([sys.executable, str(script), "x"], stdout=subprocess.PIPE, text=True, env=env)
             for _ in range(2)]
    outs = [p.communicate(timeout=120)[0].split() for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    assert log.read_text() == "build\n"  # one build, the other process waited for it
    assert outs[0] == outs[1] and outs[0][1] == "x"
    # Other arguments are another fixture: built afresh, beside the first.
    subprocess.run([sys.executable, str(script), "y"], check=True, env=env, capture_output=True)
    assert log.read_text() == "build\nbuild\n"


def test_a_build_that_died_half_way_is_never_read(tmp_path, monkeypatch):
    monkeypatch.setenv("DRAFTGUARD_FIXTURE_CACHE", str(tmp_path))
    calls = []

    def dies(out: Path) -> Path:
        calls.append(out)
        out.mkdir(parents=True)
        (out / "half").write_text("")
        raise KeyboardInterrupt

    def builds(out: Path) -> Path:
        calls.append(out)
        out.mkdir(parents=True)
        return out

    with pytest.raises(KeyboardInterrupt):
        built_once.once("demo", dies)
    got = built_once.once("demo", builds)
    assert len(calls) == 2 and not (got / "half").exists()  # the second call built again, from nothing
    assert built_once.once("demo", builds) == got and len(calls) == 2  # and a third read it


def test_the_key_changes_with_the_builders_sources(tmp_path, monkeypatch):
    before = built_once.sources_key("demo")
    fixtures = tmp_path / "tests" / "fixtures"
    fixtures.mkdir(parents=True)
    (tmp_path / "draftguard").mkdir()
    (fixtures / "make_x.py").write_text("STEPS = 1\n")
    monkeypatch.setattr(built_once, "ROOT", tmp_path)
    one = built_once.sources_key("demo")
    (fixtures / "make_x.py").write_text("STEPS = 2\n")
    assert built_once.sources_key("demo") != one != before
