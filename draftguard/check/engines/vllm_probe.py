"""The real tier's worker for vLLM: runs *inside a vLLM environment* (never imported by draftguard), and
answers what vLLM itself builds for each config: its own config path
(``EngineArgs(...).create_engine_config()``: config registry, RoPE patching, speculative config) and its
model classes built on torch's ``meta`` device (no weights, no GPU), read back layer by layer.

In: one JSON request per stdin line: ``{"model": target folder, "draft": drafter folder or null,
"method": "dflash"|"eagle3"|null}``, or a launch: ``{"launch": [the arguments after `vllm serve`],
"env": {name: value}}`` (vLLM's own serve parser, ``EngineArgs.from_cli_args`` and
``create_engine_config()`` under that environment).
Out: one JSON line per request on stdout: a list of views (``check.engines.view.EngineView`` fields) or
``{"error": "..."}``. Imports nothing of draftguard: the environment holds vLLM, not draftguard.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import json
import os
import sys
import traceback
import types
from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any


class _StubMeta(type):
    """A stand-in class whose every attribute is another stand-in class (enum members included)."""

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _StubMeta(name, (), {})


class _Stub(types.ModuleType):
    """Any attribute of a stubbed module is a stand-in class."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        value = _StubMeta(name, (), {"__module__": self.__name__})
        setattr(self, name, value)
        return value


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """torchvision on a CPU install: PyPI's only build of the version vLLM pins is CUDA's, which breaks
    ``import vllm``, and without it transformers' image processors (imported while vLLM inspects a
    multimodal architecture) fail. No view reads images, so an empty stand-in is enough."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name == "torchvision" or name.startswith("torchvision."):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec: Any) -> Any:
        return _Stub(spec.name)

    def exec_module(self, module: Any) -> None:
        module.__path__ = []
        module.__version__ = "0.0"


def _setup() -> Any:
    try:
        import torchvision  # noqa: F401 (a working torchvision is used as it is)
    except Exception:  # missing or broken: the stand-in
        sys.modules.pop("torchvision", None)
        sys.meta_path.insert(0, _StubFinder())
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    # vLLM and torch: this file only ever runs in the vLLM environment (draftguard never imports it).
    import torch
    import vllm
    from vllm.distributed import parallel_state
    from vllm.model_executor.models import registry

    # vLLM inspects each architecture in a fresh subprocess "to avoid initializing CUDA" (20-40 s
    # each); there is no CUDA here, so in-process is the same answer in about a second.
    registry._run_in_subprocess = lambda fn: fn()
    # Choose the model runner as a GPU machine would: vLLM's CPU build has no Triton, which alone
    # forces V1 here (VllmConfig.use_v2_model_runner, vllm/config/vllm.py).
    import vllm.config.vllm as vllm_config_module

    vllm_config_module.HAS_TRITON = True
    if not parallel_state._WORLD:
        port = 29500 + os.getpid() % 1000
        parallel_state.init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                                                    distributed_init_method=f"tcp://127.0.0.1:{port}")
    return torch, vllm


def _engine_config(model: str, draft: str | None, method: str | None) -> Any:
    # vLLM: the environment's own engine arguments (only run in the vLLM environment).
    from vllm.engine.arg_utils import EngineArgs

    spec = None
    if draft:
        spec = {"method": method, "model": draft, "num_speculative_tokens": 4}
    args = EngineArgs(model=model, skip_tokenizer_init=True, load_format="dummy", enforce_eager=True,
                      speculative_config=spec, max_num_seqs=1)
    return args.create_engine_config()


def _build(cfg: Any, model_config: Any = None) -> Any:
    # vLLM and torch: only run in the vLLM environment.
    import torch
    from vllm.config import set_current_vllm_config
    from vllm.distributed import parallel_state
    from vllm.model_executor.model_loader.utils import initialize_model

    with set_current_vllm_config(cfg):  # per config: the expert-parallel group exists only for MoE models
        if parallel_state.model_parallel_is_initialized():
            parallel_state.destroy_model_parallel()
        parallel_state.ensure_model_parallel_initialized(1, 1)
    with set_current_vllm_config(cfg), torch.device("meta"):
        return initialize_model(vllm_config=cfg, model_config=model_config or cfg.model_config)


def _windows(model: Any) -> tuple[list[Any], list[Any]]:
    # vLLM: only run in the vLLM environment.
    from vllm.model_executor.layers.attention.attention import Attention

    layers = [m for m in model.modules() if isinstance(m, Attention)]
    return [m.sliding_window for m in layers], [str(getattr(m, "attn_type", "")) for m in layers]


def _dtype(torch_dtype: Any) -> str:
    return str(torch_dtype).replace("torch.", "")


def _base(cfg: Any, model_config: Any) -> dict[str, Any]:
    archs = getattr(model_config.hf_config, "architectures", None) or [None]
    return {"architecture": model_config.architecture if hasattr(model_config, "architecture") else archs[0],
            "max_model_len": int(model_config.max_model_len), "dtype": _dtype(model_config.dtype),
            "max_len_why": "vLLM ModelConfig.max_model_len", "dtype_why": "vLLM ModelConfig.dtype",
            "head_size": _int_or_none(model_config.get_head_size),
            "num_kv_heads": _int_or_none(model_config.get_total_num_kv_heads)}


def _int_or_none(read: Any) -> int | None:
    try:
        return int(read())
    except Exception:  # a model vLLM sizes another way (no attention, encoder-decoder)
        return None


def target_view(model: str) -> list[dict[str, Any]]:
    cfg = _engine_config(model, None, None)
    view = _base(cfg, cfg.model_config)
    try:
        built = _build(cfg)
        view["windows"], _ = _windows(built)
        view["windows_why"] = "the built model's Attention layers (meta device)"
    except Exception as exc:  # a model vLLM cannot build on CPU: the config-level view only
        view["notes"] = [f"not built on meta: {type(exc).__name__}: {str(exc)[:200]}"]
    return [view]


def _runner_aux(cfg: Any, runner: str) -> tuple[list[int] | None, str]:
    # vLLM: the two runners' own lookups (only run in the vLLM environment).
    from vllm.v1.worker.gpu.spec_decode.eagle.eagle3_utils import get_eagle3_aux_layers_from_config
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    if runner == "V1":
        got = GPUModelRunner._get_eagle3_aux_layers_from_config(SimpleNamespace(speculative_config=cfg.speculative_config))
    else:
        got = get_eagle3_aux_layers_from_config(cfg.speculative_config)
    return (list(got) if got else None), f"{runner} runner's aux-layer lookup"


def drafter_views(model: str, draft: str, method: str) -> list[dict[str, Any]]:
    views = []
    try:
        cfg = _engine_config(model, draft, method)
    except Exception as exc:
        try:  # the target alone fails here too: not the pair's refusal, vLLM cannot take this target on CPU
            _engine_config(model, None, None)
        except Exception as target_exc:
            raise RuntimeError(f"the target does not configure here: {_words(target_exc)}") from None
        # vLLM refuses the pair at configuration: its words are the answer
        return [{"runner": r, "refusal": _words(exc)} for r in ("V1", "V2")]
    draft_config = cfg.speculative_config.draft_model_config
    target, built_draft = None, None
    try:  # the draft model once: its layers do not depend on the runner
        built = _build(cfg, draft_config)
        built_draft = {"windows": _windows(built)[0], "windows_why": "the built draft model's Attention layers (meta device)"}
    except Exception as exc:  # the draft model's own refusal, at build
        built_draft = {"refusal": _words(exc)}
    for runner in ("V1", "V2"):
        view: dict[str, Any] = {"runner": runner, "architecture": draft_config.architecture,
                                "dtype": _dtype(draft_config.dtype)}
        aux, why = _runner_aux(cfg, runner)
        if aux is None:
            if target is None:
                target = _build(cfg)
            aux, why = list(target.get_eagle3_default_aux_hidden_state_layers()), "the target model's default aux ids"
        view["layers_read"], view["layers_why"] = [i - 1 for i in aux], why
        n = cfg.model_config.hf_text_config.num_hidden_layers
        view["notes"] = ["prenorm"] if n in aux else []
        refusal = _v1_refusal(cfg) if runner == "V1" else None
        view.update({"refusal": refusal} if refusal else built_draft)
        views.append(view)
    return views


def _v1_refusal(cfg: Any) -> str | None:
    try:
        unsupported = cfg._get_v1_model_runner_unsupported_features()
    except Exception:  # not in this vLLM version
        return None
    return f"Model Runner V1 does not support: {', '.join(unsupported)}" if unsupported else None


@contextmanager
def launch_environment(env: dict[str, str]) -> Iterator[None]:
    """The launch's variables set in ``os.environ`` for the block, then each put back as it was (unset
    again where it was unset). Engines read their variables when asked, so this is enough; the SGLang
    worker uses it too (it imports this sibling)."""
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "tiktoken.model")


def _checker_lacks(exc: BaseException, model: Any) -> str | None:
    """Why a failure is the checker's lack, not the engine's refusal of the launch: the engine read a file
    the checked repo does not hold here (a tokenizer, under --reasoning-parser or --tool-call-parser; a file
    of a gated or absent Hub repo). None where it is the engine's own refusal."""
    text = str(exc)
    folder = model if isinstance(model, str) and os.path.isdir(model) else None
    if "tokenizer" in text.lower() and folder is not None and not any(
            os.path.isfile(os.path.join(folder, name)) for name in TOKENIZER_FILES):
        return (f"vLLM read the tokenizer, which the model folder here lacks ({_words(exc)}): the deployment's "
                "own copy of the model has it, so this is not vLLM's refusal of the launch")
    if isinstance(exc, (FileNotFoundError, PermissionError)) or any(sign in text for sign in (
            "does not appear to have a file named", "gated repo", "Cannot access gated repo", "401 Client Error")):
        return f"vLLM could not read a file of the model here ({_words(exc)}), so it could not judge the launch"
    return None


