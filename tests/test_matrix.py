"""The transformers version matrix, against real installs of transformers 4.52.4 and 5.24.0.

4.52.4 is installed once into the shared cache (``$DRAFTGUARD_CACHE_DIR``, else the user cache,
``~/.cache/draftguard``): about 35 s with pip, a few seconds with uv, then cached for every later run.
5.24.0 is the version draftguard itself runs with, so it needs no environment. Broken versions are
simulated with real virtual environments whose ``transformers`` crashes or hangs on import, and
"no such version" / "no network" with a package index on loopback (or a closed loopback port).
"""

from __future__ import annotations

import http.server
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from draftguard.check import environments, matrix, resolver
from draftguard.check.findings import ABSENT
from draftguard.cli import main
from draftguard.snapshot import BadInput

REPO = Path(__file__).resolve().parents[1]
SWA_DRAFTER = str(REPO / "examples" / "qwen3-swa-drafter")
OLD, PINNED = "4.52.4", "5.24.0"


@pytest.fixture(scope="module")
def shared_cache():
    """One cache for the whole session, so CI installs 4.52.4 once; exported so CLI runs use it."""
    cache = environments.cache_dir()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(environments.CACHE_ENV, str(cache))
        yield cache


@pytest.fixture(scope="module")
def old_env(shared_cache):
    """transformers 4.52.4 installed (on first use, with the progress lines that says so)."""
    lines: list[str] = []
    python, took = matrix.ensure_env(OLD, cache=shared_cache, progress=lines.append)
    return python, took, lines


@pytest.fixture(scope="module")
def swa_report(shared_cache, old_env):
    return matrix.check_matrix([SWA_DRAFTER], [PINNED, OLD], cache=shared_cache)


def _host_is_pinned():
    if environments.host_transformers_version() != PINNED:
        pytest.skip(f"draftguard runs with transformers {environments.host_transformers_version()}, not {PINNED}")


# --- versions and the cache -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    ["5.24.0;rm -rf /", "--index-url=http://evil", ">=4.0", "latest", "4", "4.52.4+local", "4.52.4 ", "v4.52.4",
     "4.52.4 --pre", "git+https://github.com/huggingface/transformers"],
)
def test_anything_but_a_release_number_is_refused_before_pip_sees_it(bad):
    if bad == "4.52.4 ":  # surrounding blanks are trimmed, not refused
        assert matrix.parse_versions([bad]) == ["4.52.4"]
        return
    with pytest.raises(BadInput, match="is not a transformers version"):
        matrix.parse_versions([PINNED, bad])


def test_versions_are_normalised_deduplicated_and_sorted_oldest_first():
    assert matrix.parse_versions(["5.24.0", "4.52.04", "5.0.0rc1", "4.52.4"]) == ["4.52.4", "5.0.0rc1", "5.24.0"]


