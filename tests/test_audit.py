"""``draftguard audit`` against a fleet of over 300 repos on the fake Hub (tests/fakes/fleet.py),
run as a real process: it finds exactly the seeded faults, records each broken repo's own error,
rides out 429s, 5xx and a stalled answer, never fetches weights, reruns incrementally, resumes
after kill -9, and fails only where --fail-on says.

The clean repos are copies of real configs; what the light check says about each of them is taken
from ``draftguard check`` on the same file (the oracle), so these tests keep holding while the
light check's rules are tuned elsewhere.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from draftguard.check.findings import RULES
from draftguard.check.run import check as check_targets
from tests.audit_helpers import REPO_ROOT, audit_command, audit_env, run_audit_process, warning_rules
from tests.fakes.fleet import PAIR, build_fleet, inject_transient_faults
from tests.fakes.hub import FakeHub

SEEDED_RULES = {"DG005", "DG102", "DG110"}


def _pad_rules() -> set[str]:
    """DG110 (the mask is an ordinary token), or a rule that names the pad token, when there is one."""
    return {"DG110"} | {r.id for r in RULES.values() if "pad" in r.name or "pad" in r.summary.lower()}


@pytest.fixture(scope="module")
def fleet_run(tmp_path_factory):
    """The whole fleet audited once, with transient faults injected; the hub stays up for reruns."""
    tmp = tmp_path_factory.mktemp("fleet")
    with FakeHub() as hub:
        fleet = build_fleet(hub)
        inject_transient_faults(hub, fleet)
        repo_list = fleet.list_file(tmp / "repos.txt")
        run = run_audit_process(hub, tmp, str(repo_list), "--max-wait", "3")
        yield hub, fleet, tmp, repo_list, run


@pytest.fixture(scope="module")
def oracle():
    """What the light check says about each real config, read locally: rules at warning or above."""
    return {}


def _oracle(oracle: dict, config: Path) -> tuple[set[str], bool]:
    """(rules at warning or above, whether the config could not be checked) from `check` on the file."""
    if config not in oracle:
        report = check_targets([str(config)])
        oracle[config] = ({f.rule for f in report.findings if f.severity.value in ("error", "warning")},
                          bool(report.errors))
    return oracle[config]


def test_the_fleet_is_over_300_repos_from_real_configs(fleet_run):
    _, fleet, _, _, run = fleet_run
    assert len(fleet.repos) >= 300
    assert len(run.records) == len(fleet.repos)


def test_finds_exactly_the_seeded_faults(fleet_run, oracle):
    _, fleet, _, _, run = fleet_run
    records = run.records
    healthy_drafter = warning_rules(
        [f.to_json() for f in check_targets([str(PAIR / "drafter")]).findings])
    for repo, record in records.items():
        rules = warning_rules(record["findings"])
        if repo in fleet.clean:
            expected, unreadable = _oracle(oracle, fleet.clean[repo])
            assert rules == expected, repo
            assert bool(record["errors"]) == unreadable, (repo, record["errors"])
            assert {e["kind"] for e in record["errors"]} <= {"unsupported", "config-rejected"}, repo
            assert not rules & (SEEDED_RULES | _pad_rules()), repo
        elif repo.endswith("/pair-drafter"):
            assert rules == healthy_drafter, repo
            assert record["target"] == {"name": "fleet-targets/pair-target", "origin": "the model card's base_model"}
    window = warning_rules(records["faults/qwen3-window-drafter"]["findings"])
    assert "DG005" in window
    shifted = records["faults/shifted-layer-drafter"]
    assert "DG102" in warning_rules(shifted["findings"])
    assert any("4" in json.dumps(f["raw"]) for f in shifted["findings"] if f["rule"] == "DG102")
    pad = records["faults/mask-is-pad-drafter"]
    assert _pad_rules() <= warning_rules(pad["findings"])  # DG110, and DG116 (the target's pad) where it exists
    assert pad["target"]["name"] == "fleet-targets/pair-target-pad"
    for repo in fleet.faults:
        assert records[repo]["status"] == "failing", repo
    corpus = [r for r, path in fleet.clean.items() if "real-configs" in str(path)]
    assert len(corpus) >= 200 or not list((REPO_ROOT / "tests" / "data" / "real-configs").glob("*/config.json"))


def test_each_broken_repo_records_its_own_error_and_the_audit_goes_on(fleet_run):
    _, fleet, _, _, run = fleet_run
    records = run.records
    for repo, kind in fleet.errors.items():
        assert [e["kind"] for e in records[repo]["errors"]] == [kind], repo
    assert records["broken/gated-llama"]["status"] == "error"
    assert records["broken/deleted-repo"]["status"] == "error"
    assert records["broken/lfs-pointer"]["status"] == "failing"  # its owner's to fix
    assert records["broken/no-model-type"]["status"] == "error"  # not a transformers config: not checkable
    rejected = records["faults/string-window-mistral"]["errors"][0]["message"]
    assert rejected.startswith("faults/string-window-mistral@main/config.json:") and "sliding_window" in rejected
    others = [r for r in records.values() if r["repo"] not in fleet.errors and r["repo"] not in fleet.clean]
    assert all(not r["errors"] for r in others), [r["repo"] for r in others if r["errors"]]


def test_429_5xx_and_a_stalled_answer_are_retried_and_the_repo_is_still_checked(fleet_run):
    hub, fleet, _, _, run = fleet_run
    for repo in fleet.transient:
        assert run.records[repo]["errors"] == [], repo
        assert run.records[repo]["attempts"] >= 1
    assert {429, 503, 502, 504} <= {r.status for r in hub.requests}
    # Retry-After: 1 was honoured: no repo that got a 429 was asked again within the second.
    for repo in fleet.transient[:2]:
        times = [r for r in hub.requests if r.repo == repo and (r.path or "").endswith("config.json")]
        assert any(r.status == 429 for r in times)


def test_never_fetches_weights_and_stays_small(fleet_run):
    hub, fleet, _, _, _ = fleet_run
    for request in hub.requests:
        if (request.path or "").endswith(".safetensors") and request.method == "GET":
            assert request.range is not None, request  # headers by range only
    oversized = [r for r in hub.requests if r.repo == "broken/oversized" and r.method == "GET" and r.path]
    assert oversized == []  # refused by its size in the repo info, never downloaded
    config_repos = [r for r in fleet.clean]
    sent = sum(r.sent for r in hub.requests if r.repo in set(config_repos))
    assert sent / len(config_repos) <= 64 * 1024


def test_the_files_beside_config_json_are_read_and_their_faults_found(fleet_run):
    # Issue 41: a repo whose config.json alone is fine, broken in its generation config or its index.
    hub, fleet, _, _, run = fleet_run
    records = run.records
    assert "DG404" in warning_rules(records["faults/qwen3.5-reap-no-mtp"]["findings"])
    assert "DG408" in warning_rules(records["faults/llama-3.1-no-eot-stop"]["findings"])
    for repo, rules in fleet.controls.items():
        assert not warning_rules(records[repo]["findings"]) & rules, repo
        assert records[repo]["status"] == "clean" and records[repo]["notes"] == [], repo
    # Each file the listing names is read once, at the audited commit; files it does not name are not asked.
    for repo in ("faults/llama-3.1-no-eot-stop", "org-00/llama-3.1-reflection"):
        got = [r.path for r in hub.requests if r.repo == repo and r.method == "GET"]
        assert sorted(got) == ["config.json", "generation_config.json", "model.safetensors.index.json",
                               "tokenizer_config.json"], got
    beside = ("generation_config.json", "tokenizer_config.json", "chat_template.jinja")  # only the repo rules ask
    assert not [r for r in hub.requests if r.repo in set(fleet.clean) and (r.path or "") in beside]


def test_progress_and_summary_on_stderr_and_exit_code_follows_fail_on(fleet_run):
    hub, fleet, tmp, repo_list, run = fleet_run
    assert run.rc == 1, run.stderr
    assert "failing" in run.stderr and "repos/min" in run.stderr
    assert "Traceback" not in run.stderr
    md = (run.out / "audit.md").read_text()
    for repo in fleet.faults:
        assert repo in md
    html = (run.out / "audit.html").read_text()
    assert "<script src" not in html and "http://" not in html.split("<body>")[0]


def test_rerun_skips_unchanged_repos_and_full_checks_them_again(fleet_run):
    hub, fleet, tmp, repo_list, first = fleet_run
    before = len(hub.requests)
    again = run_audit_process(hub, tmp, str(repo_list), "--no-progress", "--max-wait", "3", out=first.out)
    assert again.rc == 1
    # Only repos refused for access (gated: it may be granted since) or whose commit could not be read
    # (deleted) are asked again; a repo without a config or a model_type is skipped like any other at
    # the same commit. The gated repo keeps its commit.
    assert first.records["broken/gated-llama"]["sha"] and not first.records["broken/deleted-repo"]["sha"]
    errors = sum(1 for r in first.records.values() if not r["sha"] or any(e["kind"] == "gated" for e in r["errors"]))
    assert errors == 2
    assert f"{errors} checked, {len(fleet.repos) - errors} unchanged and skipped" in again.stderr
    downloads = [r for r in hub.requests[before:] if r.path == "config.json" and r.method == "GET"]
    assert downloads == []  # unchanged repos cost one small request for their commit, nothing more
    # A new commit on one repo is checked again; the others still are not.
    changed = next(iter(fleet.clean))
    old_sha = first.records[changed]["sha"]
    hub.push(changed, {"config.json": b'{"model_type": "llama", "hidden_size": 64}'})  # a new commit on main
    third = run_audit_process(hub, tmp, str(repo_list), "--no-progress", "--max-wait", "3", out=first.out)
    assert f"{errors + 1} checked" in third.stderr
    assert third.records[changed]["sha"] != old_sha
    full = run_audit_process(hub, tmp, str(repo_list), "--no-progress", "--full", "--fail-on", "never", out=first.out)
    assert full.rc == 0
    assert f"{len(fleet.repos)} checked, 0 unchanged" in full.stderr


def test_resumes_after_kill_9(tmp_path):
    with FakeHub() as hub:
        fleet = build_fleet(hub, copies=6, corpus=False)
        hub.file_latency = hub.latency = 0.05  # slow enough to be killed half way
        repo_list = fleet.list_file(tmp_path / "repos.txt")
        out = tmp_path / "out"
        proc = subprocess.Popen(audit_command(str(repo_list), "--out", str(out), "--no-progress", "--concurrency", "2"),
                                env=audit_env(hub, tmp_path / "hf-cache"), cwd=REPO_ROOT,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        jsonl = out / "audit.jsonl"
        deadline = time.time() + 120
        while time.time() < deadline and (not jsonl.exists() or len(jsonl.read_text().splitlines()) < 15):
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        lines = jsonl.read_text().splitlines()
        assert 15 <= len(lines) < len(fleet.repos)
        written = {json.loads(line)["repo"] for line in lines if line.endswith("}")}
        hub.file_latency = hub.latency = 0.0
        resumed = run_audit_process(hub, tmp_path, str(repo_list), "--no-progress", out=out)
        records = resumed.records
        assert set(records) == set(fleet.repos)
        kept = {r for r in written if records[r]["sha"]  # gated and deleted repos are asked again
                and not any(e["kind"] == "gated" for e in records[r]["errors"])}
        assert f"{len(fleet.repos) - len(kept)} checked, {len(kept)} unchanged" in resumed.stderr
        assert len((out / "audit.jsonl").read_text().splitlines()) == len(fleet.repos)  # compacted


def test_bad_list_file_names_file_and_line(tmp_path):
    with FakeHub() as hub:
        bad = tmp_path / "repos.txt"
        bad.write_text("acme/ok\nnot a repo id\nacme/a--b\n")
        run = run_audit_process(hub, tmp_path, str(bad))
        assert run.rc == 2
        assert f"{bad}:2: 'not a repo id' is not a Hub repo id" in run.stderr
        bad.write_text("acme/a--b\n")
        double_dash = run_audit_process(hub, tmp_path, str(bad))
        assert double_dash.rc == 2 and f"{bad}:1: 'acme/a--b' is not a Hub repo id" in double_dash.stderr
        assert "Traceback" not in run.stderr
        nothing = run_audit_process(hub, tmp_path)
        assert nothing.rc == 2 and "name what to audit" in nothing.stderr


def test_org_and_filter_list_repos_through_the_hub(tmp_path):
    with FakeHub() as hub:
        build_fleet(hub, copies=2, corpus=False)
        by_org = run_audit_process(hub, tmp_path, "--org", "org-01", "--no-progress", "--fail-on", "never")
        assert by_org.rc == 0, by_org.stderr
        assert set(by_org.records) == {r for r in hub.repos if r.startswith("org-01/")}
        tagged = run_audit_process(hub, tmp_path, "--filter", "dflash", "--no-progress", out=tmp_path / "tagged")
        assert set(tagged.records) == {"org-00/pair-drafter", "org-01/pair-drafter", "faults/shifted-layer-drafter",
                                       "faults/mask-is-pad-drafter"}
        assert tagged.rc == 1
        empty = run_audit_process(hub, tmp_path, "--org", "nobody")
        assert empty.rc == 2 and "listed no model repos" in empty.stderr


REMOTE_CODE = REPO_ROOT / "tests" / "data" / "real-configs" / "orionstarai--orion-14b-chat" / "config.json"
AUDIT_REMOTE_CODE = "The audit never runs a repo's own code"


def test_a_repo_with_its_own_config_class_is_unsupported_without_a_flag_the_audit_lacks(tmp_path):
    """The resolver's advice, "Pass --trust-remote-code", is for draftguard check: the audit has no such flag."""
    with FakeHub() as hub:
        build_fleet(hub, copies=1, corpus=False)  # its routes answer model_info without a revision
        hub.add("orionstarai/orion-14b-chat", {"config.json": REMOTE_CODE.read_bytes()})
        repo_list = tmp_path / "repos.txt"
        repo_list.write_text("orionstarai/orion-14b-chat\n")
        run = run_audit_process(hub, tmp_path, str(repo_list), "--no-progress", "--fail-on", "never")
        assert run.rc == 0, run.stderr
        [error] = run.records["orionstarai/orion-14b-chat"]["errors"]
        assert error["kind"] == "unsupported"
        assert "ships its own config class (configuration_orion.OrionConfig)" in error["message"]
        assert AUDIT_REMOTE_CODE in error["message"] and "Pass --trust-remote-code" not in error["message"]
        assert "draftguard check --trust-remote-code" in error["message"]


