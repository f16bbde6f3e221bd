"""One acceptance job on a GPU worker: ``draftguard accept`` in a child process, its JSON back.

The bot's GPU queue (``draftguard worker --queue gpu``) calls ``run_acceptance_job`` with the drafter's
files fetched at the pull request's head and the repo's ``.draftguard.yml`` settings. It returns the
AcceptanceResult as a dict (the JSON contract of ``result.py``), pass or fail alike.

Why a child process: vLLM keeps its metrics in a process-wide registry and does not hand GPU memory
back when an engine is dropped, and the reference backend holds its models on the GPU too. A worker
that ran jobs in process would leak memory and mix counters from one job into the next. The child
loads a pull request's config and weights, so it gets no token and no secret (``child_env``): this
parent downloads the target with the runner's token (``fetch_target``) and hands the child its folder,
with huggingface_hub offline. The argv names no drafting method: the child's ``draftguard accept``
reads it from the drafter folder's config.json (DFlash or EAGLE-3, ``engine_options.drafting_method``).

The runner picks what the repo does not say, through its environment (``runner/draftguard-runner.env``):

- ``DRAFTGUARD_BACKEND``: reference, vllm or both, when the repo's settings name none (default: reference);
- ``DRAFTGUARD_DEVICE``: the reference backend's device (default: cuda when an NVIDIA GPU is visible,
  else cpu);
- ``DRAFTGUARD_ACCEPT_ARGS``: more ``draftguard accept`` options for every job on this runner, such as
  ``--attention-backend FLASH_ATTN --max-model-len 8192``;
- ``DRAFTGUARD_ACCEPT_TIMEOUT``: seconds before a job is stopped (default 3000, under the queue's
  one-hour GPU lease);
- ``DRAFTGUARD_MAX_TARGET_BYTES``: a target repo past this size is refused before any download
  (``max_target_bytes``: 200 GiB by default, 0 for none).

In: the target, the drafter's local folder, the repo's ``Settings``, the runner's environment, and a
prompt file fetched from the default branch (``fetch_prompts``).
Out: ``accept_command`` -> the ``draftguard accept`` argv; ``fetch_target`` -> the target's local folder;
``child_env`` -> the child's environment; ``run_acceptance_job`` -> the
AcceptanceResult dict, or ``AcceptanceJobError`` with the child's last stderr line (bad input, timeout).

Example::

    >>> from draftguard.settings import Settings
    >>> accept_command("Qwen/Qwen3-8B", "/tmp/drafter", Settings(min_acceptance_length=3.0, backend="both"),
    ...                python="python", env={"DRAFTGUARD_DEVICE": "cuda"})
    ['python', '-m', 'draftguard', 'accept', '--target', 'Qwen/Qwen3-8B', '--drafter', '/tmp/drafter', '--format', 'json', '--backend', 'both', '--device', 'cuda', '--min-acceptance-length', '3.0']
"""

from __future__ import annotations

import os
import posixpath
import shlex
import subprocess
import sys
import tempfile
from typing import Any, Mapping

from draftguard.check.drafter.detect import is_mtp_assistant
from draftguard.errors import AcceptanceJobError, TransientHubError
from draftguard.hub_access import fetched_files, hub_api, hub_problem, hub_repos
from draftguard.secrets import is_secret_name
from draftguard.runner.engine_options import drafting_method
from draftguard.runner.result import AcceptanceResult
from draftguard.snapshot import BadInput, load_snapshot

BACKENDS = ("reference", "vllm", "both")
DEFAULT_TIMEOUT = 3000.0


def _setting(settings: Any, name: str) -> Any:
    return getattr(settings, name, None) if settings is not None else None


def default_device(env: Mapping[str, str] | None = None) -> str:
    """cuda when this machine has an NVIDIA GPU visible to the worker, else cpu. Asked without torch
    (the worker never imports it): the driver's control device exists and CUDA_VISIBLE_DEVICES does
    not hide every GPU.

    Example::

        >>> default_device({"CUDA_VISIBLE_DEVICES": ""})
        'cpu'
    """
    env = os.environ if env is None else env
    if env.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return "cpu"
    return "cuda" if os.path.exists("/dev/nvidiactl") else "cpu"


def _assistant_folder(drafter: str) -> bool:
    """Whether a drafter folder is an MTP assistant (Gemma 4's): it drafts beside the target it is named
    with, not as a model of its own (``runner/mtp_gemma4.py``)."""
    try:
        return is_mtp_assistant(load_snapshot(drafter).load_json())
    except BadInput:
        return False