def test_cache_dir_prefers_draftguard_then_xdg_then_home(monkeypatch, tmp_path):
    monkeypatch.setenv(environments.CACHE_ENV, str(tmp_path / "dg"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert environments.cache_dir() == tmp_path / "dg"
    monkeypatch.delenv(environments.CACHE_ENV)
    assert environments.cache_dir() == tmp_path / "xdg" / "draftguard"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert environments.cache_dir() == tmp_path / "home" / ".cache" / "draftguard"
    # Keyed by version (and the Python the venv was built for).
    assert environments.env_dir("4.52.4", tmp_path).name == f"transformers-4.52.4-py{sys.version_info[0]}{sys.version_info[1]}"


def test_versions_come_from_the_option_else_from_draftguard_yml(tmp_path):
    assert matrix.requested_versions(None, tmp_path) is None
    (tmp_path / ".draftguard.yml").write_text("fail_on: error\ntransformers: [5.24.0, 4.52.4]\n")
    assert matrix.requested_versions(None, tmp_path) == ["4.52.4", "5.24.0"]
    assert matrix.requested_versions("4.57.6", tmp_path) == ["4.57.6"]
    (tmp_path / ".draftguard.yml").write_text("fail_on: error\ntransformers:\n  - 4.52.4\n  - '5.x'\n")
    with pytest.raises(BadInput) as caught:
        matrix.requested_versions(None, tmp_path)
    assert caught.value.line == 2 and caught.value.key == "transformers"
    assert str(caught.value).startswith(f"{tmp_path / '.draftguard.yml'}:2: '5.x' is not a transformers version")


def test_version_spans_read_as_runs_of_the_checked_versions():
    checked = ["4.52.4", "4.53.3", "4.57.6", "5.24.0"]
    assert matrix._span(["4.53.3", "4.57.6", "5.24.0"], checked) == "4.53.3 to 5.24.0"
    assert matrix._span(["4.52.4", "5.24.0"], checked) == "4.52.4 and 5.24.0"
    assert matrix._span(["4.57.6"], checked) == "4.57.6"


# --- real installs ------------------------------------------------------------------------------------


def test_first_use_installs_with_progress_and_later_uses_are_cached(shared_cache, old_env):
    python, took, lines = old_env
    if took is None:  # installed by an earlier session into the shared cache
        assert lines == []
    else:
        assert lines[0].startswith(f"installing transformers {OLD} (first use of this version) into ")
        assert lines[1] == f"installed transformers {OLD} in {took:.1f} s"
    again: list[str] = []
    assert matrix.ensure_env(OLD, cache=shared_cache, progress=again.append) == (python, None)
    assert again == []
    version = subprocess.run([python, "-c", "import transformers; print(transformers.__version__)"],
                             capture_output=True, text=True, check=True).stdout.strip()
    assert version == OLD
    # Nothing but transformers and what it pulls: no torch, no draftguard.
    missing = subprocess.run([python, "-I", "-c", "import importlib.util as u; print(u.find_spec('torch'), "
                              "u.find_spec('draftguard'))"], capture_output=True, text=True, check=True)
    assert missing.stdout.split() == ["None", "None"]


def test_the_qwen3_window_gate_shows_under_5_24_and_not_under_4_52(swa_report):
    _host_is_pinned()
    assert [c.status for c in swa_report.matrix.columns] == ["ok", "ok"]
    assert swa_report.matrix.versions == [OLD, PINNED]
    assert swa_report.errors == []
    by_key = {(f.rule, f.key): f for f in swa_report.findings}
    # Each shown once, with the one version it occurs under.
    assert len(swa_report.findings) == len(by_key)
    dropped = by_key[("DG001", "sliding_window")]
    assert dropped.versions == [PINNED]
    assert (dropped.raw, dropped.resolved) == (2048, None)
    assert f"(transformers {PINNED})" in dropped.message
    assert dropped.message.endswith(f"Not on transformers {OLD}, where the model reads 2048.")
    assert by_key[("DG005", "layer_types")].versions == [PINNED]
    # The key x version table holds the window and the effective attention, and nothing equal.
    rows = {row.key: row.values for row in swa_report.matrix.rows}
    assert rows["sliding_window"] == {OLD: 2048, PINNED: None}
    assert rows[matrix.ATTENTION_ROW] == {OLD: "0-3: sliding(2048); 4: full", PINNED: "0-3: full; 4: full"}
    assert "hidden_size" not in rows


def test_a_finding_under_every_version_is_merged_into_one_naming_them_all(tmp_path, shared_cache, old_env):
    _host_is_pinned()
    (tmp_path / "config.json").write_text(json.dumps({
        "model_type": "qwen3", "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2,
        "num_hidden_layers": 2, "rope_theta": 1000000,
    }, indent=2))
    report = matrix.check_matrix([str(tmp_path)], [OLD, PINNED], cache=shared_cache)
    head_dim = [f for f in report.findings if f.key == "head_dim"]
    assert len(head_dim) == 1
    assert head_dim[0].rule == "DG003" and head_dim[0].versions == [OLD, PINNED]
    assert f"(transformers {OLD} and {PINNED})" in head_dim[0].message
    assert "Not on" not in head_dim[0].message
    # 5.x folds rope_theta into rope_parameters: a rename there, nothing under 4.52.
    [rope] = [f for f in report.findings if f.key == "rope_theta"]
    assert (rope.rule, rope.versions) == ("DG007", [PINNED])
    assert {r.key: r.values for r in report.matrix.rows}["rope_theta"] == {OLD: 1000000, PINNED: ABSENT}


def test_cli_json_and_markdown_carry_versions_and_the_table(shared_cache, old_env, capsys):
    _host_is_pinned()
    assert main(["check", SWA_DRAFTER, "--transformers", f"{PINNED},{OLD}", "--format", "json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["matrix"]["versions"] == [OLD, PINNED]
    assert [c["status"] for c in out["matrix"]["columns"]] == ["ok", "ok"]
    assert {(f["rule"], f["key"]): f["versions"] for f in out["findings"]} == {
        ("DG001", "sliding_window"): [PINNED], ("DG005", "layer_types"): [PINNED]}
    assert {"key": "sliding_window", "raw": 2048, "values": {OLD: 2048, PINNED: None}}.items() <= {
        k: v for k, v in out["matrix"]["rows"][0].items() if k != "file"}.items()

    assert main(["check", SWA_DRAFTER, "--transformers", f"{OLD},{PINNED}", "--format", "markdown"]) == 1
    md = capsys.readouterr().out
    assert "| key | config.json | 4.52.4 | 5.24.0 |" in md
    assert "| sliding_window | <code>2048</code> | <code>2048</code> | <code>null</code> |" in md
    assert f"Effective attention of <code>{SWA_DRAFTER}/config.json</code> (transformers {PINNED})" in md

    assert main(["check", SWA_DRAFTER, "--transformers", f"{OLD},{PINNED}"]) == 1
    text = capsys.readouterr().out
    assert "resolved values that differ by transformers version" in text
    assert f"transformers: {PINNED}" in text


def test_the_light_check_is_unchanged_without_the_option(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no .draftguard.yml here
    assert main(["check", SWA_DRAFTER, "--format", "json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert "matrix" not in out and all("versions" not in f for f in out["findings"])


# --- bad input ----------------------------------------------------------------------------------------


def _offline_installer_env(monkeypatch, index_url: str) -> None:
    """Point pip and uv at ``index_url`` only, away from any machine-wide config."""
    for name in list(os.environ):
        if name.startswith(("PIP_", "UV_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_INDEX_URL", index_url)
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("UV_NO_CONFIG", "1")
    monkeypatch.setenv("UV_DEFAULT_INDEX", index_url)
    monkeypatch.setenv("UV_HTTP_RETRIES", "0")
    monkeypatch.setenv("UV_CACHE_DIR", os.path.join(os.environ.get("TMPDIR", "/tmp"), "draftguard-test-uv-cache"))


class _Index(http.server.BaseHTTPRequestHandler):
    """A PEP 503 simple index that knows one transformers release, 4.52.4."""

    def do_GET(self):
        if self.path.rstrip("/") == "/simple/transformers":
            body = (b'<html><body><a href="/files/transformers-4.52.4-py3-none-any.whl">'
                    b"transformers-4.52.4-py3-none-any.whl</a></body></html>")
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
        else:
            body = b"not here"
            self.send_response(404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def fake_index():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Index)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/simple/"
    server.shutdown()
    server.server_close()


def test_a_version_that_does_not_exist_is_named_and_the_others_still_print(
    fake_index, monkeypatch, tmp_path, capsys
):
    _host_is_pinned()
    _offline_installer_env(monkeypatch, fake_index)
    monkeypatch.setenv(environments.CACHE_ENV, str(tmp_path / "cache"))
    assert main(["check", SWA_DRAFTER, "--transformers", f"{PINNED},99.0.0", "--format", "json"]) == 2
    captured = capsys.readouterr()
    assert "draftguard: installing transformers 99.0.0 (first use of this version)" in captured.err
    assert "draftguard: transformers 99.0.0 does not exist on the package index" in captured.err
    out = json.loads(captured.out)
    assert {(f["rule"], f["key"]) for f in out["findings"]} == {("DG001", "sliding_window"), ("DG005", "layer_types")}
    assert [(c["version"], c["status"]) for c in out["matrix"]["columns"]] == [(PINNED, "ok"), ("99.0.0", "install failed")]
    assert not environments.env_dir("99.0.0", tmp_path / "cache").exists()  # no half-built env left behind


def test_no_network_and_nothing_cached_says_so(monkeypatch, tmp_path, capsys):
    with socket.socket() as probe:  # a loopback port nobody listens on: connections are refused
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    _offline_installer_env(monkeypatch, f"http://127.0.0.1:{port}/simple/")
    monkeypatch.setenv(environments.CACHE_ENV, str(tmp_path / "cache"))
    assert main(["check", SWA_DRAFTER, "--transformers", OLD, "--format", "json"]) == 2
    err = capsys.readouterr().err
    assert f"transformers {OLD} is not cached and the package index could not be reached (no network?)" in err
    assert "Traceback" not in err


def _broken_env(cache: Path, version: str, body: str) -> None:
    """A real venv whose transformers package runs ``body`` on import, marked ready in the cache."""
    env = environments.env_dir(version, cache)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    site = env / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    (site / "transformers").mkdir(parents=True)
    (site / "transformers" / "__init__.py").write_text(body)
    (env / environments.READY_MARKER).write_text("{}")


def test_the_resolver_package_runs_from_a_copy_where_draftguard_cannot_be_imported(tmp_path):
    # The matrix's environments hold nothing but transformers: the package must load under its
    # private name, from a folder outside the source tree, with every import of draftguard refused.
    folder = tmp_path / "resolver"
    shutil.copytree(environments.RESOLVER_PACKAGE, folder, ignore=shutil.ignore_patterns("__pycache__"))
    refuse_draftguard = "import sys\nsys.modules['draftguard'] = None\n"
    request = {"configs": [{"raw": {"model_type": "qwen3", "sliding_window": 2048}},
                           {"raw": {"model_type": "qwen33"}}]}
    proc = subprocess.run([sys.executable, "-I", "-c", refuse_draftguard + resolver.LOADER, str(folder)],
                          input=json.dumps(request), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    answer = json.loads(proc.stdout)
    window, typo = answer["results"]
    assert window["__config__"] == "Qwen3Config" and window["values"]["sliding_window"] is None
    assert window["evidence"]["gates"] == {"sliding_window": "use_sliding_window"}
    assert typo["error"]["kind"] == "model_type_unknown" and "'qwen3'" in typo["error"]["message"]
    assert answer["transformers_version"] == environments.host_transformers_version()


def test_a_crashing_or_hanging_resolver_marks_its_column_and_the_run_goes_on(tmp_path, capsys, monkeypatch):
    _host_is_pinned()
    _broken_env(tmp_path, "0.0.1", "import os\nos.abort()\n")
    _broken_env(tmp_path, "0.0.2", "import time\ntime.sleep(600)\n")
    # The limit leaves room for the healthy version on a loaded 2-core machine.
    limit = 10
    started = time.monotonic()
    report = matrix.check_matrix([SWA_DRAFTER], [PINNED, "0.0.1", "0.0.2"], cache=tmp_path, resolve_timeout=limit)
    assert time.monotonic() - started < limit + 10
    columns = {c.version: c for c in report.matrix.columns}
    assert columns[PINNED].status == "ok"
    assert columns["0.0.1"].status == "crashed" and "killed by SIGABRT" in columns["0.0.1"].detail
    assert columns["0.0.2"].status == "timed out"
    assert columns["0.0.2"].detail == f"the resolver did not answer within {limit} s and was stopped"
    assert {f.rule for f in report.findings} == {"DG001", "DG005"}
    assert all(f.versions == [PINNED] for f in report.findings)
    assert sorted(e.message.split(":")[0] for e in report.errors) == ["transformers 0.0.1", "transformers 0.0.2"]
    header, _ = report.matrix.table()
    assert header == ["key", "config.json", "0.0.1 (crashed)", "0.0.2 (timed out)", PINNED]

    monkeypatch.setenv(environments.CACHE_ENV, str(tmp_path))
    assert main(["check", SWA_DRAFTER, "--transformers", f"{PINNED},0.0.1"]) == 2
    captured = capsys.readouterr()
    assert "transformers 0.0.1: the resolver crashed (killed by SIGABRT)" in captured.out and "DG001" in captured.out
    assert "draftguard: transformers 0.0.1: the resolver crashed (killed by SIGABRT)" in captured.err


def test_a_speculators_drafter_is_judged_through_its_layer_config_and_against_its_target(
    tmp_path, shared_cache, old_env
):
    _host_is_pinned()
    target = tmp_path / "target"
    target.mkdir()
    (target / "config.json").write_text(json.dumps({
        "model_type": "qwen3", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 4,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "vocab_size": 48,
    }))
    drafter = tmp_path / "drafter"
    drafter.mkdir()
    (drafter / "config.json").write_text(json.dumps({
        "architectures": ["DFlashSpeculator"], "speculators_model_type": "dflash", "model_type": "speculators",
        "transformer_layer_config": {
            "model_type": "qwen3", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "vocab_size": 48,
            "layer_types": ["sliding_attention", "full_attention"], "sliding_window": 6, "max_window_layers": 0,
        },
        "aux_hidden_state_layer_ids": [1, 5], "block_size": 4, "mask_token_id": 46, "draft_vocab_size": 48,
    }, indent=2))
    report = matrix.check_matrix([str(drafter)], [OLD, PINNED], cache=shared_cache, drafter_target=str(target))
    assert report.errors == []
    [window] = [f for f in report.findings if f.rule == "DG001"]
    assert window.key == "transformer_layer_config.sliding_window" and window.versions == [PINNED]
    assert '"sliding_window"' in (drafter / "config.json").read_text().splitlines()[window.line - 1]
    assert {r.key for r in report.matrix.rows} >= {"transformer_layer_config.sliding_window"}
    # The drafter-against-target rules run once, not per version: aux id 5 is past the target's 4 layers.
    [out_of_range] = [f for f in report.findings if f.rule == "DG102"]
    assert out_of_range.versions is None


def test_an_unusable_cache_dir_or_time_limit_is_bad_input_not_a_crash(tmp_path, monkeypatch, capsys):
    _host_is_pinned()
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv(environments.CACHE_ENV, str(blocker))
    assert main(["check", SWA_DRAFTER, "--transformers", f"{PINNED},4.52.4", "--format", "json"]) == 2
    captured = capsys.readouterr()
    assert f"draftguard: transformers 4.52.4: cannot use the cache dir {blocker / 'envs'}" in captured.err
    assert f"set {environments.CACHE_ENV} to a writable directory" in captured.err
    assert json.loads(captured.out)["findings"]  # 5.24.0's results are still printed

    monkeypatch.setenv(matrix.RESOLVE_TIMEOUT_ENV, "soon")
    assert main(["check", SWA_DRAFTER, "--transformers", PINNED]) == 2
    assert capsys.readouterr().err == f"draftguard: {matrix.RESOLVE_TIMEOUT_ENV}='soon' is not a number of seconds\n"
