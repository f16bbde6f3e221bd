"""The GPU path end to end, on CPU: a pull request whose drafter folder holds a fixture goes through
every step, and the acceptance test runs in a real ``draftguard worker --queue gpu --device cpu``.

- GitHub: the drafter's weights are stored with Git LFS, served as GitHub serves them (the contents
  and blob APIs answer the pointer; the media endpoint, the file's ``download_url``, gives the bytes).
  The light check runs on the PR, a writer comments ``/ok-to-test``, the worker fetches the real
  bytes (checked against the pointer), runs ``draftguard accept``, and the sticky comment gets its
  acceptance section with τ while the ``draftguard/acceptance`` check run is created.
- Hub: the same for a Hub pull request, whose weights come through huggingface_hub.

Both read ``prompts:`` from the default branch's .draftguard.yml: the fixture target has no
tokenizer, so only its token-id prompts can run (the built-in text prompts made vLLM fail with "The
decoder prompt cannot be empty").

The tests marked ``vllm`` run the worker with vLLM's CPU build (scripts/test.sh, ``.venv-vllm``); the
reference-backend twins run the same path in the main suite.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("starlette")
pytest.importorskip("huey")
pytest.importorskip("github")

from draftguard.bot.github_events import github_route  # noqa: E402
from draftguard.bot.github_handler import ACCEPTANCE_CHECK, CONFIG_CHECK, GitHubHandler  # noqa: E402
from draftguard.bot.hub_events import hub_route  # noqa: E402
from draftguard.bot.hub_handler import HubHandler  # noqa: E402
from draftguard.jobs import DONE, Queue  # noqa: E402
from draftguard.bot.webhooks import create_app  # noqa: E402
from draftguard.hosts.github import GitHubConfig  # noqa: E402
from draftguard.hosts.hub import HubConfig  # noqa: E402
from draftguard.report.comment import MARKER, parse_sticky  # noqa: E402
from tests.fakes.github import BotServer, FakeGitHub, comment_payload, post_webhook, pr_payload  # noqa: E402
from tests.fakes.hub import FakeHub, use_fake_hub  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
VLLM_MODELS = ROOT / "tests" / "fixtures" / "vllm-models"
MODELS = ROOT / "tests" / "fixtures" / "models"
GH_TOKEN = "ghp_SECRETgpuPath0123456789abcdef"
HF_TOKEN = "hf_SECRETgpuPath0123456789abcdefXYZ"
SECRET = "gpu-path-webhook-secret-42"
REPO = "acme/drafter"
BASE, HEAD = "b" * 40, "c" * 40
BACKENDS = [pytest.param("reference", id="reference"), pytest.param("vllm", id="vllm", marks=pytest.mark.vllm)]
# (backend, drafter): DFlash and EAGLE-3 heads (issue 33) through the same path.
DRAFTERS = [pytest.param("reference", "drafter", id="reference"),
            pytest.param("vllm", "drafter", id="vllm", marks=pytest.mark.vllm),
            pytest.param("reference", "eagle3", id="reference-eagle3"),
            pytest.param("vllm", "eagle3", id="vllm-eagle3", marks=pytest.mark.vllm)]


def drafter_files(backend: str, drafter: str = "drafter") -> dict[str, bytes]:
    """The drafter fixture the backend can run: vLLM's CPU build needs the head_dim-32, all-full one;
    the EAGLE-3 head is trained on that target (tests/fixtures/make_eagle3_models.py)."""
    folder = (VLLM_MODELS if backend == "vllm" or drafter != "drafter" else MODELS) / drafter
    return {name: (folder / name).read_bytes() for name in ("config.json", "model.safetensors")}


def settings_yml(backend: str, drafter: str = "drafter") -> str:
    target = (VLLM_MODELS if backend == "vllm" or drafter != "drafter" else MODELS) / "target"
    return (f"target: {target}\nbackend: {backend}\nmin_acceptance_length: 3.0\nnum_prompts: 4\n"
            "max_new_tokens: 24\nprompts: eval/prompts.jsonl\n")


def worker_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GITHUB_", "DRAFTGUARD_", "HF_", "VLLM_"))}
    env.update(DRAFTGUARD_RETRY_BASE="0.2", DRAFTGUARD_ACCEPT_ARGS="--enforce-eager --quiet",
               TOKENIZERS_PARALLELISM="false", VLLM_CPU_KVCACHE_SPACE="1", **extra)
    return env


class Worker:
    """``draftguard worker --queue gpu --device cpu`` as a real process on the shared SQLite queue."""

    def __init__(self, tmp_path: Path, queue_url: str, env: dict[str, str]):
        self.log = open(tmp_path / "worker.log", "w+")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "draftguard", "worker", "--queue", "gpu", "--device", "cpu",
             "--queue-url", queue_url], env=env, stdout=self.log, stderr=subprocess.STDOUT, cwd=tmp_path)

    def wait_done(self, queue: Queue, job_id: str, timeout: float = 420.0) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            job = queue.get(job_id)
            if job is not None and job.state == DONE:
                return
            assert self.proc.poll() is None, self.output()
            time.sleep(0.5)
        pytest.fail(f"{job_id} not done in {timeout:.0f}s: {queue.get(job_id)}; worker log:\n{self.output()}")

    def output(self) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read()[-5000:]

    def stop(self) -> str:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        return self.output()


def assert_acceptance_section(section: str, backend: str) -> None:
    assert "**pass**" in section, section
    tau = float(section.split("τ = **", 1)[1].split("**", 1)[0])
    assert tau >= 3.0
    assert "| 1 |" in section  # the per-position table


@pytest.mark.parametrize("backend,drafter", DRAFTERS)
def test_github_pr_with_lfs_weights_runs_the_acceptance_test_on_a_gpu_worker(tmp_path, backend, drafter):
    api = FakeGitHub(token=GH_TOKEN).start()
    files = drafter_files(backend, drafter)
    weights = files["model.safetensors"]
    pointer = api.add_lfs(weights)
    assert len(pointer) < 200  # what the contents API answers for the weights
    prompts = (MODELS / "prompts.jsonl").read_bytes()
    api.add_repo(REPO)
    main = {".draftguard.yml": settings_yml(backend, drafter), "eval/prompts.jsonl": prompts}
    api.set_files(REPO, "main", main)
    api.set_files(REPO, BASE, main)
    api.set_files(REPO, HEAD, {**main, "drafter/config.json": files["config.json"], "drafter/model.safetensors": pointer})
    api.add_pull(REPO, 9, head=HEAD, base=BASE, author="eve", head_repo="eve/drafter")
    api.set_permission(REPO, "eve", "read")
    api.set_permission(REPO, "mona", "maintain")

    queue_url = f"sqlite:///{tmp_path}/queue.db"
    config = GitHubConfig(api_url=api.url, token=GH_TOKEN, webhook_secret=SECRET, timeout=5.0, write_interval=0,
                          retry_base=0.2)
    config.secrets = [GH_TOKEN, SECRET]
    queue = Queue(queue_url)
    queue.handlers["github"] = GitHubHandler(config)
    server = BotServer(create_app(queue, [github_route(SECRET)], consumers={"cpu": 1, "gpu": 0}))
    worker = None
    try:
        with server:
            post = lambda event, payload, delivery: post_webhook(  # noqa: E731
                server.url, event, payload, secret=SECRET, delivery=delivery)
            assert post("pull_request", pr_payload(REPO, 9, HEAD, BASE, author="eve", head_repo="eve/drafter"),
                        "pr-9").status_code == 202
            assert queue.wait_idle(60, ids=["pr-9"])
            sticky = [c for c in api.comments_on(REPO, 9) if c["body"].startswith(MARKER)]
            sections = parse_sticky(sticky[0]["body"])
            assert "light" in sections and "/ok-to-test" in sections["acceptance"]  # a fork: it waits
            assert api.runs_for(REPO, HEAD, CONFIG_CHECK)

            c = api.add_comment(REPO, 9, "/ok-to-test", user="mona")
            assert post("issue_comment", comment_payload(REPO, 9, c), "ok-9").status_code == 202
            deadline = time.time() + 60
            while not [j for j in queue.jobs() if j.kind == "acceptance"]:
                assert time.time() < deadline, [(j.id, j.state, j.result) for j in queue.jobs()]
                time.sleep(0.2)
            job = [j for j in queue.jobs() if j.kind == "acceptance"][0]
            assert job.queue == "gpu"

            worker = Worker(tmp_path, queue_url, worker_env(GITHUB_API_URL=api.url, GITHUB_TOKEN=GH_TOKEN))
            worker.wait_done(queue, job.id)
    finally:
        log = worker.stop() if worker else ""
        api.stop()
    assert GH_TOKEN not in log
    sticky = [c for c in api.comments_on(REPO, 9) if c["body"].startswith(MARKER)]
    assert len(sticky) == 1
    sections = parse_sticky(sticky[0]["body"])
    assert_acceptance_section(sections["acceptance"], backend)
    # The child found the method in the head's files (no --method in its argv).
    assert ("EAGLE-3 chain drafting" in sections["acceptance"]) == (drafter == "eagle3")
    assert "light" in sections
    runs = api.runs_for(REPO, HEAD, ACCEPTANCE_CHECK)
    assert len(runs) == 1 and runs[0]["conclusion"] == "success" and runs[0]["status"] == "completed"
    assert runs[0]["output"]["title"].startswith("τ = ")
    # The weights came from download_url's own host, without the token (B10 of issue 25: they were
    # asked of the API host; the pointer alone would have been refused by accept).
    assert ("GET", f"/_media/{REPO}/{HEAD}/drafter/model.safetensors", None) in api.media_requests
    assert any(p == f"/repos/{REPO}/contents/eval/prompts.jsonl" for _, p in api.requests)


def test_a_drafter_accept_does_not_run_gets_no_gpu_job_and_the_plain_reason(tmp_path):
    """An MTP model and a P-EAGLE head (real configs) in a trusted pull request: no acceptance job is
    queued, and the sticky comment and the check say why in plain words (issue 33)."""
    data = ROOT / "tests" / "data" / "real-drafters"
    api = FakeGitHub(token=GH_TOKEN).start()
    api.add_repo(REPO)
    main = {".draftguard.yml": settings_yml("reference")}
    api.set_files(REPO, "main", main)
    api.set_files(REPO, BASE, main)
    api.set_files(REPO, HEAD, {**main, "mtp/config.json": (data / "mtp-minimax-m2.7" / "config.json").read_bytes(),
                               "peagle/config.json": (data / "specforge-qwen3-8b-peagle" / "config.json").read_bytes()})
    api.add_pull(REPO, 11, head=HEAD, base=BASE, author="mona")
    api.set_permission(REPO, "mona", "maintain")
    config = GitHubConfig(api_url=api.url, token=GH_TOKEN, webhook_secret=SECRET, timeout=5.0, write_interval=0,
                          retry_base=0.2)
    queue = Queue(f"sqlite:///{tmp_path}/queue.db")
    queue.handlers["github"] = GitHubHandler(config)
    server = BotServer(create_app(queue, [github_route(SECRET)], consumers={"cpu": 1, "gpu": 0}))
    try:
        with server:
            assert post_webhook(server.url, "pull_request", pr_payload(REPO, 11, HEAD, BASE, author="mona"),
                                secret=SECRET, delivery="pr-11").status_code == 202
            assert queue.wait_idle(60, ids=["pr-11"])
    finally:
        api.stop()
    assert not [j for j in queue.jobs() if j.kind == "acceptance"]
    [sticky] = [c for c in api.comments_on(REPO, 11) if c["body"].startswith(MARKER)]
    section = parse_sticky(sticky["body"])["acceptance"]
    assert "**skipped**" in section, section
    assert "mtp/config.json: MTP heads are not run" in section
    assert "peagle/config.json: P-EAGLE heads draft in parallel" in section
    assert not api.runs_for(REPO, HEAD, ACCEPTANCE_CHECK)


def test_an_lfs_object_that_does_not_match_its_pointer_is_never_used(tmp_path):
    from draftguard.hosts.github import LfsError, PullRequestClient, connect

    api = FakeGitHub(token=GH_TOKEN).start()
    try:
        api.add_repo(REPO)
        pointer = api.add_lfs(b"real weights")
        oid = pointer.split(b"sha256:")[1][:64].decode()
        api.lfs_objects[oid] = b"tampered!!!!"  # same size, other bytes
        api.set_files(REPO, HEAD, {"drafter/config.json": b"{}", "drafter/model.safetensors": pointer})
        api.add_pull(REPO, 9, head=HEAD, base=BASE)
        config = GitHubConfig(api_url=api.url, token=GH_TOKEN, timeout=5.0)
        client = PullRequestClient(connect(config), REPO, 9)
        dest = tmp_path / "d"
        dest.mkdir()
        with pytest.raises(LfsError, match="did not match its pointer"):
            client.download_folder("drafter", HEAD, str(dest))
        assert not (dest / "model.safetensors").exists()

        api.lfs_objects[oid] = b"real weights"
        assert sorted(client.download_folder("drafter", HEAD, str(dest))) == ["config.json", "model.safetensors"]
        assert (dest / "model.safetensors").read_bytes() == b"real weights"
        # B10: from download_url's own host, as on github.com, and without the token.
        assert api.media_requests and all(auth is None for _, _, auth in api.media_requests)
        assert not [p for _, p in api.requests if p.startswith("/_media/")]
    finally:
        api.stop()


@pytest.mark.parametrize("backend", BACKENDS)
def test_hub_pr_runs_the_acceptance_test_on_a_gpu_worker(monkeypatch, tmp_path, backend):
    from tests.test_bot_hub import comment_payload as hub_comment, discussion_payload

    hub = FakeHub().start()
    use_fake_hub(monkeypatch, hub, str(tmp_path / "hf-cache"))
    hub.token, hub.user = HF_TOKEN, "draftguard-bot"
    hub.add_org("acme", ["mona"])
    files = drafter_files(backend)
    main = {".draftguard.yml": settings_yml(backend).encode(), "eval/prompts.jsonl": (MODELS / "prompts.jsonl").read_bytes()}
    hub.push(REPO, main, "main")
    head = hub.open_pr(REPO, 3, {**main, "drafter/config.json": files["config.json"],
                                 "drafter/model.safetensors": files["model.safetensors"]}, author="eve")
    queue_url = f"sqlite:///{tmp_path}/queue.db"
    config = HubConfig(endpoint=hub.endpoint, token=HF_TOKEN, webhook_secret=SECRET, retry_base=0.2,
                       secrets=[HF_TOKEN, SECRET])
    queue = Queue(queue_url)
    queue.handlers["hub"] = HubHandler(config)
    server = BotServer(create_app(queue, [github_route(None), hub_route(SECRET)], consumers={"cpu": 1, "gpu": 0}))
    worker = None

    def post(payload):
        import requests

        return requests.post(f"{server.url}/webhooks/hub", data=json.dumps(payload).encode(),
                             headers={"Content-Type": "application/json", "X-Webhook-Secret": SECRET}, timeout=10)

    def sections():
        mine = [c for c in hub.comments_on(REPO, 3, author="draftguard-bot")
                if c["data"]["latest"]["raw"].startswith(MARKER)]
        assert len(mine) == 1
        return parse_sticky(mine[0]["data"]["latest"]["raw"])

    try:
        with server:
            assert post(discussion_payload(3)).status_code == 202
            assert queue.wait_idle(60)
            assert "light" in sections() and "skipped" in sections()["acceptance"]  # eve is no member
            c = hub.add_comment(REPO, 3, "/recheck", author="mona")
            assert post(hub_comment(3, c)).status_code == 202
            deadline = time.time() + 60
            while not [j for j in queue.jobs() if j.kind == "acceptance"]:
                assert time.time() < deadline, [(j.id, j.state, j.result) for j in queue.jobs()]
                time.sleep(0.2)
            job = [j for j in queue.jobs() if j.kind == "acceptance"][0]
            assert job.queue == "gpu" and job.head_sha == head
            worker = Worker(tmp_path, queue_url, worker_env(HF_ENDPOINT=hub.endpoint, HF_TOKEN=HF_TOKEN,
                                                            HF_HUB_CACHE=str(tmp_path / "worker-cache")))
            worker.wait_done(queue, job.id)
            assert_acceptance_section(sections()["acceptance"], backend)
            assert "light" in sections()
    finally:
        log = worker.stop() if worker else ""
        hub.stop()
    assert HF_TOKEN not in log


def test_the_acceptance_child_never_gets_a_token_or_the_bots_secrets(monkeypatch, tmp_path):
    # R7 of issue 25: the child that loads the pull request's files got the App key, the tokens and
    # the webhook secrets. Issue 32: it still got HF_TOKEN, to download the target itself. Now the
    # parent downloads the target (a private repo here: only the token reads it) and the child gets
    # its folder. A stand-in python writes down the environment and arguments it was given.
    from draftguard.errors import AcceptanceJobError
    from draftguard.runner.gpu_job import run_acceptance_job
    from draftguard.settings import Settings

    hub = FakeHub().start()
    try:
        use_fake_hub(monkeypatch, hub, str(tmp_path / "hf-cache"))
        hub.token = HF_TOKEN
        hub.push("acme/target", {name: (MODELS / "target" / name).read_bytes()
                                 for name in ("config.json", "generation_config.json", "model.safetensors")}, "main")
        hub.private.add("acme/target")
        seen, args = tmp_path / "env.txt", tmp_path / "args.txt"
        stub = tmp_path / "python"
        stub.write_text(f"#!/bin/sh\nenv > {seen}\necho \"$@\" > {args}\n"
                        "echo 'stand-in: no engine here' >&2\nexit 2\n")
        stub.chmod(0o755)
        env = {"PATH": os.environ["PATH"], "HF_ENDPOINT": hub.endpoint, "HF_TOKEN": HF_TOKEN,
               "HUGGING_FACE_HUB_TOKEN": HF_TOKEN, "GITHUB_TOKEN": "ghs_x", "GH_TOKEN": "gho_y",
               "DRAFTGUARD_GITHUB_PRIVATE_KEY": "-----BEGIN RSA PRIVATE KEY-----", "DRAFTGUARD_GITHUB_WEBHOOK_SECRET": "w",
               "DRAFTGUARD_HUB_WEBHOOK_SECRET": "h", "DRAFTGUARD_QUEUE": "redis://:pw@redis:6379/0",
               "TOKENIZERS_PARALLELISM": "false"}
        with pytest.raises(AcceptanceJobError, match="stand-in"):
            run_acceptance_job("acme/target", str(tmp_path), Settings(min_acceptance_length=2.0), env=env,
                               python=str(stub), timeout=30)
    finally:
        hub.stop()
    child = dict(line.split("=", 1) for line in seen.read_text().splitlines() if "=" in line)
    assert not set(child) & {"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "GITHUB_TOKEN", "GH_TOKEN",
                             "DRAFTGUARD_GITHUB_PRIVATE_KEY", "DRAFTGUARD_GITHUB_WEBHOOK_SECRET",
                             "DRAFTGUARD_HUB_WEBHOOK_SECRET", "DRAFTGUARD_QUEUE"}, sorted(child)
    assert HF_TOKEN not in seen.read_text() and "gho_y" not in seen.read_text()
    assert child["HF_HUB_OFFLINE"] == "1" and not os.path.exists(child["HF_TOKEN_PATH"])
    assert child["TOKENIZERS_PARALLELISM"] == "false"
    # The target arrives as a folder the parent downloaded with the token.
    argv = args.read_text().split()
    target = Path(argv[argv.index("--target") + 1])
    assert target.is_dir() and (target / "config.json").read_bytes() == (MODELS / "target" / "config.json").read_bytes()
    assert (target / "model.safetensors").exists()
    assert [r for r in hub.requests if r.repo == "acme/target" and r.path == "model.safetensors" and r.authorized]


def test_a_drafter_folder_over_the_gpu_download_limit_is_refused_before_any_download(tmp_path, monkeypatch):
    # R8 of issue 25: nothing capped what the GPU path downloads of a pull request's drafter.
    from draftguard.errors import FileTooLarge
    from draftguard.hosts.github import PullRequestClient, connect
    from draftguard.hosts.hub import HubConfig, HubPullRequestClient
    from tests.fakes.hub import FakeHub

    monkeypatch.setenv("DRAFTGUARD_MAX_DRAFTER_BYTES", "4096")
    api = FakeGitHub(token=GH_TOKEN).start()
    try:
        api.add_repo(REPO)
        api.set_files(REPO, HEAD, {"drafter/config.json": b"{}", "drafter/model.safetensors": api.add_lfs(bytes(8192))})
        api.add_pull(REPO, 9, head=HEAD, base=BASE)
        client = PullRequestClient(connect(GitHubConfig(api_url=api.url, token=GH_TOKEN, timeout=5.0)), REPO, 9)
        with pytest.raises(FileTooLarge, match="over the limit"):
            client.download_folder("drafter", HEAD, str(tmp_path))
        assert api.media_requests == [] and not (tmp_path / "model.safetensors").exists()
    finally:
        api.stop()
    with FakeHub() as hub:
        hub.push("acme/hub-drafter", {"drafter/config.json": b"{}", "drafter/model.safetensors": bytes(8192)})
        monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
        client = HubPullRequestClient(HubConfig(endpoint=hub.endpoint), "acme/hub-drafter", 0)
        with pytest.raises(FileTooLarge, match="over the limit"):
            client.download_folder("drafter", "main")
        assert not [r for r in hub.requests if r.method == "GET" and r.path == "drafter/model.safetensors"]


def test_a_target_past_the_runners_limit_is_refused_before_any_download(tmp_path, monkeypatch):
    """The GPU path runs DeepSeek-V3 MTP targets since issue 43; a 688 GB checkpoint would have been
    downloaded whole before the reference ran out of memory. The Hub's file list sizes it first."""
    from draftguard.errors import AcceptanceJobError
    from draftguard.runner.gpu_job import fetch_target
    from tests.fakes.hub import FakeHub

    with FakeHub() as hub:
        hub.push("acme/big", {"config.json": b"{}", "model-00001-of-00002.safetensors": bytes(6000),
                              "model-00002-of-00002.safetensors": bytes(6000), "original/consolidated.pth": bytes(50000)})
        env = {"HF_ENDPOINT": hub.endpoint, "HF_HUB_CACHE": str(tmp_path / "hf"), "DRAFTGUARD_MAX_TARGET_BYTES": "10000"}
        monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
        with pytest.raises(AcceptanceJobError, match=r"acme/big: its 0\.0 GiB of files \(3 files\) are over .*MAX_TARGET_BYTES"):
            fetch_target("acme/big", env)
        assert not [r for r in hub.requests if r.method == "GET" and r.path.endswith(".safetensors")]
        # Under the limit (the skipped original/ checkpoint not counted), it downloads.
        folder = fetch_target("acme/big", {**env, "DRAFTGUARD_MAX_TARGET_BYTES": "13000"})
        assert (Path(folder) / "model-00002-of-00002.safetensors").stat().st_size == 6000
