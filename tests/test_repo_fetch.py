"""The files beside config.json that a bot or the audit fetches for the repo rules (issue 41):
huggingface_hub's client over HTTP to the fake Hub on loopback, which answers range requests as the Hub
does (206, Content-Range); the byte budget, and its note."""

from __future__ import annotations

import json
import struct
from pathlib import Path

from draftguard.check.repo import check_repo
from draftguard.check.repo.fetched import fetch_repo_files
from draftguard.check.repo.files import RepoFiles, read_header
from draftguard.hosts.hub import HubConfig, HubPullRequestClient
from draftguard.hosts.hub import read_range
from draftguard.snapshot import Snapshot
from tests.fakes import fake_hub  # noqa: F401  (a fixture)

ROOT = Path(__file__).resolve().parent.parent
DRAFTER = ROOT / "examples" / "dflash-pair" / "drafter"  # a real (tiny) checkpoint: one model.safetensors
REAP = ROOT / "tests" / "data" / "real-repos" / "bryce-hoehn--qwen3.5-18b-reap-a3b-coding"
REPO = "acme/model"


def _client(hub) -> HubPullRequestClient:
    return HubPullRequestClient(HubConfig(endpoint=hub.endpoint), REPO, 0)


def _fetch(hub, config: bytes, **kw):
    client = _client(hub)
    sha = hub.commit_of(REPO, "main")
    return fetch_repo_files(config, "", lambda p, n: client.read_file(p, sha, max_bytes=n),
                            lambda p, a, b: client.read_range(p, sha, a, b), **kw)


def _snapshot(config: bytes, files: dict[str, bytes]) -> Snapshot:
    names = {"config.json": config, **files}
    return Snapshot(source=REPO, revision="main", files=names, display={n: n for n in names})


def test_a_single_file_checkpoint_is_read_by_its_header_alone_with_range_requests(fake_hub):
    weights = (DRAFTER / "model.safetensors").read_bytes()
    config = (DRAFTER / "config.json").read_bytes()
    fake_hub.add(REPO, {"config.json": config, "model.safetensors": weights})
    got = _fetch(fake_hub, config)
    (length,) = struct.unpack("<Q", weights[:8])
    assert got.files["model.safetensors"] == weights[: 8 + length] and len(weights) > 8 + length
    ranged = fake_hub.requests_for(REPO, "model.safetensors")
    assert [(r.method, r.range, r.status) for r in ranged] == [("GET", "bytes=0-7", 206),
                                                               ("GET", f"bytes=8-{7 + length}", 206)]
    assert sum(r.sent for r in ranged) == 8 + length  # the length and the header: not one weight byte
    # The repo rules read the fetched copy as they read the local file.
    tensors = RepoFiles(_snapshot(config, got.files)).tensors()
    assert tensors is not None and tensors.names == frozenset(read_header(DRAFTER / "model.safetensors"))


