"""Which MTP layout a target's checkpoint uses, and what is wrong with its MTP layer's tensors, read
from config.json and the safetensors headers only (no torch): ``draftguard accept --method mtp`` names
the cause ``mtp-weights`` from here whichever backend ran, vLLM's included.

A fault is an MTP tensor the checkpoint lacks (dropped at save: vllm-project/vllm#35548's accept length
1.000), one stored quantized (FP8, int8) where config.json declares no ``quantization_config``
(sgl-project/sglang#35797), or (DeepSeek-V3's layout) the layer's own copies of the shared tensors
(``embed_tokens``, ``shared_head.head``) differing from the target's ``model.embed_tokens`` and
``lm_head``. vLLM 0.32 refuses the first two at load (a parameter the checkpoint lacks, a scale it has
no parameter for); the reference runs them as an engine that loads them would (zeros, raw values), so
their τ is measured. The third vLLM runs: its proposer replaces the layer's copies with the target's
(``llm_base_proposer._maybe_share_embeddings`` / ``_maybe_share_lm_head``: "Detected MTP model"), as
the family shares them, so a layer trained against copies of its own drafts with embeddings and a
head it was not trained with; the reference shares them the same way. The copies are compared byte
for byte, read from the safetensors files without torch.

The layouts: MiMo's (``model.mtp_layers.{i}.*``), MiMo-V2-Flash's, -Pro's and the omni export's
(``model.mtp.layers.{i}.*``, its count by architecture), LongCat-Flash's (``model.mtp.layers.0.*``, ``model.mtp.norm``; 1 layer by architecture where the
config states no ``num_nextn_predict_layers``, as vLLM 0.32 reads it), DeepSeek-V3's, GLM-4.5's,
GLM-4.7-Flash's and Step-3.5/3.7's (``model.layers.{N}.*``; GLM-4.5V's exports:
``model.language_model.layers.{N}.*``), ERNIE-4.5's (``model.mtp_*.0.*``), Nemotron-H's
(``mtp.layers.{j}.*``, one per MTP sublayer) and Qwen3.5/3.6's, which Qwen3-Next and EXAONE-MoE share (``mtp.fc``,
``mtp.pre_fc_norm_{embedding,hidden}``, ``mtp.norm``, ``mtp.layers.{i}.*``), by the config's architecture
(Qwen3.5/3.6's multimodal exports' too, whose MTP key sits under ``text_config``).

The MTP layer count is read as the engines read it, through the target's config class
(``mtp_rewrite``): vLLM 0.32 takes its ``n_predict`` from the class's resolved (text) config, not from
the file. Two classes change it. Step3p7Config builds ``text_config`` from defaults when the file is
flat (the key at the top level), and Step3p7TextConfig pops ``num_nextn_predict_layers`` with a
default of 0 (transformers 5.24 configuration_step3p7.py:189): vLLM then builds ``Step3p5MTP`` with
``n_predict`` 0, nothing to draft with; the run is refused with the cause ``config-rewrite``.
DeepseekV3Config (and Glm4MoeConfig, BailingHybridConfig) give 1 MTP layer where the file states none
(``num_mtp_layers: int = 1``, configuration_deepseek_v3.py:116): vLLM's ``method: mtp`` builds
``DeepSeekMTPModel`` from ``model.layers.{N}.*`` all the same, so the reference runs that layer too
and a collapse is diagnosed ``config-rewrite``.

In: a local target folder.
Out: its ``MtpLayout`` (``mtp_layout``), the faults, one sentence each
naming the tensors (``mtp_faults``), the class's rewrite of the MTP layer count (``mtp_rewrite``), and
the diagnosis they make (``mtp_diagnosis``); bad input (exit 2) for a target without MTP layers, whose
class resolves them to none, or of a layout the reference does not build (``mtp_layouts.LAYOUTS``: MiMo's, MiMo-V2-Flash's,
DeepSeek-V3's, GLM-4.5's, GLM-4.7-Flash's, GLM-4.5V's, ERNIE-4.5's, Qwen3.5's, EXAONE-MoE's, EXAONE-4.5's,
LongCat-Flash's, Nemotron-H's, Step-3.5/3.7's).
"""

from __future__ import annotations

import copy
import json
import logging
import struct
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from draftguard.check.drafter.detect import MTP_KEYS, MTP_LAYOUT_MODEL_TYPES, MTP_REFERENCE_LAYOUTS
from draftguard.check.repo.checkpoint import mtp_declared, text_node
from draftguard.check.repo.files import read_header
from draftguard.errors import HeaderError
from draftguard.runner.mtp_coverage import refusal
from draftguard.runner.mtp_layouts import LAYOUTS, MtpLayout, layer_prefix
from draftguard.runner.result import CONFIG_REWRITE, MTP_WEIGHTS
from draftguard.snapshot import BadInput, key_lines, parse_json_object

