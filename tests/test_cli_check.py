"""`draftguard check` as users run it: formats, exit codes and bad input."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from draftguard.cli import BOT_EXTRA, main

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "qwen3-swa-drafter"
HEALTHY = ROOT / "tests" / "data" / "healthy" / "qwen3-8b.json"


def run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """The installed command in a real process, the way CI and users call it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DRAFTGUARD_")}
    return subprocess.run([sys.executable, "-m", "draftguard", *args], cwd=cwd, capture_output=True,
                          text=True, env=env, timeout=120)


def write(tmp_path: Path, text: str, name: str = "config.json") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_example_shows_the_silent_override_and_exits_1():
    proc = run("check", str(EXAMPLE.relative_to(ROOT)))
    assert proc.returncode == 1, proc.stderr
    assert "DG001" in proc.stdout and "sliding_window" in proc.stdout
    assert "DG005" in proc.stdout
    assert "examples/qwen3-swa-drafter/config.json:37" in proc.stdout
    assert proc.stderr == ""


def test_json_format_carries_findings_summary_and_version(capsys):
    assert main(["check", str(EXAMPLE), "--format", "json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["summary"] == {"error": 2, "warning": 0, "info": 0}
    assert out["transformers_version"].startswith("5.")
    finding = next(f for f in out["findings"] if f["key"] == "sliding_window")
    assert set(finding) >= {"rule", "severity", "key", "raw", "resolved", "file", "line", "message"}
    assert (finding["raw"], finding["resolved"], finding["line"]) == (2048, None, 37)
    assert out["targets"][0]["attention"][0] == {"layer": 0, "declared": "sliding(2048)", "effective": "full"}


def test_github_format_writes_workflow_annotations(capsys):
    main(["check", str(EXAMPLE), "--format", "github"])
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith("::error file=") and ",line=37," in line and "sliding_window" in line for line in lines)
    assert all(line.startswith("::") for line in lines)


def test_markdown_format_has_table_and_attention(capsys):
    main(["check", str(EXAMPLE), "--format", "markdown"])
    out = capsys.readouterr().out
    assert "| :x: |  | DG001 value-overridden | <code>sliding_window</code> |" in out
    assert "| 0-3 | sliding(2048) | full :x: |" in out


def test_markdown_format_escapes_what_the_file_says(tmp_path, capsys):
    """The markdown view goes into PR comments: a config value must not close a table cell,
    mention anyone or inject HTML."""
    # Two keys for one attribute: the DG002 message quotes the value that wins.
    raw = {"model_type": "gpt2", "n_embd": 64, "hidden_size": "a|b <img src=x> @team"}
    (tmp_path / "config.json").write_text(json.dumps(raw))
    main(["check", str(tmp_path), "--format", "markdown"])
    out = capsys.readouterr().out
    assert "&lt;img src=x&gt;" in out  # the value is shown...
    assert "<img" not in out and "@team" not in out and "a|b" not in out  # ...but inert
    assert "| :x: |" in out


def test_markdown_format_shows_what_the_engines_serve(capsys, monkeypatch):
    monkeypatch.delenv("DRAFTGUARD_VLLM_PYTHON", raising=False)
    pair = ROOT / "examples" / "dflash-pair" / "drafter"
    main(["check", str(pair), "--format", "markdown", "--engine", "vllm==0.32.0,sglang==0.5.23"])
    section = capsys.readouterr().out.split("### What the engines serve", 1)[1]
    rows = {line.split(" | ")[0].strip("| "): line for line in section.splitlines() if line.startswith("| ")}
    # V1 refuses a draft mixing sliding and full layers; V2 and SGLang serve it, fed target layers 0 and 2.
    assert "| not served |" in rows["vLLM 0.32.0, V1 runner (light tier)"]
    assert '"Model Runner V1 does not support: mixed sliding/full dflash drafts"' in rows["vLLM 0.32.0, V1 runner (light tier)"]
    for served in ("vLLM 0.32.0, V2 runner (light tier)", "SGLang 0.5.23 (light tier)"):
        assert "| sliding(6) at layer 0, full at layer 1 | <code>0, 2</code> (reads <code>dflash_config" in rows[served]
        assert rows[served].endswith("|  |  |")  # no dtype on a draft view, no refusal
    main(["check", str(pair), "--format", "markdown"])
    assert "What the engines serve" not in capsys.readouterr().out


def test_fail_on_levels(tmp_path, capsys):
    warn_only = write(tmp_path, json.dumps({"model_type": "qwen3", "hidden_size": 1024,
                                            "num_attention_heads": 16, "num_hidden_layers": 2}))
    assert main(["check", str(warn_only)]) == 0
    assert main(["check", str(warn_only), "--fail-on", "warning"]) == 1
    assert main(["check", str(EXAMPLE), "--fail-on", "never"]) == 0
    assert main(["check", str(HEALTHY)]) == 0


def test_several_targets_make_one_report(capsys):
    assert main(["check", str(EXAMPLE), str(HEALTHY), "--format", "json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert [t["config_class"] for t in out["targets"]] == ["Qwen3Config", "Qwen3Config"]
    assert {f["file"] for f in out["findings"] if f["severity"] == "error"} == {str(EXAMPLE / "config.json")}


@pytest.mark.parametrize(
    "text, expected",
    [
        ('{\n  "model_type": "qwen3",\n  "hidden_size": 64,,\n}', ":3:21: invalid JSON"),
        ("[1, 2]", "top level must be a JSON object"),
        ('{"hidden_size": 64}', "no `model_type`"),
        ('{"model_type": "qwen33"}', "unknown to transformers"),
        ('{"model_type": 3}', "`model_type` must be a string"),
        ('{\n"model_type": "qwen3",\n"sliding_window": "1024"\n}', ":3: StrictDataclassFieldValidationError"),
        ('{"model_type": "acme", "auto_map": {"AutoConfig": "acme.AcmeConfig"}}', "--trust-remote-code"),
        # The class names its own attribute (rope_parameters); the error must point at the file's key.
        ('{\n"model_type": "qwen3",\n"rope_scaling": "linear"\n}', ":3: StrictDataclassFieldValidationError"),
    ],
    ids=["invalid-json", "not-object", "no-model-type", "unknown-model-type", "model-type-type",
         "class-rejects", "remote-code", "class-rejects-folded-key"],
)
def test_bad_input_is_one_clear_line_and_exit_2(tmp_path, text, expected):
    path = write(tmp_path, text)
    proc = run("check", str(path))
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert expected in line and str(path) in line


def test_unknown_model_type_suggests_the_close_one(tmp_path, capsys):
    assert main(["check", str(write(tmp_path, '{"model_type": "qwen33"}'))]) == 2
    assert "Did you mean 'qwen3'" in capsys.readouterr().err


def test_rejected_folded_key_names_the_files_key(tmp_path, capsys):
    main(["check", str(write(tmp_path, '{\n"model_type": "qwen3",\n"rope_scaling": "linear"\n}')), "--format", "json"])
    [error] = json.loads(capsys.readouterr().out)["errors"]
    assert (error["key"], error["line"]) == ("rope_scaling", 3)


def test_missing_model_type_names_the_key(tmp_path, capsys):
    main(["check", str(write(tmp_path, '{"hidden_size": 64}')), "--format", "json"])
    [error] = json.loads(capsys.readouterr().out)["errors"]
    assert error["key"] == "model_type"


def test_huge_file_is_refused_without_reading_it(tmp_path):
    path = tmp_path / "config.json"
    with open(path, "wb") as f:
        f.truncate(6 * 1024 * 1024)
    proc = run("check", str(path))
    assert proc.returncode == 2 and "over 5 MB are refused" in proc.stderr


def test_not_utf8_is_bad_input(tmp_path):
    path = tmp_path / "config.json"
    path.write_bytes(b'{"model_type": "\xff"}')
    proc = run("check", str(path))
    assert proc.returncode == 2 and "not UTF-8" in proc.stderr


def test_missing_paths_and_folders_without_config(tmp_path):
    proc = run("check", str(tmp_path / "nope"), str(tmp_path))
    assert proc.returncode == 2
    errors = proc.stderr.strip().splitlines()
    assert len(errors) == 2
    assert "no such file or folder" in errors[0] and "no config.json in this folder" in errors[1]


def test_one_bad_target_does_not_hide_the_others(tmp_path, capsys):
    bad = write(tmp_path, "{oops")
    assert main(["check", str(bad), str(EXAMPLE), "--format", "json"]) == 2
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert out["summary"]["error"] == 2 and len(out["errors"]) == 1
    assert "invalid JSON" in captured.err


def test_usage_errors_exit_2(tmp_path):
    # Nothing to check where it runs. Before: run from the repository's root, where `check` with no target
    # checks every config.json of the repository (86 s, past the 120 s timeout beside CI's other pass), and
    # its exit 2 came from a drafter whose Hub target could not be fetched, not from the usage error.
    proc = run("check", cwd=tmp_path)
    assert proc.returncode == 2 and f"no model config.json in {tmp_path}" in proc.stderr, proc.stderr
    assert run("check", str(EXAMPLE), "--format", "yaml").returncode == 2


def test_version():
    proc = run("--version")
    assert proc.returncode == 0 and proc.stdout.startswith("draftguard ")


def test_check_never_imports_torch_even_when_installed():
    """`python -X importtime` lists every module the check imports; torch must not be one."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DRAFTGUARD_")}
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "draftguard", "check", str(EXAMPLE)],
                          cwd=ROOT, capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 1
    imported = {line.split("|")[-1].strip().split(".")[0] for line in proc.stderr.splitlines() if "|" in line}
    assert "transformers" in imported  # the check really ran through transformers
    assert not imported & {"torch", "vllm", "torchvision"}
    # Nor any other extra: the base install (no extras) runs the check.
    assert not imported & {"starlette", "uvicorn", "huey", "redis", "github", "matplotlib", "safetensors"}


@pytest.mark.parametrize("command", ["serve", "worker"])
def test_the_bot_commands_without_the_bot_extra_say_so_in_one_line(command):
    """huey stands in for any missing package of the extra (None in sys.modules: not importable)."""
    code = f"import sys; sys.modules['huey'] = None; from draftguard.cli import main; sys.exit(main([{command!r}]))"
    env = {k: v for k, v in os.environ.items() if not k.startswith("DRAFTGUARD_")}
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, env=env,
                          timeout=120)
    # The first missing package of the extra is named: huey here, or one before it in BOT_EXTRA where
    # the extra is not installed at all (the per-Python venvs of scripts/test_pythons.sh).
    named = next(n for n in BOT_EXTRA if n == "huey" or importlib.util.find_spec(n) is None)
    assert proc.returncode == 2
    assert proc.stderr == (f"draftguard: the bot needs the `bot` extra ({named} is missing): "
                           "in a draftguard clone: pip install -c constraints.txt -e '.[bot]'\n")


REMOTE_CLASS = '''
from transformers import PretrainedConfig


class AcmeConfig(PretrainedConfig):
    model_type = "acme"

    def __init__(self, hidden_size=64, window=None, **kwargs):
        self.hidden_size = hidden_size
        # The repo's own class silently ignores the window it was given.
        self.window = None
        super().__init__(**kwargs)
'''


def test_repo_config_class_runs_only_with_trust_remote_code(tmp_path):
    repo = tmp_path / "acme"
    repo.mkdir()
    (repo / "configuration_acme.py").write_text(REMOTE_CLASS)
    (repo / "config.json").write_text(json.dumps(
        {"model_type": "acme", "auto_map": {"AutoConfig": "configuration_acme.AcmeConfig"},
         "hidden_size": 64, "window": 512}, indent=2))
    env = {k: v for k, v in os.environ.items() if not k.startswith("DRAFTGUARD_")}
    env["HF_HOME"] = str(tmp_path / "hf")  # transformers copies remote code into its modules cache

    refused = subprocess.run([sys.executable, "-m", "draftguard", "check", str(repo)],
                             capture_output=True, text=True, env=env, timeout=120)
    assert refused.returncode == 2 and "--trust-remote-code" in refused.stderr

    trusted = subprocess.run([sys.executable, "-m", "draftguard", "check", str(repo), "--trust-remote-code",
                              "--format", "json"], capture_output=True, text=True, env=env, timeout=120)
    assert trusted.returncode == 1, trusted.stderr
    out = json.loads(trusted.stdout)
    assert out["targets"][0]["config_class"] == "AcmeConfig"
    [finding] = [f for f in out["findings"] if f["key"] == "window"]
    assert (finding["rule"], finding["raw"], finding["resolved"], finding["line"]) == ("DG001", 512, None, 7)


def test_lines_are_githubs_even_past_a_unicode_line_separator(tmp_path):
    # B1 of issue 32: GitHub ends a line at \n only; YAML and str.splitlines() also at U+2028,
    # U+2029 and U+0085. A .draftguard.yml comment holding one put the error a line low (:3).
    (tmp_path / "config.json").write_text(EXAMPLE.joinpath("config.json").read_text())
    (tmp_path / ".draftguard.yml").write_text("# note\u2028# more\nbogus: 1\n", encoding="utf-8")
    proc = run("check", str(tmp_path))
    assert proc.returncode == 2 and f"{tmp_path / '.draftguard.yml'}:2: unknown key `bogus`" in proc.stderr
    # A config's annotations are on GitHub's line of the key too (`sliding_window` is line 38 here).
    (tmp_path / ".draftguard.yml").unlink()
    text = EXAMPLE.joinpath("config.json").read_text().replace('"qwen3",', '"qwen3",\n  "_name_or_path": "a\u2028b",')
    (tmp_path / "config.json").write_text(text, encoding="utf-8")
    proc = run("check", "--format", "github", str(tmp_path))
    line = text.split("\n").index('  "sliding_window": 2048,') + 1
    assert f"file={tmp_path / 'config.json'},line={line},title=DG001" in proc.stdout, proc.stdout


def test_the_readmes_synopses_name_every_option_of_check_and_fix():
    # Before (issue 42): the README's `check` synopsis left out --launch-file and --launch.
    from draftguard.cli import _parser

    readme = (ROOT / "README.md").read_text()
    commands = next(a for a in _parser()._actions if a.dest == "command").choices
    for name in ("check", "fix"):
        synopsis = readme.split(f"```\ndraftguard {name} ", 1)[1].split("```", 1)[0]
        options = {o for a in commands[name]._actions for o in a.option_strings if o.startswith("--")} - {"--help"}
        assert sorted(options - set(re.findall(r"--[a-z][a-z-]*", synopsis))) == [], name
