"""The second probe (issue 25) of `draftguard serve` as a real process, against the loopback fakes
of GitHub and the Hub: each test replays one probe black-box and failed before its fix
(docs/security.md, "Probes")."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

pytest.importorskip("starlette")
pytest.importorskip("huey")
pytest.importorskip("github")

from draftguard.report.comment import parse_sticky  # noqa: E402
from tests.fakes.github import pr_payload  # noqa: E402
from tests.test_bot import BASE, REPO  # noqa: E402
from tests.test_bot_hardening import World, add_pr, world  # noqa: E402,F401

FIXED = (Path(__file__).parent / "data/healthy/qwen3-8b.json").read_text()


def open_pr(world: World, number: int, files: dict, **kw) -> str:
    head = add_pr(world, number, files, **kw)
    assert world.post("pull_request", pr_payload(REPO, number, head, BASE)).status_code == 202
    return head


def light(world: World, number: int) -> str:
    return parse_sticky(world.sticky(number)["body"])["light"]


def conclusion(world: World, head: str) -> str:
    return world.api.runs_for(REPO, head, "draftguard/config")[0]["conclusion"]


# --- B3: a tiny config with a huge layer count under a name the cap did not list ----------------

def test_a_huge_layer_count_under_any_name_is_refused_quickly_and_fails_the_check(world):
    mellum = open_pr(world, 201, {"m/config.json": '{"model_type":"mellum","num_mtp_layers":3e7}'})
    cohere = open_pr(world, 202, {"c/config.json": json.dumps({"model_type": "cohere2_moe",
                                                                "first_k_dense_replace": 30000000})})
    # Before: both CPU workers were held past 100 s, until the check's budget stopped them. What shows the cap
    # refused each file before any build is its message below ("more than 10000 layers", not the budget's);
    # the wait only has to outlast the workers' start, which took over 40 s beside CI's vLLM pass.
    world.settle(timeout=180)
    for number, head, key in ((201, mellum, "num_mtp_layers"), (202, cohere, "first_k_dense_replace")):
        said = light(world, number)
        assert key in said and "more than 10000 layers" in said, said
        assert conclusion(world, head) == "failure"


# --- B4: a config nested 400 deep ---------------------------------------------------------------

def test_a_deeply_nested_config_is_a_clear_finding_and_replaces_an_earlier_pass(world):
    head_a = open_pr(world, 203, {"d/config.json": FIXED})
    world.settle()
    assert conclusion(world, head_a) == "success"
    deep = FIXED.rstrip().rstrip("}") + ',\n  "x": ' + '{"y": ' * 400 + "1" + "}" * 400 + "\n}"
    head_b = "a" * 39 + "3"
    world.api.set_files(REPO, head_b, {"d/config.json": deep})
    world.api.repos[REPO].pulls[203]["head"] = head_b
    assert world.post("pull_request", pr_payload(REPO, 203, head_b, BASE, action="synchronize")).status_code == 202
    world.settle()
    said = light(world, 203)
    assert "nested more than 32 levels deep" in said and head_b[:7] in said, said
    assert conclusion(world, head_b) == "failure"
    assert "Traceback" not in world.log()


# --- B1: a pull request names a private Hub repo as its verifier -------------------------------

SECRET_REPO = "acme-secret/private-77B"
SECRET_TARGET = {"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "hidden_size": 7777,
                 "num_hidden_layers": 77, "num_attention_heads": 77, "num_key_value_heads": 7, "head_dim": 101,
                 "intermediate_size": 31111, "vocab_size": 333333, "max_position_embeddings": 262144}


def _private_verifier(world: World) -> None:
    if SECRET_REPO not in world.hub.repos:
        world.hub.push(SECRET_REPO, {"config.json": json.dumps(SECRET_TARGET).encode()}, "main")
        world.hub.private.add(SECRET_REPO)


def _leaks(text: str) -> list[str]:
    return [v for v in ("7777", "333333", "31111") if v in text]


def _fork_pr_naming_the_private_verifier(world: World, repo: str, number: int, settings: str) -> str:
    """A pull request from eve's fork whose drafter names the private repo as its verifier, in a repo
    whose default branch's settings (``settings``) name no target; settled. Returns its head."""
    from tests.test_bot import _speculators_drafter

    _private_verifier(world)
    world.api.add_repo(repo)
    world.api.set_files(repo, "main", {".draftguard.yml": settings})
    world.api.set_files(repo, BASE, {"README.md": "hi"})
    head = add_pr(world, number, {"drafter/config.json": _speculators_drafter(SECRET_REPO)}, repo=repo,
                  author="eve", fork=True)
    assert world.post("pull_request", pr_payload(repo, number, head, BASE, author="eve",
                                                 head_repo="eve/fork")).status_code == 202
    world.settle()
    return head