FULL_PRECISION = ("F32", "F16", "BF16")


def read_config(folder: Path) -> dict[str, Any]:
    path = folder / "config.json"
    if not path.is_file():
        raise BadInput(f"{path}: no config.json in the target folder", file=str(path))
    return parse_json_object(path.read_bytes(), str(path))


def mtp_layout(raw: dict[str, Any], where: str) -> MtpLayout:
    """The layout of a target's MTP layers from its config.json (the architecture, else
    ``model_type``), or bad input naming what the reference builds.

    Example::

        >>> mtp_layout({"architectures": ["MiMoForCausalLM"], "model_type": "qwen2",
        ...             "num_nextn_predict_layers": 1}, "config.json").name
        'mimo'
        >>> mtp_layout({"architectures": ["Qwen3_5MoeForConditionalGeneration"], "model_type": "qwen3_5_moe",
        ...             "text_config": {"mtp_num_hidden_layers": 1}}, "config.json").name
        'qwen3_5'
    """
    rewrite = refuse_rewritten_to_none(raw, where)
    if mtp_declared(raw) is None and rewrite is None:
        raise BadInput(f"{where}: --method mtp needs a target that declares MTP layers ({', '.join(MTP_KEYS)}); "
                       "this config declares none", file=where)
    archs = raw.get("architectures") if isinstance(raw.get("architectures"), list) else []
    for arch in archs:  # the engines pick the model by its architecture; a MiMo may say model_type qwen2
        if arch in MTP_REFERENCE_LAYOUTS:
            return LAYOUTS[MTP_REFERENCE_LAYOUTS[arch]]
    model_type = str(raw.get("model_type"))
    layout = LAYOUTS.get(MTP_LAYOUT_MODEL_TYPES.get(model_type, model_type))
    if layout is None:
        raise BadInput(f"{where}: the reference builds MTP layers of the {', '.join(LAYOUTS)} layout "
                       f"({', '.join(MTP_REFERENCE_LAYOUTS)}); architectures {archs} and model_type "
                       f"{raw.get('model_type')!r} are not one of them{refusal(raw)}", file=where, key="architectures")
    return layout


def _headers(folder: Path) -> dict[str, tuple[str, Path]]:
    """Every tensor's dtype and file, from the safetensors headers (one file or the shards an index names)."""
    index = folder / "model.safetensors.index.json"
    files = (sorted(set(json.loads(index.read_text())["weight_map"].values())) if index.is_file()
             else ["model.safetensors"])
    out: dict[str, str] = {}
    for name in files:
        path = folder / name
        if not path.is_file():
            continue  # the loader names a missing shard
        try:
            out.update({k: (dtype, path) for k, (dtype, _shape) in read_header(path).items()})
        except HeaderError as exc:
            raise BadInput(f"{path}: {exc}", file=str(path)) from None
    return out


def mtp_faults(folder: str | Path) -> list[str]:
    """What is wrong with MTP layer 0's tensors, one sentence each; empty for a whole layer.

    Example::

        >>> mtp_faults("tests/fixtures/mtp-models/mimo")
        []
        >>> mtp_faults("tests/fixtures/mtp-models/mimo-mtp-dropped")[0][:60]
        'config.json declares 1 MTP layer(s) (`num_nextn_predict_laye'
    """
    folder = Path(folder)
    raw = read_config(folder)
    layout = mtp_layout(raw, f"{folder}/config.json")
    key, count = mtp_count(raw, str(folder / "config.json"))
    n = text_node(raw)[0].get("num_hidden_layers", 0)
    headers = _headers(folder)
    prefix = layer_prefix(layout, n, headers)
    dtypes = {k: v[0] for k, v in headers.items() if k.startswith(prefix)}
    faults = []
    roles = [f"{prefix}{name}.weight" for name in (layout.enorm, layout.hnorm, layout.proj, layout.final_norm,
                                                     layout.own_head) if name]
    lacking = [r for r in roles if r not in dtypes]
    said = (f"vLLM 0.32 builds {count} MTP layer(s) for {raw['architectures'][0]} (by its architecture: "
            "config.json states no count)" if key == "architectures"
            else f"config.json declares {count} MTP layer(s) (`{key}`)" if mtp_declared(raw) is not None
            else f"the config class builds {count} MTP layer(s) (`{key}`, which config.json leaves out)")
    if not dtypes:
        engine = ("vLLM 0.32 starts all the same and drafts with the layer's initial values: HYV3MTP.load_weights "
                  "returns no loaded names, so its loader's completeness check is skipped" if layout.name == "hy_v3"
                  else "vLLM 0.32 refuses to start")
        faults.append(f"{said}, but the weights hold no tensor under "
                      f"`{prefix}`: dropped at save ({engine}; the reference runs the layer as zeros)")
    elif lacking:
        faults.append(f"the weights lack {', '.join(f'`{r}`' for r in lacking)} (the reference runs them as zeros)")
    if "quantization_config" not in raw:
        for name, dtype in sorted(dtypes.items()):
            # a fused MoE stack (Qwen3.5/3.6-MoE's ``experts.gate_up_proj``) is a weight without the suffix
            if dtype in FULL_PRECISION or not name.endswith(("weight", "experts.gate_up_proj", "experts.down_proj")):
                continue
            scale = next((s for s in (name + "_scale_inv", name + "_scale") if s in dtypes), None)
            faults.append(f"`{name}` is stored {dtype}" + (f" with `{scale}` beside it" if scale else "")
                          + ", but config.json declares no quantization_config (the reference reads its raw values)")
    differ = [(prefix + own, shared) for own, shared in layout.copies
              if prefix + own in headers and shared in headers
              and not _same_tensor((headers[prefix + own][1], prefix + own), (headers[shared][1], shared))]
    if differ:
        faults.append(" and ".join(f"`{own}` differs from the target's `{shared}`" for own, shared in differ)
                      + ": the family shares them, and vLLM 0.32 runs the MTP layer with the target's (its proposer "
                      "replaces the layer's copies at load; so does the reference), so a layer trained against "
                      "copies of its own drafts with embeddings it was not trained with")
    # dots3's own table (layout.own_embed) is no copy of a shared tensor: vLLM drafts with it as it is
    # (has_own_embed_tokens), so one that differs from the target's is the family's design, not a fault.
    return faults