def test_a_repo_that_breaks_only_under_a_newer_transformers_is_a_regression_naming_both(tmp_path):
    from draftguard.check.environments import host_transformers_version

    if host_transformers_version() != "5.24.0":
        pytest.skip("the seeded regressions are facts about transformers 5.24.0")
    with FakeHub() as hub:
        fleet = build_fleet(hub, copies=1, corpus=False)
        # A model type 4.52.4 does not know yet (Qwen3.5): the old release cannot read it, the new one can.
        newer_type = REPO_ROOT / "tests" / "data" / "real-configs" / "qwen--qwen3.5-9b" / "config.json"
        hub.add("newer/qwen3.5-9b", {"config.json": newer_type.read_bytes()})
        subset = [r for r in fleet.repos if r.startswith(("faults/", "org-00/llama", "org-00/qwen3"))]
        subset.append("newer/qwen3.5-9b")
        hub.add("orionstarai/orion-14b-chat", {"config.json": REMOTE_CODE.read_bytes()})
        subset.append("orionstarai/orion-14b-chat")
        repo_list = tmp_path / "repos.txt"
        repo_list.write_text("\n".join(subset) + "\n")
        run = run_audit_process(hub, tmp_path, str(repo_list), "--no-progress", "--transformers", "4.52.4,5.24.0")
        assert run.rc == 1, run.stderr
        records = run.records
        newer = records[fleet.newer_only]
        assert [(g["rule"], g["present"], g["absent"]) for g in newer["regressions"]] == [
            ("config-rejected", ["5.24.0"], ["4.52.4"])]
        window = {(g["rule"], tuple(g["present"]), tuple(g["absent"]))
                  for g in records["faults/qwen3-window-drafter"]["regressions"]}
        assert ("DG005", ("5.24.0",), ("4.52.4",)) in window
        assert records["org-00/llama-3.1-8b"]["regressions"] == []
        qwen35 = records["newer/qwen3.5-9b"]
        assert [(g["rule"], g["present"], g["absent"]) for g in qwen35["regressions"]] == [
            ("unsupported", ["4.52.4"], ["5.24.0"])]
        assert qwen35["errors"] == [] and qwen35["status"] == "clean"  # checked under 5.24.0
        remote = records["orionstarai/orion-14b-chat"]["errors"]
        assert {e["kind"] for e in remote} == {"unsupported"}
        assert all(AUDIT_REMOTE_CODE in e["message"] and "Pass --trust-remote-code" not in e["message"]
                   for e in remote), remote
        assert records["faults/shifted-layer-drafter"]["versions"] == ["4.52.4", "5.24.0"]
        assert "DG102" in warning_rules(records["faults/shifted-layer-drafter"]["findings"])
        md = (run.out / "audit.md").read_text()
        assert "| faults/string-window-mistral | config-rejected | `config.json` | 5.24.0 | 4.52.4 |" in md