def test_a_private_verifier_named_by_a_pull_request_is_never_read_with_the_bots_token(world):
    repo = "acme/no-target"  # its default branch's settings name no target
    head = _fork_pr_naming_the_private_verifier(world, repo, 204, "fail_on: error\n")
    said = world.sticky(204, repo=repo)["body"]
    run = world.api.runs_for(repo, head, "draftguard/config")[0]
    assert _leaks(said) == [] and _leaks(json.dumps(run.get("output"))) == [], said
    assert "read without the bot's token" in said
    reads = [r for r in world.hub.requests if r.repo == SECRET_REPO]
    assert reads and not any(r.authorized for r in reads)


def test_the_matrix_section_never_reads_a_private_verifier_with_the_bots_token_either(world):
    """With ``transformers:`` set, the matrix section re-checked the head's configs from temp folders
    with the drafter rules on, and those looked the verifier up with the bot's token (the findings were
    dropped, the authorized read was made). The matrix section now runs the config rules alone."""
    from draftguard.check import resolver

    repo = "acme/matrix-no-target"
    _fork_pr_naming_the_private_verifier(world, repo, 206, f"transformers: ['{resolver.transformers_version()}']\n")
    sections = parse_sticky(world.sticky(206, repo=repo)["body"])
    assert sections["matrix"].startswith("### transformers matrix") and _leaks(str(sections)) == []
    reads = [r for r in world.hub.requests if r.repo == SECRET_REPO]
    assert reads and not any(r.authorized for r in reads)


def test_a_private_verifier_named_by_a_hub_pull_request_is_never_read_with_the_bots_token(world):
    from tests.test_bot import _speculators_drafter
    from tests.test_bot_hardening import HUB_BOT, HUB_REPO

    _private_verifier(world)
    world.hub.open_pr(HUB_REPO, 204, {"drafter/config.json": _speculators_drafter(SECRET_REPO).encode()},
                      author="eve")
    payload = {"event": {"action": "create", "scope": "discussion"}, "repo": {"type": "model", "name": HUB_REPO},
               "discussion": {"num": 204, "isPullRequest": True, "status": "open", "author": {"id": "u-eve"}}}
    assert world.post_hub(payload).status_code == 202
    world.settle()
    [said] = [e["data"]["latest"]["raw"] for e in world.hub.comments_on(HUB_REPO, 204, author=HUB_BOT)]
    assert _leaks(said) == [] and "read without the bot's token" in said, said
    assert not any(r.authorized for r in world.hub.requests if r.repo == SECRET_REPO)


def test_the_audit_never_reads_a_private_verifier_with_its_token(tmp_path):
    from tests.audit_helpers import run_audit_process
    from tests.fakes.hub import FakeHub
    from tests.test_bot import _speculators_drafter

    from tests.fakes.fleet import install_routes

    with FakeHub() as hub:
        install_routes(hub)
        hub.token = "hf_AUDITtoken0123456789abcdef"
        hub.push(SECRET_REPO, {"config.json": json.dumps(SECRET_TARGET).encode()}, "main")
        hub.private.add(SECRET_REPO)
        hub.push("eve/drafter", {"config.json": _speculators_drafter(SECRET_REPO).encode()}, "main")
        (tmp_path / "repos.txt").write_text("eve/drafter\n")
        run = run_audit_process(hub, tmp_path, str(tmp_path / "repos.txt"), "--no-progress", timeout=300,
                                HF_TOKEN=hub.token)
        assert "Traceback" not in run.stderr, run.stderr
        written = (run.out / "audit.jsonl").read_text() + "".join(
            p.read_text() for p in run.out.glob("*.md"))
        assert _leaks(written) == [], written[:2000]
        reads = [r for r in hub.requests if r.repo == SECRET_REPO]
        assert reads and not any(r.authorized for r in reads)


