"""The repo rules that set config.json against the checkpoint's tensor names: quantization
(DG400-DG403), MTP layers (DG404) and tied embeddings (DG405, DG406). Names and shapes only, from
the index or the headers (``files.RepoFiles.tensors``); a rule that needs the names is silent when
they cannot be read.

In: the raw config.json (dict), the values its class resolved, ``RepoFiles``, and the ``emit``
callback of ``check_repo`` (rule, key, raw, resolved, message, file=None, line_key=None).
Out: findings, through ``emit``.
"""

from __future__ import annotations

import fnmatch
import re
from typing import Any, Callable

from draftguard.check.findings import ABSENT, is_int
from draftguard.check.repo.files import RepoFiles, TensorNames

Emit = Callable[..., None]
IGNORE_KEYS = ("ignore", "modules_to_not_convert", "exclude_modules", "ignored_layers")
MTP_KEYS = ("num_nextn_predict_layers", "mtp_num_hidden_layers", "num_mtp_layers", "num_mtp_modules")
# As check/drafter/detect.py's: MiMo-V2-Flash's and LongCat-Flash's configs name no MTP key, vLLM 0.32 builds
# 1 layer by class.
MTP_BY_ARCHITECTURE = {"MiMoV2FlashForCausalLM": 1, "MiMoV2ForCausalLM": 1, "MiMoV2OmniForCausalLM": 1,
                       "LongcatFlashForCausalLM": 1}
_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")
# The tensors that hold a quantized weight's scales, by the weight tensor's own suffix.
_SCALES = {
    "weight_packed": ("weight_scale",),  # compressed-tensors (int4/nvfp4 packed)
    "qweight": ("scales",),  # GPTQ / AWQ
}
# Modules no quantization scheme stores quantized: norms, embeddings, MoE router gates and the
# small non-linear parameters of hybrid layers. A tensor of these with no scales is as it should be.
_NEVER_QUANTIZED = re.compile(r"norm|^ln(?:_|\d|$)|embed|^gate$|^router$|^shared_expert_gate$|conv1d|^A_log$|^dt_bias$",
                              re.I)
# Names that mark a tensor as an MTP module's: DeepSeek/GLM put the MTP layers after the decoder
# (layers.{num_hidden_layers}...), Qwen3.5 and MiMo under an `mtp` prefix, ERNIE-4.5 as `model.mtp_block.0`,
# `model.mtp_emb_norm.0`, `model.mtp_hidden_norm.0`, `model.mtp_linear_proj.0`.
_MTP_SEGMENT = re.compile(r"(?:^|\.)(?:mtp|mtp_layers|nextn|mtp_(?:block|emb_norm|hidden_norm|linear_proj))(?:\.|$)")


