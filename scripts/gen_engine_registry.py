"""Write the engines' model registries into draftguard/check/engines/data/, read from their own code.

The light tier says an engine will not serve a config when its architecture is in neither the engine
version's registry nor what that engine's Transformers backend can build (``check.engines.registry``).
These lists are generated, never written by hand:

    # vLLM: run under an interpreter with that vLLM and the transformers it installs
    PYTHONPATH=$PWD .venv-vllm/bin/python scripts/gen_engine_registry.py vllm
    # SGLang: its models folder is read as source (its model modules need GPU kernels to import);
    # the transformers facts come from the interpreter running this (SGLang 0.5.23 runs transformers 5.x)
    PYTHONPATH=$PWD .venv-vllm/bin/python scripts/gen_engine_registry.py sglang .venv-sglang/site
    # vLLM from a wheel's source alone (a release with no CPU build), the transformers it installs on the
    # path (vLLM 0.33.0 pins transformers<5.21.0: 5.20.2, installed --no-deps --target a folder):
    PYTHONPATH=/tmp/tf-5.20.2:$PWD .venv-vllm/bin/python scripts/gen_engine_registry.py vllm-source /tmp/vllm-0.33.0 0.33.0

Each file records the engine version, the transformers version the Transformers-backend facts were read
with, and the source paths. ``tests/test_engines_vllm.py`` checks the shipped files equal what the
installed engines say.
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "draftguard" / "check" / "engines" / "data"
# transformers exports that are never model classes (skipped only to import less)
SKIP = ("Config", "Tokenizer", "TokenizerFast", "Processor", "ProcessorFast", "FeatureExtractor", "Output",
        "Args", "Arguments", "Callback", "Pipeline", "Mixin", "Cache", "Layer", "Quantizer")


def transformers_classes() -> dict:
    """Every model class transformers exports, and the two flags the engines' Transformers backends
    read: ``_supports_attention_backend`` (vLLM and SGLang) and ``_can_set_attn_implementation()``
    (vLLM, which accepts either)."""
    import transformers

    classes, no_backend, cannot_set = [], [], []
    for name in sorted(dir(transformers)):
        if not name[:1].isupper() or name.endswith(SKIP):
            continue
        try:
            cls = getattr(transformers, name)
        except Exception:  # a class whose optional dependency is missing: not buildable here either
            continue
        if not (isinstance(cls, type) and issubclass(cls, transformers.PreTrainedModel)):
            continue
        classes.append(name)
        if not cls.is_backend_compatible():
            no_backend.append(name)
        try:
            can_set = cls._can_set_attn_implementation()
        except Exception:
            can_set = False
        # transformers caches the answer on the class, where subclasses would inherit it: each class
        # must be judged by its own module's source, as in a fresh process
        if "_can_set_attn_implementation_cached_value" in cls.__dict__:
            del cls._can_set_attn_implementation_cached_value
        if not can_set:
            cannot_set.append(name)
    return {"transformers": transformers.__version__, "transformers_classes": classes,
            "no_attention_backend": no_backend, "cannot_set_attn_implementation": cannot_set}


def vllm_from_installed() -> dict:
    """vLLM's registry from the installed package (its own dicts, not its source text)."""
    import vllm
    from vllm.model_executor.models import registry
    from vllm.transformers_utils import config as vllm_config

    return {"engine": "vllm", "version": vllm.__version__,
            "source": "vllm/model_executor/models/registry.py (_VLLM_MODELS, _PREVIOUSLY_SUPPORTED_MODELS, "
                      "_OOT_SUPPORTED_MODELS); vllm/config/model.py _SUFFIX_TO_DEFAULTS; "
                      "vllm/transformers_utils/config.py _CONFIG_REGISTRY",
            "architectures": sorted(registry._VLLM_MODELS),
            "transformers_backend_models": sorted(registry._TRANSFORMERS_BACKEND_MODELS),
            "previously_supported": dict(sorted(registry._PREVIOUSLY_SUPPORTED_MODELS.items())),
            "out_of_tree": dict(sorted(registry._OOT_SUPPORTED_MODELS.items())),
            "suffixes": [s for s, _ in _suffixes()],
            "config_model_types": sorted(vllm_config._CONFIG_REGISTRY),
            "float16_not_supported": dict(sorted(_float16().items())),
            **_config_types(), **transformers_classes()}


def _float16() -> dict:
    from vllm.config import model

    return dict(model._FLOAT16_NOT_SUPPORTED_MODELS)


def _suffixes() -> list:
    from vllm.config.model import iter_architecture_defaults

    return list(iter_architecture_defaults())


def _config_types() -> dict:
    from transformers import CONFIG_MAPPING

    return {"transformers_model_types": sorted(CONFIG_MAPPING.keys())}


def _dict_keys(tree: ast.Module, name: str) -> list[str]:
    """The string keys of a module-level dict literal ``name = {...}`` (``**other`` spreads skipped)."""
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        if isinstance(target, ast.Name) and target.id == name and isinstance(node.value, ast.Dict):
            return [k.value for k in node.value.keys if isinstance(k, ast.Constant)]
        if isinstance(target, ast.Name) and target.id == name and isinstance(node.value, ast.Call):
            # LazyConfigDict(model_type="Class", ..., **{"name-with-dash": "Class"})
            return [k.arg for k in node.value.keywords if k.arg] + [
                key.value for k in node.value.keywords if k.arg is None and isinstance(k.value, ast.Dict)
                for key in k.value.keys if isinstance(key, ast.Constant)]
    return []


