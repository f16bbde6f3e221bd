"""A fleet of model repos on the fake Hub, for ``draftguard audit``: over 300 repos built from real
configs and drafters, with seeded faults whose ids the tests know.

Extra API routes (added to ``FakeHub.routes``; read from huggingface_hub 2.4's hf_api.py):

- ``GET /api/models?author=&search=&filter=&expand=`` (``list_models``): ids and tags, the sha only when
  asked (``expand=sha`` or ``full``), as the Hub answers; no pagination;
- ``GET /api/models/{repo}/discussions?p=&author=&type=`` (``get_repo_discussions``);
- ``POST /api/models/{repo}/discussions`` (``create_discussion``, answers ``{"num"}``);
- ``POST /api/models/{repo}/discussions/{num}/status`` (``change_discussion_status``, with an
  optional closing comment).

Where the configs come from: tests/data/healthy, tests/data/real-configs and tests/data/real-repos (each with its SOURCE), examples/dflash-pair (a tiny real DFlash drafter and its target, made by regenerate.py),
examples/qwen3-swa-drafter (the incident's window case).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from tests.fakes.hub import FakeHub

REPO_ROOT = Path(__file__).resolve().parents[2]
PAIR = REPO_ROOT / "examples" / "dflash-pair"


# --- routes ------------------------------------------------------------------------------------------


def install_routes(fake: FakeHub) -> None:
    """Add the listing and discussion-management routes to a FakeHub (once)."""
    if _route not in fake.routes:
        fake.routes.append(_route)


def _route(h, method, segs, query, raw, answer, error, authorized) -> bool:
    fake: FakeHub = h.fake
    if segs == ["models"] and method == "GET":
        answer(200, _listing(fake, query))
        return True
    if len(segs) == 3 and segs[0] == "models" and method == "GET":  # model_info without a revision
        repo = f"{segs[1]}/{segs[2]}"
        found = fake._files_at(repo, "main") if repo in fake.repos else None
        if repo in fake.private and not (authorized and fake.token is not None):
            found = None  # a private repo, asked without its token: as if there were none
        if found is None:
            error(404, "Repository not found", "RepoNotFound")
            return True
        from tests.fakes.hub import model_info_body

        answer(200, model_info_body(fake, repo, found, query))
        return True
    if len(segs) < 4 or segs[0] != "models" or segs[3] != "discussions":
        return False
    repo = f"{segs[1]}/{segs[2]}"
    if repo not in fake.repos:
        error(404, "Repository not found", "RepoNotFound")
        return True
    rest = segs[4:]
    if not rest and method == "GET":
        found = [d for (r, _), d in sorted(fake.discussions.items()) if r == repo]
        if query.get("author"):
            found = [d for d in found if d["author"] == query["author"][0]]
        if query.get("type") == ["discussion"]:
            found = [d for d in found if not d["pr"]]
        page = int((query.get("p") or ["0"])[0])
        size = 50
        shown = found[page * size:(page + 1) * size]
        answer(200, {"count": len(found), "start": page * size, "discussions": [
            {"title": d["title"], "num": d["num"], "author": {"name": d["author"]}, "createdAt": d["created"],
             "status": d["status"], "repo": {"name": repo, "type": "model"}, "isPullRequest": d["pr"]}
            for d in shown]})
        return True
    if method != "POST":
        return False
    if not authorized or fake.token is None:
        error(401, "Invalid credentials in Authorization header")
        return True
    body = json.loads(raw or b"{}")
    if not rest:
        num = 1 + max([n for (r, n) in fake.discussions if r == repo] or [0])
        fake.discussions[(repo, num)] = {
            "num": num, "title": body["title"], "author": fake.user, "status": "open", "base": "main",
            "pr": bool(body.get("pullRequest")), "created": "2026-11-30T05:00:00.000Z",
            "events": [fake._event("comment", fake.user, {"edited": False, "hidden": False, "numEdits": 0,
                                                          "latest": {"raw": body["description"], "html": ""}})],
        }
        answer(200, {"num": num, "url": f"{fake.endpoint}/{repo}/discussions/{num}"})
        return True
    if len(rest) == 2 and rest[1] == "status" and rest[0].isdigit():
        d = fake.discussions.get((repo, int(rest[0])))
        if d is None:
            error(404, "Discussion not found")
            return True
        d["status"] = body["status"]
        if body.get("comment"):
            d["events"].append(fake._event("comment", fake.user, {"edited": False, "hidden": False, "numEdits": 0,
                                                                  "latest": {"raw": body["comment"], "html": ""}}))
        event = fake._event("status-change", fake.user, {"status": body["status"]})
        d["events"].append(event)
        answer(200, {"newStatus": event})
        return True
    return False


def _listing(fake: FakeHub, query: dict) -> list[dict]:
    author, search = (query.get("author") or [None])[0], (query.get("search") or [None])[0]
    tags = query.get("filter") or []
    expand = query.get("expand") or query.get("expand[]") or []
    out = []
    for repo in sorted(fake.repos):
        found = fake._files_at(repo, "main")
        if found is None:
            continue
        from tests.fakes.hub import _card_data

        card = _card_data(found[1]) if "README.md" in found[1] else {}
        repo_tags = [str(t) for t in card.get("tags", [])] if isinstance(card.get("tags"), list) else []
        if author and repo.split("/")[0] != author:
            continue
        if search and search.lower() not in repo.lower():
            continue
        if any(t not in repo_tags for t in tags):
            continue
        item = {"id": repo, "modelId": repo, "sha": found[0], "tags": repo_tags, "private": False}
        if expand:  # only the properties asked for, and the id, as the Hub answers ``expand[]``
            item = {"_id": item["id"], "id": repo, **{k: item[k] for k in expand if k in item}}
        elif "full" not in query:  # the Hub's plain listing carries no sha
            del item["sha"]
        out.append(item)
    limit = (query.get("limit") or [None])[0]
    return out[: int(limit)] if limit else out


# --- the fleet ---------------------------------------------------------------------------------------


@dataclass
class Fleet:
    """What was seeded: every repo id, and per seeded repo the rule ids (or error kinds) it must get."""

    repos: list[str] = field(default_factory=list)
    faults: dict[str, set[str]] = field(default_factory=dict)  # repo -> rule ids (config/drafter faults)
    errors: dict[str, str] = field(default_factory=dict)  # repo -> expected error kind
    clean: dict[str, Path] = field(default_factory=dict)  # copies of real configs -> the config file
    newer_only: str = ""  # breaks only under a newer transformers (rejected by 5.x, read by 4.52)
    transient: list[str] = field(default_factory=list)  # repos that get 429s, 5xx or a timeout first
    # Repos with their files beside config.json (issue 41), healthy: the rules (set) must not fire there.
    controls: dict[str, set[str]] = field(default_factory=dict)

    def list_file(self, path: Path) -> Path:
        path.write_text("# the fleet\n" + "\n".join(self.repos) + "\n")
        return path


def healthy_configs() -> list[Path]:
    """tests/data/healthy: 13 real configs of common families (SOURCE notes there)."""
    return sorted((REPO_ROOT / "tests" / "data" / "healthy").glob("*.json"))


def corpus_configs() -> list[Path]:
    """tests/data/real-configs: one folder per published repo (owner--name/config.json + SOURCE)."""
    return sorted((REPO_ROOT / "tests" / "data" / "real-configs").glob("*/config.json"))


def _pair_drafter(**changes) -> dict[str, bytes]:
    config = json.loads((PAIR / "drafter" / "config.json").read_text())
    for key, value in changes.items():
        node = config
        *parents, last = key.split(".")
        for part in parents:
            node = node[part]
        node[last] = value
    return {"config.json": json.dumps(config, indent=2).encode(),
            "model.safetensors": (PAIR / "drafter" / "model.safetensors").read_bytes()}


# The MTP tensor names a Qwen3.5 checkpoint carries (vLLM's qwen3_5_mtp loads these).
QWEN35_MTP = ["mtp.fc.weight", "mtp.layers.0.input_layernorm.weight", "mtp.layers.0.mlp.gate.weight",
              "mtp.layers.0.post_attention_layernorm.weight", "mtp.layers.0.self_attn.q_proj.weight",
              "mtp.norm.weight", "mtp.pre_fc_norm_embedding.weight", "mtp.pre_fc_norm_hidden.weight"]


def real_repo_files(folder: Path, **changes: bytes) -> dict[str, bytes]:
    """A real repo's files (tests/data/real-repos/NAME, its SOURCE left out), with ``changes``."""
    return {**{p.name: p.read_bytes() for p in folder.iterdir() if p.name != "SOURCE"}, **changes}