def _tensor_span(path: Path, name: str) -> tuple[str, list[int], int, int]:
    """One tensor's dtype, shape and byte span in a safetensors file (the header's offsets; no torch)."""
    with open(path, "rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        entry = json.loads(f.read(length))[name]
    start, end = entry["data_offsets"]
    return entry["dtype"], entry["shape"], 8 + length + start, end - start


def _same_tensor(a: tuple[Path, str], b: tuple[Path, str], chunk: int = 1 << 24) -> bool:
    """Whether two tensors (file, name) hold the same dtype, shape and bytes, read in chunks: a
    DeepSeek-V3 embedding is 1.9 GB."""
    (da, sa, oa, na), (db, sb, ob, nb) = _tensor_span(*a), _tensor_span(*b)
    if (da, sa, na) != (db, sb, nb):
        return False
    with open(a[0], "rb") as fa, open(b[0], "rb") as fb:
        fa.seek(oa)
        fb.seek(ob)
        for at in range(0, na, chunk):
            size = min(chunk, na - at)
            if fa.read(size) != fb.read(size):
                return False
    return True


def mtp_diagnosis(faults: list[str], status: str, rewrite: "MtpRewrite | None" = None) -> dict[str, Any] | None:
    """The diagnosis of a run on a target whose MTP tensors ``mtp_faults`` found wrong: cause
    ``mtp-weights``, the reason naming each tensor; or, when the config class rewrote the MTP layer
    count to none, or to layers whose tensors the checkpoint lacks, and the run failed,
    ``config-rewrite`` naming the key, both values and the line, the tensors' faults after it. A
    rewritten count whose layers are whole is no cause (the note says it): a failure there is the
    engine's or the layer's. None when the layer is whole."""
    if rewrite is not None and status == "fail" and (faults or rewrite.resolved == 0):
        reason = f"{rewrite.sentence()} ({rewrite.where()})"
        if faults:
            reason += "; the MTP layer's weights: " + "; ".join(faults)
        return {"cause": CONFIG_REWRITE, "status": status, "reason": reason, "rewritten": [rewrite.to_dict()],
                "intervals": [], "cells": {}, "config_class": rewrite.config_class, "confidence": 0.95}
    if not faults:
        return None
    return {"cause": MTP_WEIGHTS, "status": status, "reason": "the MTP layer's weights: " + "; ".join(faults),
            "rewritten": [], "intervals": [], "cells": {}, "config_class": None, "confidence": 0.95}


# --- the MTP layer count as the config class resolves it -----------------------------------------------


@dataclass(frozen=True)
class MtpRewrite:
    """The MTP layer count config.json states (None: it states none) against the one its class resolves
    (the language model's sub-config where it has one, as vLLM reads it), with where the file says it."""

    key: str
    raw: int | None
    resolved: int
    config_class: str
    version: str
    file: str
    line: int | None
    fix: str
    why: str = ""

    def where(self) -> str:
        return f"{self.file}:{self.line}" if self.line else self.file

    def text(self) -> str:
        return f"{'absent' if self.raw is None else self.raw} → {self.resolved}"

    def sentence(self) -> str:
        stated = (f"`{self.key}` is {self.raw} in config.json" if self.raw is not None
                  else "config.json states no MTP layer count")
        built = ("builds no MTP layer: vLLM 0.32 takes `n_predict` 0 from it, so `method: mtp` has nothing to draft "
                 "with (with num_speculative_tokens set it divides by that 0)" if self.resolved == 0
                 else f"builds {self.resolved} MTP layer(s) (vLLM 0.32's `method: mtp` sets n_predict {self.resolved} "
                      "and loads them from the checkpoint)")
        why = f" ({self.why})" if self.why else ""
        return (f"{stated}, but {self.config_class} (transformers {self.version}) resolves "
                f"`{self.key.rpartition('.')[2]}` to {self.resolved}{why}: an engine that trusts the class {built}")

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "raw": self.raw, "resolved": self.resolved, "text": self.text(), "rule": None,
                "file": self.file, "line": self.line, "config_class": self.config_class}


