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


def test_every_uses_in_the_docs_is_pinned_to_a_commit_with_its_version_or_is_local():
    found = local = 0
    for path in DOCS + WORKFLOWS:
        for line in uses_lines(path):
            found += 1
            ref, comment = USES.match(line).groups()
            if ref.startswith("./"):  # draftguard from a copy of a clone (docs/action.md, "From a clone")
                local += 1
                assert ref.rstrip("/").endswith(".github/actions/draftguard"), (path.name, line)
                continue
            name, _, sha = ref.partition("@")
            assert re.fullmatch(r"[0-9a-f]{40}", sha), (path.name, line)
            assert comment.strip().startswith("# v"), (path.name, line)
    assert found >= 5  # docs/action.md's example and the shipped workflows are really read
    assert local >= 3  # docs/action.md's example, the light and the GPU workflows


# Where a text names one of draftguard's own tags: a pre-commit rev, an action or pip ref, a tag ref,
# a tag command, or the package's own version written as its tag.
TAG_MENTIONS = [r"\brev:\s*['\"]?(v\d[\w.]*)", r"draftguard@(v\d[\w.]*)", r"refs/tags/(v\d[\w.]*)",
                r"\bgit tag\b[^`\n]*?\b(v\d+(?:\.\d+)*)\b", r"draftguard@[0-9a-f]{40}\s*#\s*(v\d[\w.]*)",
                rf"(?<![\w/:@.-])(v{re.escape(draftguard.__version__)})\b"]
TEXTS = [*DOCS, *WORKFLOWS, ROOT / "CHANGELOG.md", ROOT / ".pre-commit-hooks.yaml", ROOT / "action.yml",
         ROOT / "bot" / "README.md", *sorted((ROOT / "draftguard").glob("*.py"))]


def named_tags(text: str) -> list[str]:
    return [m.group(1) for pattern in TAG_MENTIONS for m in re.finditer(pattern, text)]


def test_named_tags_are_found_where_a_snippet_names_one():
    # The patterns really match what the docs used to say (issue 42: every snippet named v0.2.0).
    old = ("  rev: v0.2.0\n- uses: OWNER/draftguard@0000000000000000000000000000000000000000 # v0.2.0\n"
           "pip install 'draftguard @ git+https://github.com/OWNER/draftguard@v0.2.0'\n"
           "git tag -fa v0 -m latest && git push -f origin v0\n")
    assert set(named_tags(old)) == {"v0.2.0", "v0"}
    assert named_tags("vllm/vllm-openai:v0.10.1 `uvx vllm@v0.9.1 serve`") == []


def test_no_text_names_a_tag_that_does_not_exist():
    import subprocess

    import pytest

    listed = subprocess.run(["git", "-C", str(ROOT), "tag", "-l"], capture_output=True, text=True)
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    tags = set(listed.stdout.split())
    missing = [f"{path.relative_to(ROOT)}: {tag}" for path in TEXTS if path.exists()
               for tag in named_tags(path.read_text()) if tag not in tags]
    assert missing == []


def test_one_place_names_the_home_and_the_rest_follow_it():
    from draftguard.report import sarif
    from draftguard.settings import settings_schema

    assert draftguard.HOME.startswith("https://github.com/") and "OWNER" not in draftguard.HOME
    urls = re.search(r"^\[project\.urls\]\n((?:.+\n)+)", (ROOT / "pyproject.toml").read_text(), re.M).group(1)
    assert f'Homepage = "{draftguard.HOME}"' in urls
    assert all(draftguard.HOME in line for line in urls.splitlines() if "=" in line and not line.startswith("#"))
    assert sarif.DOCS_URL.startswith(draftguard.HOME + "/")
    assert settings_schema()["$id"].startswith(draftguard.RAW_HOME + "/")
    # No other address for draftguard's repository anywhere a reader copies from.
    other = re.compile(r"(?:github\.com|githubusercontent\.com)/([\w.-]+/draftguard)\b")
    home_repo = draftguard.HOME.split("github.com/", 1)[1]
    stray = [f"{path.relative_to(ROOT)}: {m.group(0)}"
             for path in [*TEXTS, ROOT / "docs" / "draftguard.schema.json", ROOT / "runner" / "README.md",
                          *sorted((ROOT / "draftguard").rglob("*.py"))]
             for m in other.finditer(path.read_text()) if m.group(1) != home_repo]
    assert stray == []


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
    assert set(on) == {"workflow_dispatch"}  # run on the default branch; it makes the tags itself
    [job] = workflow["jobs"].values()
    assert job["permissions"]["id-token"] == "write" and workflow["permissions"] == {}
    assert job["permissions"]["contents"] == "write"
    script = "\n".join(step.get("run", "") for step in job["steps"])
    assert "python -m build" in script and "twine check --strict dist/*" in script
    # The tags docs/action.md documents: vX.Y.Z created on this commit, the major tag moved to it,
    # after the build is checked and before publishing.
    names = [step.get("name", step.get("uses", "")) for step in job["steps"]]
    tagging = names.index("Tag the release and move the major tag")
    assert names.index("Version, changelog, build and check") < tagging < len(names) - 1
    tag_script = job["steps"][tagging]["run"]
    assert 'ref=refs/tags/$TAG' in tag_script and "git/refs/tags/$MAJOR" in tag_script and "force=true" in tag_script
    assert 'echo "major=v${version%%.*}"' in script and 'echo "tag=v$version"' in script
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


def test_the_documented_copy_of_a_clone_is_an_action_that_installs(tmp_path):
    # docs/action.md's "From a clone": the copy a model repository's `uses: ./.github/actions/draftguard`
    # runs holds action.yml, what its install step reads, and a package that builds.
    import subprocess
    import sys

    import pytest
    import yaml

    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode != 0:
        pytest.skip("not a git checkout: the copy is taken at a commit")
    doc = (ROOT / "docs" / "action.md").read_text().split("## From a clone", 1)[1]
    script = doc.split("```bash\n", 1)[1].split("```", 1)[0]
    assert "git -C /path/to/draftguard archive <commit>" in script
    # The README's snippet is the same copy, plus the example workflow that uses it.
    readme = (ROOT / "README.md").read_text().split("## Where reviewers look", 1)[1]
    readme_script = readme.split("```bash\n", 1)[1].split("```", 1)[0]
    copy_lines = [line for line in script.splitlines() if not line.startswith("git add")]
    assert readme_script.startswith("\n".join(copy_lines) + "\n"), (readme_script, script)
    script = readme_script
    script = script.replace("/path/to/draftguard", str(ROOT)).replace("<commit>", head.stdout.strip())
    model = tmp_path / "model-repo"
    model.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=model, check=True)
    subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=model, check=True, timeout=120)
    copy = model / ".github" / "actions" / "draftguard"
    workflow = yaml.safe_load((model / ".github" / "workflows" / "draftguard.yml").read_text())
    uses = [step.get("uses", "") for job in workflow["jobs"].values() for step in job["steps"]]
    assert "./.github/actions/draftguard" in uses  # the copied workflow runs the copy
    action = (copy / "action.yml").read_text()
    assert "$GITHUB_ACTION_PATH/constraints.txt" in action and (copy / "constraints.txt").is_file()
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                            "-w", str(tmp_path / "wheel"), str(copy)], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-2000:]
    [wheel] = (tmp_path / "wheel").glob("draftguard-*.whl")
    import zipfile

    assert "draftguard/data/rules.md" in zipfile.ZipFile(wheel).namelist()