# --- B6: the unauthenticated /metrics decoded every job record on every request -----------------

def test_metrics_costs_one_scan_however_many_clients_poll_it(world):
    import sqlite3
    import statistics
    from concurrent.futures import ThreadPoolExecutor

    import requests

    from draftguard.jobs import DONE, Job

    # A store with 30k finished jobs (a busy week), written in one transaction.
    db = world.queue.url.removeprefix("sqlite:///")
    name = world.queue.store.name
    rows = [(name, f"job:flood-{i}", Job(id=f"flood-{i}", source="github", kind="pull_request", repo=REPO,
                                         number=i, state=DONE, result="1 finding(s)").to_bytes())
            for i in range(30_000)]
    with sqlite3.connect(db, timeout=30) as conn:
        conn.executemany("insert or replace into kv (queue, key, value) values (?, ?, ?)", rows)
    try:
        def timed(_: int = 0) -> float:
            started = time.perf_counter()
            answer = requests.get(f"{world.url}/metrics", timeout=60)
            assert answer.status_code == 200
            return time.perf_counter() - started

        first = timed()
        with ThreadPoolExecutor(16) as pool:
            later = list(pool.map(timed, range(64)))
        # Before: every request decoded all 30k records (each about as slow as the first).
        assert statistics.median(later) < first / 5, (first, statistics.median(later))
        assert 'draftguard_jobs{state="done"}' in requests.get(f"{world.url}/metrics", timeout=60).text
    finally:
        with sqlite3.connect(db, timeout=30) as conn:
            conn.execute("delete from kv where queue = ? and key like 'job:flood-%'", (name,))


# --- B2: the target's files were downloaded whole before their size was known -------------------

def test_the_targets_files_are_sized_before_any_download(world):
    from tests.test_bot import HEAD_CONFIG, TARGET
    from tests.test_bot_hardening import SIX_MB, padded

    world.hub.push("acme/huge-target", {"config.json": padded(json.dumps(TARGET, indent=2), SIX_MB).encode()}, "main")
    world.hub.push("acme/fat-extras", {"config.json": json.dumps(TARGET).encode(),
                                       "generation_config.json": b'{"eos_token_id": 2}' + b" " * (3 << 20),
                                       "tokenizer_config.json": b"{\"x\": 1}" + b" " * (9 << 20)}, "main")
    for n, target in ((205, "acme/huge-target"), (206, "acme/fat-extras")):
        repo = f"acme/sized-{n}"
        world.api.add_repo(repo)
        world.api.set_files(repo, "main", {".draftguard.yml": f"target: {target}\n"})
        world.api.set_files(repo, BASE, {"README.md": "hi"})
        head = add_pr(world, n, {"drafter/config.json": HEAD_CONFIG}, repo=repo)
        assert world.post("pull_request", pr_payload(repo, n, head, BASE)).status_code == 202
    world.settle()
    said = world.sticky(205, repo="acme/sized-205")["body"]
    assert "6.3 MB" in said and "not downloaded" in said, said
    fetched = [(r.repo, r.path, r.sent) for r in world.hub.requests
               if r.repo in ("acme/huge-target", "acme/fat-extras") and r.method == "GET" and r.sent > (1 << 20)]
    assert fetched == []  # before: 6 MB (and 3 MB extras) downloaded, then refused
    asked = {r.path for r in world.hub.requests if r.repo == "acme/fat-extras" and r.method == "HEAD"}
    assert {"config.json", "tokenizer_config.json"} <= asked, asked


# --- R1: markdown in a pull request's text survived the escaping --------------------------------

def test_markdown_a_pull_request_writes_is_never_rendered_in_the_comment(world):
    evil = "**bold** ~~gone~~ https://evil.example/x www.evil.example acme/other#12 #34 _it_"
    head = open_pr(world, 207, {"r/config.json": json.dumps({"model_type": evil, "hidden_size": 8})})
    world.settle()
    said = light(world, 207)
    assert "evil" in said and "is unknown to transformers" in said, said
    for form in ("**bold**", "~~gone~~", "https://evil", "www.evil", "other#12", "#34", "_it_"):
        assert form not in said, (form, said)
    assert conclusion(world, head) == "failure"