def _resolved_config(raw: dict[str, Any]) -> Any:
    """The target's config as transformers' class for its model_type builds it from the file (no remote
    code); None where transformers has no such class or the class refuses the file."""
    try:
        from transformers import CONFIG_MAPPING  # the config classes only: no torch
    except ImportError:
        return None
    try:
        cls = CONFIG_MAPPING[str(raw.get("model_type"))]
    except KeyError:
        return None
    quiet = logging.getLogger("transformers")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return cls.from_dict(copy.deepcopy(raw))
    except Exception:  # noqa: BLE001 (a class that refuses the file: the loader says why, later)
        return None
    finally:
        quiet.setLevel(level)


def mtp_rewrite(raw: dict[str, Any], where: str = "config.json") -> MtpRewrite | None:
    """The config class's rewrite of the MTP layer count, or None where it keeps what the file states
    (or transformers has no class for it).

    Example::

        >>> path = "tests/data/real-configs/stepfun-ai--step-3.7-flash/config.json"
        >>> r = mtp_rewrite(read_config(Path(path).parent), path)
        >>> (r.key, r.raw, r.resolved, r.config_class, r.line)
        ('num_nextn_predict_layers', 3, 0, 'Step3p7Config', 70)
    """
    config = _resolved_config(raw)
    if config is None:
        return None
    import transformers  # for its version: loaded by _resolved_config already, when it returned a config

    declared = mtp_declared(raw)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config

    def resolved(leaf: str) -> int | None:
        for node in (text, config):
            value = getattr(node, leaf, None)
            if isinstance(value, int) and not isinstance(value, bool):
                return value
        return None

    if declared is not None:
        key, count = declared
        now = resolved(key.rpartition(".")[2])
        if now is None or now == count:
            return None
    else:
        found = next(((k, v) for k in MTP_KEYS if (v := resolved(k)) is not None and v > 0), None)
        if found is None:
            return None
        key, count, now = found[0], None, found[1]
    sub = "text_config" if text is not config else None
    lines = key_lines(Path(where).read_text(encoding="utf-8", errors="replace")) if Path(where).is_file() else {}
    line = lines.get(key) or lines.get("model_type")
    fix = (f"move the language model's keys, `{key}` with them, into \"{sub}\"" if sub and sub not in raw
           else f"\"{key.rpartition('.')[2]}\": {count}" if count is not None
           else f"\"{key}\": 0 if the model is not meant to draft with MTP layers")
    why = (f"it reads the language model's settings from `{sub}`, which the file does not have, and builds it from "
           f"{type(text).__name__}'s defaults" if sub and sub not in raw
           else f"its default, where the file states none" if count is None else "")
    return MtpRewrite(key, count, now, type(config).__name__, transformers.__version__, where, line, fix, why)


def refuse_rewritten_to_none(raw: dict[str, Any], where: str) -> MtpRewrite | None:
    """Bad input (exit 2) naming the cause ``config-rewrite`` where config.json declares MTP layers and
    the class resolves them to none: no engine that trusts the class drafts with them, whichever layout
    they have. Else the class's rewrite, if any."""
    rewrite = mtp_rewrite(raw, where)
    if rewrite is not None and rewrite.resolved == 0:
        raise BadInput(f"{rewrite.where()}: {rewrite.sentence()}; cause: {CONFIG_REWRITE} (`{rewrite.key}` "
                       f"{rewrite.text()}). Fix: {rewrite.fix}", file=where, key=rewrite.key)
    return rewrite


def mtp_count(raw: dict[str, Any], where: str = "config.json") -> tuple[str, int]:
    """The MTP key and the number of layers an engine builds: the class's count where it rewrites the
    file's, else the file's (0 when neither declares any)."""
    rewrite = mtp_rewrite(raw, where)
    if rewrite is not None:
        return rewrite.key, rewrite.resolved
    return mtp_declared(raw) or ("", 0)