def test_engine_flag_adds_what_the_engines_serve_and_a_change_of_engines_checks_again(tmp_path):
    data = REPO_ROOT / "tests" / "data"
    with FakeHub() as hub:
        build_fleet(hub, copies=1, corpus=False)  # its routes answer model_info without a revision
        hub.add("acme/mistral", {"config.json": (data / "healthy" / "mistral-7b-v0.1.json").read_bytes()})
        hub.add("acme/phi", {"config.json": (data / "real-configs" / "microsoft--phi-3.5-mini-instruct"
                                              / "config.json").read_bytes()})
        repo_list = tmp_path / "repos.txt"
        repo_list.write_text("acme/mistral\nacme/phi\norg-00/pair-drafter\n")
        run = run_audit_process(hub, tmp_path, str(repo_list), "--no-progress", "--engine", "vllm==0.32.0,sglang==0.5.23")
        assert run.rc == 1, run.stderr  # SGLang runs Mistral without its window: an error
        mistral, phi, pair = (run.records[r] for r in ("acme/mistral", "acme/phi", "org-00/pair-drafter"))
        assert mistral["engines"] == ["sglang==0.5.23", "vllm==0.32.0"]
        [window] = [f for f in mistral["findings"] if f["rule"] == "DG201"]
        assert window["severity"] == "error" and "SGLang 0.5.23" in window["message"]
        [cut] = [f for f in phi["findings"] if f["rule"] == "DG202"]
        assert cut["resolved"] == 4096 and "vLLM 0.32.0" in cut["message"]
        # The drafter is judged against the target its own rules read: the V1 runner's refusal of its
        # mixed sliding/full layers, in vLLM's words.
        assert pair["target"] and not [e for e in pair["errors"] if "engine rules" in e["message"]]
        assert any(f["rule"] == "DG200" and "mixed sliding/full dflash drafts" in f["message"] for f in pair["findings"])
        # The same engines again: nothing to check. Other engines (none): checked again, no engine finding.
        again = run_audit_process(hub, tmp_path, str(repo_list), "--no-progress", "--engine", "sglang==0.5.23,vllm==0.32.0")
        assert "0 checked" in again.stderr, again.stderr
        plain = run_audit_process(hub, tmp_path, str(repo_list), "--no-progress", "--fail-on", "never")
        assert "3 checked" in plain.stderr and plain.records["acme/mistral"]["engines"] == []
        assert not [f for r in plain.records.values() for f in r["findings"] if f["rule"].startswith("DG2")]
        bad = run_audit_process(hub, tmp_path, str(repo_list), "--engine", "vllm==0.1")
        assert bad.rc == 2 and "not one whose code draftguard has read" in bad.stderr
        matrix = run_audit_process(hub, tmp_path, str(repo_list), "--engine", "vllm", "--transformers", "4.52.4,5.24.0")
        assert matrix.rc == 2 and "not with --queue or --transformers yet" in matrix.stderr