def accept_command(target: str, drafter: str, settings: Any = None, *, backend_default: str = "reference",
                   python: str | None = None, env: Mapping[str, str] | None = None, prompts: str | None = None,
                   settings_dir: str | None = None, quiet: bool = False) -> list[str]:
    """The ``draftguard accept`` command line for one job, for the bot's GPU worker and the Action alike:
    the repo's settings first, the runner's defaults (``DRAFTGUARD_*`` in ``env``) where the repo says
    nothing, then ``backend_default``: reference for the bot's worker (documented in docs/gpu-runner.md),
    vllm for the Action (docs/action.md). ``prompts`` is the local copy of the repo's prompt file
    (``fetch_prompts``, or the checkout's); ``settings_dir`` the folder accept reads a .draftguard.yml
    from. ``--device`` goes only to a run that uses the reference backend (vLLM picks its own device):
    on a GPU machine it must not fall back to the CPU.

    Example::

        >>> from draftguard.settings import Settings
        >>> accept_command("t", "d", Settings(), backend_default="vllm", python="py", env={}, settings_dir="/s",
        ...                quiet=True)
        ['py', '-m', 'draftguard', 'accept', '--target', 't', '--drafter', 'd', '--format', 'json', '--backend', 'vllm', '--settings', '/s', '--quiet']
    """
    env = os.environ if env is None else env
    backend = _setting(settings, "backend") or env.get("DRAFTGUARD_BACKEND") or backend_default
    if backend not in BACKENDS:
        raise BadInput(f"DRAFTGUARD_BACKEND / .draftguard.yml `backend` must be one of {', '.join(BACKENDS)}, "
                       f"got {backend!r}", key="backend")
    if os.path.isdir(drafter) and drafting_method(drafter) == "mtp" and not _assistant_folder(drafter):
        target = drafter  # a model with its own MTP layers is its own target (docs/acceptance.md)
    cmd = [python or sys.executable, "-m", "draftguard", "accept", "--target", target, "--drafter", drafter,
           "--format", "json", "--backend", backend]
    if backend != "vllm":
        cmd += ["--device", env.get("DRAFTGUARD_DEVICE") or default_device(env)]
    for name, flag in (("min_acceptance_length", "--min-acceptance-length"), ("num_prompts", "--num-prompts"),
                       ("max_new_tokens", "--max-new-tokens"), ("block_size", "--block-size")):
        value = _setting(settings, name)
        if value is not None:
            cmd += [flag, str(value)]
    if prompts:
        cmd += ["--prompts", prompts]
    elif _setting(settings, "prompts") == "builtin":
        cmd += ["--prompts", "builtin"]
    if settings_dir:
        cmd += ["--settings", settings_dir]
    if quiet:
        cmd += ["--quiet"]
    cmd += shlex.split(env.get("DRAFTGUARD_ACCEPT_ARGS", ""))
    return cmd


def fetch_prompts(client: Any, settings: Any, folder: str) -> str | None:
    """Fetch the prompt file that ``prompts:`` in .draftguard.yml names into ``folder`` and return its
    local path; None for the built-in prompts. Read from the default branch, where the settings come
    from, never from a pull request's head. ``client`` is a GitHub or Hub pull-request client
    (``read_file(path, ref)``, ``default_branch()``).

    Why it matters: a target without a tokenizer runs only on token-id prompts; given the built-in
    text prompts instead, vLLM fails with "The decoder prompt cannot be empty".
    """
    name = _setting(settings, "prompts")
    if not name or name == "builtin":
        return None
    path = posixpath.normpath(name)
    if posixpath.isabs(path) or path == ".." or path.startswith("../"):
        raise AcceptanceJobError(f".draftguard.yml `prompts: {name}` must name a file inside the repo")
    data = client.read_file(path, client.default_branch())
    if data is None:
        raise AcceptanceJobError(f".draftguard.yml `prompts: {name}`: no such file on the default branch "
                                 f"of {getattr(client, 'repo_name', 'the repo')} (or it is over 5 MB)")
    local = os.path.join(folder, posixpath.basename(path))
    with open(local, "wb") as fh:
        fh.write(data)
    return local


