"""A launch checked: its model references resolved as the engine resolves them, the engine asked
(the real tier: vLLM's own parser and ``create_engine_config()`` through ``RealEngines.launch``; else
the light tier's rules), and the answer judged into findings DG300-DG309 on the launch file's lines.

Model references: a local folder (relative to the launch file's folder; a container path mapped back
through a compose volume, a ``docker run -v`` or a hostPath mount), else a Hub repo id read through
draftguard's one Hub reader (huggingface_hub's cache; ``HF_HUB_OFFLINE`` respected; ``--revision``).

In: ``Launch`` objects (``sources.read_launches`` / ``command_launches``), the engine specs asked for
and the real engines installed (or None).
Out: ``check_launches`` -> a ``Report`` (one ``TargetResult`` per launch, its ``engine_views`` the
``LaunchView`` the findings came from); what cannot be read is an ``InputError`` with file and line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from draftguard.check import resolver
from draftguard.check.drafter.detect import detect_drafter
from draftguard.check.engines import releases
from draftguard.check.engines.specs import KNOWN, EngineSpec, sort_key
from draftguard.check.engines.specs import newest as newest_release
from draftguard.check.engines.specs import oldest as oldest_release
from draftguard.check.findings import RULES, Finding, InputError, Report, Severity, TargetResult
from draftguard.check.launch.flags import MODEL_OPTIONS, Flags, parser_options, read_flags, unknown_option
from draftguard.check.launch.judge import judge
from draftguard.check.launch.light import LaunchView, sglang_view, vllm_view
from draftguard.check.launch.sources import Launch
from draftguard.check.run import check
from draftguard.hub_access import repo_id_problem
from draftguard.check.launch import reading
from draftguard.snapshot import _REPO_ID, CONFIG_NAME, BadInput, Snapshot, hub_snapshot, load_snapshot


def _release_spec(engine: str, version: str) -> EngineSpec:
    return EngineSpec(engine, version, KNOWN[engine][version])


def judged_release(launch: Launch, specs: list[EngineSpec] | None) -> tuple[EngineSpec, str, EngineSpec | None]:
    """The release a launch is judged under, why (the words the output shows), and the newer release
    its upgrade notes are for (None: it is judged under the newest asked or known).

    ``--engine`` (or settings ``engines:``) overrides: the oldest release asked for the launch's
    engine is judged, and the newest asked gives the upgrade notes (``--engine vllm==A,vllm==B``).
    Else the release the launch pins (an image tag, ``vllm@X``, ``pip install vllm==X``, a
    requirements file: ``Launch.release``), read as the known release it means; ``latest``, ``nightly``
    and no pin mean the newest known release."""
    engine = launch.engine
    asked = sorted((s for s in specs or [] if s.name == engine), key=lambda s: sort_key(s.version))
    if asked:
        return asked[0], "asked with --engine", (asked[-1] if len(asked) > 1 else None)
    newest = _release_spec(engine, newest_release(engine))
    pin, where = getattr(launch, "release", None), getattr(launch, "release_source", "") or ""
    if not pin:
        why = f"{where}: " if where else ""
        return newest, f"{why}no release pinned, so the newest known release", None
    version = releases.resolve(engine, pin)
    if version is None or version not in KNOWN[engine]:
        return newest, (f"{pin} (pinned by {where}) is not a release draftguard knows (vLLM {oldest_release(engine)}"
                        f" to {newest.version}): judged under the newest"), None
    said = f"pinned by {where}" + (f" ({pin} read as {version})" if pin.lstrip("v") != version else "")
    judged = _release_spec(engine, version)
    return judged, said, (newest if sort_key(version) < sort_key(newest.version) else None)


def resolve_model(ref: str, line: int, launch: Launch, revision: str | None, what: str,
                  confine: Path | None = None) -> Snapshot:
    """The snapshot a launch's model reference names, read as the engine would find it; a local folder
    outside ``confine`` (the Action's checkout) is refused, not read."""
    shown = f"{launch.file}:{line}"
    snapshot = _resolve(ref, shown, line, launch, revision, what)
    if confine is not None and not snapshot.is_hub and snapshot.local_dir is not None and not (
            Path(snapshot.local_dir).resolve().is_relative_to(Path(confine).resolve())):
        raise BadInput(f"{shown}: the {what} {ref} is outside the repository, not read", file=launch.file, line=line)
    return snapshot


def _resolve(ref: str, shown: str, line: int, launch: Launch, revision: str | None, what: str) -> Snapshot:
    if not ref:
        raise BadInput(f"{shown}: the {what} is empty (a variable nothing in the file sets?)", file=launch.file, line=line)

    def local(path: Path, how: str) -> Snapshot:  # read only inside the checkout: nothing outside is even looked at
        if reading.inside(path) is None:
            raise BadInput(f"{shown}: the {what} {ref} is {how} outside the checkout (or a system path), not read",
                           file=launch.file, line=line)
        reading.check_folder(path, shown, what, launch.file, line)
        return load_snapshot(str(path))

    if ref.startswith("/"):
        mounted = max((c for c in launch.volumes if ref == c or ref.startswith(c.rstrip("/") + "/")), key=len,
                      default=None)
        if mounted is not None:
            host = Path(launch.volumes[mounted]) / ref[len(mounted):].lstrip("/")
            if reading.inside(host) is None:
                raise BadInput(f"{shown}: the {what} {ref} is on a volume whose host path is outside the checkout, "
                               "not read", file=launch.file, line=line)
            if host.is_dir():
                return local(host, "through a volume")
            raise BadInput(f"{shown}: the {what} {ref} is in the volume {mounted}, which holds no model folder here",
                           file=launch.file, line=line)
        if reading.inside(ref) is None:
            raise BadInput(f"{shown}: the {what} {ref} is outside the repository, not read", file=launch.file,
                           line=line)
        if Path(ref).is_dir():
            return local(Path(ref), "a path")
        raise BadInput(f"{shown}: the {what} {ref} is a path in the container that no volume maps to a folder "
                       "here", file=launch.file, line=line)
    path = launch.folder / ref
    if ref.startswith((".", "~")) or (reading.inside(path) is not None and path.is_dir()):
        if reading.inside(path) is None:
            raise BadInput(f"{shown}: the {what} {ref} is outside the checkout (or a system path), not read",
                           file=launch.file, line=line)
        if not path.is_dir():
            raise BadInput(f"{shown}: the {what} {ref} is not a folder beside the launch file", file=launch.file,
                           line=line)
        return local(path, "a folder")
    try:  # a Hub repo a pull request's launch file names (the Action: a checkout root) is read anonymously,
        # never with the workflow's token; the CLI on its user's own files reads as its user
        if ref.count("/") != 1 or ref.endswith(".json") or not _REPO_ID.match(ref):
            raise BadInput(f"{ref}: no such file or folder, and not a Hub repo id (owner/name)", file=ref)
        return hub_snapshot(ref, revision, (CONFIG_NAME,), token=False if reading.root() is not None else None)
    except BadInput as exc:
        raise BadInput(f"{shown}: the {what} {ref}: {exc}", file=launch.file, line=line) from None


def _read(snapshot: Snapshot) -> tuple[dict[str, Any], dict[str, Any]]:
    """The raw config and the values its transformers class resolves, resolved as every other file's
    check is (``check.run.check``: in a bounded child, a file past a bound stopped and named). Raises
    BadInput: the config cannot be resolved, or it stopped at a bound."""
    report = check([snapshot], drafter_rules=False, values=True)
    if report.errors:
        error = report.errors[0]
        raise BadInput(error.message, file=error.file, line=error.line, column=error.column, key=error.key)
    return snapshot.load_json(), dict(report.targets[0].values or {})


def _draft_ref(flags: Flags) -> tuple[str, int, str | None] | None:
    if flags.engine == "vllm":
        spec = flags.data("speculative-config")
        if isinstance(spec, dict) and isinstance(spec.get("model"), str):
            revision = spec.get("revision") or spec.get("draft_revision")
            return spec["model"], flags.get("speculative-config").line, revision
        return None
    flag = flags.get("speculative-draft-model-path") or flags.get("speculative-draft-model")
    if flag is not None and flag.value:
        return flag.value, flag.line, flags.value("speculative-draft-model-revision")
    return None


def _argv(launch: Launch, flags: Flags, target: Snapshot, draft: Snapshot | None) -> list[str]:
    """The launch's arguments with its model references made the folders read here (a container path
    or a folder relative to the launch file means nothing to the worker)."""
    import json  # stdlib; only the real tier rewrites the drafter's JSON

    out: dict[int, str | None] = {i: w.text for i, w in enumerate(launch.args)}
    local = target.local_dir
    model_flag = next((flags.get(n) for n in MODEL_OPTIONS[flags.engine] if flags.get(n) is not None), None)
    if local and flags.engine == "vllm" and flags.positional_at:
        out[flags.positional_at[0]] = local
    elif local and model_flag is not None:
        last = model_flag.at[-1]
        out[last] = local if len(model_flag.at) > 1 else f"--{model_flag.name}={local}"
    tail: list[str] = []
    draft_flag = flags.get("speculative-draft-model-path") or flags.get("speculative-draft-model")
    if draft is not None and draft.local_dir and draft_flag is not None and flags.engine == "sglang":
        last = draft_flag.at[-1]
        out[last] = draft.local_dir if len(draft_flag.at) > 1 else f"--{draft_flag.name}={draft.local_dir}"
    spec_flag = flags.get("speculative-config")
    if draft is not None and spec_flag is not None and isinstance(spec_flag.data, dict):
        for i in spec_flag.at:
            out[i] = None
        tail = ["--speculative-config", json.dumps({**spec_flag.data, "model": draft.local_dir})]
    return [text for _, text in sorted(out.items()) if text is not None] + tail


def check_launch(launch: Launch, specs: list[EngineSpec] | None = None, real: Any = None,
                 confine: Path | None = None) -> TargetResult:
    """Findings for one launch. Raises BadInput (file and line) for a reference that cannot be read."""
    spec, why, upgrade = judged_release(launch, specs)
    flags = read_flags(launch, spec.version)
    early = _refused_before_the_model(launch, flags, spec)
    if early is not None:
        return early
    model = flags.model
    if model is None:
        raise BadInput(f"{launch.file}:{launch.line}: the {spec.shown} launch names no model", file=launch.file,
                       line=launch.line)
    if model.unset and not model.text:
        raise BadInput(f"{launch.file}:{model.line}: the model is ${model.unset[0]}, which nothing in the file sets",
                       file=launch.file, line=model.line)
    target = resolve_model(model.text, model.line, launch, flags.value("revision"), "model", confine)
    raw, values = _read(target)
    draft = None
    draft_raw = draft_values = None
    if (ref := _draft_ref(flags)) is not None:
        draft = resolve_model(ref[0], ref[1], launch, ref[2], "drafter", confine)
        draft_raw, draft_values = _read(draft)
    env = {k: v for k, (v, _) in launch.env.items()}
    if launch.engine == "vllm":
        view = vllm_view(flags, env, raw, values, draft_raw, draft_values, spec.shown, spec.version)
    else:
        view = sglang_view(flags, env, raw, values, draft_raw, spec.shown)
    answer = real.launch(spec, _argv(launch, flags, target, draft), env, launch.file) if real is not None else None
    if answer is None and real is not None:  # the engine ran and could not judge it here: the light view says so
        said = [why for s, what, why in getattr(real, "fallbacks", []) if s == spec and what == launch.file]
        if said:
            view.notes.append(f"{spec.shown} itself could not take this launch here: {said[-1][:300]}; the light "
                              "tier answers")
    if answer is not None:
        view = LaunchView(spec.shown, "engine", **{k: v for k, v in answer.items() if k in LaunchView.__dataclass_fields__
                                                   and k not in ("engine", "tier")})
        for snap, ref_text in ((target, model.text), (draft, ref[0] if draft is not None else None)):
            if view.refusal and snap is not None and snap.local_dir and ref_text:
                view.refusal = view.refusal.replace(snap.local_dir, ref_text)
    fmt = detect_drafter(draft_raw) if draft_raw is not None else None
    result = TargetResult(source=_source(launch), file=launch.file, revision=flags.value("revision"),
                          model_type=raw.get("model_type"), config_class=_served(view), values=None)
    view.notes.insert(0, f"{spec.shown}: {why}")
    result.findings = judge(view, launch, flags, raw, values, draft_raw, draft_values, fmt)
    if upgrade is not None:
        result.findings += upgrade_notes(launch, flags, spec, upgrade)
    result.launch_view = view  # for the tier comparison; the text views render engine_views, not these
    return result


def upgrade_notes(launch: Launch, flags: Flags, judged: EngineSpec, upgrade: EngineSpec) -> list[Finding]:
    """DG309 warnings: what the launch's flags meet in ``upgrade`` that ``judged`` takes: an option its
    parser refuses, a value no longer among an option's choices, a speculative method it no longer has;
    each with the first known release that refuses it (all releases between the two are searched)."""
    out: list[Finding] = []
    newer = read_flags(launch, upgrade.version)
    _, accepted, _ = parser_options(launch.engine, judged.version)
    _, known, _ = parser_options(launch.engine, upgrade.version)
    rule = RULES["DG309"]
    where = f" [{launch.where}]" if launch.where else ""

    def add(key: str, line: int, raw: Any, message: str, severity: Any = None) -> None:
        out.append(Finding("DG309", severity or rule.severity, key, raw, None, launch.file, line,
                           f"{upgrade.shown} (upgrade from {judged.version}){where}: {message}"))

    between = [v for v in releases.known(launch.engine)
               if sort_key(judged.version) < sort_key(v) <= sort_key(upgrade.version)]
    for flag in newer.options.values():
        base = flag.name.split(".", 1)[0]
        if not flag.long or not (base in accepted or any(o.startswith(base) for o in accepted)):
            continue
        if base not in known and not any(o.startswith(base) for o in known):
            first = releases.first_refusing(launch.engine, base, after=judged.version) or upgrade.version
            add(f"--{base}", flag.line, flag.value,
                f"--{base} is accepted by {judged.version} and refused from {first} on (\"unrecognized arguments: "
                f"--{base}\"). Fix: drop it before upgrading" + _deprecated_words(launch.engine, judged.version, base))
            continue
        refusing = [v for v in between if releases.option_kind(launch.engine, v, base) is None]
        if refusing:  # refused on the way, taken again by the release upgraded to
            add(f"--{base}", flag.line, flag.value,
                f"--{base} is accepted by {judged.version} and {upgrade.version}, but refused by {refusing[0]}"
                + (f" to {refusing[-1]}" if len(refusing) > 1 else "") + ": moving the pin to one of those "
                "releases breaks this launch", Severity.INFO)
        value = flag.value.lower() if flag.value is not None and base == "quantization" else flag.value
        if value is not None and judged.version in releases.known(launch.engine) and not releases.refuses_value(
                launch.engine, judged.version, base, value) and releases.refuses_value(
                launch.engine, upgrade.version, base, value):
            first = next((v for v in between if releases.refuses_value(launch.engine, v, base, value)),
                         upgrade.version)
            why = "no longer one of its quantization methods" if base == "quantization" else f"invalid choice: {value!r}"
            add(f"--{base}", flag.line, flag.value,
                f"--{base} {flag.value} is accepted by {judged.version} and refused from {first} on ({why})")
    method = (flags.data("speculative-config") or {}).get("method") if isinstance(flags.data("speculative-config"), dict) else None
    if isinstance(method, str) and launch.engine == "vllm":
        now, then = releases.facts("vllm", judged.version), releases.facts("vllm", upgrade.version)
        if method in (now.speculative_methods or ()) and then.speculative_methods and method not in then.speculative_methods:
            first = next((v for v in releases.known("vllm") if sort_key(judged.version) < sort_key(v)
                          and method not in (releases.facts("vllm", v).speculative_methods or (method,))), upgrade.version)
            spec_flag = flags.get("speculative-config")
            add("--speculative-config", spec_flag.line if spec_flag else launch.line, method,
                f"the speculative method {method!r} is served by {judged.version} and removed from {first} on")
    return out


def _deprecated_words(engine: str, version: str, option: str) -> str:
    words = (releases.facts(engine, version).deprecated or {}).get(option)
    return f" ({version} already says: {words})" if words else ""


def _refused_before_the_model(launch: Launch, flags: Flags, spec: EngineSpec) -> TargetResult | None:
    """A launch its engine refuses before any model is read, as a finding: a model reference that is
    neither a folder nor a repo id (``vllm serve "$ARGS"``: the whole quoted line is vLLM's one
    positional, and huggingface_hub's repo id check, which vLLM's model config runs, refuses it), an
    SGLang launch without ``--model-path`` (its parser requires it), or, with no model named, an
    argument the parser does not take. None for every other launch."""
    model, env = flags.model, {k: v for k, (v, _) in launch.env.items()}
    view = LaunchView(spec.shown, "light")
    if model is not None and (refusal := _not_a_model(model.text, launch)) is not None:
        view.refusal, view.refusal_where = refusal, "huggingface_hub's repo id check (the engine's model config)"
    elif model is None and launch.engine == "sglang":  # argparse checks required options before the rest
        view.refusal = "sglang: error: the following arguments are required: --model-path/--model"
        view.refusal_where = "argparse (SGLang's ServerArgs parser)"
    elif model is None and unknown_option(flags) is not None:
        view = vllm_view(flags, env, {}, {}, None, None, spec.shown, spec.version)
    else:
        return None
    result = TargetResult(source=_source(launch), file=launch.file, revision=None, model_type=None,
                          config_class=_served(view), values=None)
    result.findings = judge(view, launch, flags, {}, {}, None, None, None)
    result.launch_view = view
    return result


def _not_a_model(ref: str, launch: Launch) -> str | None:
    """huggingface_hub's words for a reference that is no folder and no valid repo id, else None."""
    if not ref or ref.startswith(("/", ".", "~")) or (launch.folder / ref).is_dir():
        return None
    return repo_id_problem(ref, whole=True)  # through the one Hub reader, which alone imports huggingface_hub


def _source(launch: Launch) -> str:
    """The launch as a target is named: its file, and the service or container in it."""
    return f"{launch.file} [{launch.where}]" if launch.where else launch.file


def _served(view: LaunchView) -> str:
    """What the views say the launch serves, in one phrase (the text view's header for it)."""
    runner = f"{view.runner} runner, " if view.runner else ""
    if view.refusal:
        return f"{view.engine} launch ({runner}{view.tier} tier): refused"
    parts = [view.architecture or "?", f"max_model_len {view.max_model_len}", view.dtype or "dtype from the weights"]
    if view.draft_architecture:
        parts.append(f"{view.method} drafter {view.draft_architecture}")
    return f"{view.engine} launch ({runner}{view.tier} tier): " + ", ".join(str(p) for p in parts)


def check_launches(launches: list[Launch], specs: list[EngineSpec] | None = None, real: Any = None,
                   report: Report | None = None, confine: Path | None = None) -> Report:
    """Every launch into one Report (``report`` extended when given)."""
    report = report or Report(transformers_version=resolver.transformers_version())
    for launch in launches:
        try:
            report.targets.append(check_launch(launch, specs, real, confine))
        except BadInput as exc:
            report.errors.append(InputError.of(launch.file, exc))
        except Exception as exc:  # noqa: BLE001 (one launch's failure is an error on its file; the run goes on)
            report.errors.append(InputError.of(launch.file, BadInput(reading.failure(launch.file, exc),
                                                                     file=launch.file, line=launch.line)))
    return report
