"""Our own workflows pass a workflow security linter, and the Action can be used twice in one job."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
WORKFLOWS = sorted((ROOT / "examples" / "workflows").glob("*.yml"))


def zizmor() -> str:
    found = shutil.which("zizmor", path=str(Path(sys.executable).parent)) or shutil.which("zizmor")
    if found is None:
        pytest.skip("zizmor is not installed (it is in the test extra: pip install -e '.[test]')")
    return found


def test_zizmor_finds_nothing_in_action_yml_and_the_example_workflows():
    # Offline: no GitHub API calls; every audit that needs none runs, at the default persona.
    done = subprocess.run([zizmor(), "--offline", "--no-progress", "--format", "plain", str(ROOT / "action.yml"),
                           *map(str, WORKFLOWS), *map(str, sorted((ROOT / ".github" / "workflows").glob("*.yml")))],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "No findings to report" in done.stdout + done.stderr


def test_zizmor_still_catches_what_we_fixed(tmp_path):
    # The linter is really looking: the unfixed light-check workflow fails it.
    bad = tmp_path / "bad.yml"
    bad.write_text((ROOT / "examples/workflows/draftguard.yml").read_text()
                   .replace("@11d5960a326750d5838078e36cf38b85af677262 # v4.4.0", "@v4")
                   .replace("persist-credentials: false", "fetch-tags: false"))
    done = subprocess.run([zizmor(), "--offline", "--no-progress", "--format", "plain", str(bad)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "unpinned-uses" in done.stdout and "artipacked" in done.stdout


def test_every_uses_is_pinned_to_a_commit_with_its_version_in_a_comment():
    # ...but draftguard itself, used from a copy of a clone in the model repository (docs/action.md).
    for path in [ROOT / "action.yml", *WORKFLOWS]:
        for line in path.read_text().splitlines():
            if "uses:" in line and not line.strip().startswith("#"):
                ref = line.split("uses:", 1)[1].strip()
                if ref.startswith("./"):
                    assert ref.split()[0].endswith(".github/actions/draftguard"), (path.name, line)
                    continue
                name, _, rest = ref.partition("@")
                sha, _, comment = rest.partition(" # ")
                assert len(sha) == 40 and all(c in "0123456789abcdef" for c in sha), (path.name, line)
                assert comment.startswith("v"), (path.name, line)


def _install_step() -> dict:
    action = yaml.safe_load((ROOT / "action.yml").read_text())
    return next(s for s in action["runs"]["steps"] if s.get("id") == "install")


def test_the_action_installs_once_and_can_be_used_twice_in_one_job(tmp_path):
    """The install step, run twice as two `uses:` of the action in one job would: the second reuses
    the first's venv instead of failing on it. A small stand-in package keeps this quick; uv is the
    version the action pins, from PyPI."""
    step = _install_step()
    pkg = tmp_path / "action"
    (pkg / "standin").mkdir(parents=True)
    (pkg / "standin" / "__init__.py").write_text("def main():\n    print('standin')\n")
    (pkg / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "standin"\nversion = "0"\n[project.optional-dependencies]\naction = []\n'
        '[project.scripts]\ndraftguard = "standin:main"\n')
    (pkg / "constraints.txt").write_text("")
    out = tmp_path / "github_output"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PIP_"))}
    env.update({"MODE": "check", "SETUP_PYTHON": sys.executable, "UV_VERSION": str(step["env"]["UV_VERSION"]),
                "RUNNER_TEMP": str(tmp_path / "runner-temp"), "GITHUB_ACTION_PATH": str(pkg),
                "GITHUB_OUTPUT": str(out)})
    (tmp_path / "runner-temp").mkdir()
    runs = [subprocess.run(["bash", "-e", "-c", step["run"]], env=env, capture_output=True, text=True, timeout=600)
            for _ in range(2)]
    if runs[0].returncode != 0 and "uv==" in runs[0].stderr and "Could not" in runs[0].stderr:
        pytest.skip(f"uv could not be installed from PyPI here: {runs[0].stderr[-300:]}")
    assert [r.returncode for r in runs] == [0, 0], [r.stderr[-2000:] for r in runs]
    assert "installed already" in runs[1].stdout
    bins = [line.split("=", 1)[1] for line in out.read_text().splitlines() if line.startswith("bin=")]
    assert len(bins) == 2 and bins[0] == bins[1]
    assert subprocess.run([bins[1]], capture_output=True, text=True).stdout.strip() == "standin"


def test_the_app_manifest_asks_for_the_least_and_documents_each_permission():
    import json

    manifest = json.loads((ROOT / "bot/github-app-manifest.json").read_text())
    permissions = manifest["default_permissions"]
    # Comments and reactions on a pull request need pull_requests, not issues.
    assert permissions == {"checks": "write", "contents": "read", "metadata": "read", "pull_requests": "write"}
    assert set(manifest["default_events"]) == {"pull_request", "issue_comment", "check_run"}
    readme = (ROOT / "bot/README.md").read_text()
    for name, level in permissions.items():
        assert f"| {name.replace('_', ' ')}: {level} |" in readme, name


# --- the GPU workflow's gate, run as the runner runs it (bash, with a stand-in `gh` on PATH) -------

HEAD_SHA = "ab12cd3" + "4" * 33
TWIN = "ab12cd3" + "9" * 33  # another commit with the same 7-character prefix


def _gate(tmp_path: Path, body: str, head: str = HEAD_SHA, permission: str = "write") -> dict[str, str]:
    """Run the gate's ``decide`` step of examples/workflows/draftguard-gpu.yml for an issue comment
    by a commenter with ``permission``, on a pull request whose head is ``head``; its outputs."""
    flow = yaml.safe_load((ROOT / "examples/workflows/draftguard-gpu.yml").read_text())
    script = next(s for s in flow["jobs"]["gate"]["steps"] if s.get("id") == "decide")["run"]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    gh = bin_dir / "gh"
    gh.write_text(f"#!/bin/sh\ncase \"$2\" in */permission) echo {permission};; */pulls/*) echo {head};; esac\n")
    gh.chmod(0o755)
    out = tmp_path / "out"
    out.write_text("")
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "GITHUB_OUTPUT": str(out), "EVENT": "issue_comment",
           "REPO": "acme/m", "NUMBER": "7", "COMMENTER": "mona", "BODY": body, "GH_TOKEN": "x", "PR_SHA": ""}
    done = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return dict(line.split("=", 1) for line in out.read_text().splitlines())


def test_the_gpu_gate_approves_only_the_full_sha_of_the_current_head(tmp_path):
    assert _gate(tmp_path, f"/recheck {HEAD_SHA}") == {"ok": "true", "sha": HEAD_SHA}
    assert _gate(tmp_path, f"/recheck {HEAD_SHA}\r\nthanks") == {"ok": "true", "sha": HEAD_SHA}
    # B7: a 7-character sha; a different commit with the same prefix was approved before.
    assert _gate(tmp_path, "/recheck ab12cd3", head=TWIN)["ok"] == "false"
    assert _gate(tmp_path, "/recheck ab12cd3")["ok"] == "false"
    # R9: a bare /recheck (whatever head is there when the gate runs) and a sentence are no command.
    assert _gate(tmp_path, "/recheck")["ok"] == "false"
    assert _gate(tmp_path, "/recheck is flaky on this runner")["ok"] == "false"
    assert _gate(tmp_path, f"/rechecking {HEAD_SHA}")["ok"] == "false"
    assert _gate(tmp_path, f"/recheck {HEAD_SHA}", head=TWIN)["ok"] == "false"
    assert _gate(tmp_path, f"/recheck {HEAD_SHA}", permission="read")["ok"] == "false"
