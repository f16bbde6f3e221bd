"""The real tier's worker for SGLang: runs *inside an interpreter that has torch and transformers* with
SGLang 0.5.23's wheel on a path of its own (installed ``--no-deps``: its GPU kernels do not install on
CPU), never imported by draftguard. It answers what SGLang's own ``ModelConfig`` (config registry,
``_derive_context_length``, ``_get_and_verify_dtype``, hybrid-SWA detection) makes of each config.
The modules SGLang imports only for GPU kernels, multimodal processors and grammars are stand-ins;
per-layer windows come from model files that need those kernels, so this tier does not report them.

In: argv[1], the folder holding the sglang package; one JSON request per stdin line: ``{"id": n,
"model": folder}``, or a launch: ``{"id": n, "launch": [the arguments after the launcher], "env": {...}}``
(SGLang's own ``ServerArgs.add_cli_args`` parser, ``ServerArgs.from_cli_args`` and ``ModelConfig``
for the target and the draft, under that environment).
Out: one JSON line per request on stdout: ``{"id": n, "answer": [view fields] | {"error": ...}}``, after
a ready line. Imports nothing of draftguard but its sibling ``vllm_probe`` (the torchvision stand-in).
"""

from __future__ import annotations

import abc
import importlib.abc
import importlib.machinery
import json
import os
import sys
import types
from typing import Any

# Imported only for GPU kernels, multimodal processors, grammars and notebooks: never for a config.
STUBBED = ("sglang.srt.multimodal", "sglang.kernels", "sgl_kernel", "tvm_ffi", "xgrammar",
           "sglang.srt.function_call", "sglang.srt.constrained", "IPython")


class _Anything:
    """A stand-in value: callable (as a decorator factory it hands back what it decorates), any attribute."""

    def __init__(self, *args: Any, _pass: bool = False, **kwargs: Any):
        self._pass = _pass

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._pass and len(args) == 1 and callable(args[0]):
            return args[0]
        return _Anything(_pass=True)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything()

    def __bool__(self) -> bool:
        return False


class _StandInMeta(abc.ABCMeta):
    """Stand-in classes: usable as bases (beside ABCs), and as functions or decorator factories."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if cls.__dict__.get("_stand_in"):
            return _Anything(_pass=True)
        return super().__call__(*args, **kwargs)

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything()


class _StandInModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        value = _StandInMeta(name, (), {"_stand_in": True, "__module__": self.__name__})
        setattr(self, name, value)
        return value


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if any(name == s or name.startswith(s + ".") for s in STUBBED):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec: Any) -> Any:
        return _StandInModule(spec.name)

    def exec_module(self, module: Any) -> None:
        module.__path__ = []


def view(model_config_class: Any, folder: str) -> list[dict[str, Any]]:
    config = model_config_class(folder, trust_remote_code=False)
    archs = getattr(config.hf_config, "architectures", None) or [None]
    return [{"architecture": archs[0], "max_model_len": int(config.context_len),
             "dtype": str(config.dtype).replace("torch.", ""), "max_len_why": "SGLang ModelConfig.context_len",
             "dtype_why": "SGLang ModelConfig.dtype",
             "notes": ["hybrid-swa"] if getattr(config, "is_hybrid_swa", False) else []}]


def _parser(server_args: Any) -> Any:
    """SGLang's own launch parser. The choices it lists from stubbed modules (tool-call and reasoning
    parsers, KV hash modes) are not known here, so those options take any value."""
    import argparse  # stdlib; only launches build a parser

    module = sys.modules[server_args.__module__]
    for name in dir(module):
        if name.startswith("_") and (name.endswith("_choices") or name.startswith("_real_")) and callable(getattr(module, name)):
            setattr(module, name, lambda: [])

    class Parser(argparse.ArgumentParser):
        def error(self, message: str) -> Any:  # argparse would print usage and exit
            raise ValueError(f"sglang: error: {message}")

    parser = Parser(prog="sglang")
    server_args.add_cli_args(parser)
    for action in parser._actions:
        if action.choices is not None and list(action.choices) in ([], ["auto"]):
            action.choices = None
    return parser


def launch(server_args: Any, model_config_class: Any, argv: list[str], env: dict[str, str]) -> dict[str, Any]:
    """One SGLang launch as SGLang reads it: its refusal in its own words, or what it serves."""
    from vllm_probe import _words, launch_environment  # the sibling main() put on the path; draftguard never imports this file

    view: dict[str, Any] = {"tier": "engine"}
    with launch_environment(env):
        try:
            sa = server_args.from_cli_args(_parser(server_args).parse_args(argv))
            config = model_config_class.from_server_args(sa)
        except Exception as exc:
            return {**view, "refusal": _words(exc), "refusal_where": type(exc).__name__}
        archs = getattr(config.hf_config, "architectures", None) or [None]
        view.update(architecture=archs[0], max_model_len=int(config.context_len),
                    dtype=str(config.dtype).replace("torch.", ""),
                    method=sa.speculative_algorithm.lower() if sa.speculative_algorithm else None)
        sa.context_length = None
        view["derived_max_len"] = int(model_config_class.from_server_args(sa).context_len)
        if sa.speculative_draft_model_path:
            draft = model_config_class.from_server_args(sa, model_path=sa.speculative_draft_model_path, is_draft_model=True)
            view.update(draft_architecture=(getattr(draft.hf_config, "architectures", None) or [None])[0],
                        draft_max_model_len=int(draft.context_len))
        return view


def main() -> None:
    proto = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    sys.path.insert(0, sys.argv[1])
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    # Siblings and SGLang: this file only ever runs as the SGLang worker (draftguard never imports it).
    import vllm_probe

    try:
        import torchvision  # noqa: F401 (a working torchvision is used as it is)
    except Exception:  # missing or broken: the stand-in
        sys.modules.pop("torchvision", None)
        sys.meta_path.insert(0, vllm_probe._StubFinder())
    sys.meta_path.insert(0, _Finder())
    from importlib.metadata import version as dist_version  # stdlib; only the ready line needs it

    from sglang.srt.configs.model_config import ModelConfig  # SGLang: on the path given in argv[1] only
    from sglang.srt.server_args import ServerArgs  # SGLang: on the path given in argv[1] only

    ready = {"ready": True, "sglang": dist_version("sglang"), "transformers": dist_version("transformers")}
    print(json.dumps(ready), file=proto, flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        try:
            if "launch" in request:
                answer: Any = launch(ServerArgs, ModelConfig, request["launch"], request.get("env") or {})
            else:
                answer = view(ModelConfig, request["model"])
        except Exception as exc:  # SGLang cannot take this config here: the light tier answers
            answer = {"error": vllm_probe._words(exc)}
        print(json.dumps({"id": request.get("id"), "answer": answer}, default=str), file=proto, flush=True)


if __name__ == "__main__":
    main()