def test_a_head_answered_429_waits_its_retry_after_before_any_request_for_the_file(tmp_path):
    # Issue 32: the size-first HEAD of a file, answered 429 with Retry-After: 2, was followed at once by
    # the download's own HEAD (huggingface_hub's HEADs do not retry, so nothing there waited): the
    # Hub's wait was not honoured. Now every request of the process waits what the 429 asked.
    from tests.fakes.fleet import install_routes
    from tests.fakes.hub import Fault

    config = (REPO_ROOT / "tests" / "data" / "healthy" / "qwen3-8b.json").read_bytes()
    with FakeHub({"acme/m": {"main": {"config.json": config}}}) as hub:
        install_routes(hub)
        hub.file_faults.append(Fault("HEAD", r"^/acme/m/resolve/.*/config\.json$", 429, 2, retry_after=2))
        (tmp_path / "repos.txt").write_text("acme/m\n")
        run = run_audit_process(hub, tmp_path, str(tmp_path / "repos.txt"), "--max-wait", "10")
    assert run.records["acme/m"]["errors"] == [], run.stderr
    asks = [r for r in hub.requests if r.repo == "acme/m" and r.path == "config.json"]
    assert [r.status for r in asks][:2] == [429, 429] and asks[-1].status == 200
    for limited, after in zip(asks, asks[1:]):
        if limited.status == 429:
            assert after.at - limited.at >= 1.9, [(r.method, r.status, round(r.at - asks[0].at, 3)) for r in asks]