def _control(hub: FakeHub, fleet: "Fleet", repo: str, files: dict[str, bytes], rules: set[str]) -> None:
    hub.add(repo, files)
    fleet.repos.append(repo)
    fleet.controls[repo] = rules


def build_fleet(hub: FakeHub, *, copies: int | None = None, faults: bool = True, corpus: bool = True) -> Fleet:
    """Seed ``hub`` with the fleet: ``copies`` orgs each holding the healthy configs and a healthy
    drafter (named by its model card's base_model), every config of the real-config corpus once
    (under its published repo id), the DFlash pair's target, and (``faults``) one
    repo per seeded fault. By default enough copies for over 300 repos."""
    install_routes(hub)
    fleet = Fleet()
    configs = corpus_configs() if corpus else []
    if copies is None:
        copies = 6 if len(configs) >= 200 else 24
    for config in configs:
        name = config.parent.name  # owner--name: the published repo's own id
        repo = name.replace("--", "/", 1) if "--" in name else f"corpus/{name}"
        hub.add(repo, {"config.json": config.read_bytes()})
        fleet.repos.append(repo)
        fleet.clean[repo] = config
    target_files = {"config.json": (PAIR / "target" / "config.json").read_bytes(),
                    "tokenizer.json": (PAIR / "target" / "tokenizer.json").read_bytes()}
    hub.add("fleet-targets/pair-target", target_files)
    card = b"---\nbase_model: fleet-targets/pair-target\ntags: [dflash]\n---\n# A DFlash drafter\n"
    for n in range(copies):
        org = f"org-{n:02d}"
        for config in healthy_configs():
            repo = f"{org}/{config.stem}"
            hub.add(repo, {"config.json": config.read_bytes()})
            fleet.repos.append(repo)
            fleet.clean[repo] = config
        # A healthy drafter, its target named by its model card only.
        repo = f"{org}/pair-drafter"
        hub.add(repo, {**_pair_drafter(), "README.md": card})
        fleet.repos.append(repo)
    if not faults:
        return fleet

    def seed(repo: str, files: dict[str, bytes], rules: set[str]) -> None:
        hub.add(repo, files)
        fleet.repos.append(repo)
        fleet.faults[repo] = rules

    # The incident's window case: a Qwen3 drafter whose sliding layers lose their window.
    seed("faults/qwen3-window-drafter", {"config.json": (REPO_ROOT / "examples" / "qwen3-swa-drafter" /
                                                         "config.json").read_bytes()}, {"DG005"})
    # Target layer ids shifted by one ([0, 2] -> [1, 4]): the last is past the target's 4 layers.
    seed("faults/shifted-layer-drafter", {**_pair_drafter(**{"dflash_config.target_layer_ids": [1, 4]}),
                                          "README.md": card}, {"DG102"})
    # The mask token is the target's pad token, an ordinary vocabulary word (w43) used as padding.
    pad_target = json.loads(target_files["config.json"])
    pad_target["pad_token_id"] = 43
    hub.add("fleet-targets/pair-target-pad", {
        "config.json": json.dumps(pad_target).encode(), "tokenizer.json": target_files["tokenizer.json"],
        "tokenizer_config.json": json.dumps({"pad_token": "w43"}).encode()})
    seed("faults/mask-is-pad-drafter", {**_pair_drafter(**{"dflash_config.mask_token_id": 43}),
                                        "README.md": card.replace(b"pair-target", b"pair-target-pad")}, {"DG110"})
    # Breaks only under a newer transformers: 5.5+ validate types and reject a string window.
    mistral = json.loads((REPO_ROOT / "tests" / "data" / "healthy" / "mistral-7b-v0.1.json").read_text())
    mistral["sliding_window"] = "4096"
    seed("faults/string-window-mistral", {"config.json": json.dumps(mistral, indent=2).encode()}, set())
    fleet.errors["faults/string-window-mistral"] = "config-rejected"
    fleet.newer_only = "faults/string-window-mistral"

    # The repo beside config.json (issue 41): faults only the generation config or the index shows, each
    # with its healthy control. A REAP-pruned Qwen3.5 MoE whose export dropped its declared MTP layer (the
    # control has the MTP names a Qwen3.5 checkpoint carries); Llama 3.1 (Reflection) with <|eot_id|>
    # dropped from generation_config.json's eos_token_id (the control as published).
    reap, reflection = REPO_ROOT / "tests" / "data" / "real-repos" / "bryce-hoehn--qwen3.5-18b-reap-a3b-coding", \
        REPO_ROOT / "tests" / "data" / "real-repos" / "mattshumer--reflection-llama-3.1-70b"
    seed("faults/qwen3.5-reap-no-mtp", real_repo_files(reap), {"DG404"})
    index = json.loads((reap / "model.safetensors.index.json").read_bytes())
    index["weight_map"].update({name: "model-00007-of-00007.safetensors" for name in QWEN35_MTP})
    _control(hub, fleet, "org-00/qwen3.5-reap-with-mtp",
             real_repo_files(reap, **{"model.safetensors.index.json": json.dumps(index, indent=2).encode()}), {"DG404"})
    generation = json.loads((reflection / "generation_config.json").read_bytes())
    seed("faults/llama-3.1-no-eot-stop", real_repo_files(reflection, **{"generation_config.json": json.dumps(
        dict(generation, eos_token_id=[128001]), indent=2).encode()}), {"DG408"})
    _control(hub, fleet, "org-00/llama-3.1-reflection", real_repo_files(reflection), {"DG408", "DG409"})

    # Repos that cannot be audited, each for its own reason.
    llama = (REPO_ROOT / "tests" / "data" / "healthy" / "llama-3.1-8b.json").read_bytes()
    for repo, files, kind in [
        ("broken/gated-llama", {"config.json": llama}, "gated"),
        ("broken/no-config", {"README.md": b"# weights elsewhere\n"}, "no-config"),
        ("broken/no-model-type", {"config.json": b'{"word_embedding_dimension": 384}'}, "unsupported"),
        ("broken/invalid-json", {"config.json": b'{"model_type": "llama",\n "hidden_size": 4096,,}'},
         "invalid-config"),
        ("broken/oversized", {"config.json": b'{"model_type": "llama", "pad": "' + b"x" * (6 * 2**20) + b'"}'},
         "oversized"),
        ("broken/lfs-pointer", {"config.json": b"version https://git-lfs.github.com/spec/v1\noid sha256:"
                                + b"0" * 64 + b"\nsize 812\n"}, "lfs-pointer"),
    ]:
        hub.add(repo, files)
        fleet.repos.append(repo)
        fleet.errors[repo] = kind
    hub.gated.add("broken/gated-llama")
    fleet.repos.append("broken/deleted-repo")  # listed, but not on the Hub (deleted)
    fleet.errors["broken/deleted-repo"] = "not-found"
    return fleet