def text_node(raw: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The node that describes the language model, and its key prefix: text_config where there is
    one, else the root."""
    text = raw.get("text_config")
    return (text, "text_config.") if isinstance(text, dict) else (raw, "")


def mtp_declared(raw: dict[str, Any]) -> tuple[str, int] | None:
    """The key that declares MTP layers and how many, when more than none; ``"architectures"`` for a class
    whose engine builds them whatever the file states (MiMo-V2-Flash: 1)."""
    node, prefix = text_node(raw)
    for where, at in ((node, prefix), (raw, "")):
        for key in MTP_KEYS:
            value = where.get(key)
            if is_int(value) and value > 0:
                return at + key, value
    archs = raw.get("architectures")
    if isinstance(archs, list) and archs and archs[0] in MTP_BY_ARCHITECTURE:
        if archs[0] == "LongcatFlashForCausalLM" and "num_nextn_predict_layers" in node:
            return None  # vLLM reads the key (1 only where absent): a stated 0 builds none, as detect.py reads it
        return "architectures", MTP_BY_ARCHITECTURE[archs[0]]
    return None


def mtp_tensors(names: frozenset[str], layers: Any, count: int) -> set[str]:
    """The tensors of the MTP modules: under an `mtp` prefix, or in the layers past the decoder's. An
    embedding table alone under the prefix (dots3's `model.mtp.embed_tokens`, beside its layer at
    `model.layers.{N}`) is no MTP layer: vLLM refuses a checkpoint that keeps only it."""
    found = {n for n in names if _MTP_SEGMENT.search(n) and ".embed_tokens." not in n}
    if is_int(layers):
        for name in names:
            match = _LAYER.search(name)
            if match and layers <= int(match.group(1)) < layers + count:
                found.add(name)
    return found


# --- quantization ------------------------------------------------------------------------------------


def _ignore_list(quant: dict[str, Any]) -> tuple[str, list[str]] | None:
    for key in IGNORE_KEYS:
        value = quant.get(key)
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return key, value
    return None


def never_quantized(module: str) -> bool:
    """Whether a module is one that no scheme quantizes (a norm, an embedding, a router gate).

    Example::

        >>> never_quantized("mtp.pre_fc_norm_embedding"), never_quantized("mtp.fc")
        (True, False)
    """
    return bool(_NEVER_QUANTIZED.search(module.rpartition(".")[2]))


def _matches(entry: str, modules: set[str], *, substring: bool = False) -> bool:
    """Whether an ignore entry names any module: a `re:` pattern (compressed-tensors, matched from
    the start of the name as compressed-tensors and vLLM match it), a glob (ModelOpt: ``*lm_head*``),
    or a dotted module name, found as a whole path or as its tail. ``substring``: AWQ's and GPTQ's
    ``modules_to_not_convert``, which vLLM and transformers match as a substring of the layer's name."""
    if substring and not entry.startswith("re:") and any(entry in m for m in modules):
        return True
    if entry.startswith("re:"):
        try:
            pattern = re.compile(entry[3:])
        except re.error:
            return True  # not ours to judge
        return any(pattern.match(m) for m in modules)
    if any(ch in entry for ch in "*?["):
        return any(fnmatch.fnmatchcase(m, entry) for m in modules)
    return any(m == entry or m.endswith("." + entry) or m.startswith(entry + ".") or f".{entry}." in f".{m}."
               for m in modules)


def _modules(names: frozenset[str]) -> set[str]:
    """Every module path the tensor names hold (each name's parents)."""
    found: set[str] = set()
    for name in names:
        parts = name.split(".")
        for end in range(1, len(parts)):
            found.add(".".join(parts[:end]))
    return found


# safetensors dtypes a weight is stored in only when it is quantized (FP8, FP4 and integer codes).
QUANTIZED_DTYPES = frozenset({"F8_E4M3", "F8_E5M2", "F8_E8M0", "F4", "F6_E2M3", "F6_E3M2", "I8", "U8", "I4", "U4"})
_SCALE_LEAVES = ("weight_scale", "weight_scale_inv", "scales", "weight_scale_2")


def _quantized(tensors: TensorNames) -> set[str]:
    """The modules whose weights are stored quantized, as their tensors show: a packed weight or a
    scale tensor beside it, or (where a header gave dtypes) a weight stored in an FP8, FP4 or
    integer dtype."""
    found = set()
    for name in tensors.names:
        module, _, leaf = name.rpartition(".")
        if leaf in _SCALES or leaf in _SCALE_LEAVES:
            found.add(module)
    for name, dtype in (tensors.dtypes or {}).items():
        module, _, leaf = name.rpartition(".")
        if leaf == "weight" and dtype in QUANTIZED_DTYPES and not never_quantized(module):
            found.add(module)
    return found


# Files beside config.json that engines read a quantization scheme from (vLLM: GPTQ's
# quantize_config.json, ModelOpt's hf_quant_config.json).
QUANT_FILES = ("quantize_config.json", "quant_config.json", "hf_quant_config.json")


def quantization(raw: dict[str, Any], files: RepoFiles, emit: Emit) -> None:
    quant = raw.get("quantization_config")
    if not isinstance(quant, dict):
        text, _ = text_node(raw)
        if not isinstance(text.get("quantization_config"), dict):
            _config_missing(files, emit)
        return
    _group_sizes(raw, quant, emit)
    tensors = files.tensors()
    if tensors is None:
        return
    _ignore_entries(quant, tensors, emit)
    _mtp_left_out(raw, quant, tensors, emit)
    _scales_missing(tensors, emit)


def quantization_evidence(tensors: TensorNames) -> list[str]:
    """The tensors that show a checkpoint is stored quantized: packed weights and their scales
    (``weight_packed``, ``qweight``, ``weight_scale_inv``, ``weight_scale``, ``scales``), or a weight
    whose header dtype is FP8, FP4 or an integer code. Norms, embeddings and router gates are left out."""
    shown = []
    for name in sorted(tensors.names):
        module, _, leaf = name.rpartition(".")
        if leaf in _SCALES or leaf in _SCALE_LEAVES and not never_quantized(module):
            shown.append(name)
    for name, dtype in sorted((tensors.dtypes or {}).items()):
        module, _, leaf = name.rpartition(".")
        if leaf == "weight" and dtype in QUANTIZED_DTYPES and not never_quantized(module):
            shown.append(f"{name} ({dtype})")
    return shown


def _config_missing(files: RepoFiles, emit: Emit) -> None:
    """DG410: the tensors are stored quantized and nothing says how: no quantization_config, no
    quantization file an engine reads. Every reader builds full-precision layers."""
    tensors = files.tensors()
    if tensors is None or any(files.raw(name) is not None for name in QUANT_FILES):
        return
    evidence = quantization_evidence(tensors)
    if not evidence:
        return
    emit("DG410", "quantization_config", ABSENT, None,
         f"{tensors.file} stores quantized weights ({', '.join(f'`{e}`' for e in evidence[:3])}"
         f"{f' and {len(evidence) - 3} more' if len(evidence) > 3 else ''}), but config.json has no "
         "`quantization_config` and the repo no quantization file. Every reader then builds full-precision "
         "layers: transformers loads the FP8 or integer codes as if they were bf16 values and drops the "
         "scales as unexpected keys (the model serves garbage), vLLM and SGLang find no parameter for the "
         "scales and refuse the checkpoint. A DeepSeek-V3 MTP layer exported with its FP8 `weight_scale_inv` "
         "tensors and without the config's quantization_config is this case. Fix: copy the "
         "`quantization_config` the checkpoint was quantized with into config.json (DeepSeek-V3: "
         "{\"quant_method\": \"fp8\", \"fmt\": \"e4m3\", \"activation_scheme\": \"dynamic\", "
         "\"weight_block_size\": [128, 128]}), or export the weights dequantized.")


def _group_sizes(raw: dict[str, Any], quant: dict[str, Any], emit: Emit) -> None:
    """DG402: a group (or block) size that does not divide the in-features of the layers it quantizes."""
    node, prefix = text_node(raw)
    sizes: list[tuple[str, int]] = []

    def walk(value: Any, path: str) -> None:
        if isinstance(value, dict):
            for key, child in value.items():
                where = f"{path}.{key}"
                if key == "group_size" and is_int(child) and child > 0:
                    sizes.append((where, child))
                elif key == "weight_block_size" and isinstance(child, list) and len(child) == 2 \
                        and all(is_int(c) and c > 0 for c in child):
                    sizes.append((where, child[1]))  # [out, in]: the in-features block
                elif key != "ignore":
                    walk(child, where)

    walk(quant, "quantization_config")
    dims = [(prefix + k, node.get(k)) for k in ("hidden_size", "intermediate_size", "moe_intermediate_size",
                                                "shared_expert_intermediate_size")]
    for where, size in sizes[:8]:
        for key, dim in dims:
            if is_int(dim) and dim > 0 and dim % size:
                emit("DG402", where, size, dim,
                     f"`{where}` is {size}, which does not divide `{key}` ({dim}), the in-features of the layers "
                     f"it quantizes: {dim} = {dim // size} x {size} + {dim % size}. Engines refuse the checkpoint "
                     "(vLLM: the input size is not divisible by the group size) or run the last group with "
                     "the wrong scales (vllm-project/compressed-tensors#712, vllm-project/llm-compressor#1983). "
                     f"Fix: quantize again with a group size that divides {dim} (for example "
                     f"{_divisor(dim, size)}), or leave these layers out of the quantization.")
                return


def _divisor(dim: int, size: int) -> int:
    for candidate in (size // 2, size // 4, 64, 32, 16):
        if candidate > 0 and dim % candidate == 0:
            return candidate
    return 1


def _ignore_entries(quant: dict[str, Any], tensors: TensorNames, emit: Emit) -> None:
    """DG400: entries of the ignore list that name no module of the checkpoint: the module meant is
    then quantized by the engine, with no scales to load."""
    found = _ignore_list(quant)
    if found is None:
        return
    key, entries = found
    modules = _modules(tensors.names)
    substring = _substring_scheme(quant)
    unmatched = [e for e in entries if not _matches(e, modules, substring=substring)]
    if not unmatched or len(unmatched) == len(entries) and len(entries) > 3:
        return  # every entry unmatched: another naming scheme (a GGUF or a trimmed index), not a typo
    shown = ", ".join(f"`{e}`" for e in unmatched[:5]) + (f" and {len(unmatched) - 5} more" if len(unmatched) > 5 else "")
    emit("DG400", f"quantization_config.{key}", unmatched[:20], None,
         f"`quantization_config.{key}` names {shown}, which no tensor of {tensors.file} belongs to. An ignore "
         "list is matched against module names: an entry that matches nothing leaves the module it meant "
         "quantized in the engine's eyes, which then looks for scales that are not there or quantizes a "
         "layer that was meant to stay in full precision. Fix: write each entry as the module path the "
         "weights use (or remove the entries for modules the model does not have).")


def _substring_scheme(quant: dict[str, Any]) -> bool:
    return str(quant.get("quant_method", "")).lower() in ("awq", "gptq", "awq_marlin", "gptq_marlin", "auto-round")


def _mtp_left_out(raw: dict[str, Any], quant: dict[str, Any], tensors: TensorNames, emit: Emit) -> None:
    """DG401: the MTP layers stored one way and built the other. Stored unquantized while the rest is
    quantized and the ignore list does not name them: engines build them quantized and fail to load
    their weights. Stored quantized (``qweight``, ``weight_packed``) while the ignore list names them:
    engines build them in full precision, with no parameter for the packed weights. Either way the MTP
    head is dropped or drafts from weights it never loaded (sgl-project/sglang#35797: accept length 1.000)."""
    declared = mtp_declared(raw)
    if declared is None:
        return
    node, _ = text_node(raw)
    mtp = mtp_tensors(tensors.names, node.get("num_hidden_layers"), declared[1])
    if not mtp:
        return  # DG404 says the MTP weights are missing
    quantized = _quantized(tensors)
    mtp_modules = {n.rpartition(".")[0] for n in mtp}
    main_quantized = any(m not in mtp_modules for m in quantized)
    mtp_linears = {n.rpartition(".")[0] for n in mtp if n.endswith((".weight", ".weight_packed", ".qweight"))
                   and any(p in n for p in ("proj", "experts", "eh_proj", "fc"))}
    mtp_linears = {m for m in mtp_linears if not never_quantized(m)}
    found = _ignore_list(quant)
    entries = found[1] if found else []
    substring = _substring_scheme(quant)
    key = f"quantization_config.{found[0]}" if found else "quantization_config"

    def ignored(module: str) -> bool:
        return any(_matches(e, {module}, substring=substring) for e in entries)

    packed = sorted(m for m in mtp_linears if m in quantized and ignored(m))
    if packed:
        leaf = next((leaf for leaf in (*_SCALES, *_SCALE_LEAVES) if f"{packed[0]}.{leaf}" in tensors.names),
                    f"weight ({(tensors.dtypes or {}).get(packed[0] + '.weight')})")
        emit("DG401", key, packed[:10], None,
             f"`{key}` names the MTP module `{packed[0]}` ({declared[0]} = {declared[1]}), which {tensors.file} "
             f"stores quantized (`{packed[0]}.{leaf}`; {len(packed)} such module(s)). Engines build a module "
             "the ignore list names in full precision and look for its `.weight`: the packed weights have no "
             "parameter to load into, so the MTP head fails to load or drafts from weights it never loaded, and "
             "speculative decoding accepts nothing (sgl-project/sglang#35797, accept length 1.000). Fix: take "
             f"`{packed[0]}` out of the ignore list, or store the MTP layers unquantized.")
        return
    plain = sorted(m for m in mtp_linears if m not in quantized)
    if not main_quantized or not plain:
        return
    left_out = [m for m in plain if not ignored(m)]
    if not left_out:
        return
    emit("DG401", key, left_out[:10], None,
         f"The MTP layers ({declared[0]} = {declared[1]}) are stored unquantized in {tensors.file} "
         f"(`{left_out[0]}` has no scales) while the rest of the model is quantized, and `{key}` does not "
         f"name them ({len(left_out)} module(s)). Engines then build the MTP layers quantized, cannot load "
         "their weights, and drop the MTP head: speculative decoding accepts nothing (sgl-project/sglang#35797, "
         "accept length 1.000). Fix: add the MTP layers to the ignore list (for example "
         f"\"re:{_layer_pattern(left_out[0])}\").")


def _layer_pattern(module: str) -> str:
    match = _LAYER.search(module)
    if match:
        return re.escape(module[:match.end()]).replace(r"\.", ".") + ".*"
    return module.split(".")[0] + ".*"


def _scales_missing(tensors: TensorNames, emit: Emit) -> None:
    """DG403: a packed quantized weight with no scale tensor beside it (vllm-project/vllm#48508)."""
    missing = []
    for name in sorted(tensors.names):
        module, _, leaf = name.rpartition(".")
        scales = _SCALES.get(leaf)
        if scales and not any(f"{module}.{s}" in tensors.names for s in scales):
            missing.append(name)
    if missing:
        emit("DG403", "quantization_config", missing[:10], None,
             f"`{missing[0]}` in {tensors.file} is a packed quantized weight with no "
             f"`{_SCALES[missing[0].rpartition('.')[2]][0]}` beside it ({len(missing)} such tensor(s)). Without "
             "its scales the weight cannot be dequantized: engines fail to load it or run it with scales of 1, "
             "and the model serves garbage (vllm-project/vllm#48508, vllm-project/compressed-tensors#712). Fix: "
             "save the checkpoint again with every scale tensor, and commit every shard the index names.",
             file=tensors.file)


# --- MTP weights ---------------------------------------------------------------------------------------


def mtp_weights(raw: dict[str, Any], files: RepoFiles, emit: Emit) -> None:
    """DG404: MTP layers declared, none of their tensors in the checkpoint (vllm-project/vllm#35548)."""
    declared = mtp_declared(raw)
    if declared is None:
        return
    tensors = files.tensors()
    if tensors is None:
        return
    node, _ = text_node(raw)
    if mtp_tensors(tensors.names, node.get("num_hidden_layers"), declared[1]):
        return
    key, count = declared
    by_class = key == "architectures"  # MiMo-V2-Flash: the engines build the layer by its class
    said = (f"{raw['architectures'][0]} has {count} MTP layer(s) (vLLM builds them by architecture)" if by_class
            else f"`{key}` declares {count} MTP layer(s)")
    fix = ("serve it without `method mtp`" if by_class
           else f"set `{key.rpartition('.')[2]}` to 0 if the model is meant to be served without them")
    emit("DG404", key, count, 0,
         f"{said}, but {tensors.file} holds no tensor of them (none under an "
         f"`mtp` prefix, none in layers {node.get('num_hidden_layers')}+). Speculative decoding with the "
         "model's own MTP head (vLLM and SGLang `--speculative-config method mtp`) then fails to load it or "
         "drafts from weights that were never trained (vllm-project/vllm#35548: an NVFP4 checkpoint that "
         "shipped without them). Fix: ship the MTP layers' weights with the checkpoint, or "
         f"{fix}.")


# --- tied embeddings -------------------------------------------------------------------------------------


def tied_embeddings(raw: dict[str, Any], values: dict[str, Any], files: RepoFiles, emit: Emit) -> None:
    """DG405: the root's tie_word_embeddings against text_config's; DG406: an untied head with no
    lm_head tensor in the checkpoint."""
    text = raw.get("text_config")
    archs = raw.get("architectures")
    causal = isinstance(archs, list) and any(isinstance(a, str) and a.endswith("ForCausalLM") for a in archs)
    composite = isinstance(text, dict) and isinstance(text.get("tie_word_embeddings"), bool)
    if not composite and not (causal and text is None and values.get("tie_word_embeddings") is False):
        return  # nothing to set against the checkpoint: its names are not read
    tensors = files.tensors()
    has_head = None if tensors is None else any(n.endswith("lm_head.weight") for n in tensors.names)
    if composite:
        inner = text["tie_word_embeddings"]
        stated = raw.get("tie_word_embeddings", ABSENT)
        outer = stated if isinstance(stated, bool) else values.get("tie_word_embeddings")
        # A root that leaves it to the class is read only by some readers (transformers 4.52 ties by
        # text_config, an engine by the root): where the weights cannot say which head is trained,
        # that is no finding. A root that states the other value contradicts the file itself.
        harmful = (stated is not ABSENT or (outer is False and has_head is False)
                   or (outer is True and has_head is True))
        if isinstance(outer, bool) and outer != inner and harmful:
            how = "states" if stated is not ABSENT else "leaves it to the class, which gives"
            # Both ways serve garbage: a tied reader ignores a trained lm_head.weight, an untied one with
            # none initialises its head at random. Only an untied root over a checkpoint that holds
            # lm_head.weight is likely fine (the head was saved), so that is a warning.
            benign = outer is False and has_head is True
            severity_note = (" (the checkpoint holds an lm_head.weight, so the untied reader has a head)" if benign
                             else " (the checkpoint holds an lm_head.weight that a tied reader ignores)"
                             if has_head else "")
            emit("DG405", "tie_word_embeddings", stated, inner,
                 f"`text_config.tie_word_embeddings` is {str(inner).lower()}, but the root {how} "
                 f"{str(outer).lower()}. Which one a reader follows differs: transformers before PR #43429 and "
                 "engines that read the root (vllm-project/vllm PR #53020) "
                 f"{'tie' if outer else 'untie'} the head, the language model's own config "
                 f"{'ties' if inner else 'unties'} it. A head left untied with no trained lm_head weights is "
                 "initialised at random, and a head tied where it was trained untied ignores its trained weights: "
                 "either way the model serves gibberish (a Ministral 3 checkpoint did)"
                 f"{severity_note}. Fix: state \"tie_word_embeddings\": {str(inner).lower()} at the root too.",
                 line_key="text_config.tie_word_embeddings", warning=benign)
            return
    if tensors is None or has_head or text is not None:
        return
    embeds = any(n.endswith("embed_tokens.weight") for n in tensors.names)
    if causal and embeds and values.get("tie_word_embeddings") is False:
        stated = raw.get("tie_word_embeddings", ABSENT)
        said = "states false" if stated is False else "leaves it to the class, which unties it"
        emit("DG406", "tie_word_embeddings", stated, False,
             f"The head is untied (`tie_word_embeddings`: config.json {said}), but {tensors.file} holds no "
             "lm_head.weight: the output layer is initialised at random and the model serves gibberish "
             "(transformers warns once that the weight is newly initialised; engines say nothing). Fix: "
             "set \"tie_word_embeddings\": true if the head shares the embeddings, or ship lm_head.weight.")