def _longest(args: Any, default: int, served: int) -> int:
    """The longest max_model_len vLLM takes for this model without VLLM_ALLOW_LONG_MAX_MODEL_LEN: its
    default where the launch serves no more; else whether vLLM itself takes the served length (a LongRoPE
    model serves its original length by default and takes up to its trained one)."""
    if served <= default:
        return default
    from vllm.engine.arg_utils import EngineArgs  # vLLM: only in the engine's own environment

    with launch_environment({"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "0"}):
        try:
            EngineArgs(model=args.model, revision=args.revision, hf_overrides=args.hf_overrides, tokenizer=args.model,
                       skip_tokenizer_init=True, trust_remote_code=args.trust_remote_code,
                       max_model_len=served).create_model_config()
        except Exception:  # vLLM's own refusal of the length: past what it derives
            return default
    return served


def _words(exc: BaseException) -> str:
    """The engine's own sentence: for pydantic's wrapper, the "Value error, ..." line it wraps."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    for line in lines:
        if line.startswith(("Value error, ", "Assertion failed, ")):
            return line.split(", ", 1)[1].split(" [type=")[0][:300]
    return (lines[0] if lines else type(exc).__name__)[:300]


MEMORY_EXIT = 86  # an allocation failed at the memory bound (check/engines/real.py reads it)


def _limit_memory() -> None:
    """The caller's memory bound (``DRAFTGUARD_PROBE_MEMORY`` bytes) on top of the address space that
    importing vLLM and torch took: set once, soft and hard, before any config is read."""
    extra = int(os.environ.get("DRAFTGUARD_PROBE_MEMORY") or 0)
    if extra > 0:
        import resource  # stdlib; only a bounded worker needs it

        with open("/proc/self/statm") as statm:
            mapped = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        resource.setrlimit(resource.RLIMIT_AS, (mapped + extra, mapped + extra))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _limit_cpu() -> None:
    """The caller's CPU bound for the next request (``DRAFTGUARD_PROBE_CPU_SECONDS``): SIGXCPU once the
    worker has used that many more seconds."""
    seconds = float(os.environ.get("DRAFTGUARD_PROBE_CPU_SECONDS") or 0)
    if seconds > 0:
        import math  # stdlib; only a bounded worker needs it
        import resource  # stdlib; only a bounded worker needs it

        used = resource.getrusage(resource.RUSAGE_SELF)
        soft = math.ceil(used.ru_utime + used.ru_stime + seconds)
        resource.setrlimit(resource.RLIMIT_CPU, (soft, resource.RLIM_INFINITY))


def launch_view(argv: list[str], env: dict[str, str]) -> dict[str, Any]:
    """One ``vllm serve`` line as vLLM itself reads it: its own parser (``ServeSubcommand`` on a
    ``FlexibleArgumentParser``), ``EngineArgs.from_cli_args`` and ``create_engine_config()``, under
    the launch's environment (vLLM reads its variables when asked, so setting them here is enough).
    Its refusal, in its own words, or what it would serve: target and drafter together."""
    # vLLM: the environment's own CLI (only run in the vLLM environment).
    from vllm.engine.arg_utils import EngineArgs
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    class Parser(FlexibleArgumentParser):
        def error(self, message: str) -> Any:  # argparse would print usage and exit
            raise ValueError(f"vllm serve: error: {message}")

    parser = Parser(prog="vllm")
    ServeSubcommand().subparser_init(parser.add_subparsers(dest="subparser"))
    view: dict[str, Any] = {"tier": "engine"}
    args = None  # what parse_args made of the line, where it got that far
    with launch_environment(env):
        try:
            args = parser.parse_args(["serve", *argv])
            if getattr(args, "model_tag", None):  # ServeSubcommand.cmd: the positional model wins
                args.model = args.model_tag
            cfg = EngineArgs.from_cli_args(args).create_engine_config()
        except MemoryError:  # the memory bound, not the engine's refusal: main() names it
            raise
        except Exception as exc:
            if (lacking := _checker_lacks(exc, getattr(args, "model", None))) is not None:
                return {"error": lacking}  # not the engine's refusal: the light tier answers, and says why
            return {**view, "refusal": _words(exc), "refusal_where": type(exc).__name__}
        model = cfg.model_config
        view.update(architecture=model.architecture, max_model_len=int(model.max_model_len),
                    dtype=_dtype(model.dtype), runner="V2" if cfg.use_v2_model_runner else "V1")
        derived = EngineArgs(model=args.model, revision=args.revision, hf_overrides=args.hf_overrides,
                             tokenizer=args.model, skip_tokenizer_init=True,
                             trust_remote_code=args.trust_remote_code).create_model_config()
        view["derived_max_len"] = _longest(args, int(derived.max_model_len), int(model.max_model_len))
        spec = cfg.speculative_config
        if spec is not None:
            view.update(method=spec.method, num_speculative_tokens=spec.num_speculative_tokens)
            draft = spec.draft_model_config
            if draft is not None and spec.method in ("eagle", "eagle3", "dflash"):
                view.update(draft_architecture=draft.architecture, draft_max_model_len=int(draft.max_model_len))
                refusal = _v1_refusal(cfg) if view["runner"] == "V1" else None
                if refusal:
                    return {**view, "refusal": refusal, "refusal_where": "VllmConfig"}
                try:  # the draft model's own refusal comes when it is built (meta device, no weights)
                    _build(cfg, draft)
                except MemoryError:
                    raise
                except Exception as exc:
                    return {**view, "refusal": _words(exc), "refusal_where": "the draft model's build"}
                aux, _ = _runner_aux(cfg, view["runner"])
                if aux is None:
                    aux = list(_build(cfg).get_eagle3_default_aux_hidden_state_layers())
                view["layers_read"] = [i - 1 for i in aux]
        return view


def main() -> None:
    # The protocol keeps the real stdout; anything vLLM or transformers print goes to stderr, so a
    # stray line can never be read as an answer.
    proto = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    torch, vllm = _setup()
    version = vllm.__version__
    from importlib.metadata import version as dist_version  # stdlib; only the ready line needs it

    transformers = dist_version("transformers")
    _limit_memory()
    print(json.dumps({"ready": True, "vllm": version, "transformers": transformers}), file=proto, flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        _limit_cpu()
        try:
            if "launch" in request:
                views = launch_view(request["launch"], request.get("env") or {})
            elif request.get("draft"):
                views = drafter_views(request["model"], request["draft"], request.get("method") or "dflash")
            else:
                views = target_view(request["model"])
            answer: Any = views
        except MemoryError:
            os._exit(MEMORY_EXIT)  # allocates nothing; the caller names the bound from the status
        except Exception as exc:
            answer = {"error": _words(exc), "trace": traceback.format_exc()[-1500:]}
        print(json.dumps({"id": request.get("id"), "answer": answer}, default=str), file=proto, flush=True)


if __name__ == "__main__":
    main()