def inject_transient_faults(hub: FakeHub, fleet: Fleet) -> None:
    """429 storms (with Retry-After), 5xx and a stalled answer on a few healthy repos' files and
    info: each clears after a few tries, so the audit must retry and still check them."""
    from tests.fakes.hub import Fault

    picks = [r for r in fleet.clean if r.startswith("org-")][:6]
    for repo in picks[:2]:
        hub.file_faults.append(Fault("*", rf"^/{repo}/resolve/.*/config\.json$", 429, 2, retry_after=1))
    for repo in picks[2:4]:
        hub.faults.append(Fault("GET", rf"^/api/models/{repo}(/revision/.*)?$", 503, 2))
    for repo in picks[4:6]:
        hub.file_faults.append(Fault("*", rf"^/{repo}/resolve/.*/config\.json$", 502, 1))
    picks.append([r for r in fleet.clean if r.startswith("org-")][6])  # a stalled answer, longer than the client waits
    hub.file_faults.append(Fault("*", rf"^/{picks[-1]}/resolve/.*/config\.json$", 504, 1, hang=3.0))
    fleet.transient = picks


def main(argv: list[str] | None = None) -> int:
    """Serve the fleet on loopback, for trying ``draftguard audit`` by hand (README "Audit a fleet").

    ``python -m tests.fakes.fleet -- COMMAND...`` serves it on a free port, runs COMMAND with
    ``HF_ENDPOINT`` pointing at it (and a fresh ``HF_HUB_CACHE`` unless one is set), stops, and exits
    with COMMAND's code: no server left behind, none missing. ``python -m tests.fakes.fleet --port 8765``
    serves until interrupted. ``--list FILE`` writes the repo ids. A port that cannot be had is one
    line and exit 2, at once. Needs no pytest: the base install runs it."""
    import argparse
    import os
    import subprocess
    import sys
    import tempfile
    import threading
    from http.server import ThreadingHTTPServer

    from tests.fakes.hub import _Handler

    parser = argparse.ArgumentParser(prog="python -m tests.fakes.fleet", description=main.__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, default=None,
                        help="port to serve on (default: 8765, or a free one when a command is given)")
    parser.add_argument("--list", metavar="FILE", help="write the fleet's repo ids to FILE")
    parser.add_argument("--copies", type=int, default=None)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds added to every request")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="after --: a command to run against the fleet")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    port = args.port if args.port is not None else (0 if command else 8765)
    hub = FakeHub()

    class Handler(_Handler):
        fake = hub

    try:
        server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    except OSError as exc:
        print(f"fake Hub: cannot serve on 127.0.0.1:{port}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    server.daemon_threads = True
    hub._server = server
    fleet = build_fleet(hub, copies=args.copies)
    hub.latency = hub.file_latency = args.latency
    if args.list:
        fleet.list_file(Path(args.list))
    url = hub.endpoint
    print(f"fake Hub with {len(fleet.repos)} repos at {url}", file=sys.stderr if command else sys.stdout, flush=True)
    if not command:
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            server.server_close()
        return 0
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with tempfile.TemporaryDirectory(prefix="fake-hub-cache-") as cache:
            env = {**os.environ, "HF_ENDPOINT": url}
            env.setdefault("HF_HUB_CACHE", cache)
            try:
                return subprocess.call(command, env=env)
            except OSError as exc:
                print(f"fake Hub: cannot run {command[0]!r}: {exc.strerror or exc}", file=sys.stderr)
                return 2
    finally:
        server.shutdown()
        server.server_close()


if __name__ == "__main__":
    raise SystemExit(main())