# --- R4: `..` in a verifier's revision --------------------------------------------------------

def test_a_verifier_revision_with_dot_dot_is_refused_before_any_request(world):
    from tests.test_bot import _speculators_drafter

    repo = "acme/no-target-r4"
    world.api.add_repo(repo)
    world.api.set_files(repo, "main", {".draftguard.yml": "fail_on: error\n"})
    world.api.set_files(repo, BASE, {"README.md": "hi"})
    for n, verifier in ((208, "Qwen/Qwen3-27B@../../../api/whoami-v2"), (209, "Qwen/Qwen3-27B@main/../x")):
        head = add_pr(world, n, {"drafter/config.json": _speculators_drafter(verifier)}, repo=repo)
        world.post("pull_request", pr_payload(repo, n, head, BASE))
    world.settle()
    for n in (208, 209):
        assert "is not a Hub repo id" in world.sticky(n, repo=repo)["body"]
    assert not [r for r in world.hub.requests if r.revision and ".." in r.revision]


# --- R3: nothing capped the configs one pull request asks the bot to check ---------------------

def test_a_pull_request_with_too_many_configs_is_checked_up_to_the_limit_and_fails_for_the_rest(world):
    healthy = json.dumps({"model_type": "gpt2", "n_layer": 2})
    files = {f"m{i:03d}/config.json": healthy for i in range(56)}
    head = open_pr(world, 210, files)
    world.settle()
    said = light(world, 210)
    assert "more config.json not checked" in said and "at most 50 configs" in said, said
    assert conclusion(world, head) == "failure"
    read = {p for _, p in world.api.requests if p.startswith(f"/repos/{REPO}/contents/m")}
    assert len({p.split("/contents/")[1].split("/")[0] for p in read}) <= 50


# --- R2: audit.md and the audit's discussions carried the audited repo's markup ----------------

def test_the_audit_report_and_discussions_carry_no_markup_from_the_audited_repo(tmp_path):
    from tests.audit_helpers import run_audit_process
    from tests.fakes.fleet import install_routes
    from tests.fakes.hub import FakeHub

    evil = ('<img src="https://evil.example/p.gif"> @everyone [click](https://evil.example) '
            '<!-- draftguard:sticky --> **urgent**')
    with FakeHub() as hub:
        install_routes(hub)
        hub.push("eve/markup", {"config.json": json.dumps({"model_type": evil, "hidden_size": 8}).encode()}, "main")
        (tmp_path / "repos.txt").write_text("eve/markup\n")
        run = run_audit_process(hub, tmp_path, str(tmp_path / "repos.txt"), "--no-progress", "--open-discussions",
                                timeout=300)
        assert "Traceback" not in run.stderr, run.stderr
        published = (run.out / "audit.md").read_text() + run.stdout
        assert "evil.example" in published, published  # the message is there, escaped
        for form in ("<img", "@everyone", "](https://", "<!-- draftguard:sticky", "**urgent**"):
            assert form not in published, (form, published)


# --- R10: a writer's pull request from a third party's fork -----------------------------------

def test_a_writers_pull_request_from_someone_elses_fork_is_not_trusted_for_the_gpu(world):
    from tests.test_bot import HEAD_CONFIG
    from tests.test_bot_hardening import gpu_jobs

    own = "1" * 39 + "a"
    other = "1" * 39 + "b"
    for n, head, head_repo in ((211, own, "alice/fork"), (212, other, "eve/fork")):
        world.api.set_files(REPO, head, {"drafter/config.json": HEAD_CONFIG})
        world.api.add_pull(REPO, n, head=head, base=BASE, author="alice", head_repo=head_repo)
        world.post("pull_request", pr_payload(REPO, n, head, BASE, author="alice", head_repo=head_repo))
    world.settle()
    assert [j.head_sha for j in gpu_jobs(world, 211)] == [own]  # alice's own fork: trusted, as before
    assert gpu_jobs(world, 212) == []  # eve can push to eve/fork: every later push would have been trusted
    assert "others can push to" in world.sticky(212)["body"]


