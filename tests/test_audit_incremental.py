"""Audit reruns from the listing's shas, gated repos' commits, and audits that could check nothing,
each run as a real `draftguard audit` process against the fake Hub's fleet (tests/fakes/fleet.py).

- A rerun of a Hub listing (--org) with nothing changed asks the listing (with ``expand=sha``) and
  nothing per repo for an unchanged repo: under 10% of the first run's bytes.
- A rerun of a list file asks each repo its commit alone (``expand=sha``), never its file list or a
  file.
- A gated repo's record keeps the commit the Hub gave for it, and is asked again on a rerun (its
  access may have been granted since).
- An audit in which no repo could be checked exits 2 with one line saying why.
"""

from __future__ import annotations

from pathlib import Path

from tests.audit_helpers import run_audit_process
from tests.fakes.fleet import build_fleet
from tests.fakes.hub import FakeHub, Request

LLAMA = Path(__file__).resolve().parent / "data" / "healthy" / "llama-3.1-8b.json"


def _repos_asked(requests: list[Request]) -> set[str]:
    """Repos that a request named: a file under /{repo}/resolve/..., or /api/models/{repo}..."""
    named = {r.repo for r in requests if r.repo not in (None, "api")}
    for r in requests:
        parts = (r.path or "").split("/")
        if r.repo == "api" and len(parts) >= 5 and parts[1:3] == ["api", "models"]:
            named.add(f"{parts[3]}/{parts[4]}")
    return named


def _sent(requests: list[Request]) -> int:
    return sum(r.sent for r in requests)


def test_a_rerun_of_an_org_asks_only_the_listing_for_unchanged_repos(tmp_path):
    with FakeHub() as hub:
        build_fleet(hub, copies=2, corpus=False)
        hub.add("org-00/gated-llama", {"config.json": LLAMA.read_bytes()})
        hub.gated.add("org-00/gated-llama")
        org = sorted(r for r in hub.repos if r.startswith("org-00/"))
        first = run_audit_process(hub, tmp_path, "--org", "org-00", "--no-progress", "--fail-on", "never")
        assert first.rc == 0, first.stderr
        before = first.records  # read now: the reruns write to the same audit.jsonl
        assert set(before) == set(org)
        cost = list(hub.requests)

        hub.requests.clear()
        again = run_audit_process(hub, tmp_path, "--org", "org-00", "--no-progress", "--fail-on", "never",
                                  out=first.out)
        assert again.rc == 0, again.stderr
        rerun = list(hub.requests)
        print(f"\n--org rerun, nothing changed: {len(rerun)} requests, {_sent(rerun)} bytes; first run "
              f"{len(cost)} requests, {_sent(cost)} bytes ({100 * _sent(rerun) / _sent(cost):.1f}%)")
        # The gated repo is asked again (access may have been granted); no other repo is asked anything.
        assert _repos_asked(rerun) == {"org-00/gated-llama"}
        assert _sent(rerun) < 0.10 * _sent(cost)
        assert f"1 checked, {len(org) - 1} unchanged and skipped" in again.stderr
        assert all(again.records[k] == before[k] for k in org if k != "org-00/gated-llama")

        # A new commit on one repo: that repo is read again, and only it.
        changed = "org-00/llama-3.1-8b"
        new_sha = hub.push(changed, {"config.json": LLAMA.read_bytes()})
        hub.requests.clear()
        third = run_audit_process(hub, tmp_path, "--org", "org-00", "--no-progress", "--fail-on", "never",
                                  out=first.out)
        assert _repos_asked(hub.requests) == {"org-00/gated-llama", changed}
        assert third.records[changed]["sha"] == new_sha != before[changed]["sha"]


def test_a_gated_repo_keeps_its_sha(tmp_path):
    with FakeHub() as hub:
        build_fleet(hub, copies=1, corpus=False, faults=False)
        hub.add("org-00/gated-llama", {"config.json": LLAMA.read_bytes()})
        hub.gated.add("org-00/gated-llama")
        sha = hub.commit_of("org-00/gated-llama", "main")
        listed = run_audit_process(hub, tmp_path, "--org", "org-00", "--no-progress", "--fail-on", "never")
        record = listed.records["org-00/gated-llama"]
        assert [e["kind"] for e in record["errors"]] == ["gated"]
        assert record["sha"] == sha
        repo_list = tmp_path / "repos.txt"
        repo_list.write_text("org-00/gated-llama\norg-00/llama-3.1-8b\n")
        from_file = run_audit_process(hub, tmp_path, str(repo_list), "--no-progress", "--fail-on", "never",
                                      out=tmp_path / "from-file")
        assert from_file.records["org-00/gated-llama"]["sha"] == sha