# What the child that loads a pull request's files never gets (R7 of issue 25, and issue 32): any
# token (HF_TOKEN, HUGGING_FACE_HUB_TOKEN, GITHUB_TOKEN, GH_TOKEN, ...), the App's key, the webhook
# secrets, the queue's URL (it may hold a password), a token file's path, and anything named like a
# secret. The parent downloads the target with the runner's token; the child gets local paths only.
_DROPPED = frozenset({"DRAFTGUARD_QUEUE", "DRAFTGUARD_GITHUB_APP_ID", "DRAFTGUARD_GITHUB_PRIVATE_KEY_FILE",
                      "HF_TOKEN_PATH", "GIT_ASKPASS", "SSH_AUTH_SOCK"})
# Hub files the acceptance test never reads: other formats of the weights and the original checkpoints.
_NOT_READ = ["original/*", "*.gguf", "*.onnx", "*.h5", "*.msgpack", "*.ot", "*.tflite", "*.mlmodel", "*.pth",
             "*.ckpt"]


def _secret(name: str) -> bool:
    return name.upper() in _DROPPED or is_secret_name(name)


def child_env(env: Mapping[str, str], home: str | None = None) -> dict[str, str]:
    """The environment of the acceptance test's child process: ``env`` without a token or a secret,
    huggingface_hub offline, and (with ``home``) its token file moved to an empty folder, so nothing
    in the child can read the runner's Hub token.

    Example::

        >>> sorted(child_env({"PATH": "/bin", "HF_TOKEN": "h", "GITHUB_TOKEN": "g", "GH_TOKEN": "g",
        ...                   "HUGGING_FACE_HUB_TOKEN": "h", "DRAFTGUARD_GITHUB_PRIVATE_KEY": "k",
        ...                   "DRAFTGUARD_HUB_WEBHOOK_SECRET": "s", "DRAFTGUARD_QUEUE": "redis://:pw@h",
        ...                   "TOKENIZERS_PARALLELISM": "false"}))
        ['HF_HUB_DISABLE_IMPLICIT_TOKEN', 'HF_HUB_OFFLINE', 'PATH', 'TOKENIZERS_PARALLELISM']
    """
    out = {k: v for k, v in env.items() if not _secret(k)}
    out.update(HF_HUB_OFFLINE="1", HF_HUB_DISABLE_IMPLICIT_TOKEN="1")
    if home is not None:
        out["HF_TOKEN_PATH"] = os.path.join(home, "no-token")  # never written: huggingface_hub finds no token
    return out


def fetch_target(target: str, env: Mapping[str, str] | None = None) -> str:
    """The target as a local folder, for a child that gets no token: a folder as it is; a Hub repo id
    (``owner/name[@revision]``) downloaded here, in the parent, with the runner's token (``HF_TOKEN``
    in ``env``), through huggingface_hub's cache (the safetensors weights when there are any, their
    config and tokenizer files).

    Raises:
        AcceptanceJobError: The Hub refused or has no such repo, or the name is not a repo id.
        TransientHubError: A fault worth retrying (5xx, 429 with its wait, timeout).
    """
    if os.path.isdir(target):
        return target
    env = os.environ if env is None else env
    try:
        [(repo, revision)] = hub_repos([target], what="target", strict=True)
    except BadInput as exc:
        raise AcceptanceJobError(f"target {target}: {exc}") from None
    api = hub_api(token=env.get("HF_TOKEN") or env.get("HUGGING_FACE_HUB_TOKEN") or None,
                  endpoint=env.get("HF_ENDPOINT") or None)
    try:
        tree = [f for f in api.list_repo_tree(repo, revision=revision, recursive=True) if hasattr(f, "size")]
        skip = _NOT_READ + (["*.bin", "*.pt"] if any(f.path.endswith(".safetensors") for f in tree) else [])
        _refuse_oversized(target, tree, skip, env)
        return api.snapshot_download(repo, revision=revision, ignore_patterns=skip)
    except Exception as exc:
        problem = hub_problem(exc)
        if problem is None:
            raise
        if problem.transient:
            raise TransientHubError(f"Hub download the target: {problem.status or problem.kind}",
                                    problem.wait or 30.0, exc) from None
        raise AcceptanceJobError(f"target {target}: {problem.message}") from None


