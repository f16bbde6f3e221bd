"""audit.html in a real headless browser (Debian's chromium): the table renders, the headers sort
the repos, a click opens a repo's findings, and nothing is fetched from anywhere.

The page is the report of a real audit of a small fleet on the fake Hub. A copy of it gets a short
script that clicks like a user would (header buttons, a repo row) and writes what it saw into the
DOM, which chromium's ``--dump-dom`` prints once the page's scripts have run.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.audit_helpers import run_audit_process
from tests.fakes.fleet import build_fleet
from tests.fakes.hub import FakeHub

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="chromium is not installed (Debian: apt-get install -y chromium; scripts/test.sh installs it), so "
    "the HTML report was not opened in a browser",
)

# Clicks as a user would, then records the repo order after each and whether the details opened.
PROBE = """
<script>
(function(){
  function order(){return Array.prototype.map.call(document.querySelectorAll('#repos tbody'),
    function(g){return g.dataset.repo;});}
  function header(k){return document.querySelector("#repos th[data-key='"+k+"'] button");}
  var seen={initial:order()};
  header('repo').click(); seen.repoAsc=order();
  header('repo').click(); seen.repoDesc=order();
  header('rule').click(); seen.ruleAsc=Array.prototype.map.call(document.querySelectorAll('#repos tbody'),
    function(g){return g.dataset.rule;});
  header('severity').click(); seen.severity=Array.prototype.map.call(document.querySelectorAll('#repos tbody'),
    function(g){return parseFloat(g.dataset.severity);});
  var first=document.querySelector('#repos tbody');
  seen.hiddenBefore=first.rows[1].hidden; first.rows[0].click(); seen.hiddenAfter=first.rows[1].hidden;
  seen.detailText=first.rows[1].textContent;
  var out=document.createElement('pre'); out.id='probe'; out.textContent=JSON.stringify(seen);
  document.body.appendChild(out);
})();
</script>
"""


def chromium(*args: str, profile: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={profile}", "--virtual-time-budget=5000", *args],
        capture_output=True, text=True, timeout=120,
    )


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("html")
    with FakeHub() as hub:
        fleet = build_fleet(hub, copies=1, corpus=False)
        run = run_audit_process(hub, tmp, str(fleet.list_file(tmp / "repos.txt")), "--no-progress")
    assert run.rc == 1, run.stderr
    return run.out / "audit.html"


def test_the_table_renders_and_sorting_and_expanding_work_in_chromium(report, tmp_path):
    probe = tmp_path / "probe.html"
    probe.write_text(report.read_text().replace("</body>", PROBE + "</body>"))
    done = chromium("--dump-dom", probe.as_uri(), profile=tmp_path / "profile")
    assert done.returncode == 0, done.stderr[-2000:]
    dom = done.stdout
    assert dom.count("<tbody class=\"repo\"") == len(re.findall(r"<tbody class='repo'", report.read_text()))
    seen = json.loads(re.search(r'<pre id="probe">(.*?)</pre>', dom, re.S).group(1).replace("&quot;", '"')
                      .replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">"))
    repos = seen["initial"]
    assert len(repos) > 20
    assert seen["repoAsc"] == sorted(repos)
    assert seen["repoDesc"] == sorted(repos, reverse=True)
    assert seen["ruleAsc"] == sorted(seen["ruleAsc"])
    assert seen["severity"] == sorted(seen["severity"], reverse=True)  # worst first
    assert seen["severity"][0] == 2.0  # an error-level repo on top
    assert seen["hiddenBefore"] is True and seen["hiddenAfter"] is False
    assert "DG" in seen["detailText"] or "invalid" in seen["detailText"]


def test_a_screenshot_of_the_report(report, tmp_path):
    shot = tmp_path / "audit.png"
    opened = tmp_path / "opened.html"
    # The first failing repo opened, as a reader would after one click.
    opened.write_text(report.read_text().replace(
        "</body>", "<script>document.querySelector('#repos tbody tr.summary').click();</script></body>"))
    done = chromium(f"--screenshot={shot}", "--window-size=1280,900", opened.as_uri(), profile=tmp_path / "profile")
    assert done.returncode == 0, done.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000  # a rendered page, not a blank one
