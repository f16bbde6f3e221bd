"""`draftguard check --launch-file / --launch`: launch files read as the shell, compose and the kubelet
read them (lines kept), models resolved as the engine would, and the light tier's findings on the
launch file's lines. The real tier and the tier comparison are in test_launch_vllm.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from draftguard.check.launch import launch_report
from draftguard.check.launch.flags import read_flags
from draftguard.check.launch.shell import run_script
from draftguard.check.launch.sources import command_launches, read_launches
from draftguard.errors import BadInput

ROOT = Path(__file__).resolve().parents[1]
LAUNCH = ROOT / "tests" / "data" / "launch"
REAL = ROOT / "tests" / "data" / "real-launch"
LLAMA = ROOT / "tests" / "data" / "real-drafters" / "targets" / "llama-3.1-8b" / "config.json"


def run(*args: str, cwd: Path = ROOT, env: dict | None = None) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith("DRAFTGUARD_")}
    return subprocess.run([sys.executable, "-m", "draftguard", *args], cwd=cwd, capture_output=True, text=True,
                          env={**base, **(env or {})}, timeout=180)


def findings(*files: str) -> list[tuple[str, str, int]]:
    report = launch_report([str(f) for f in files], [], None, None)
    assert report.errors == [], report.errors
    return [(f.rule, Path(f.file).name, f.line) for f in report.findings]


def test_the_shell_reads_continuations_quotes_exports_and_defaults():
    script = ("#!/bin/bash\nM=org/model   # a comment\nexport VLLM_USE_V2_MODEL_RUNNER=0\n"
              "SPEC='{\"method\": \"$NOT\"}'\n"
              "CUDA_VISIBLE_DEVICES=0 exec vllm serve \"$M\" \\\n  --speculative-config \"$SPEC\" \\\n"
              "  --port ${PORT:-8000} --max-model-len=$LEN\n")
    [command] = [c for c in run_script(script) if c.words[0].text == "exec"]
    assert [(w.text, w.line) for w in command.words] == [
        ("exec", 5), ("vllm", 5), ("serve", 5), ("org/model", 5), ("--speculative-config", 6),
        ('{"method": "$NOT"}', 6), ("--port", 7), ("8000", 7), ("--max-model-len=", 7)]
    assert command.words[-1].unset == ("LEN",)
    assert command.env["VLLM_USE_V2_MODEL_RUNNER"] == ("0", 3)
    assert command.env["CUDA_VISIBLE_DEVICES"] == ("0", 5)
    assert "M" not in command.env  # set, never exported: vLLM's process does not see it


def test_flags_read_as_vllms_parser_reads_them():
    [launch] = command_launches("python -m vllm.entrypoints.openai.api_server --model org/m --max_model_len 32K "
                                "--enforce-eager --speculative-config.method eagle3 "
                                "--speculative-config.num_speculative_tokens 4")
    flags = read_flags(launch)
    assert flags.model.text == "org/m" and flags.value("max-model-len") == "32K"
    assert flags.get("enforce-eager").value is None
    assert flags.data("speculative-config") == {"method": "eagle3", "num_speculative_tokens": 4}


def test_the_seeds_compose_file_is_refused_on_its_line():
    # The incident: a DFlash drafter with sliding layers and no window its engine can read, behind
    # --speculative-config in a compose file. vLLM 0.32 refuses it when the draft is built.
    report = launch_report([str(LAUNCH / "docker-compose.yml")], [], None, None)
    [finding] = report.findings
    assert (finding.rule, finding.line, finding.key) == ("DG300", 17, "--speculative-config")
    assert "DFlash sliding attention requires a window size" in finding.message
    assert "vLLM 0.32.0 (V2 runner, light tier) [service vllm]" in finding.message


def test_a_forced_length_is_said_on_the_flag_with_the_variable_that_allowed_it():
    assert findings(LAUNCH / "serve-long.sh") == [("DG301", "serve-long.sh", 7)]
    report = launch_report([], [f"vllm serve {ROOT / 'tests/fixtures/vllm-models/target'} --max-model-len 4096"],
                           None, None)
    [refused] = report.findings
    assert refused.rule == "DG300" and refused.file == "--launch"
    assert "User-specified max_model_len (4096) is greater than the derived max_model_len" in refused.message


def test_an_eagle3_head_under_method_eagle_gets_the_method_to_use():
    found = launch_report([str(LAUNCH / "serve-eagle.sh")], [], None, None).findings
    assert [(f.rule, f.line) for f in found] == [("DG304", 6), ("DG300", 6)]
    assert found[0].resolved == "eagle3"
    assert "EagleLlamaForCausalLMEagle3" in found[1].message


def test_float16_on_gemma2_is_refused_in_vllms_words():
    gemma = ROOT / "tests" / "data" / "real-configs" / "google--gemma-2-2b-it"
    [finding] = launch_report([], [f"vllm serve {gemma} --dtype float16"], None, None).findings
    assert finding.message.endswith("\"The model type 'gemma2' does not support float16. Reason: Numerical "
                                    "instability. Please use bfloat16 or float32 instead.\"")


def test_the_healthy_pair_gets_no_warning():
    report = launch_report([str(LAUNCH / "serve-healthy.sh")], [], None, None)
    assert [f.rule for f in report.findings] == ["DG307"] and not report.fails("warning")


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    """A huggingface_hub cache holding Llama 3.1 8B Instruct's published config.json, offline."""
    repo = tmp_path / "hub" / "models--meta-llama--Meta-Llama-3.1-8B-Instruct"
    commit = "0e9e39f249a16976918f6564b8830bc894c89659"
    (repo / "snapshots" / commit).mkdir(parents=True)
    shutil.copy(LLAMA, repo / "snapshots" / commit / "config.json")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    return {"HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HUB_OFFLINE": "1"}


