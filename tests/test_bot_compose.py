"""The bot's documented setup (bot/README.md, issue 42), tried from scratch without a container engine:
bot/compose.yml's `bot` and `worker` commands run as real processes with bot.env.example's settings
(filled as its steps say) and the App's private key at the path the compose file mounts it; a real
redis-server stands in for the `redis` service and a loopback fake GitHub for GitHub. One signed
webhook must end in the sticky comment, written with an installation token the key obtained."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
import yaml

pytest.importorskip("starlette")
pytest.importorskip("huey")
pytest.importorskip("redis")
pytest.importorskip("github")
pytest.importorskip("cryptography")

from draftguard.report.comment import MARKER  # noqa: E402
from tests.fakes.github import free_port, post_webhook, pr_payload  # noqa: E402
from tests.test_bot import BASE, HEAD, REPO, fake_api  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = yaml.safe_load((ROOT / "bot" / "compose.yml").read_text())
ENV_EXAMPLE = ROOT / "bot" / "bot.env.example"
REDIS = shutil.which("redis-server")
SECRET = "compose-webhook-secret-0123456789"


def env_file(path: Path) -> dict[str, str]:
    """KEY=VALUE lines as compose's env_file reads them (comments and blanks skipped)."""
    out = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            out[key] = value
    return out


def mounts(service: str) -> dict[str, str]:
    """The secrets a service mounts: the path inside the container -> the file on the host."""
    declared = COMPOSE.get("secrets") or {}
    out = {}
    for entry in COMPOSE["services"][service].get("secrets") or []:
        name = entry if isinstance(entry, str) else entry["source"]
        target = f"/run/secrets/{name}" if isinstance(entry, str) else entry.get("target", f"/run/secrets/{name}")
        out[target] = str((ROOT / "bot" / declared[name]["file"]).resolve())
    return out


def test_the_compose_file_mounts_the_key_its_env_file_points_to():
    key_path = env_file(ENV_EXAMPLE)["DRAFTGUARD_GITHUB_PRIVATE_KEY_FILE"]
    for service in ("bot", "worker"):
        assert COMPOSE["services"][service]["env_file"] == "bot.env"
        assert key_path in mounts(service), (service, mounts(service))
    # ...from the file the README's step puts there, which git never takes.
    assert mounts("bot")[key_path] == str(ROOT / "bot" / "draftguard-app.pem")
    ignored = subprocess.run(["git", "-C", str(ROOT), "check-ignore", "-q", "bot/draftguard-app.pem"])
    assert ignored.returncode == 0
    readme = (ROOT / "bot" / "README.md").read_text()
    assert "bot/draftguard-app.pem" in readme and key_path in readme


def _command(service: str, redis_url: str, port: int) -> list[str]:
    """The service's command as compose runs it, with the compose network's names made loopback ones."""
    words = [w.replace("redis://redis:6379/0", redis_url) for w in COMPOSE["services"][service]["command"]]
    assert words[0] == "draftguard"
    words = [sys.executable, "-m", "draftguard", *words[1:]]
    if "--host" in words:
        words[words.index("--host") + 1] = "127.0.0.1"
    if "--port" in words:
        words[words.index("--port") + 1] = str(port)
    return words


@pytest.mark.skipif(REDIS is None, reason="redis-server is not installed (Debian: apt-get install -y redis-server)")
def test_the_documented_compose_serve_and_worker_answer_a_signed_webhook(tmp_path):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    public = key.public_key().public_bytes(serialization.Encoding.PEM,
                                           serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    # Step 4: the key where the compose secret reads it (here: a copy of the bot folder's layout).
    key_file = tmp_path / "draftguard-app.pem"
    key_file.write_text(pem)
    key_file.chmod(0o600)
    api = fake_api()
    api.app_public_key = public
    # Step 5: bot.env from the example, with the App's id and the webhook secret filled in.
    settings = env_file(ENV_EXAMPLE)
    assert settings["DRAFTGUARD_GITHUB_WEBHOOK_SECRET"] == "" and settings["DRAFTGUARD_GITHUB_APP_ID"] == ""
    settings.update({"DRAFTGUARD_GITHUB_WEBHOOK_SECRET": SECRET, "DRAFTGUARD_GITHUB_APP_ID": "4242",
                     "GITHUB_API_URL": api.url})
    mounted = settings["DRAFTGUARD_GITHUB_PRIVATE_KEY_FILE"]
    assert mounted in mounts("bot")
    settings["DRAFTGUARD_GITHUB_PRIVATE_KEY_FILE"] = str(key_file)  # the mount, outside a container
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "DRAFTGUARD_"))}
    env.update(settings)
    env.update({"PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "DRAFTGUARD_RETRY_BASE": "0.2",
                "DRAFTGUARD_GITHUB_WRITE_INTERVAL": "0"})

    redis_port, bot_port = free_port(), free_port()
    procs, logs = [], []

    def start(words: list[str], name: str) -> subprocess.Popen:
        log = open(tmp_path / f"{name}.log", "w")
        logs.append(log)
        proc = subprocess.Popen(words, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path)
        procs.append(proc)
        return proc

    try:
        start([REDIS, "--port", str(redis_port), "--bind", "127.0.0.1", "--dir", str(tmp_path), "--save", "",
               "--appendonly", "no"], "redis")
        redis_url = f"redis://127.0.0.1:{redis_port}/0"
        bot = start(_command("bot", redis_url, bot_port), "bot")
        start(_command("worker", redis_url, 0), "worker")
        url = f"http://127.0.0.1:{bot_port}"
        deadline = time.time() + 90
        while True:  # step 7: /healthz
            try:
                if requests.get(f"{url}/healthz", timeout=1).ok:
                    break
            except requests.ConnectionError:
                pass
            assert bot.poll() is None and time.time() < deadline, (tmp_path / "bot.log").read_text()[-2000:]
            time.sleep(0.2)
        # Step 8: a signed delivery (an installed App's pull request event).
        answer = post_webhook(url, "pull_request", pr_payload(REPO, 7, HEAD, BASE, installation=77),
                              secret=SECRET, delivery="compose-1")
        assert answer.status_code // 100 == 2, answer.text
        # The README's step 8 redelivers the App's ping: a 2xx answer, and no job.
        ping = post_webhook(url, "ping", {"zen": "Keep it logically awesome.", "hook_id": 1}, secret=SECRET,
                            delivery="compose-ping")
        assert ping.status_code // 100 == 2, ping.text
        unsigned = post_webhook(url, "pull_request", pr_payload(REPO, 7, HEAD, BASE, installation=77),
                                secret="not-the-secret", delivery="compose-2")
        assert unsigned.status_code == 401
        deadline = time.time() + 180
        while not [c for c in api.comments_on(REPO, 7) if MARKER in c["body"]]:
            assert time.time() < deadline, ((tmp_path / "worker.log").read_text()[-3000:])
            time.sleep(0.3)
        # The comment was written with an installation token, which only the mounted key could get.
        assert api.count("POST", r"^/app/installations/77/access_tokens$") >= 1
        logged = (tmp_path / "bot.log").read_text() + (tmp_path / "worker.log").read_text()
        assert "PRIVATE KEY" not in logged and SECRET not in logged
    finally:
        for proc in reversed(procs):
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
        for log in logs:
            log.close()
        api.stop() if hasattr(api, "stop") else None