def max_target_bytes(env: "Mapping[str, str] | None" = None) -> int | None:
    """What the GPU path downloads of one target repo at most, its files together: ``DRAFTGUARD_MAX_TARGET_BYTES``,
    else 200 GiB, 0 for no limit. The reference backend holds the whole target on one device, in
    bfloat16 or float32 (an FP8 checkpoint dequantized), so a target past what one GPU holds
    cannot run: DeepSeek-V3's 688 GB, Qwen3-235B's 470 GB. The default passes a 70B model in bfloat16.

    Example::

        >>> max_target_bytes({}), max_target_bytes({"DRAFTGUARD_MAX_TARGET_BYTES": "0"})
        (214748364800, None)
    """
    value = (os.environ if env is None else env).get("DRAFTGUARD_MAX_TARGET_BYTES")
    try:
        limit = int(value) if value else 200 * 1024**3
    except ValueError:
        limit = 200 * 1024**3
    return limit if limit > 0 else None


def _refuse_oversized(target: str, tree: list[Any], skip: list[str], env: Mapping[str, str]) -> None:
    """AcceptanceJobError, before any download, for a target whose files to fetch are past
    ``max_target_bytes``: the reference could not hold it on one device, and the download alone
    would fill the runner's disk."""
    limit = max_target_bytes(env)
    fetched = fetched_files(tree, skip, key=lambda f: f.path)
    total = sum(int(f.size or 0) for f in fetched)
    if limit is not None and total > limit:
        raise AcceptanceJobError(
            f"target {target}: its {total / 1024**3:.1f} GiB of files ({len(fetched)} files) are over this runner's "
            f"limit of {limit / 1024**3:.1f} GiB (DRAFTGUARD_MAX_TARGET_BYTES): the reference backend holds the whole "
            "target on one device; not downloaded. Raise the limit in the runner's environment "
            "(runner/draftguard-runner.env; 0 for none) where this runner holds such a model")


def run_acceptance_job(target: str, drafter: str, settings: Any = None, *, timeout: float | None = None,
                       env: Mapping[str, str] | None = None, python: str | None = None,
                       prompts: str | None = None) -> dict[str, Any]:
    """Run one acceptance test in a child process and return its AcceptanceResult dict.

    Exit 0 (pass) and 1 (fail) both carry a result. Exit 2 (bad input: a drafter that does not fit its
    target, vLLM missing on this runner) and anything else raise AcceptanceJobError with the child's
    last stderr line, which never holds a traceback or a secret.

    Raises:
        AcceptanceJobError: The child exited other than 0 or 1, or its output is not a result.

    Example (on a GPU worker)::

        result = run_acceptance_job("Qwen/Qwen3-8B", "/tmp/pr-42/drafter", settings)
        result["verdict"]["status"]  # "pass", "fail" or "inconclusive"
    """
    env = os.environ if env is None else env
    name = _setting(settings, "prompts")
    if name and name != "builtin" and not prompts:
        raise AcceptanceJobError(f".draftguard.yml names the prompt file {name!r}, and it was not fetched "
                                 "(fetch_prompts); the built-in text prompts would not stand in for it")
    limit = timeout if timeout is not None else float(env.get("DRAFTGUARD_ACCEPT_TIMEOUT") or DEFAULT_TIMEOUT)
    try:
        # The repo's settings arrive as arguments; an empty --settings folder keeps a .draftguard.yml
        # in the worker's working directory from adding to them.
        with tempfile.TemporaryDirectory(prefix="draftguard-settings-") as no_settings:
            local = fetch_target(target, env)  # here, with the token: the child gets the folder
            clean = child_env(env, home=no_settings)
            cmd = accept_command(local, drafter, settings, python=python, env=clean, prompts=prompts,
                                 settings_dir=no_settings)
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=limit, env=clean)
    except subprocess.TimeoutExpired:
        raise AcceptanceJobError(f"draftguard accept ran past {limit:.0f}s and was stopped; lower num_prompts "
                                 "or max_new_tokens in .draftguard.yml, or raise DRAFTGUARD_ACCEPT_TIMEOUT") from None
    lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
    reason = lines[-1][:400] if lines else "no message"
    if done.returncode not in (0, 1):
        what = "rejected its input" if done.returncode == 2 else f"exited {done.returncode}"
        raise AcceptanceJobError(f"draftguard accept {what}: {reason}")
    try:
        result = AcceptanceResult.from_json(done.stdout, "draftguard accept").to_dict()
    except BadInput as exc:
        raise AcceptanceJobError(f"draftguard accept exited {done.returncode} without a result ({exc}); "
                                 f"stderr: {reason}") from None
    if isinstance(result.get("run"), dict) and result["run"].get("target") == local:
        result["run"]["target"] = target  # the repo id, not this runner's cache folder
    return result
