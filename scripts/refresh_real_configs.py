"""Re-fetch the real-config corpus (tests/data/real-configs) from the sources its SOURCE notes name.

Run:  python scripts/refresh_real_configs.py [--check] [--only NAME ...] [--corpus DIR]

Each corpus folder holds a config.json and a SOURCE note of `key: value` lines:

    repo: ai-dynamo/aiconfigurator          the GitHub repository that vendors the file
    path: aic-core/.../Qwen--Qwen3-8B_config.json
    commit: 095f58a51c4ca8e61b66ec108d86f223f8d559ce   (40 hex digits: the exact version)
    hub: Qwen/Qwen3-8B                      optional: the Hub model the file mirrors
    format: file                            optional: `file` (default) or `mlc-preset`
    key: qwen3_8b                           with format mlc-preset: the MODEL_PRESETS entry
    drop: context_window_size, prefill_chunk_size
                                            with format mlc-preset: keys mlc-llm added to the Hub
                                            config, removed again

`file` sources are copied byte for byte from raw.githubusercontent.com at the pinned commit.
`mlc-preset` sources are Hub configs that mlc-llm keeps verbatim as Python dicts in
MODEL_PRESETS; the entry is read with ast.literal_eval (never executed) and written as JSON.

--check reads no network: it validates that every folder has a config.json whose JSON has a
string model_type and a SOURCE note that parses, and that no two folders hold the same config.
Exit codes: 0 fine, 1 a fetch failed or changed nothing it should, 2 a malformed corpus.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import re
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "data" / "real-configs"
RAW_URL = "https://raw.githubusercontent.com/{repo}/{commit}/{path}"
FORMATS = ("file", "mlc-preset")
REQUIRED = ("repo", "path", "commit")
KNOWN = REQUIRED + ("hub", "format", "key", "drop", "note")
_REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")


class SourceNoteError(ValueError):
    """A SOURCE note that does not say where its config.json came from."""


@dataclass(frozen=True)
class SourceNote:
    """Where one corpus config.json came from."""

    repo: str
    path: str
    commit: str
    hub: str | None = None
    format: str = "file"
    key: str | None = None
    drop: tuple[str, ...] = ()

    @property
    def url(self) -> str:
        """The raw file at the pinned commit."""
        return RAW_URL.format(repo=self.repo, commit=self.commit, path=self.path)


def parse_source(text: str, where: str = "SOURCE") -> SourceNote:
    """Parse a SOURCE note; raise SourceNoteError naming the line and key of the first fault.

    Example::

        >>> parse_source("repo: a/b\\npath: c/config.json\\ncommit: " + "0" * 40 + "\\n").url
        'https://raw.githubusercontent.com/a/b/0000000000000000000000000000000000000000/c/config.json'
    """
    fields: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, sep, value = line.partition(":")
        name, value = name.strip(), value.strip()
        if not sep or not value:
            raise SourceNoteError(f"{where}:{number}: expected 'key: value', got {line!r}")
        if name not in KNOWN:
            raise SourceNoteError(f"{where}:{number}: unknown key {name!r} (known: {', '.join(KNOWN)})")
        if name in fields:
            raise SourceNoteError(f"{where}:{number}: key {name!r} given twice")
        fields[name] = value
    for name in REQUIRED:
        if name not in fields:
            raise SourceNoteError(f"{where}: missing key {name!r}")
    if not _REPO.match(fields["repo"]):
        raise SourceNoteError(f"{where}: key 'repo' must be owner/name, got {fields['repo']!r}")
    if not _COMMIT.match(fields["commit"]):
        raise SourceNoteError(f"{where}: key 'commit' must be 40 lowercase hex digits, got {fields['commit']!r}")
    if fields["path"].startswith("/") or ".." in fields["path"].split("/"):
        raise SourceNoteError(f"{where}: key 'path' must be relative to the repository, got {fields['path']!r}")
    fmt = fields.get("format", "file")
    if fmt not in FORMATS:
        raise SourceNoteError(f"{where}: key 'format' must be one of {', '.join(FORMATS)}, got {fmt!r}")
    if fmt == "mlc-preset" and "key" not in fields:
        raise SourceNoteError(f"{where}: format mlc-preset needs key 'key' (the MODEL_PRESETS entry)")
    if "drop" in fields and fmt != "mlc-preset":
        raise SourceNoteError(f"{where}: key 'drop' applies only to format mlc-preset")
    drop = tuple(name.strip() for name in fields.get("drop", "").split(",") if name.strip())
    return SourceNote(
        repo=fields["repo"], path=fields["path"], commit=fields["commit"], hub=fields.get("hub"),
        format=fmt, key=fields.get("key"), drop=drop,
    )


def check_folder(folder: Path) -> SourceNote:
    """Validate one corpus folder offline; raise SourceNoteError with what is wrong."""
    config, source = folder / "config.json", folder / "SOURCE"
    if not config.is_file():
        raise SourceNoteError(f"{folder}: no config.json")
    if not source.is_file():
        raise SourceNoteError(f"{folder}: no SOURCE note")
    note = parse_source(source.read_text(encoding="utf-8"), str(source))
    try:
        raw = json.loads(config.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise SourceNoteError(f"{config}: not valid JSON ({exc})") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("model_type"), str):
        raise SourceNoteError(f"{config}: no string model_type at the top level")
    return note


def canonical_hash(config: Path) -> str:
    """A hash of the config's JSON content, blind to formatting, to find the same config twice."""
    content = json.loads(config.read_text(encoding="utf-8"))
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()