@pytest.mark.parametrize("name, line", [("sglang-compose.yaml", 16), ("k8s-sglang-service.yaml", 35)])
def test_real_sglang_launches_that_serve_what_the_model_was_trained_for_get_no_warning(hub_cache, name, line):
    [launch] = read_launches(str(REAL / name))
    assert launch.engine == "sglang" and read_flags(launch).model.text == "meta-llama/Meta-Llama-3.1-8B-Instruct"
    assert read_flags(launch).get("model-path").line == line
    done = run("check", "--launch-file", str(REAL / name), "--format", "json", "--fail-on", "warning", env=hub_cache)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    # Llama 3.1's 131072 comes through its llama3 RoPE scaling from 8192: said, as info only
    assert [(f["rule"], f["severity"]) for f in report["findings"]] == [("DG302", "info")]
    assert report["errors"] == []


def test_a_model_on_a_volume_claim_is_bad_input_on_its_line():
    # production-stack's decode pod: vLLM inside `bash -exc`, its model on a PVC no folder here holds.
    done = run("check", "--launch-file", str(REAL / "decode-deploy.yaml"))
    assert done.returncode == 2
    assert "decode-deploy.yaml:141: the model /var/mdl/YOUR-MODEL-PATH is a path in the container" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("name, text, said", [
    ("serve.sh", "vllm serve org/m \\\n  --speculative-config '{\"method\": \n", "serve.sh:2: a single quote is never closed"),
    ("compose.yml", "services:\n  vllm:\n    image: vllm/vllm-openai\n    command: [a, b\n", "compose.yml:5: not valid YAML"),
    ("serve.sh", "echo hello\n", "launches no engine"),
    ("serve.sh", "vllm serve org/m --speculative-config '{method: eagle3}'\n", "serve.sh:1: --speculative-config is not JSON"),
])
def test_bad_launch_files_exit_2_with_file_and_line(tmp_path, name, text, said):
    (tmp_path / name).write_text(text)
    done = run("check", "--launch-file", str(tmp_path / name))
    assert done.returncode == 2 and said in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_container_paths_resolve_through_compose_volumes_and_env_counts(tmp_path):
    [launch] = read_launches(str(LAUNCH / "docker-compose.yml"))
    assert launch.volumes["/models/drafter"].endswith("examples/qwen3-swa-drafter")
    assert launch.env["HF_HUB_OFFLINE"] == ("1", 13) and launch.where == "service vllm"