def test_a_rerun_of_a_list_file_asks_each_repo_its_commit_alone(tmp_path):
    with FakeHub() as hub:
        fleet = build_fleet(hub, copies=2, corpus=False)
        repo_list = fleet.list_file(tmp_path / "repos.txt")
        first = run_audit_process(hub, tmp_path, str(repo_list), "--no-progress", "--fail-on", "never")
        cost = list(hub.requests)
        hub.requests.clear()
        again = run_audit_process(hub, tmp_path, str(repo_list), "--no-progress", "--fail-on", "never",
                                  out=first.out)
        rerun = list(hub.requests)
        print(f"\nlist-file rerun, nothing changed: {len(rerun)} requests, {_sent(rerun)} bytes; first run "
              f"{len(cost)} requests, {_sent(cost)} bytes ({100 * _sent(rerun) / _sent(cost):.1f}%)")
        assert _sent(rerun) < 0.10 * _sent(cost)
        asked_again = {"broken/gated-llama", "broken/deleted-repo"}  # access refused, or no commit to compare
        files = [r for r in rerun if r.repo not in (None, "api") and r.repo not in asked_again]
        assert files == []  # no file, no HEAD, for an unchanged repo
        unchanged = set(fleet.repos) - asked_again

        def info(requests: list[Request]) -> dict[str, list[int]]:
            out: dict[str, list[int]] = {}
            for r in requests:
                if r.repo == "api" and (r.path or "").startswith("/api/models/"):
                    out.setdefault("/".join(r.path.split("/")[3:5]), []).append(r.sent)
            return out

        first_info, rerun_info = info(cost), info(rerun)
        for repo in unchanged:  # one answer each, smaller than the first run's (no file list)
            assert len(rerun_info[repo]) == 1 and rerun_info[repo][0] < first_info[repo][0], repo
        assert f"{len(asked_again)} checked, {len(unchanged)} unchanged and skipped" in again.stderr


def test_an_audit_that_could_check_nothing_exits_2_in_one_line(tmp_path):
    with FakeHub() as hub:
        build_fleet(hub, copies=1, corpus=False, faults=False)
        repo_list = tmp_path / "repos.txt"
        repo_list.write_text("gone/one\ngone/two\n")  # deleted repos: nothing to check
        deleted = run_audit_process(hub, tmp_path, str(repo_list), "--no-progress")
        assert deleted.rc == 2, deleted.stderr
        [line] = [x for x in deleted.stderr.splitlines() if "nothing could be checked" in x]
        assert line.startswith("draftguard: nothing could be checked: 2 of 2 repos could not be read (not-found 2)")

        # A Hub outage after the listing: every repo's info answers 503; the nightly must not go green.
        hub.fail("GET", r"^/api/models/org-00/", 503, times=10**6)
        outage = run_audit_process(hub, tmp_path, "--org", "org-00", "--no-progress", "--retries", "0",
                                   out=tmp_path / "outage")
        assert outage.rc == 2, outage.stderr
        assert "nothing could be checked" in outage.stderr and "server-error" in outage.stderr
        assert "Traceback" not in outage.stderr

        # One repo checked is enough to judge the run by --fail-on.
        repo_list.write_text("gone/one\nfleet-targets/pair-target\n")
        some = run_audit_process(hub, tmp_path, str(repo_list), "--no-progress", out=tmp_path / "some")
        assert some.rc == 0, some.stderr
        assert "nothing could be checked" not in some.stderr


def test_a_hub_that_goes_away_mid_run_stops_the_audit_in_one_line(tmp_path):
    """Without the stop every repo left is retried on its own (backoff, then huggingface_hub's 23 s of
    retries for a file), and the run ends green with a column of "unreachable" errors.

    The Hub goes away at the 8th repo asked, whatever the threads' timing: the count is taken under a
    lock (two requests counted at once once skipped 8, and the Hub never went away), and the fake
    refuses every request from then on itself (a server stopped from another thread still answered
    for up to half a second, and on a connection accepted just before the stop)."""
    import threading
    import time

    with FakeHub() as hub:
        fleet = build_fleet(hub, copies=2, corpus=False)
        repo_list = fleet.list_file(tmp_path / "repos.txt")
        asked = []
        lock = threading.Lock()

        def goes_away(h, method, segs, query, raw, answer, error, authorized) -> bool:
            if segs[:1] == ["models"] and len(segs) >= 3:
                with lock:
                    asked.append(segs)
                    if len(asked) == 8:
                        hub.refuse()  # this one is answered; every request after it is not
            return False  # answered as usual

        hub.routes.insert(0, goes_away)
        started = time.perf_counter()
        run = run_audit_process(hub, tmp_path, str(repo_list), "--no-progress", "--concurrency", "2",
                                "--fail-on", "never")
        took = time.perf_counter() - started
        print(f"\nthe Hub went away after 8 repos: the audit ended in {took:.1f} s")
        assert run.rc == 2, run.stderr
        [line] = [x for x in run.stderr.splitlines() if "the audit stopped" in x]
        assert line.startswith("draftguard: the Hub at http://127.0.0.1:") and "cannot be reached" in line
        left = int(line.split("the audit stopped with ")[1].split(" of ")[0])
        assert 0 < left < len(fleet.repos)
        records = run.records
        assert len(records) == len(fleet.repos) - left  # the repos not asked have no record: the next run asks them
        assert "Traceback" not in run.stderr
        assert took < 90  # before: 154 s here, ending green; after: 9-28 s (a file read in flight retries 23 s)
