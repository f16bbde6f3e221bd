"""The GitHub Action as a runner runs it: ``draftguard action`` in a subprocess, with a synthesized
event file, a real git checkout (base and head commits changing a config.json), the runner's
GITHUB_* files, and PyGithub talking to a fake GitHub REST API on loopback."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from draftguard.action import INPUTS, OUTPUTS, glob_regex
from draftguard.report.comment import MARKER, parse_sticky, render_acceptance_section, update_sticky
from draftguard.snapshot import key_lines

pytest.importorskip("github")

from tests.fakes.github import FakeGitHub  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "ghp_ACTIONtoken0123456789abcdef"
REPO = "acme/drafter"

DRAFTER = json.loads((ROOT / "examples/qwen3-swa-drafter/config.json").read_text())
# As in the bot's tests: the base already disagrees on rope_scaling (findings that are not new); the
# head drops use_sliding_window, so the Qwen3Config gate takes the window away (new findings).
BASE_CONFIG = json.dumps(dict(DRAFTER, use_sliding_window=True, rope_scaling={"rope_type": "linear", "factor": 2.0}), indent=2)
HEAD_CONFIG = json.dumps(dict(DRAFTER, rope_scaling={"rope_type": "linear", "factor": 2.0}), indent=2)
FIXED_CONFIG = json.dumps(dict(DRAFTER, use_sliding_window=True), indent=2)
WINDOW_DROPPED = json.dumps(DRAFTER, indent=2)  # the window's gate left out, nothing else changed
HEALTHY = (ROOT / "tests/data/healthy/qwen3-8b.json").read_text()


def git(repo: Path, *args: str) -> str:
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.com", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@example.com")
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env).stdout


def commit(repo: Path, files: dict[str, str], message: str) -> str:
    for path, text in files.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD").strip()


class Checkout:
    """A git repo with a base commit on main and a pull request branch, like actions/checkout leaves."""

    def __init__(self, tmp: Path, base_files: dict[str, str]):
        self.dir = tmp / "work"
        self.dir.mkdir()
        git(self.dir, "init", "-q", "-b", "main")
        self.base = commit(self.dir, base_files, "base")
        git(self.dir, "checkout", "-q", "-b", "feature")
        self.head = self.base

    def push(self, files: dict[str, str], message: str = "change") -> str:
        self.head = commit(self.dir, files, message)
        return self.head


class Run:
    def __init__(self, done: subprocess.CompletedProcess, summary: Path, output: Path):
        self.code, self.stdout, self.stderr = done.returncode, done.stdout, done.stderr
        self.summary = summary.read_text() if summary.exists() else ""
        self.outputs = parse_outputs(output.read_text()) if output.exists() else {}

    def annotations(self, level: str = "error") -> list[str]:
        return [line for line in self.stdout.splitlines() if line.startswith(f"::{level} ")]


def parse_outputs(text: str) -> dict[str, str]:
    """Read a GITHUB_OUTPUT file as the runner does: ``name=value`` or ``name<<DELIM ... DELIM``."""
    out, lines, i = {}, text.split("\n"), 0
    while i < len(lines):
        line = lines[i]
        if "<<" in line:
            name, delim = line.split("<<", 1)
            end = lines.index(delim, i + 1)
            out[name] = "\n".join(lines[i + 1:end])
            i = end + 1
        elif "=" in line:
            name, value = line.split("=", 1)
            out[name] = value
            i += 1
        else:
            i += 1
    return out


def event_file(tmp: Path, checkout: Checkout, number: int = 7, fork: bool = False) -> Path:
    head_repo = "mallory/drafter" if fork else REPO
    event = {
        "action": "synchronize", "number": number,
        "pull_request": {"number": number, "head": {"sha": checkout.head, "ref": "feature",
                                                     "repo": {"full_name": head_repo, "fork": fork}},
                         "base": {"sha": checkout.base, "ref": "main", "repo": {"full_name": REPO}}},
        "repository": {"full_name": REPO},
    }
    path = tmp / f"event-{checkout.head[:8]}.json"
    path.write_text(json.dumps(event))
    return path


def run_action(tmp: Path, checkout: Checkout, api: FakeGitHub | None, *, event: Path | None = None,
               event_name: str = "pull_request", extra_env: dict[str, str] | None = None, **inputs: str) -> Run:
    summary, output = tmp / "summary.md", tmp / "output.txt"
    for f in (summary, output):
        f.unlink(missing_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "INPUT_", "RUNNER_"))}
    env.update({
        "GITHUB_ACTIONS": "true",
        "GITHUB_EVENT_NAME": event_name,
        "GITHUB_EVENT_PATH": str(event or event_file(tmp, checkout)),
        "GITHUB_REPOSITORY": REPO,
        "GITHUB_API_URL": api.url if api else "http://127.0.0.1:9",
        "GITHUB_STEP_SUMMARY": str(summary),
        "GITHUB_OUTPUT": str(output),
        "GITHUB_SHA": checkout.head,
        "GITHUB_BASE_REF": "main",
        "GITHUB_WORKSPACE": str(checkout.dir),
        "RUNNER_TEMP": str(tmp),
        "HF_HUB_OFFLINE": "1",
        "DRAFTGUARD_RETRY_BASE": "0.1",
        "INPUT_MODE": "check",
        "INPUT_COMMENT": "true",
        "INPUT_GITHUB_TOKEN": TOKEN,
        "PYTHONPATH": str(ROOT),
    })
    env.update({"INPUT_" + k.upper(): v for k, v in inputs.items()})
    env.update(extra_env or {})  # the runner's own environment (a token, the Hub's endpoint)
    done = subprocess.run([sys.executable, "-m", "draftguard", "action"], cwd=checkout.dir, env=env,
                          capture_output=True, text=True, timeout=120)
    return Run(done, summary, output)


@pytest.fixture()
def api():
    fake = FakeGitHub(token=TOKEN).start()
    fake.add_repo(REPO)
    yield fake
    fake.stop()


def add_pull(api: FakeGitHub, checkout: Checkout, number: int = 7) -> None:
    api.add_pull(REPO, number, head=checkout.head, base=checkout.base, changed=[])


def line_of(text: str, key: str) -> int:
    return key_lines(text)[key]


# --- the light check on a pull request ----------------------------------------------------------

def test_pull_request_annotations_summary_outputs_and_one_sticky_comment_edited_in_place(tmp_path, api):
    checkout = Checkout(tmp_path, {"README.md": "hi\n", "drafter/config.json": BASE_CONFIG})
    checkout.push({"drafter/config.json": HEAD_CONFIG, "README.md": "hello\n"})
    add_pull(api, checkout)

    first = run_action(tmp_path, checkout, api)
    assert first.code == 1, first.stderr
    assert "Traceback" not in first.stderr
    # Annotations sit on the head file's lines, named as the repo names them.
    errors = first.annotations("error")
    window = [a for a in errors if a.startswith("::error file=drafter/config.json,") and "%3A sliding_window::" in a]
    assert window, first.stdout
    assert f"line={line_of(HEAD_CONFIG, 'sliding_window')}," in window[0]
    assert any(a.startswith("::error title=draftguard::draftguard: ") for a in errors)  # the job's verdict
    # The step summary is the comment's light section: new findings marked against the base.
    assert "### Light check at `" + checkout.head[:12] + "` against base `" + checkout.base[:12] + "`" in first.summary
    assert "new in this pull request" in first.summary and "**new**" in first.summary
    # Outputs: counts, verdict, and a report file that holds the findings.
    report = json.loads(Path(first.outputs["report-json"]).read_text())
    assert first.outputs["verdict"] == "fail"
    assert int(first.outputs["errors"]) == report["summary"]["error"] > 0
    assert int(first.outputs["warnings"]) == report["summary"]["warning"]
    assert {f["file"] for f in report["findings"]} == {"drafter/config.json"}
    # One sticky comment, the bot's format.
    comments = api.comments_on(REPO, 7)
    assert len(comments) == 1 and comments[0]["body"].startswith(MARKER)
    sections = parse_sticky(comments[0]["body"])
    assert set(sections) == {"light"} and "sliding_window" in sections["light"]

    # A push that fixes the window: the same comment is edited, nothing new is posted.
    checkout.push({"drafter/config.json": FIXED_CONFIG}, "fix the window")
    api.repos[REPO].pulls[7]["head"] = checkout.head
    second = run_action(tmp_path, checkout, api)
    comments = api.comments_on(REPO, 7)
    assert len(comments) == 1 and comments[0].get("edits") == 1
    assert checkout.head[:12] in comments[0]["body"]
    assert api.count("POST", r"/issues/7/comments$") == 1
    assert second.outputs["verdict"] == ("fail" if second.code else "pass")
    assert not [a for a in second.annotations("error") if "sliding_window" in a]


def test_the_action_keeps_the_bots_acceptance_section(tmp_path, api):
    checkout = Checkout(tmp_path, {"drafter/config.json": BASE_CONFIG})
    checkout.push({"drafter/config.json": HEAD_CONFIG})
    add_pull(api, checkout)
    queued = render_acceptance_section("queued", detail="waiting for a GPU worker")
    existing = api.add_comment(REPO, 7, update_sticky(None, acceptance=queued), user="draftguard[bot]", user_type="Bot")
    api.add_comment(REPO, 7, "looks good to me", user="alice")

    run = run_action(tmp_path, checkout, api)
    assert run.code == 1
    stickies = [c for c in api.comments_on(REPO, 7) if c["body"].startswith(MARKER)]
    assert [c["id"] for c in stickies] == [existing["id"]]
    sections = parse_sticky(stickies[0]["body"])
    assert sections["acceptance"] == queued and "Light check" in sections["light"]


def test_two_uses_in_one_job_keep_a_section_each(tmp_path, api):
    # One job, two steps: the drafter folder and the target folder, each checked by its own use.
    checkout = Checkout(tmp_path, {"drafter/config.json": BASE_CONFIG, "target/config.json": HEALTHY})
    checkout.push({"drafter/config.json": HEAD_CONFIG,
                   "target/config.json": HEALTHY.replace('"rms_norm_eps": 1e-06', '"rms_norm_eps": 1e-05')})
    add_pull(api, checkout)
    first = run_action(tmp_path, checkout, api, paths="drafter/config.json")
    second = run_action(tmp_path, checkout, api, paths="target/config.json", fail_on="never")
    assert (first.code, second.code) == (1, 0), (first.stderr, second.stderr)
    comments = api.comments_on(REPO, 7)
    assert len(comments) == 1
    sections = parse_sticky(comments[0]["body"])
    lights = {name: text for name, text in sections.items() if name.startswith("light.")}
    assert len(lights) == 2, sorted(sections)
    drafter = next(text for text in lights.values() if "drafter/config.json" in text.splitlines()[0])
    target = next(text for text in lights.values() if "target/config.json" in text.splitlines()[0])
    assert "sliding_window" in drafter and "sliding_window" not in target
    # A third run of the first use edits its own section, and leaves the other's alone.
    run_action(tmp_path, checkout, api, paths="drafter/config.json", section="")
    again = parse_sticky(api.comments_on(REPO, 7)[0]["body"])
    assert {n for n in again if n.startswith("light.")} == set(lights) and again[next(
        n for n in lights if lights[n] == target)] == target


def test_the_section_input_names_a_uses_sections_and_must_be_a_plain_name(tmp_path, api):
    checkout = Checkout(tmp_path, {"drafter/config.json": BASE_CONFIG})
    checkout.push({"drafter/config.json": HEAD_CONFIG})
    add_pull(api, checkout)
    run = run_action(tmp_path, checkout, api, section="spec-drafter")
    assert run.code == 1
    sections = parse_sticky(api.comments_on(REPO, 7)[0]["body"])
    assert set(sections) == {"light.spec-drafter"} and "`spec-drafter`" not in sections["light.spec-drafter"]
    assert "<code>spec-drafter</code>" in sections["light.spec-drafter"].splitlines()[0]
    bad = run_action(tmp_path, checkout, api, section="Spec Drafter")
    assert bad.code == 2 and "input `section`" in bad.stdout and "Traceback" not in bad.stderr


def test_fork_pull_request_with_a_read_only_token_still_reports_and_does_not_fail_for_it(tmp_path, api):
    checkout = Checkout(tmp_path, {"model/config.json": HEALTHY})
    checkout.push({"model/config.json": HEALTHY.replace('"rms_norm_eps": 1e-06', '"rms_norm_eps": 1e-05')})
    add_pull(api, checkout)
    api.fail("POST", r"/issues/\d+/comments$", "forbidden", times=10)

    run = run_action(tmp_path, checkout, api, event=event_file(tmp_path, checkout, fork=True))
    assert run.code == 0, run.stdout + run.stderr
    assert api.comments_on(REPO, 7) == []
    said = [line for line in run.stdout.splitlines() if "no pull request comment" in line]
    assert len(said) == 1 and said[0].startswith("::notice ") and "read-only" in said[0]
    assert "403" in said[0] and TOKEN not in run.stdout + run.stderr
    assert not run.annotations("error")
    assert "### Light check" in run.summary and "read-only token" in run.summary
    assert run.outputs["verdict"] == "pass" and run.outputs["errors"] == "0"


def test_a_fork_with_findings_fails_for_the_findings_only(tmp_path, api):
    checkout = Checkout(tmp_path, {"drafter/config.json": BASE_CONFIG})
    checkout.push({"drafter/config.json": HEAD_CONFIG})
    add_pull(api, checkout)
    api.fail("POST", r"/issues/\d+/comments$", "forbidden", times=10)
    run = run_action(tmp_path, checkout, api, event=event_file(tmp_path, checkout, fork=True))
    assert run.code == 1
    assert [a for a in run.annotations("error") if "sliding_window" in a]
    assert not [a for a in run.annotations("error") if "could not comment" in a]
    assert sum("no pull request comment" in line for line in run.stdout.splitlines()) == 1


def window_dropped_pull(tmp_path: Path, api: FakeGitHub) -> Checkout:
    """Pull request 7, whose head leaves out the window's gate (a fix draftguard proves), with the
    files and patch the pull request files API gives."""
    checkout = Checkout(tmp_path, {"drafter/config.json": FIXED_CONFIG})
    checkout.push({"drafter/config.json": WINDOW_DROPPED})
    api.set_files(REPO, checkout.base, {"drafter/config.json": FIXED_CONFIG})
    api.set_files(REPO, checkout.head, {"drafter/config.json": WINDOW_DROPPED})
    api.add_pull(REPO, 7, head=checkout.head, base=checkout.base)
    return checkout


def test_the_proven_fix_is_a_one_click_suggestion_on_a_same_repository_pull_request(tmp_path, api):
    # The bot's suggested changes (tests/test_fix_bot.py), from the Action: one review on the head,
    # the suggestion on the changed config's line, never twice across runs, none on a fork's.
    checkout = window_dropped_pull(tmp_path, api)

    first = run_action(tmp_path, checkout, api)
    assert first.code == 1, first.stderr
    [comment] = [c for c in api.review_comments_on(REPO, 7) if "```suggestion" in c["body"]]
    assert comment["path"] == "drafter/config.json" and comment["side"] == "RIGHT"
    block = comment["body"].split("```suggestion\n", 1)[1].split("\n```", 1)[0]
    assert '"use_sliding_window": true' in block
    # Committing it gives a file without the window's findings.
    lines = WINDOW_DROPPED.splitlines()
    start = comment["start_line"] or comment["line"]
    fixed = "\n".join(lines[:start - 1] + block.split("\n") + lines[comment["line"]:])
    assert json.loads(fixed) == json.loads(FIXED_CONFIG)
    [review] = [r for r in api.reviews if r["number"] == 7]
    assert review["commit_id"] == checkout.head and review["event"] == "COMMENT"

    again = run_action(tmp_path, checkout, api)
    assert again.code == 1 and len([r for r in api.reviews if r["number"] == 7]) == 1

    off = run_action(tmp_path, checkout, api, event=event_file(tmp_path, checkout, number=7, fork=True))
    assert off.code == 1 and len([r for r in api.reviews if r["number"] == 7]) == 1
    assert TOKEN not in first.stdout + first.stderr + again.stdout + off.stdout


def test_suggestions_false_posts_no_review(tmp_path, api):
    checkout = window_dropped_pull(tmp_path, api)
    run = run_action(tmp_path, checkout, api, suggestions="false")
    assert run.code == 1 and api.reviews == [] and len(api.comments_on(REPO, 7)) == 1


def test_transient_github_faults_are_retried(tmp_path, api):
    checkout = Checkout(tmp_path, {"model/config.json": HEALTHY})
    checkout.push({"model/config.json": HEALTHY.replace("1e-06", "1e-05")})
    add_pull(api, checkout)
    api.fail("POST", r"/issues/\d+/comments$", "502", times=1)
    run = run_action(tmp_path, checkout, api)
    assert run.code == 0, run.stdout + run.stderr
    assert len(api.comments_on(REPO, 7)) == 1


def test_bad_credentials_fail_plainly_and_keep_the_summary(tmp_path, api):
    checkout = Checkout(tmp_path, {"model/config.json": HEALTHY})
    checkout.push({"model/config.json": HEALTHY.replace("1e-06", "1e-05")})
    add_pull(api, checkout)
    run = run_action(tmp_path, checkout, api, github_token="ghp_wrongtoken_abcdef123")
    assert run.code == 1
    failed = run.annotations("error")
    assert len(failed) == 1 and "could not comment" in failed[0] and "401" in failed[0]
    assert "ghp_wrongtoken_abcdef123" not in run.stdout + run.stderr
    assert "### Light check" in run.summary and run.outputs["verdict"] == "pass"


def test_a_shallow_checkout_fetches_the_base_and_a_push_diffs_against_before(tmp_path, api):
    origin = Checkout(tmp_path, {"drafter/config.json": BASE_CONFIG, "other/config.json": HEAD_CONFIG})
    origin.push({"drafter/config.json": HEAD_CONFIG})
    # What actions/checkout leaves by default: one commit, with the base only on the remote.
    shallow = tmp_path / "shallow"
    subprocess.run(["git", "clone", "-q", "--depth", "1", "--branch", "feature", f"file://{origin.dir}", str(shallow)],
                   check=True, capture_output=True)
    assert subprocess.run(["git", "-C", str(shallow), "cat-file", "-e", f"{origin.base}^{{commit}}"]).returncode != 0
    clone = Checkout.__new__(Checkout)
    clone.dir, clone.base, clone.head = shallow, origin.base, origin.head
    add_pull(api, clone)
    run = run_action(tmp_path, clone, api, comment="false")
    assert f"against base `{origin.base[:12]}`" in run.summary, run.stdout + run.stderr
    report = json.loads(Path(run.outputs["report-json"]).read_text())
    assert [t["file"] for t in report["targets"]] == ["drafter/config.json"]

    push = tmp_path / "push.json"
    push.write_text(json.dumps({"before": origin.base, "after": origin.head, "repository": {"full_name": REPO}}))
    run = run_action(tmp_path, origin, api, event=push, event_name="push")
    report = json.loads(Path(run.outputs["report-json"]).read_text())
    assert [t["file"] for t in report["targets"]] == ["drafter/config.json"]
    assert run.code == 1 and api.comments_on(REPO, 7) == []  # no pull request, no comment


def test_only_changed_config_files_are_checked(tmp_path, api):
    checkout = Checkout(tmp_path, {"a/config.json": HEALTHY, "b/config.json": HEAD_CONFIG, "README.md": "x\n"})
    checkout.push({"README.md": "y\n"})
    add_pull(api, checkout)
    run = run_action(tmp_path, checkout, api)
    assert run.code == 0 and run.outputs["verdict"] == "skipped"
    assert "no config file changed" in run.summary
    assert api.comments_on(REPO, 7) == []  # nothing to say, no comment

    checkout.push({"a/tokenizer_config.json": "{}"})
    run = run_action(tmp_path, checkout, api)
    report = json.loads(Path(run.outputs["report-json"]).read_text())
    assert [t["file"] for t in report["targets"]] == ["a/config.json"]  # b's findings are not this PR's


def test_paths_globs_choose_the_files(tmp_path, api):
    checkout = Checkout(tmp_path, {"models/x/config.json": HEALTHY, "models/y/config.json": HEAD_CONFIG,
                                   "other/config.json": HEAD_CONFIG})
    checkout.push({"README.md": "y\n"})
    add_pull(api, checkout)
    run = run_action(tmp_path, checkout, api, paths="models/**", comment="false")
    report = json.loads(Path(run.outputs["report-json"]).read_text())
    assert sorted(t["file"] for t in report["targets"]) == ["models/x/config.json", "models/y/config.json"]
    assert run.code == 1 and api.comments_on(REPO, 7) == []


def test_transformers_versions_runs_the_version_matrix(tmp_path, api):
    import transformers

    checkout = Checkout(tmp_path, {"drafter/config.json": BASE_CONFIG})
    checkout.push({"drafter/config.json": HEAD_CONFIG})
    add_pull(api, checkout)
    run = run_action(tmp_path, checkout, api, transformers_versions=transformers.__version__, comment="false")
    report = json.loads(Path(run.outputs["report-json"]).read_text())
    assert report["matrix"]["versions"] == [transformers.__version__]
    assert run.code == 1 and "**new**" in run.summary  # base and head both judged through the matrix


def test_a_version_matrix_that_finds_a_difference_shows_its_table(tmp_path, api, monkeypatch):
    """4.52.4 keeps Qwen3's sliding window without the use_sliding_window gate, 5.24.0 drops it: a row
    differs, and the table reaches the sticky comment and the step summary (it once crashed: exit 3)."""
    from draftguard.check import environments

    # The matrix tests' cache convention, so 4.52.4 is installed once for the whole suite.
    cache = environments.cache_dir()
    monkeypatch.setenv(environments.CACHE_ENV, str(cache))
    environments.ensure_env("4.52.4", cache=cache)  # before the timed subprocess, which then finds it ready
    checkout = Checkout(tmp_path, {"drafter/config.json": BASE_CONFIG})
    checkout.push({"drafter/config.json": HEAD_CONFIG})
    add_pull(api, checkout)
    run = run_action(tmp_path, checkout, api, transformers_versions="4.52.4,5.24.0")
    assert run.code == 1, run.stdout + run.stderr
    assert "Traceback" not in run.stderr
    report = json.loads(Path(run.outputs["report-json"]).read_text())
    assert report["matrix"]["versions"] == ["4.52.4", "5.24.0"]
    row = "| sliding_window | <code>2048</code> | <code>2048</code> | <code>null</code> |"
    assert "### transformers matrix" in run.summary and row in run.summary
    [comment] = api.comments_on(REPO, 7)
    sections = parse_sticky(comment["body"])
    assert "| key | config.json | 4.52.4 | 5.24.0 |" in sections["matrix"] and row in sections["matrix"]


def test_settings_come_from_the_base_so_a_pull_request_cannot_relax_its_gate(tmp_path, api):
    checkout = Checkout(tmp_path, {".draftguard.yml": "fail_on: error\n", "drafter/config.json": BASE_CONFIG})
    checkout.push({".draftguard.yml": "fail_on: never\n", "drafter/config.json": HEAD_CONFIG})
    add_pull(api, checkout)
    run = run_action(tmp_path, checkout, api, comment="false")
    assert run.code == 1 and "fail on: error" in run.summary


def test_a_config_that_cannot_be_read_is_verdict_error_with_one_error_line(tmp_path, api):
    # Before (issue 42): verdict `fail` and two ::error:: lines (the file's, then "could not check 1 file(s)").
    checkout = Checkout(tmp_path, {"model/config.json": HEALTHY})
    checkout.push({"model/config.json": HEALTHY.replace('"model_type"', '"model_type",,', 1)})
    add_pull(api, checkout)
    run = run_action(tmp_path, checkout, api, comment="false")
    assert run.code == 2 and "Traceback" not in run.stderr
    assert [line for line in run.stdout.splitlines() if line.startswith("::error")] == run.annotations("error")
    [error] = run.annotations("error")
    assert "file=model/config.json" in error and "invalid JSON" in error
    assert run.outputs["verdict"] == "error"


def test_bad_settings_and_inputs_are_one_clear_error(tmp_path, api):
    checkout = Checkout(tmp_path, {".draftguard.yml": "fail_on: error\nfial_on: never\n",
                                   "model/config.json": HEALTHY})
    checkout.push({"model/config.json": HEALTHY.replace("1e-06", "1e-05")})
    add_pull(api, checkout)
    run = run_action(tmp_path, checkout, api)
    assert run.code == 2 and "Traceback" not in run.stderr
    [error] = run.annotations("error")
    assert "file=.draftguard.yml,line=2" in error and "fial_on" in error
    assert run.outputs["verdict"] == "error"

    run = run_action(tmp_path, checkout, api, mode="gpu")
    [error] = run.annotations("error")
    assert run.code == 2 and "input `mode` must be one of check, acceptance" in error

    run = run_action(tmp_path, checkout, api, fail_on="sometimes")
    assert run.code == 2 and "`fail-on`" in run.annotations("error")[0]

    run = run_action(tmp_path, checkout, api, transformers_versions="banana")
    [error] = run.annotations("error")
    assert run.code == 2 and "input `transformers-versions`: 'banana' is not a transformers version" in error
    assert "Traceback" not in run.stderr and api.comments_on(REPO, 7) == []


def test_acceptance_mode_needs_a_target(tmp_path, api):
    checkout = Checkout(tmp_path, {"drafter/config.json": BASE_CONFIG})
    checkout.push({"drafter/config.json": HEAD_CONFIG})
    add_pull(api, checkout)
    run = run_action(tmp_path, checkout, api, mode="acceptance")
    assert run.code == 2 and "needs the target model" in run.annotations("error")[0]
    assert api.comments_on(REPO, 7) == []


def drafter_pull(tmp_path, api, target: Path, drafter: Path, bar: float, also: dict | None = None) -> "Checkout":
    """A pull request adding the fixture folder ``drafter`` (and the files ``also``) to a repo whose
    .draftguard.yml names ``target``, the reference backend, a bar and 4 short prompts."""
    prompts = ROOT / "tests/fixtures/models/prompts.jsonl"
    checkout = Checkout(tmp_path, {".draftguard.yml": f"target: {target}\nbackend: reference\n"
                                                      f"min_acceptance_length: {bar}\nnum_prompts: 4\n"
                                                      f"max_new_tokens: 16\nprompts: {prompts}\n"})
    files = {f"{drafter.name}/{p.name}": p.read_bytes() for p in drafter.iterdir() if p.is_file()}
    for name, data in {**files, **(also or {})}.items():
        (checkout.dir / name).parent.mkdir(parents=True, exist_ok=True)
        (checkout.dir / name).write_bytes(data)
    git(checkout.dir, "add", "-A")
    git(checkout.dir, "commit", "-q", "-m", f"add {drafter.name}")
    checkout.head = git(checkout.dir, "rev-parse", "HEAD").strip()
    add_pull(api, checkout)
    return checkout


@pytest.mark.skipif(not (ROOT / "tests/fixtures/models/target").is_dir(), reason="no tiny fixture models")
def test_acceptance_mode_runs_draftguard_accept_and_updates_the_acceptance_section(tmp_path, api):
    pytest.importorskip("torch")
    fixtures = ROOT / "tests/fixtures/models"
    checkout = drafter_pull(tmp_path, api, fixtures / "target", fixtures / "drafter", 2.0)
    light = update_sticky(None, light="### Light check\n\nkept")
    api.add_comment(REPO, 7, light, user="draftguard[bot]", user_type="Bot")
    run = run_action(tmp_path, checkout, api, mode="acceptance")
    assert run.code in (0, 1), run.stdout + run.stderr
    [comment] = api.comments_on(REPO, 7)
    sections = parse_sticky(comment["body"])
    assert sections["light"] == "### Light check\n\nkept"
    assert "τ = **" in sections["acceptance"] and comment["edits"] == 2  # running, then done
    assert run.outputs["verdict"] in ("pass", "fail", "inconclusive")
    assert json.loads(Path(run.outputs["report-json"]).read_text())["results"][0]["drafter"] == "drafter/config.json"


@pytest.mark.skipif(not (ROOT / "tests/fixtures/vllm-models/eagle3").is_dir(), reason="no EAGLE-3 fixture")
def test_acceptance_mode_runs_an_eagle3_head(tmp_path, api):
    """An EAGLE-3 head in a pull request gets its acceptance test (issue 33): the method is found
    in the head's files by the child's `draftguard accept`, and the comment says how it drafted."""
    pytest.importorskip("torch")
    fixtures = ROOT / "tests/fixtures/vllm-models"
    # Beside it, a model with MTP layers (real config): not run, and said so.
    mtp = {"mtp/config.json": (ROOT / "tests/data/real-drafters/mtp-minimax-m2.7/config.json").read_bytes()}
    checkout = drafter_pull(tmp_path, api, fixtures / "target", fixtures / "eagle3", 3.0, also=mtp)
    run = run_action(tmp_path, checkout, api, mode="acceptance")
    assert run.code == 0 and run.outputs["verdict"] == "pass", run.stdout + run.stderr
    [comment] = api.comments_on(REPO, 7)
    section = parse_sticky(comment["body"])["acceptance"]
    assert "**pass**" in section and "EAGLE-3 chain drafting, 3 draft tokens per step" in section
    assert "Not run: mtp/config.json: MTP heads are not run" in section
    [entry] = json.loads(Path(run.outputs["report-json"]).read_text())["results"]
    assert entry["drafter"] == "eagle3/config.json" and entry["result"]["run"]["method"] == "eagle3"


@pytest.mark.skipif(not (ROOT / "tests/fixtures/vllm-models/eagle3-speculators").is_dir(), reason="no fixture")
def test_acceptance_mode_runs_a_speculators_head_and_says_why_another_is_not(tmp_path, api):
    """Issue 43: a speculators-layout head (layers.0.* weights) is run where the reference builds it;
    a head it does not build (a real P-EAGLE head) gets one sentence."""
    pytest.importorskip("torch")
    fixtures = ROOT / "tests/fixtures/vllm-models"
    other = {"peagle/config.json": (ROOT / "tests/data/real-drafters/specforge-qwen3-8b-peagle/config.json").read_bytes()}
    checkout = drafter_pull(tmp_path, api, fixtures / "target", fixtures / "eagle3-speculators", 3.0, also=other)
    run = run_action(tmp_path, checkout, api, mode="acceptance")
    assert run.code == 0 and run.outputs["verdict"] == "pass", run.stdout + run.stderr
    section = parse_sticky(api.comments_on(REPO, 7)[0]["body"])["acceptance"]
    assert "**pass**" in section and "EAGLE-3 chain drafting" in section
    assert "Not run: peagle/config.json: P-EAGLE heads draft in parallel" in section
    [entry] = json.loads(Path(run.outputs["report-json"]).read_text())["results"]
    assert entry["drafter"] == "eagle3-speculators/config.json" and entry["result"]["run"]["method"] == "eagle3"


# --- action.yml and the example workflows -------------------------------------------------------

def load_action() -> dict:
    return yaml.safe_load((ROOT / "action.yml").read_text())


def test_action_yml_declares_what_the_entry_point_reads():
    action = load_action()
    for key in ("name", "description", "inputs", "outputs", "runs"):
        assert action.get(key), f"action.yml has no {key}"
    assert action["runs"]["using"] == "composite"
    declared = set(action["inputs"])
    assert declared == set(INPUTS)
    for name, spec in action["inputs"].items():
        assert spec.get("description"), f"input {name} has no description"
    # Every input name the entry point reads is declared (read_input refuses others at run time too).
    sources = [path.read_text() for path in sorted((ROOT / "draftguard/action").glob("*.py"))]
    read = {node.args[1].value for source in sources for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "read_input"
            and len(node.args) == 2 and isinstance(node.args[1], ast.Constant)}
    assert read and read <= declared, read - declared
    assert all("os.environ[\"INPUT_" not in source for source in sources)
    assert action["inputs"]["github-token"]["default"] == "${{ github.token }}"
    # One step runs the one entry point and passes every input as INPUT_<NAME>.
    steps = action["runs"]["steps"]
    runs = [s for s in steps if re.search(r"draftguard\S*\s+action\b", s.get("run", ""), re.I)]
    assert len(runs) == 1
    step = runs[0]
    for name in INPUTS:
        assert step["env"]["INPUT_" + name.upper().replace("-", "_")] == "${{ inputs.%s }}" % name
    # Outputs are exactly the issue's, each wired to that step's outputs.
    assert set(action["outputs"]) == set(OUTPUTS)
    for name, spec in action["outputs"].items():
        assert spec["value"] == "${{ steps.%s.outputs.%s }}" % (step["id"], name)
    # Installs draftguard from the action's own checkout, torch-free, with the pinned constraints.
    install = "\n".join(s.get("run", "") for s in steps).replace("\\\n", " ")
    assert '-c "$GITHUB_ACTION_PATH/constraints.txt" "$GITHUB_ACTION_PATH[action]"' in install
    installs = [line for line in install.splitlines() if 'pip install' in line and '"$GITHUB_ACTION_PATH' in line]
    assert len(installs) == 2  # the light check's (pinned) and the GPU runner's (its own vLLM stack)
    assert not [line for line in installs if re.search(r"torch|vllm|runner", line)]
    for s in steps:
        if "run" in s:
            assert s.get("shell") == "bash", "composite run steps need a shell"


def test_example_workflows_keep_fork_code_off_the_gpu_runner():
    folder = ROOT / "examples/workflows"
    flows = {p.name: yaml.safe_load(p.read_text()) for p in folder.glob("*.yml")}
    assert len(flows) >= 2
    texts = {p.name: p.read_text() for p in folder.glob("*.yml")}
    for name, flow in flows.items():
        assert "pull_request_target" not in flow[True], name  # YAML reads the key `on` as True
        assert "${{ github.event.comment.body }}" not in texts[name].split("env:")[0], "script injection"
    light = [f for f in flows.values() if any(j.get("runs-on") == "ubuntu-latest" for j in f["jobs"].values())
             and "pull_request" in f[True]]
    assert light, "no light-check workflow on GitHub-hosted runners"
    gpu = [(n, f) for n, f in flows.items()
           if any(j.get("runs-on") == ["self-hosted", "gpu"] for j in f["jobs"].values())]
    assert len(gpu) == 1
    name, flow = gpu[0]
    assert set(flow[True]) == {"pull_request", "issue_comment"}
    for job_name, job in flow["jobs"].items():
        if job.get("runs-on") != ["self-hosted", "gpu"]:
            continue
        # The GPU job only runs behind the gate job, which admits same-repo PRs or a writer's /recheck.
        assert "gate" in (job.get("needs") or []), job_name
        assert "needs.gate.outputs" in job["if"]
        checkout = [s for s in job["steps"] if str(s.get("uses", "")).startswith("actions/checkout")]
        assert checkout and checkout[0]["with"]["ref"] == "${{ needs.gate.outputs.sha }}"
        assert checkout[0]["with"]["persist-credentials"] is False
        assert any(s.get("with", {}).get("mode") == "acceptance" for s in job["steps"])
    gate = flow["jobs"]["gate"]
    gate_text = yaml.safe_dump(gate)
    assert gate["runs-on"] == "ubuntu-latest"
    assert "head.repo.full_name" in gate_text and "/recheck" in gate_text
    assert "collaborators" in gate_text and "permission" in gate_text


@pytest.mark.parametrize("pattern,path,hit", [
    ("config.json", "config.json", True),
    ("*/config.json", "a/config.json", True),
    ("*/config.json", "a/b/config.json", False),
    ("**/config.json", "config.json", True),
    ("**/config.json", "a/b/config.json", True),
    ("models/**", "models/a/config.json", True),
    ("models/[ab]/*.json", "models/b/x.json", True),
    ("./a/config.json", "a/config.json", True),
])
def test_globs(pattern, path, hit):
    assert bool(glob_regex(pattern).match(path)) is hit


@pytest.mark.parametrize("number,expected", [(7, 7), ("7", 7), (7.0, 7), (3.5, None), (True, None), (None, None)])
def test_the_pull_request_number_is_a_whole_number_or_none(tmp_path, number, expected):
    """A malformed event must not post to another pull request: 3.5 once became 3, true became 1."""
    from draftguard.action.inputs import Context

    event = tmp_path / "event.json"
    event.write_text(json.dumps({"pull_request": {"number": number, "head": {"sha": "h"}, "base": {"sha": "b"}}}))
    ctx = Context.from_env({"GITHUB_EVENT_PATH": str(event), "GITHUB_EVENT_NAME": "pull_request"})
    assert ctx.pr_number == expected


def test_many_uses_with_long_sections_still_fit_in_one_comment(tmp_path, api):
    # Three earlier uses each left a long light section (a folder full of findings); a fourth use's
    # section must still be written: GitHub refuses a body over 65536 characters.
    folders = [f"drafter-{i}" for i in range(40)]
    checkout = Checkout(tmp_path, {f"{d}/config.json": BASE_CONFIG for d in folders})
    checkout.push({f"{d}/config.json": HEAD_CONFIG for d in folders})
    add_pull(api, checkout)
    long = "### Light check\n\n" + "\n".join(f"| `drafter-{i}/config.json` | DG001 | finding {i} |" for i in range(420))
    earlier = {f"light.use-{n}": long for n in range(3)}
    existing = api.add_comment(REPO, 7, update_sticky(None, **earlier), user="draftguard[bot]", user_type="Bot")
    assert len(existing["body"]) > 55000
    run = run_action(tmp_path, checkout, api, section="use-3")
    assert run.code == 1 and "Traceback" not in run.stderr
    assert "could not comment" not in run.stdout, run.stdout
    body = api.comments_on(REPO, 7)[0]["body"]
    sections = parse_sticky(body)
    assert len(body) <= 65536 and set(sections) == {"light.use-0", "light.use-1", "light.use-2", "light.use-3"}
    assert "sliding_window" in sections["light.use-3"] and "drafter-0/config.json" in sections["light.use-3"]


def test_outside_github_actions_it_says_so_in_one_line_and_exits_2(tmp_path):
    # A folder full of config.json files, as a user's clone is: nothing of it may be checked.
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text('{"model_type": "qwen3", "sliding_window": 4}')
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "INPUT_", "RUNNER_"))}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run([sys.executable, "-m", "draftguard", "action"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stdout == ""  # no annotations
    [line] = done.stderr.strip().splitlines()
    assert "only inside GitHub Actions" in line and "draftguard check" in line


def test_the_engines_input_adds_what_the_engines_serve(tmp_path, api):
    phi = (Path(__file__).resolve().parent / "data" / "real-configs" / "microsoft--phi-3.5-mini-instruct"
           / "config.json").read_text()
    checkout = Checkout(tmp_path, {"model/config.json": HEALTHY})
    checkout.push({"phi/config.json": phi})
    add_pull(api, checkout)
    run = run_action(tmp_path, checkout, api, engines="vllm==0.32.0", comment="false")
    report = json.loads(Path(run.outputs["report-json"]).read_text())
    [cut] = [f for f in report["findings"] if f["rule"] == "DG202"]
    assert cut["resolved"] == 4096 and "vLLM 0.32.0" in cut["message"] and run.code == 0  # a warning
    assert "DG202" in run.summary
    run = run_action(tmp_path, checkout, api, engines="vllm==0.1", comment="false")
    [error] = run.annotations("error")
    assert run.code == 2 and "input `engines`" in error and "Traceback" not in run.stderr


def _engine_rows(section: str, config: str) -> dict[str, list[str]]:
    """The engine table under one config in the engine section: cells by engine label."""
    part = section.split(f"<code>{config}</code>", 1)[1].split("\n\n", 2)[1]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in part.splitlines()[2:]]
    return {row[0]: row[1:] for row in rows}


def test_the_engines_input_adds_an_engine_section_to_the_comment_and_the_summary(tmp_path, api):
    real = Path(__file__).resolve().parent / "data"
    phi = (real / "real-configs" / "microsoft--phi-3.5-mini-instruct" / "config.json").read_text()
    mistral = (real / "healthy" / "mistral-7b-v0.1.json").read_text()
    checkout = Checkout(tmp_path, {"model/config.json": HEALTHY})
    checkout.push({"phi/config.json": phi, "mistral/config.json": mistral})
    add_pull(api, checkout)
    run = run_action(tmp_path, checkout, api, engines="vllm==0.32.0,sglang==0.5.23")
    assert run.code == 1 and "Traceback" not in run.stderr  # SGLang runs Mistral without its window: DG201
    section = parse_sticky(api.comments_on(REPO, 7)[0]["body"])["engines"]
    assert section.startswith("### What the engines serve") and section in run.summary
    phi_rows = _engine_rows(section, "phi/config.json")
    # max_model_len, attention, target layers read, dtype, refusal
    assert phi_rows["vLLM 0.32.0 (light tier)"][0] == "<code>4096</code>"  # LongRoPE's original length
    assert phi_rows["SGLang 0.5.23 (light tier)"][0] == "<code>131072</code>"
    rows = _engine_rows(section, "mistral/config.json")
    assert rows["vLLM 0.32.0 (light tier)"][1] == "sliding(4096) at layers 0-31"
    assert rows["SGLang 0.5.23 (light tier)"][1:] == ["full at layers 0-31", "", "<code>bfloat16</code>", ""]
    assert "(transformers " in section and ": sliding(4096) at layers 0-31)" in section
    # A later run without engines takes the section away, as a matrix that no longer differs.
    checkout.push({"mistral/config.json": mistral.replace("4096", "4097")})
    run = run_action(tmp_path, checkout, api)
    assert "engines" not in parse_sticky(api.comments_on(REPO, 7)[0]["body"])
    assert "What the engines serve" not in run.summary


def test_a_refusal_is_quoted_in_the_engine_section(tmp_path, api):
    checkout = Checkout(tmp_path, {"model/config.json": HEALTHY})
    checkout.push({"drafter/config.json": HEAD_CONFIG})
    add_pull(api, checkout)
    run = run_action(tmp_path, checkout, api, engines="vllm==0.32.0,sglang==0.5.23", comment="false")
    rows = _engine_rows(run.summary.split("### What the engines serve", 1)[1], "drafter/config.json")
    v1, v2 = rows["vLLM 0.32.0, V1 runner (light tier)"], rows["vLLM 0.32.0, V2 runner (light tier)"]
    assert v1[1] == "not served" and '"Model Runner V1 does not support: mixed sliding/full dflash drafts"' in v1[4]
    assert '"DFlash sliding attention requires a window size"' in v2[4]
    assert "require config.sliding_window" in rows["SGLang 0.5.23 (light tier)"][4]


def test_a_pull_request_that_breaks_the_settings_fails_with_the_settings_check_message(tmp_path, api):
    # Issue 35: the head's own .draftguard.yml is checked (never obeyed): the same message as
    # `draftguard settings check`, on its line.
    checkout = Checkout(tmp_path, {".draftguard.yml": "fail_on: error\n", "model/config.json": HEALTHY})
    checkout.push({".draftguard.yml": "fail_on: error\nrules:\n  DG0012: off\n"})
    add_pull(api, checkout)
    run = run_action(tmp_path, checkout, api, comment="false")
    assert run.code == 2 and "Traceback" not in run.stderr
    errors = run.annotations("error")
    assert any("file=.draftguard.yml,line=3" in e and "no rule `DG0012`; did you mean `DG012`?" in e for e in errors), errors


def test_the_action_writes_sarif_for_code_scanning(tmp_path, api):
    # Issue 35: output `sarif` (and the `upload-sarif` input's step in action.yml uploads it).
    checkout = Checkout(tmp_path, {"drafter/config.json": BASE_CONFIG})
    checkout.push({"drafter/config.json": HEAD_CONFIG})
    add_pull(api, checkout)
    run = run_action(tmp_path, checkout, api, comment="false")
    log = json.loads(Path(run.outputs["sarif"]).read_text())
    results = log["runs"][0]["results"]
    assert results and {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in results} == {"drafter/config.json"}
    step = next(s for s in load_action()["runs"]["steps"] if "upload-sarif" in s.get("uses", ""))
    assert step["with"]["sarif_file"] == "${{ steps.draftguard.outputs.sarif }}" and "inputs.upload-sarif" in step["if"]