def test_a_header_over_the_budget_is_a_note_after_its_length_alone(fake_hub):
    header = json.dumps({f"model.layers.{i}.mlp.{p}.weight": {"dtype": "BF16", "shape": [2, 2],
                                                               "data_offsets": [8 * n, 8 * n + 8]}
                         for n, (i, p) in enumerate((i, p) for i in range(900) for p in ("up_proj", "down_proj"))})
    data = struct.pack("<Q", len(header)) + header.encode() + b"\0" * (8 * 1800)
    config = json.dumps({"model_type": "llama", "tie_word_embeddings": False,
                         "architectures": ["LlamaForCausalLM"]}).encode()
    fake_hub.add(REPO, {"config.json": config, "model.safetensors": data})
    got = _fetch(fake_hub, config)
    assert got.files["model.safetensors"] == data[: 8 + len(header)]
    fake_hub.requests.clear()
    small = _fetch(fake_hub, config, budget=len(header) // 2)
    assert "model.safetensors" not in small.files and small.spent == 8
    assert [r.range for r in fake_hub.requests_for(REPO, "model.safetensors")] == ["bytes=0-7"]
    assert small.notes == [f"model.safetensors (its header): not read: {(8 + len(header)) / 1024:.0f} KB would pass "
                           f"the {len(header) // 2 / 1024:.0f} KB this config's other files may take; the repo rules "
                           "that read it did not run"]


def test_the_byte_budget_stops_a_read_before_it_starts_and_says_so(fake_hub):
    files = {p.name: p.read_bytes() for p in REAP.iterdir() if p.name != "SOURCE"}
    fake_hub.add(REPO, files)
    config = files["config.json"]
    whole = _fetch(fake_hub, config)
    assert set(whole.files) == {"generation_config.json", "tokenizer_config.json", "model.safetensors.index.json"}
    assert "DG404" in {f.rule for f in check_repo(_snapshot(config, whole.files), {})}
    index = len(files["model.safetensors.index.json"])
    fake_hub.requests.clear()
    budget = len(files["generation_config.json"]) + len(files["tokenizer_config.json"]) + index // 2
    cut = _fetch(fake_hub, config, budget=budget)
    assert "model.safetensors.index.json" not in cut.files and cut.spent <= budget
    assert cut.notes == [f"model.safetensors.index.json: not read: {index / 1024:.0f} KB would pass the "
                         f"{budget / 1024:.0f} KB this config's other files may take; the repo rules that read "
                         "it did not run"]
    # Sized first (a HEAD): not one byte of it was downloaded; and DG404 stays silent, not wrong.
    assert all(r.method == "HEAD" for r in fake_hub.requests_for(REPO, "model.safetensors.index.json"))
    assert "DG404" not in {f.rule for f in check_repo(_snapshot(config, cut.files), {})}


def test_a_drafter_head_reads_nothing_beside_its_config(fake_hub):
    config = json.dumps({"speculators_model_type": "eagle3", "transformer_layer_config": {}}).encode()
    fake_hub.add(REPO, {"config.json": config, "generation_config.json": b"{}"})
    got = _fetch(fake_hub, config)
    assert got.files == {} and got.spent == 0 and fake_hub.requests == []


def test_never_more_than_the_asked_bytes_even_from_a_server_that_ignores_the_range(fake_hub):
    weights = (DRAFTER / "model.safetensors").read_bytes()
    fake_hub.add(REPO, {"model.safetensors": weights, "empty.safetensors": b"", "short.safetensors": b"abc"})
    fake_hub.ranges = False
    assert read_range(REPO, "model.safetensors", "main", 8, 15) == weights[8:16]
    assert fake_hub.requests[-1].status == 200  # the whole file came; the reader kept its 8 bytes
    fake_hub.ranges = True
    assert read_range(REPO, "empty.safetensors", "main", 0, 7) == b""  # 416: nothing at that offset
    assert read_range(REPO, "missing.safetensors", "main", 0, 7) is None
    # A checkpoint file too short for a header is no header, not a failed job.
    config = (DRAFTER / "config.json").read_bytes()
    for body in (b"", b"abc"):
        fake_hub.add(REPO, {"config.json": config, "model.safetensors": body})
        got = _fetch(fake_hub, config)
        assert "model.safetensors" not in got.files and got.notes == []


def test_the_audit_notes_what_its_per_repo_budget_leaves_unread(fake_hub, monkeypatch):
    from draftguard.audit.inputs import RepoRef
    from draftguard.audit.record import AuditResult, RepoRecord
    from draftguard.audit.repo import fetch_repo
    from draftguard.audit.report import render_markdown
    from tests.fakes.fleet import install_routes

    install_routes(fake_hub)  # the repo info the audit asks first
    files = {p.name: p.read_bytes() for p in REAP.iterdir() if p.name != "SOURCE"}
    fake_hub.add("acme/reap", files)
    monkeypatch.setenv("DRAFTGUARD_AUDIT_REPO_BYTES", "20000")
    fetched = fetch_repo(RepoRef.parse("acme/reap"))
    assert {"generation_config.json", "tokenizer_config.json"} <= set(fetched.snapshot.files)
    assert "model.safetensors.index.json" not in fetched.snapshot.files
    assert fetched.notes == [f"model.safetensors.index.json: not read: {len(files['model.safetensors.index.json']) / 1024:.0f}"
                             " KB would pass the 20 KB this config's other files may take; the repo rules that read it "
                             "did not run"]
    assert not fake_hub.requests_for("acme/reap", "model.safetensors.index.json")  # sized by the listing alone
    record = RepoRecord(repo="acme/reap", repo_id="acme/reap", revision=None, notes=fetched.notes)
    assert RepoRecord.from_json(record.to_json()).notes == fetched.notes
    md = render_markdown(AuditResult(records=[record]), ["5.24.0"])
    assert "## Not read (over the per-repo byte budget)" in md and "model.safetensors.index.json: not read" in md
    monkeypatch.setenv("DRAFTGUARD_AUDIT_REPO_BYTES", "0")  # config.json alone, as before issue 41
    assert set(fetch_repo(RepoRef.parse("acme/reap")).snapshot.files) == {"config.json"}