# --- the bot and the Action agree on which drafters get a GPU test (issue 25, Deliver 1) -------

def test_the_bot_queues_a_gpu_test_for_every_drafter_accept_runs_and_no_other(world):
    # DFlash without its architecture name was refused before; EAGLE-3 heads were refused until
    # issue 33 (accept runs them now); DFlash2 and P-EAGLE heads are still not run.
    from tests.test_bot import DRAFTER
    from tests.test_bot_hardening import gpu_jobs

    no_arch = {k: v for k, v in DRAFTER.items() if k != "architectures"}  # DFlash named by dflash_config only
    dflash2 = dict(DRAFTER, architectures=["DFlash2DraftModel"])
    eagle3 = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": 4096,
              "num_hidden_layers": 1, "num_attention_heads": 32, "draft_vocab_size": 32000, "vocab_size": 128256}
    peagle = dict(eagle3, architectures=["PEagleDraftModel"], num_hidden_layers=4)
    # Speculators-layout heads (issue 43): run where the reference builds the layer, a qwen3 one included
    # (vLLM's Eagle3Qwen3ForCausalLM; the reference builds it since issue 43's second turn).
    layer = {k: v for k, v in eagle3.items() if k not in ("architectures", "draft_vocab_size")}
    speculators = {"architectures": ["Eagle3DraftModel"], "speculators_model_type": "eagle3",
                   "draft_vocab_size": 32000, "transformer_layer_config": layer,
                   "speculators_config": {"algorithm": "eagle3", "verifier": {"name_or_path": "acme/target"}}}
    qwen3_layer = dict(speculators, transformer_layer_config=dict(layer, model_type="qwen3"))
    heads = {}
    for n, config in ((213, no_arch), (214, dflash2), (215, eagle3), (217, peagle), (218, speculators),
                      (219, qwen3_layer)):
        heads[n] = open_pr(world, n, {"drafter/config.json": json.dumps(config, indent=2)})
    world.settle()
    assert [j.head_sha for j in gpu_jobs(world, 213)] == [heads[213]]  # before: the bot said no
    assert [j.head_sha for j in gpu_jobs(world, 215)] == [heads[215]]  # before issue 33: no
    assert [j.head_sha for j in gpu_jobs(world, 218)] == [heads[218]]  # before issue 43: no
    assert [j.head_sha for j in gpu_jobs(world, 219)] == [heads[219]]  # before issue 43's second turn: no
    assert gpu_jobs(world, 214) == [] and gpu_jobs(world, 217) == []


def test_the_approval_rule_is_written_once_for_both_hosts():
    # Issue 25: "a command approves only the head it was judged on" was coded twice, differently, and
    # so was the whole pull-request flow. Now one flow (bot/flow.py) judges commands and re-reads the
    # head for every host; the host adapters hold no trust or approval rule of their own. The
    # behaviour is probed above and in test_bot_hardening, against both hosts.
    root = Path(__file__).resolve().parent.parent / "draftguard" / "bot"
    flow = (root / "flow.py").read_text()
    assert "judge_command(" in flow and ".holds_for(head)" in flow and ".holds_for(checked)" in flow
    for name in ("github_handler.py", "hub_handler.py"):
        text = (root / name).read_text()
        for rule in ("judge_command", "holds_for", "gpu_job_id", "queue.lock", "queue.submit", "update_sticky",
                     "def acceptance", "def _acceptance", "command_saw_head", "mark_head_seen"):
            assert rule not in text, (name, rule)
        assert len(text.splitlines()) < 150, name  # a host's own parts, not a copy of the flow


def test_the_configs_one_pull_request_reads_are_bounded_in_all(world):
    # B2 of issue 25, per pull request: 14 configs of 4.9 MB each (each under the 5 MB file limit).
    from tests.test_bot_hardening import padded

    big = padded(FIXED.strip(), int(4.9 * 2**20))
    head = open_pr(world, 216, {f"p{i:02d}/config.json": big for i in range(14)})
    world.settle()
    said = light(world, 216)
    assert "configs pass 64 MB in all" in said and "in 13 config(s)" in said, said[:3000]
    assert conclusion(world, head) == "failure"
