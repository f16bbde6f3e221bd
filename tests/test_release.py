"""Releases: the package version, CHANGELOG.md's newest entry and the version every example pins
agree, and every `uses:` a reader may copy from the docs is pinned to a commit."""

from __future__ import annotations

import re
from pathlib import Path

import draftguard

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "runner" / "README.md"]
WORKFLOWS = sorted((ROOT / "examples" / "workflows").glob("*.yml"))
USES = re.compile(r"^\s*-?\s*uses:\s*(\S+)(.*)$")


def uses_lines(path: Path) -> list[str]:
    """The `uses:` lines a reader copies: every one in a workflow, those in a doc's code blocks."""
    lines, in_code = [], path.suffix != ".md"
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif in_code and USES.match(line) and not line.strip().startswith("#"):
            lines.append(line)
    return lines


def test_the_changelog_has_an_entry_for_this_version():
    headings = re.findall(r"^## (\S+)", (ROOT / "CHANGELOG.md").read_text(), re.M)
    released = [h for h in headings if h != "Unreleased"]
    assert released[0] == draftguard.__version__


def test_every_uses_in_the_docs_is_pinned_to_a_commit_with_its_version():
    found = 0
    for path in DOCS + WORKFLOWS:
        for line in uses_lines(path):
            found += 1
            ref, comment = USES.match(line).groups()
            name, _, sha = ref.partition("@")
            assert re.fullmatch(r"[0-9a-f]{40}", sha), (path.name, line)
            assert comment.strip().startswith("# v"), (path.name, line)
    assert found >= 5  # docs/action.md's example and the shipped workflows are really read


def test_the_examples_pin_this_release_of_draftguard():
    tag = f"v{draftguard.__version__}"
    major = "v" + draftguard.__version__.split(".")[0]  # the moving tag, where the docs explain it
    mentions = []
    for path in DOCS + WORKFLOWS:
        for line in path.read_text().splitlines():
            if "OWNER/draftguard@" in line and "<sha>" not in line and "@0000..." not in line:
                mentions.append(line)
                assert re.search(r"OWNER/draftguard@([0-9A-Za-z.]+)", line).group(1) in (tag, major, "0" * 40), line
                if "@" + "0" * 40 in line:
                    assert f"# {tag}" in line, line
    assert len(mentions) >= 4


# --- installable as documented (issue 35) ----------------------------------------------------------

def test_no_hint_names_a_package_that_is_not_on_pypi():
    # The README installs from the clone: a hint must say the same, not `pip install 'draftguard[bot]'`.
    offenders = []
    for path in [*sorted((ROOT / "draftguard").rglob("*.py")), *DOCS, *sorted((ROOT / "runner").glob("*"))]:
        if path.is_file():
            text = path.read_text(errors="replace")
            offenders += [f"{path.relative_to(ROOT)}: {m}" for m in re.findall(r"pip install ['\"]draftguard\[[^\]]*\]['\"]", text)]
    assert offenders == []


def test_version_is_the_installed_packages():
    import subprocess
    import sys
    from importlib import metadata

    done = subprocess.run([sys.executable, "-m", "draftguard", "--version"], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == f"draftguard {metadata.version('draftguard')}"
    assert metadata.version("draftguard") == draftguard.__version__


def test_the_release_workflow_builds_checks_and_publishes_by_trusted_publishing():
    import yaml

    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "release.yml").read_text())
    on = workflow.get("on", workflow.get(True))
    assert on["push"]["tags"] == ["v[0-9]+.[0-9]+.[0-9]+"]
    [job] = workflow["jobs"].values()
    assert job["permissions"]["id-token"] == "write" and workflow["permissions"] == {}
    script = "\n".join(step.get("run", "") for step in job["steps"])
    assert "python -m build" in script and "twine check --strict dist/*" in script
    assert job["steps"][-1]["uses"].startswith("pypa/gh-action-pypi-publish@")
    assert "password" not in job["steps"][-1].get("with", {})  # no token: trusted publishing


def test_the_wheel_and_sdist_build_pass_twine_check_and_carry_the_rules_doc(tmp_path):
    import shutil
    import subprocess
    import sys
    import tarfile
    import zipfile

    import pytest

    import importlib.util

    for module in ("build", "twine"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed (it comes with the `test` extra)")
    tree = tmp_path / "tree"  # a copy of the tracked files: the build writes nothing into the checkout
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.split("\n")
    for name in filter(None, files):
        source = ROOT / name
        if source.is_symlink() or source.is_file():
            (tree / name).parent.mkdir(parents=True, exist_ok=True)
            if source.is_symlink():
                (tree / name).symlink_to(source.readlink())
            else:
                shutil.copy2(source, tree / name)
    dist = tmp_path / "dist"
    # --no-isolation: builds offline with the setuptools of this environment (CI has PyPI either way).
    built = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(tree)],
                           capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    [wheel] = dist.glob("*.whl")
    [sdist] = dist.glob("*.tar.gz")
    assert wheel.name == f"draftguard-{draftguard.__version__}-py3-none-any.whl"
    checked = subprocess.run([sys.executable, "-m", "twine", "check", "--strict", str(wheel), str(sdist)],
                             capture_output=True, text=True, timeout=120)
    assert checked.returncode == 0 and checked.stdout.count("PASSED") == 2, checked.stdout + checked.stderr
    rules = (ROOT / "docs" / "rules.md").read_bytes()
    schema = (ROOT / "docs" / "draftguard.schema.json").read_bytes()
    with zipfile.ZipFile(wheel) as zf:
        assert zf.read("draftguard/data/rules.md") == rules
        assert zf.read("draftguard/data/draftguard.schema.json") == schema
    with tarfile.open(sdist) as tf:
        member = tf.getmember(f"draftguard-{draftguard.__version__}/draftguard/data/rules.md")
        assert member.isfile() and tf.extractfile(member).read() == rules


def _pins(path: Path) -> dict[tuple[str, str], str]:
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            spec, _, marker = line.partition(";")
            name, _, version = spec.partition("==")
            pins[(name.strip().lower(), marker.strip())] = version.strip()
    return pins


def test_the_vllm_pins_are_the_base_pins_but_the_transformers_vllm_needs():
    # constraints.txt's transformers 5.24.0 cannot install beside vLLM 0.32 (it needs <5.20): with it,
    # pip resolves `.[runner,vllm]` to vLLM 0.30.0. constraints-vllm.txt pins vLLM 0.32.0 and
    # transformers 5.19.0 (`pip install --dry-run` resolves it, 2026-12-04), everything else as the base.
    base, with_vllm = _pins(ROOT / "constraints.txt"), _pins(ROOT / "constraints-vllm.txt")
    assert with_vllm[("vllm", "")] == "0.32.0" and with_vllm[("transformers", "")] == "5.19.0"
    for key, version in with_vllm.items():
        if key[0] not in ("vllm", "transformers"):
            assert base.get(key) == version, key
    assert "constraints-vllm.txt" in (ROOT / "docs" / "gpu-runner.md").read_text()
