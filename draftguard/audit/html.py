"""audit.html: one self-contained page, readable offline, with no server and nothing fetched.

One table row group (``<tbody>``) per repo: a summary row (severity, repo, rules, findings,
regressions, status) and a details row with its findings, opened by clicking the repo. The column
headers sort the groups by severity, repo or rule; the script and styles are inline, and every
text from a repo is escaped, so a config cannot inject markup into the page.

In: an ``AuditResult`` (its ``RepoRecord`` list) and the transformers versions.
Out: ``render_html`` -> the page as one HTML string (``report.write_reports`` writes it).
"""

from __future__ import annotations

import html
import time
from typing import TYPE_CHECKING

from draftguard import __version__
from draftguard.audit.record import CLEAN, ERROR, FAILING, RepoRecord, severity_rank, sort_key

if TYPE_CHECKING:
    from draftguard.audit.record import AuditResult

_STYLE = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#1b1f24}
h1{font-size:20px;margin:0 0 4px}.meta{color:#57606a;margin:0 0 16px}
.counts span{display:inline-block;margin-right:14px;font-weight:600}
table{border-collapse:collapse;width:100%;margin-top:12px}
th,td{text-align:left;padding:6px 8px;border-bottom:1px solid #d0d7de;vertical-align:top}
th button{font:inherit;font-weight:600;background:none;border:0;cursor:pointer;padding:0}
th[aria-sort=ascending] button::after{content:" \\25B2"}th[aria-sort=descending] button::after{content:" \\25BC"}
.sev{font-weight:700;text-transform:uppercase;font-size:12px}
.sev-error{color:#cf222e}.sev-warning{color:#9a6700}.sev-info{color:#0969da}.sev-none{color:#1a7f37}
.sev-unchecked{color:#6e7781}
tr.summary{cursor:pointer}tr.summary:hover{background:#f6f8fa}
.toggle{font:inherit;background:none;border:0;cursor:pointer;padding:0;color:#0969da}
tr.detail td{background:#f6f8fa}.finding{margin:0 0 8px}.finding code{background:#eaeef2;padding:0 3px}
.rule{font-weight:600}.where{color:#57606a}.reg{color:#8250df}
"""

_SCRIPT = """
(function(){
  var table=document.getElementById('repos');
  function key(g,k){return k==='severity'?parseFloat(g.dataset.severity):(g.dataset[k]||'');}
  function sortBy(k,dir){
    var groups=Array.prototype.slice.call(table.tBodies);
    groups.sort(function(a,b){
      var x=key(a,k),y=key(b,k),c=(x<y?-1:x>y?1:0);
      if(c===0){c=a.dataset.repo<b.dataset.repo?-1:a.dataset.repo>b.dataset.repo?1:0;return c;}
      return dir==='ascending'?c:-c;});
    groups.forEach(function(g){table.appendChild(g);});
    Array.prototype.forEach.call(table.tHead.rows[0].cells,function(th){
      if(th.dataset.key===k){th.setAttribute('aria-sort',dir);}else{th.removeAttribute('aria-sort');}});
  }
  Array.prototype.forEach.call(table.tHead.rows[0].cells,function(th){
    if(!th.dataset.key){return;}
    th.querySelector('button').addEventListener('click',function(){
      var now=th.getAttribute('aria-sort');
      var dir=now?(now==='ascending'?'descending':'ascending'):(th.dataset.key==='severity'?'descending':'ascending');
      sortBy(th.dataset.key,dir);});
  });
  Array.prototype.forEach.call(table.tBodies,function(g){
    var detail=g.rows[1],button=g.querySelector('.toggle');
    g.rows[0].addEventListener('click',function(){
      detail.hidden=!detail.hidden;button.setAttribute('aria-expanded',String(!detail.hidden));});
  });
  window.draftguardSort=sortBy;
})();
"""


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _severity(record: RepoRecord) -> tuple[str, float]:
    label = "unchecked" if record.status == ERROR else (record.worst or "none")
    return label, severity_rank(record)


def _details(record: RepoRecord) -> str:
    parts = []
    if record.target:
        parts.append(f"<p class='where'>Drafter ({_e(record.drafter)}) checked against "
                     f"<b>{_e(record.target['name'])}</b>, named by {_e(record.target['origin'])}.</p>")
    for error in record.errors:
        parts.append(f"<p class='finding'><span class='rule'>{_e(error.kind)}</span>: {_e(error.message)}</p>")
    for reg in record.regressions:
        parts.append(f"<p class='finding reg'><span class='rule'>{_e(reg.rule)}</span> regression on "
                     f"<code>{_e(reg.key)}</code>: present under transformers {_e(', '.join(reg.present))}, "
                     f"absent under {_e(', '.join(reg.absent))}.</p>")
    for f in record.findings:
        where = f"{f.get('file')}:{f['line']}" if f.get("line") else f.get("file")
        versions = f" (transformers {', '.join(f['versions'])})" if f.get("versions") else ""
        parts.append(f"<p class='finding'><span class='sev sev-{_e(f['severity'])}'>{_e(f['severity'])}</span> "
                     f"<span class='rule'>{_e(f['rule'])}</span> <code>{_e(f['key'])}</code> "
                     f"<span class='where'>{_e(where)}{_e(versions)}</span><br>{_e(f['message'])}</p>")
    if not parts:
        parts.append("<p class='finding'>No findings.</p>")
    sha = f"<p class='where'>commit {_e(record.sha)}</p>" if record.sha else ""
    return sha + "".join(parts)


def render_html(result: "AuditResult", versions: list[str]) -> str:
    """The whole page as one string (UTF-8, no external resources)."""
    counts = result.counts()
    groups = []
    for record in sorted(result.records, key=sort_key):
        label, rank = _severity(record)
        rules = ", ".join(record.rules("warning")) or ", ".join(e.kind for e in record.errors)
        status = {FAILING: "failing", ERROR: "could not be checked", CLEAN: "clean"}[record.status]
        groups.append(
            f"<tbody class='repo' data-severity='{rank}' data-repo='{_e(record.repo.lower())}' "
            f"data-rule='{_e(rules or '~')}'>"
            f"<tr class='summary'><td><span class='sev sev-{label}'>{_e(label)}</span></td>"
            f"<td><button class='toggle' aria-expanded='false'>{_e(record.repo)}</button></td>"
            f"<td>{_e(rules)}</td><td>{len(record.findings)}</td><td>{len(record.regressions)}</td>"
            f"<td>{_e(status)}</td></tr>"
            f"<tr class='detail' hidden><td colspan='6'>{_details(record)}</td></tr></tbody>"
        )
    problems = "".join(f"<p class='where'>transformers {_e(v)} did not run: {_e(why)}</p>"
                       for v, why in sorted(result.version_problems.items()))
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        "<title>draftguard audit</title>"
        f"<style>{_STYLE}</style></head><body>"
        "<h1>draftguard audit</h1>"
        f"<p class='meta'>{len(result.records)} repos under transformers {_e(', '.join(versions))} · draftguard "
        f"{_e(__version__)} · {_e(time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime()))}</p>"
        f"<p class='counts'><span class='sev-error'>{counts[FAILING]} failing</span>"
        f"<span class='sev-unchecked'>{counts[ERROR]} could not be checked</span>"
        f"<span class='sev-none'>{counts[CLEAN]} clean</span></p>{problems}"
        "<table id='repos'><thead><tr>"
        "<th data-key='severity' aria-sort='descending'><button>Severity</button></th>"
        "<th data-key='repo'><button>Repo</button></th><th data-key='rule'><button>Rules</button></th>"
        "<th>Findings</th><th>Regressions</th><th>Status</th></tr></thead>"
        + "".join(groups)
        + f"</table><script>{_SCRIPT}</script></body></html>\n"
    )