def test_settings_launch_key_is_checked_when_no_target_is_given(tmp_path):
    shutil.copytree(LAUNCH, tmp_path / "deploy")
    shutil.copytree(ROOT / "tests" / "fixtures" / "vllm-models", tmp_path / "fixtures" / "vllm-models")
    (tmp_path / ".draftguard.yml").write_text("launch: [\"deploy/serve-long.sh\"]\n")
    # serve-long.sh names ../../fixtures/vllm-models/target from its folder
    (tmp_path / "deploy" / "serve-long.sh").write_text(
        (LAUNCH / "serve-long.sh").read_text().replace("../../fixtures", "../fixtures"))
    done = run("check", "--format", "json", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert [(f["rule"], f["line"]) for f in json.loads(done.stdout)["findings"]] == [("DG301", 7)]


def test_the_readme_command_runs_as_written():
    readme = (ROOT / "README.md").read_text()
    block = readme.split("## What a launch serves: `--launch-file`", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    [command] = block.strip().splitlines()
    assert command == (ROOT / "docs" / "launch.md").read_text().split("```bash\n", 1)[1].split("\n", 1)[0]
    done = run(*command.split()[1:])
    words = " ".join(done.stdout.split())  # the text view wraps at 80 columns
    assert done.returncode == 1 and "tests/data/launch/docker-compose.yml:17" in words
    assert "DG300" in words and "DFlash sliding attention requires a window size" in words


def test_fix_rewrites_the_method_where_it_is_written_and_proves_it(tmp_path):
    # The method sits in a variable three lines above the flag that expands it: that line is edited.
    docs = (ROOT / "docs" / "launch.md").read_text()
    [command] = [b.split("\n", 1)[0] for b in docs.split("```bash\n")[1:] if b.startswith("draftguard fix")]
    assert command == "draftguard fix --launch-file tests/data/launch/serve-eagle.sh"  # docs/launch.md's, as written
    done = run(*command.split()[1:])
    assert done.returncode == 0, done.stderr
    assert "-SPEC='{\"method\": \"eagle\"," in done.stdout and "+SPEC='{\"method\": \"eagle3\"," in done.stdout
    assert "serve-eagle.sh:3: fixed DG304: method 'eagle' -> 'eagle3'" in done.stderr
    # SGLang: accepted by the engine as EAGLE (silently about one token per step); --write edits the file.
    script = tmp_path / "serve.sh"
    targets = ROOT / "tests" / "data" / "real-drafters"
    script.write_text(f"python3 -m sglang.launch_server --model-path {targets / 'targets' / 'llama-3.1-8b'} \\\n"
                      f"  --speculative-algorithm EAGLE --speculative-draft-model-path "
                      f"{targets / 'specforge-llama3-8b-eagle3'}\n")
    done = run("fix", "--launch-file", str(script), "--write")
    assert done.returncode == 0 and "fixed DG304: method 'EAGLE' -> 'EAGLE3'" in done.stderr, done.stderr
    assert "--speculative-algorithm EAGLE3 --speculative-draft" in script.read_text()
    assert [f.rule for f in launch_report([str(script)], [], None, None).findings if f.rule == "DG304"] == []


def test_real_vllm_scripts_are_read_as_their_shell_reads_them():
    [docker] = read_launches(str(REAL / "run-model.sh"))  # docker run ... vllm/vllm-openai:latest --model $MODEL
    flags = read_flags(docker)
    assert (docker.engine, docker.image, flags.model.text, flags.model.line) == (
        "vllm", "vllm/vllm-openai:latest", "meta-llama/Meta-Llama-3-8B-Instruct", 9)
    assert docker.volumes == {"/root/.cache/huggingface": str(Path("~/.cache/huggingface").expanduser())}
    [server] = read_launches(str(REAL / "run_vllm.sh"))
    flags = read_flags(server)
    assert (flags.model.text, flags.model.line, flags.value("tensor-parallel-size"), flags.get("port").line) == (
        "meta-llama/llama-3.1-405b-instruct-fp8", 2, "8", 6)


TARGETS = ROOT / "tests" / "data" / "real-drafters" / "targets"


@pytest.mark.parametrize("command, rule, severity", [
    (f"vllm serve {TARGETS / 'qwen3-8b'} --dtype float16", "DG303", "warning"),  # bfloat16 weights in float16
    (f"vllm serve {TARGETS / 'qwen3-8b'} --dtype float32", "DG303", "info"),
    (f"vllm serve {TARGETS / 'qwen3-8b'} --hf-overrides '{{\"rope_theta\": 10000}}'", "DG308", "warning"),
    (f"vllm serve {ROOT / 'tests/data/real-configs/google--gemma-2-2b-it'} --disable-sliding-window", "DG308", "warning"),
    (f"vllm serve {TARGETS / 'llama-3.1-8b'} --max-model-len 8192 --speculative-config "
     f"'{{\"method\": \"eagle3\", \"model\": \"{ROOT / 'tests/data/real-drafters/specforge-llama3-8b-eagle3'}\", "
     "\"num_speculative_tokens\": 3}'", "DG305", "warning"),  # a head built for 2048 positions, served to 8192
    (f"vllm serve {ROOT / 'tests/fixtures/vllm-models/target'} --speculative-config "
     f"'{{\"method\": \"dflash\", \"model\": \"{ROOT / 'tests/fixtures/vllm-models/drafter'}\", "
     "\"num_speculative_tokens\": 5}'", "DG306", "warning"),  # a DFlash block of 4 drafts 3
])
def test_each_launch_rule_on_a_launch_that_has_it(command, rule, severity):
    found = launch_report([], [command], None, None).findings
    assert [(f.rule, f.severity.value) for f in found if f.rule == rule] == [(rule, severity)], \
        [(f.rule, f.message) for f in found]
    assert all(f.line == 1 and f.file == "--launch" for f in found)


def test_the_settings_launch_key_is_a_list_of_globs():
    from draftguard.settings import parse_settings

    assert parse_settings("launch: ['deploy/*.sh', docker-compose.yml]\n", ".draftguard.yml").launch == [
        "deploy/*.sh", "docker-compose.yml"]
    with pytest.raises(BadInput, match="launch"):
        parse_settings("launch: docker-compose.yml\n", ".draftguard.yml")


def test_targets_beside_a_launch_get_engine_views_only_when_asked():
    done = run("check", "examples/qwen3-swa-drafter", "--launch-file", "tests/data/launch/serve-long.sh",
               "--format", "json")
    assert sorted({f["rule"] for f in json.loads(done.stdout)["findings"]}) == ["DG001", "DG005", "DG301"]


def test_the_draft_rename_is_vllms_eagle_config():
    from draftguard.check.launch.light import renamed_draft

    # vllm/transformers_utils/configs/eagle.py (0.32.0): an Eagle3 name keeps its name under "eagle", and
    # LiLiCorrDraftModel is exempt from the DFlash prefix; the hand-written rename got both wrong.
    assert renamed_draft("Eagle3LlamaForCausalLM", "eagle") == "Eagle3LlamaForCausalLM"
    assert renamed_draft("LiLiCorrDraftModel", "dflash") == "LiLiCorrDraftModel"
    assert renamed_draft("LlamaForCausalLM", "eagle3") == "Eagle3LlamaForCausalLM"


def test_the_draft_registry_is_the_asked_vllm_versions(tmp_path):
    # DFlashQwen3XPressModel is registered in vLLM 0.33.0, not 0.32.0 (the generated registries in
    # draftguard/check/engines/data/): the light tier reads the version the launch is checked against,
    # where a hand list of 0.32.0's draft architectures refused it under both.
    from draftguard.check.engines.specs import parse_engines

    drafter = tmp_path / "drafter"
    shutil.copytree(ROOT / "tests/fixtures/vllm-models/drafter", drafter)
    config = json.loads((drafter / "config.json").read_text())
    (drafter / "config.json").write_text(json.dumps({**config, "architectures": ["DFlashQwen3XPressModel"]}))
    command = (f"vllm serve {ROOT / 'tests/fixtures/vllm-models/target'} --speculative-config "
               f"'{{\"method\": \"dflash\", \"model\": \"{drafter}\", \"num_speculative_tokens\": 5}}'")
    refused = "Model architectures ['DFlashQwen3XPressModel'] are not supported for now."
    old = launch_report([], [command], parse_engines("vllm==0.32.0"), None).findings
    assert any(refused in f.message for f in old), [(f.rule, f.message) for f in old]
    new = launch_report([], [command], parse_engines("vllm==0.33.0"), None).findings
    assert not any(refused in f.message for f in new), [(f.rule, f.message) for f in new]
    assert "DG307" in [f.rule for f in new]  # judged past the registry: the layers the drafter is fed