def check_corpus(corpus: Path) -> list[str]:
    """Every problem in the corpus, one line each; empty when the corpus is well formed."""
    problems: list[str] = []
    seen: dict[str, str] = {}
    folders = sorted(p for p in corpus.iterdir() if p.is_dir())
    if not folders:
        return [f"{corpus}: no corpus folders"]
    for folder in folders:
        try:
            check_folder(folder)
        except SourceNoteError as exc:
            problems.append(str(exc))
            continue
        digest = canonical_hash(folder / "config.json")
        if digest in seen:
            problems.append(f"{folder.name}: same config as {seen[digest]}")
        seen[digest] = folder.name
    return problems


def fetch_text(url: str, timeout: float = 30.0) -> bytes:
    """GET one URL and return its body."""
    with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 (https URLs we build)
        return response.read()


def mlc_preset(source: bytes, key: str) -> dict:
    """The MODEL_PRESETS[key] dict of mlc-llm's model_preset.py, read without executing it."""
    for node in ast.parse(source).body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        if isinstance(target, ast.Name) and target.id == "MODEL_PRESETS" and node.value is not None:
            presets = ast.literal_eval(node.value)
            if key not in presets:
                raise KeyError(f"MODEL_PRESETS has no entry {key!r}")
            return presets[key]
    raise KeyError("no MODEL_PRESETS assignment found")


def fetch_config(note: SourceNote) -> bytes:
    """The config.json bytes that a SOURCE note points at."""
    body = fetch_text(note.url)
    if note.format == "mlc-preset":
        preset = {k: v for k, v in mlc_preset(body, note.key or "").items() if k not in note.drop}
        return (json.dumps(preset, indent=2) + "\n").encode()
    json.loads(body)  # a vendored file that is no longer JSON is a failure, not a new config
    return body


def refresh(corpus: Path, only: list[str] | None = None) -> int:
    """Re-fetch every (or each named) folder's config.json; return the number of failures."""
    failures = 0
    for folder in sorted(p for p in corpus.iterdir() if p.is_dir()):
        if only and folder.name not in only:
            continue
        try:
            note = parse_source((folder / "SOURCE").read_text(encoding="utf-8"), str(folder / "SOURCE"))
            data = fetch_config(note)
        except (OSError, SourceNoteError, ValueError, KeyError, SyntaxError) as exc:
            print(f"{folder.name}: {exc}", file=sys.stderr)
            failures += 1
            continue
        target = folder / "config.json"
        changed = not target.exists() or target.read_bytes() != data
        target.write_bytes(data)
        print(f"{folder.name}: {'updated' if changed else 'unchanged'}")
    return failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, default=CORPUS, help="corpus folder (default: %(default)s)")
    parser.add_argument("--check", action="store_true", help="validate offline; fetch nothing")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="refresh only these folders")
    args = parser.parse_args(argv)
    if not args.corpus.is_dir():
        print(f"{args.corpus}: not a folder", file=sys.stderr)
        return 2
    if args.check:
        problems = check_corpus(args.corpus)
        for problem in problems:
            print(problem, file=sys.stderr)
        count = sum(1 for p in args.corpus.iterdir() if p.is_dir())
        print(f"{count} folders, {len(problems)} problems")
        return 2 if problems else 0
    return 1 if refresh(args.corpus, args.only) else 0


if __name__ == "__main__":
    sys.exit(main())
