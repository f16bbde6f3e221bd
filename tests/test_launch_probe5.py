"""The fifth attacker's probe (issue 40) of the launch reader, run as the attacker runs it: a pull
request's files in a git checkout, a real `python -m draftguard action` process over them, talking to
the fake GitHub (and the fake Hub). Each test failed before its fix (docs/security.md, "Probes")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from draftguard.check.launch.sources import read_launches
from draftguard.report.comment import parse_sticky
from tests.fakes.hub import FakeHub
from tests.test_action import REPO, Checkout, add_pull, api, git, run_action  # noqa: F401

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "vllm-models"
HF_SECRET = "hf_PROBE5secretHFtoken0123456789abcdef"
GIT_SECRET = "eC1hY2Nlc3MtdG9rZW46Z2hzX1BST0JFNXNlY3JldA"  # what actions/checkout keeps in .git/config
HEALTHY = """services:
  vllm:
    image: vllm/vllm-openai:v0.32.0
    volumes:
      - ./models/target:/models/target
    command: /models/target --max-model-len 128
"""


def models() -> dict[str, str]:
    return {"models/target/config.json": (FIXTURES / "target" / "config.json").read_text()}


def commit_links(checkout: Checkout, links: dict[str, str], files: dict[str, str] | None = None) -> None:
    """The pull request adds ``links`` (path -> symlink target) and ``files``, as a push would."""
    for path, text in (files or {}).items():
        (checkout.dir / path).parent.mkdir(parents=True, exist_ok=True)
        (checkout.dir / path).write_text(text)
    for path, target in links.items():
        (checkout.dir / path).parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target, checkout.dir / path)
    git(checkout.dir, "add", "-A")
    git(checkout.dir, "commit", "-q", "-m", "deploy")
    checkout.head = git(checkout.dir, "rev-parse", "HEAD").strip()


def published(run, api) -> str:
    """Everything the run published: output, step summary, report JSON, SARIF, comments."""
    texts = [run.stdout, run.stderr, run.summary]
    report = run.outputs.get("report-json")
    if report and Path(report).exists():
        texts += [Path(report).read_text(), Path(report).with_suffix(".sarif").read_text()]
    texts += [c["body"] for c in api.comments_on(REPO, 7)]
    return "\n".join(texts)


def report_of(run) -> dict:
    assert run.outputs.get("report-json"), run.stdout + run.stderr
    return json.loads(Path(run.outputs["report-json"]).read_text())


# --- B1: a symlink out of the checkout --------------------------------------------------------------


def test_a_dotenv_linked_to_the_checkouts_git_config_or_proc_environ_publishes_nothing(tmp_path, api):
    checkout = Checkout(tmp_path, models())
    with open(checkout.dir / ".git" / "config", "a") as f:  # as actions/checkout leaves it
        f.write(f'[http "https://github.com/"]\n\textraheader = AUTHORIZATION: basic {GIT_SECRET}\n')
    first = next(k for k in os.environ if not k.startswith(("GITHUB_", "INPUT_", "RUNNER_")))
    # The attacker names the variable the linked file defines first: its value is the rest of the file.
    compose = 'services:\n  vllm:\n    image: vllm/vllm-openai:v0.32.0\n    command: ["${extraheader}"]\n'
    environ = f'services:\n  vllm:\n    image: vllm/vllm-openai:v0.32.0\n    command: ["${{{first}}}"]\n'
    commit_links(checkout, {"deploy/.env": "../.git/config", "proc/.env": "/proc/self/environ"},
                 {"deploy/docker-compose.yml": compose, "proc/docker-compose.yml": environ,
                  "docker-compose.yml": HEALTHY})
    add_pull(api, checkout)
    run = run_action(tmp_path, checkout, api, extra_env={"HF_TOKEN": HF_SECRET},
                     launch_files="deploy/docker-compose.yml\nproc/docker-compose.yml\ndocker-compose.yml")
    assert "Traceback" not in run.stderr
    said = published(run, api)
    assert GIT_SECRET not in said and HF_SECRET not in said
    errors = {e["file"]: e["message"] for e in report_of(run)["errors"]}
    assert "link out of the checkout" in errors["deploy/.env"], errors
    assert "link out of the checkout" in errors["proc/.env"], errors
    # the other launch file is still checked, and the sticky comment written
    assert [t["file"] for t in report_of(run)["targets"]] == ["docker-compose.yml"]
    assert "deploy/.env" in parse_sticky(api.comments_on(REPO, 7)[0]["body"])["light"]


def test_a_launch_file_that_is_a_link_to_a_runner_file_is_not_read(tmp_path, api):
    runner_file = tmp_path / "runner" / "env.sh"  # a file of the runner's, outside the checkout
    runner_file.parent.mkdir()
    runner_file.write_text(f"vllm serve {HF_SECRET}\n")
    checkout = Checkout(tmp_path, models())
    commit_links(checkout, {"serve.sh": str(runner_file)})
    add_pull(api, checkout)
    run = run_action(tmp_path, checkout, api, launch_files="serve.sh")
    assert HF_SECRET not in published(run, api)
    [error] = report_of(run)["errors"]
    assert error["file"] == "serve.sh" and "link out of the checkout" in error["message"]
    assert run.code == 2 and "Traceback" not in run.stderr


def test_a_model_folder_whose_config_links_out_of_the_checkout_is_not_read(tmp_path, api):
    outside = tmp_path / "runner" / "config.json"
    outside.parent.mkdir()
    outside.write_text(json.dumps({"model_type": HF_SECRET}))
    checkout = Checkout(tmp_path, {"README.md": "deployments\n"})
    commit_links(checkout, {"models/evil/config.json": str(outside),
                            "models/other/tokenizer_config.json": "/proc/self/environ"},
                 {"serve.sh": "vllm serve ./models/evil --max-model-len 128\n",
                  "other.sh": "vllm serve ./models/other --max-model-len 128\n",
                  "models/other/config.json": (FIXTURES / "target" / "config.json").read_text()})
    add_pull(api, checkout)
    run = run_action(tmp_path, checkout, api, launch_files="serve.sh\nother.sh")
    assert HF_SECRET not in published(run, api)
    errors = {e["source"]: e for e in report_of(run)["errors"]}  # (and the config check's own)
    assert errors["serve.sh"]["file"] == "serve.sh" and "not read" in errors["serve.sh"]["message"], errors
    assert "tokenizer_config.json is a link out of the checkout" in errors["other.sh"]["message"], errors


# --- B7: a volume onto the runner ---------------------------------------------------------------------


def test_a_volume_onto_the_runners_root_is_not_followed_and_no_location_leaves_the_checkout(tmp_path, api):
    outside = tmp_path / "runner-model"
    outside.mkdir()
    (outside / "config.json").write_text((FIXTURES / "target" / "config.json").read_text())
    checkout = Checkout(tmp_path, {"README.md": "deployments\n"})
    compose = (f"services:\n  vllm:\n    image: vllm/vllm-openai:v0.32.0\n    volumes:\n      - /:/host\n"
               f"    command: /host{outside} --max-model-len 999999999\n")
    missing = compose.replace(str(outside), str(tmp_path / "no-such-folder"))
    checkout.push({"a/docker-compose.yml": compose, "b/docker-compose.yml": missing})
    add_pull(api, checkout)
    run = run_action(tmp_path, checkout, api, launch_files="a/docker-compose.yml\nb/docker-compose.yml")
    report = report_of(run)
    # a path that exists and one that does not get the same answer: nothing learnt about the runner
    messages = [e["message"].split(": ", 1)[1].replace(str(tmp_path / "no-such-folder"), str(outside))
                for e in report["errors"]]
    assert len(messages) == 2 and messages[0] == messages[1] and "outside the checkout, not read" in messages[0]
    files = [f["file"] for f in report["findings"]] + [e["file"] for e in report["errors"]]
    sarif = json.loads(Path(run.outputs["report-json"]).with_suffix(".sarif").read_text())
    files += [loc["physicalLocation"]["artifactLocation"]["uri"] for r in sarif["runs"] for res in r["results"]
              for loc in res.get("locations", [])]
    files += [a.split("file=", 1)[1].split(",")[0] for a in run.annotations("error") if "file=" in a]
    assert files and all(not f.startswith(("/", "..")) and ".." not in f.split("/") for f in files), files


# --- B2, B3, B4: files that cost more than they are worth -----------------------------------------------


BILLION_LAUGHS = "apiVersion: v1\na: &a [lol,lol,lol,lol,lol,lol,lol,lol,lol]\n" + "".join(
    f"{c}: &{c} [*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p}]\n" for p, c in zip("abcdefgh", "bcdefghi"))


def test_yaml_alias_bombs_json_nesting_and_a_4_gb_word_are_errors_on_their_files(tmp_path, api):
    checkout = Checkout(tmp_path, models())
    deep = "[" * 100_000 + "]" * 100_000
    doubling = "A=xxxxxxxx\n" + "A=$A$A\n" * 28 + 'vllm serve "$A"\n'
    files = {
        "self.yaml": "apiVersion: v1\nx: &a [*a]\n",  # 25 bytes: a node that holds itself
        "laughs.yaml": BILLION_LAUGHS,
        "deep.sh": f"vllm serve ./models/target --speculative-config '{deep}'\n",
        "double.sh": doubling,
        "docker-compose.yml": HEALTHY,
    }
    checkout.push(files)
    add_pull(api, checkout)
    started = time.monotonic()
    run = run_action(tmp_path, checkout, api, launch_files="\n".join(files))
    assert "Traceback" not in run.stderr and run.code == 2, run.stderr
    errors = {e["file"]: e["message"] for e in report_of(run)["errors"]}
    assert "refers to a node that contains it" in errors["self.yaml"]
    assert "expand to more than" in errors["laughs.yaml"] or "YAML aliases" in errors["laughs.yaml"]
    assert "nests JSON past 32 levels" in errors["deep.sh"]
    assert "expands past 1 MB" in errors["double.sh"]
    assert [t["file"] for t in report_of(run)["targets"]] == ["docker-compose.yml"]
    sticky = parse_sticky(api.comments_on(REPO, 7)[0]["body"])["light"]
    assert all(name in sticky for name in ("self.yaml", "laughs.yaml", "deep.sh", "double.sh"))
    assert time.monotonic() - started < 110  # generous: a hang or a 4 GB word does not finish at all


def test_an_error_on_a_launch_file_replaces_an_earlier_pass_in_the_sticky_comment(tmp_path, api):
    checkout = Checkout(tmp_path, models())
    checkout.push({"docker-compose.yml": HEALTHY})
    add_pull(api, checkout)
    first = run_action(tmp_path, checkout, api, launch_files="docker-compose.yml")
    assert first.code == 0, first.stdout + first.stderr
    deep = "{\"a\":" * 100_000 + "1" + "}" * 100_000
    checkout.push({"docker-compose.yml": HEALTHY.replace("--max-model-len 128", f"--hf-overrides '{deep}'")})
    api.add_pull(REPO, 7, head=checkout.head, base=checkout.base, changed=[])
    second = run_action(tmp_path, checkout, api, launch_files="docker-compose.yml")
    assert second.code == 2 and "Traceback" not in second.stderr
    [comment] = api.comments_on(REPO, 7)
    assert checkout.head[:7] in comment["body"] and "nests JSON past" in comment["body"]


def _seconds(n: int, folder: Path) -> float:
    path = folder / f"compose-{n}.yml"
    path.write_text("services:\n  vllm:\n    image: vllm/vllm-openai\n    command: m " + " ".join(["${X}"] * n) + "\n")
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        read_launches(str(path))
        best = min(best, time.perf_counter() - started)
    return best


def test_compose_interpolation_of_many_words_is_linear(tmp_path):
    (tmp_path / ".env").write_text("X=abc\n")  # each word expands to text the file does not hold
    small, large = _seconds(10_000, tmp_path), _seconds(100_000, tmp_path)
    # 10 times the words: about 10 times the time when linear (100 times when quadratic: 140 s at 100k)
    assert large / small < 30, (small, large)


# --- B5: a Hub model a pull request names -------------------------------------------------------------


def test_a_hub_model_named_by_a_launch_file_is_read_without_the_workflows_token(tmp_path, api):
    config = json.loads((FIXTURES / "target" / "config.json").read_text())
    with FakeHub({"acme/private-model": {"main": {"config.json": json.dumps(config).encode()}},
                  "acme/public-model": {"main": {"config.json": json.dumps(config).encode()}}}) as hub:
        hub.token = HF_SECRET
        hub.private.add("acme/private-model")
        checkout = Checkout(tmp_path, {"README.md": "deployments\n"})
        checkout.push({"private.sh": "vllm serve acme/private-model --max-model-len 128\n",
                       "public.sh": "vllm serve acme/public-model --max-model-len 128\n"})
        add_pull(api, checkout)
        env = {**hub.env(str(tmp_path / "hf-cache")), "HF_TOKEN": HF_SECRET}
        run = run_action(tmp_path, checkout, api, extra_env=env, launch_files="private.sh\npublic.sh")
        assert hub.requests and not any(r.authorized for r in hub.requests), hub.requests
    report = report_of(run)
    assert [t["file"] for t in report["targets"]] == ["public.sh"]
    [error] = report["errors"]
    assert error["file"] == "private.sh" and "private" in error["message"], error


def test_a_compose_file_found_by_walking_the_repo_is_read_within_the_bounds(tmp_path):
    """A Kubernetes container on a locally built image sends the reader through the repository for the
    compose file or Dockerfile that builds it: those files are a stranger's too. A compose file that is a
    FIFO blocked the walk for ever (a plain open() waits for a writer); now it is passed over as every
    launch file is (regular files only, opened without blocking), and the Dockerfile is found."""
    (tmp_path / ".git").mkdir()
    os.mkfifo(tmp_path / "compose.yml")
    (tmp_path / "docker-compose.yml").write_text(BILLION_LAUGHS)
    (tmp_path / "Dockerfile.mine").write_text("FROM vllm/vllm-openai:v0.10.1.1\n")
    code = ("import sys; from pathlib import Path; from draftguard.check.launch.built import local_image; "
            "print(local_image('mine:local', Path(sys.argv[1])) is not None)")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=60,
                          cwd=ROOT)
    assert done.returncode == 0 and done.stdout.strip() == "True", done.stderr