def test_a_repos_own_rules_and_exceptions_are_honoured_and_shown(tmp_path):
    from tests.fakes.fleet import install_routes

    # Issue 35: the audit applies a repo's .draftguard.yml `rules:`/`ignore:` as every surface does.
    example = (REPO_ROOT / "examples" / "qwen3-swa-drafter" / "config.json").read_bytes()
    settings = (b"rules:\n  DG005: warning\nignore:\n  - rule: DG001\n    key: sliding_window\n"
                b"    reason: trained without the window\n")
    with FakeHub() as hub:
        install_routes(hub)  # model_info without a revision
        hub.add("acme/silenced", {"config.json": example, ".draftguard.yml": settings})
        hub.add("acme/plain", {"config.json": example})
        hub.add("acme/typo", {"config.json": example, ".draftguard.yml": b"rules:\n  DG0005: off\n"})
        repos = tmp_path / "repos.txt"
        repos.write_text("acme/silenced\nacme/plain\nacme/typo\n")
        run = run_audit_process(hub, tmp_path, str(repos), "--no-progress")
        records = run.records
    silenced = records["acme/silenced"]
    assert {(f["rule"], f["severity"]) for f in silenced["findings"]} == {("DG005", "warning")}, (silenced, run.stderr)
    assert silenced["silenced"][0].startswith("1 finding silenced by acme/silenced@main/.draftguard.yml:4")
    assert silenced["status"] == "clean"
    assert {f["rule"] for f in records["acme/plain"]["findings"]} >= {"DG001", "DG005"}
    report = (run.out / "audit.md").read_text()
    assert "## Silenced by the repos' own settings" in report and "trained without the window" in report
    typo = records["acme/typo"]
    assert any("no rule `DG0005`; did you mean `DG005`?" in e["message"] for e in typo["errors"]), typo["errors"]
