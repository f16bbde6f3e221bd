"""`draftguard action --dry-run` (issue 42): the Action's logic on a local checkout with no GitHub
variable set, run as a real process. HEAD plays the pull request, its parent the base; it prints the
annotations and what it would write and post, and sends nothing."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

from tests.test_action import BASE_CONFIG, HEAD_CONFIG, HEALTHY, Checkout

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "ghp_DRYRUNtoken0123456789abcdef"


class Listener:
    """A loopback port that counts the connections made to it (the dry run must make none)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.connections = 0
        self.stopped = False
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def _accept(self) -> None:
        while not self.stopped:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            conn.close()

    def close(self) -> None:
        self.stopped = True
        self.thread.join()
        self.sock.close()


def dry_run(checkout: Checkout, *args: str, extra: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    # What a maintainer's shell has: no runner variables at all (GITHUB_ACTIONS is not set).
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "INPUT_", "RUNNER_"))}
    env.update({"PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", **(extra or {})})
    return subprocess.run([sys.executable, "-m", "draftguard", "action", "--dry-run", *args], cwd=checkout.dir,
                          env=env, capture_output=True, text=True, timeout=300)


def test_a_dry_run_on_a_local_checkout_prints_what_the_action_would_post_and_sends_nothing(tmp_path):
    checkout = Checkout(tmp_path, {"drafter/config.json": BASE_CONFIG, "target/config.json": HEALTHY})
    checkout.push({"drafter/config.json": HEAD_CONFIG})
    github = Listener()
    try:
        # A token and an API in the environment: the dry run still posts nothing and shows no token.
        done = dry_run(checkout, extra={"GITHUB_TOKEN": TOKEN, "INPUT_GITHUB_TOKEN": TOKEN,
                                        "GITHUB_API_URL": github.url, "GITHUB_REPOSITORY": "acme/drafter"})
    finally:
        github.close()
    assert github.connections == 0
    assert TOKEN not in done.stdout + done.stderr
    assert done.returncode == 1, done.stdout + done.stderr  # the step would fail: new errors
    assert "Traceback" not in done.stderr
    out = done.stdout
    assert out.startswith(f"draftguard action --dry-run: {checkout.dir}, HEAD {checkout.head[:12]} against base "
                          f"{checkout.base[:12]}")
    # The annotations, on the changed file's lines, as the runner would read them.
    errors = [line for line in out.splitlines() if line.startswith("::error file=drafter/config.json,line=")]
    # DG001 and DG005 are new; the base's DG002 (rope_scaling) is annotated too, and not counted new.
    assert {e.split("title=")[1].split(" ")[0] for e in errors} == {"DG001", "DG002", "DG005"}
    summary = out.split("--- the step summary it would write ---\n")[1].split("--- the outputs it would set ---")[0]
    assert f"against base `{checkout.base[:12]}`" in summary and "2 new in this pull request" in summary
    outputs = dict(line.split("=", 1) for line in
                   out.split("--- the outputs it would set ---\n")[1].split("--- the sticky")[0].splitlines())
    assert outputs["verdict"] == "fail" and outputs["errors"] == str(len(errors))
    report = json.loads(Path(outputs["report-json"]).read_text())  # the report it names is there
    assert {f["rule"] for f in report["findings"]} >= {"DG001", "DG005"}
    comment = out.split("--- the sticky comment it would post (nothing was sent) ---\n")[1]
    assert comment.startswith("<!-- draftguard:sticky -->") and "<!-- draftguard:section:light -->" in comment
    assert "**new**" in comment and "DG005" in comment
    assert out.rstrip().endswith("--- exit 1 ---")


def test_a_dry_run_reads_the_settings_and_inputs_as_the_runner_would(tmp_path):
    # fail_on: never on the base: the step passes; INPUT_PATHS narrows the files as the input would.
    checkout = Checkout(tmp_path, {"drafter/config.json": BASE_CONFIG, ".draftguard.yml": "fail_on: never\n"})
    checkout.push({"drafter/config.json": HEAD_CONFIG, "other/config.json": HEAD_CONFIG})
    done = dry_run(checkout, extra={"INPUT_PATHS": "other/**"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "file=other/config.json" in done.stdout and "file=drafter/config.json" not in done.stdout
    assert "verdict=pass" in done.stdout or "verdict=warn" in done.stdout


def test_a_dry_run_with_an_unknown_base_or_outside_a_repository_is_one_line(tmp_path):
    checkout = Checkout(tmp_path, {"config.json": HEALTHY})
    done = dry_run(checkout, "--base", "no-such-ref")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        f"draftguard: {checkout.dir}: --base no-such-ref: no such commit; the dry run checks HEAD against a base "
        "commit"]
    # A repository of one commit: no base, every config file checked.
    one = dry_run(checkout)
    assert one.returncode == 0, one.stdout + one.stderr
    assert "against no base (every config file is checked)" in one.stdout


def test_without_dry_run_outside_actions_the_hint_names_it(tmp_path):
    checkout = Checkout(tmp_path, {"config.json": HEALTHY})
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "INPUT_", "RUNNER_"))}
    done = subprocess.run([sys.executable, "-m", "draftguard", "action"], cwd=checkout.dir, capture_output=True,
                          text=True, env={**env, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert done.returncode == 2 and "draftguard action --dry-run" in done.stderr


def test_the_actions_target_from_the_settings_is_named_with_its_file_and_line(tmp_path):
    # Issue 42: a target from .draftguard.yml that cannot be read was said to come from --target.
    checkout = Checkout(tmp_path, {"drafter/config.json": BASE_CONFIG,
                                   ".draftguard.yml": "# the drafters' target\ntarget: acme/no-such-target\n"})
    checkout.push({"drafter/config.json": HEAD_CONFIG})
    done = dry_run(checkout)  # HF_HUB_OFFLINE=1: the target is not in the cache
    assert done.returncode != 0
    [line] = [x for x in done.stdout.splitlines() if x.startswith("::error file=acme/no-such-target")]
    assert "::target from `target:` of .draftguard.yml line 2: acme/no-such-target@main/config.json" in line


def test_the_actions_target_input_is_named_as_the_input_not_as_a_flag(tmp_path):
    # Issue 42: the Action's own `target` input was reported as "--target", a flag nobody passed.
    checkout = Checkout(tmp_path, {"drafter/config.json": BASE_CONFIG})
    checkout.push({"drafter/config.json": HEAD_CONFIG})
    done = dry_run(checkout, extra={"INPUT_TARGET": "acme/no-such-target"})
    assert done.returncode != 0
    [line] = [x for x in done.stdout.splitlines() if x.startswith("::error file=acme/no-such-target")]
    assert "::target from input `target`: acme/no-such-target@main/config.json" in line, line
    assert "--target" not in done.stdout + done.stderr