def vllm_from_source(site: Path, version: str) -> dict:
    """vLLM's registry from a release's source (a wheel unpacked), where no build of it runs here."""
    tree = ast.parse((site / "vllm/model_executor/models/registry.py").read_text())
    groups = ("_TEXT_GENERATION_MODELS", "_EMBEDDING_MODELS", "_LATE_INTERACTION_MODELS", "_REWARD_MODELS",
              "_TOKEN_CLASSIFICATION_MODELS", "_SEQUENCE_CLASSIFICATION_MODELS", "_MULTIMODAL_MODELS",
              "_SPECULATIVE_DECODING_MODELS", "_TRANSFORMERS_SUPPORTED_MODELS", "_TRANSFORMERS_BACKEND_MODELS")
    archs = sorted({k for g in groups for k in _dict_keys(tree, g)})
    previous = {k: v.value for k, v in _dict_items(tree, "_PREVIOUSLY_SUPPORTED_MODELS")}
    oot = {k: v.value for k, v in _dict_items(tree, "_OOT_SUPPORTED_MODELS")}
    config_tree = ast.parse((site / "vllm/transformers_utils/config.py").read_text())
    model_tree = ast.parse((site / "vllm/config/model.py").read_text())
    float16 = {k: v.value for k, v in _dict_items(model_tree, "_FLOAT16_NOT_SUPPORTED_MODELS")}
    return {"engine": "vllm", "version": version,
            "source": f"the vllm=={version} wheel's vllm/model_executor/models/registry.py, read as source (no "
                      "CPU build of this release); vllm/transformers_utils/config.py _CONFIG_REGISTRY; "
                      "vllm/config/model.py _SUFFIX_TO_DEFAULTS, _FLOAT16_NOT_SUPPORTED_MODELS",
            "architectures": archs, "transformers_backend_models": sorted(_dict_keys(tree, "_TRANSFORMERS_BACKEND_MODELS")),
            "previously_supported": dict(sorted(previous.items())), "out_of_tree": dict(sorted(oot.items())),
            "suffixes": _suffixes_from_source(model_tree),
            "config_model_types": sorted(_dict_keys(config_tree, "_CONFIG_REGISTRY")),
            "float16_not_supported": dict(sorted(float16.items())),
            **_config_types(), **transformers_classes()}


def _suffixes_from_source(tree: ast.Module) -> list[str]:
    """``_SUFFIX_TO_DEFAULTS``' suffixes, in order (vllm/config/model.py)."""
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        if isinstance(target, ast.Name) and target.id == "_SUFFIX_TO_DEFAULTS" and isinstance(node.value, ast.List):
            return [e.elts[0].value for e in node.value.elts if isinstance(e, ast.Tuple)]
    return []


def _dict_items(tree: ast.Module, name: str) -> list:
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        if isinstance(target, ast.Name) and target.id == name and isinstance(node.value, ast.Dict):
            return [(k.value, v) for k, v in zip(node.value.keys, node.value.values)
                    if isinstance(k, ast.Constant) and isinstance(v, ast.Constant)]
    return []


def sglang_from_source(site: Path) -> dict:
    """SGLang's registry: every ``EntryClass`` of python/sglang/srt/models/*.py (registry.py
    import_model_classes keys each by the class's ``__name__``), read as source."""
    models = site / "sglang" / "srt" / "models"
    archs: set[str] = set()
    for path in sorted(models.glob("*.py")):
        tree = ast.parse(path.read_text())
        classes = {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
        aliases = {t.id: n.value.id for n in tree.body if isinstance(n, ast.Assign) and isinstance(n.value, ast.Name)
                   for t in n.targets if isinstance(t, ast.Name)}
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "EntryClass" for t in node.targets):
                values = node.value.elts if isinstance(node.value, (ast.List, ast.Tuple)) else [node.value]
                for value in values:
                    if isinstance(value, ast.Name):
                        name = value.id
                        while name not in classes and name in aliases:
                            name = aliases[name]
                        archs.add(name)
    import importlib.metadata as md

    version = next((d.version for d in md.distributions(path=[str(site)]) if d.metadata["Name"] == "sglang"), "?")
    return {"engine": "sglang", "version": version,
            "source": "python/sglang/srt/models/*.py EntryClass (registry.py import_model_classes), read as source; "
                      "unknown architectures fall back to TransformersForCausalLM (registry.py _normalize_archs), "
                      "which refuses a class with _supports_attention_backend False (models/transformers.py)",
            "architectures": sorted(archs), **transformers_classes()}


def write(data: dict) -> Path:
    DATA.mkdir(parents=True, exist_ok=True)
    path = DATA / f"{data['engine']}-{data['version']}.json"
    path.write_text(json.dumps(data, indent=0, sort_keys=True) + "\n")
    return path


def main(argv: list[str]) -> None:
    kind = argv[0] if argv else "vllm"
    if kind == "vllm":
        data = vllm_from_installed()
    elif kind == "vllm-source":
        data = vllm_from_source(Path(argv[1]), argv[2])
    elif kind == "sglang":
        data = sglang_from_source(Path(argv[1]))
    else:
        raise SystemExit(f"unknown engine {kind!r}: vllm, vllm-source or sglang")
    print(write(data))


if __name__ == "__main__":
    main(sys.argv[1:])
