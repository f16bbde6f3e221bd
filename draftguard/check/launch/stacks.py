"""The serving stacks' Helm values that name a model and its engine flags, read as the chart renders them.

- The vLLM production stack (vllm-project/production-stack, ``helm/templates/deployment-vllm-multi.yaml``):
  each ``servingEngineSpec.modelSpec`` entry is one ``vllm serve`` container on the image
  ``repository:tag``. The chart writes ``vllm serve MODELURL --host 0.0.0.0 --port 8000``, then
  ``--enable-lora`` (``enableLoRA``), ``--enable-auto-tool-choice`` (``enableTool``), ``--tool-call-parser``;
  from ``vllmConfig``: ``--enable-chunked-prefill``/``--no-enable-chunked-prefill`` where the key is set,
  ``--enable-prefix-caching`` or else ``--no-enable-prefix-caching``, ``--max-model-len``, ``--dtype``,
  ``--tensor-parallel-size``, ``--max-num-seqs``, ``--gpu_memory_utilization``, ``--max_loras``, then every
  ``extraArgs`` word; ``--kv-transfer-config`` when ``lmcacheConfig.enabled``; ``--chat-template``. Its
  environment: ``modelSpec.env`` entries with a ``value``, and ``VLLM_USE_V1=0`` for ``vllmConfig.v0: "1"``.
  An entry with a ``raySpec`` is rendered as a Ray cluster, which this does not read (said in ``skipped``).

Each word keeps the line of the values key it comes from, so a finding sits on the line a maintainer edits.

In: a YAML document's node tree (``reading.compose_all``) and the file's name.
Out: ``production_stack`` -> one ``StackLaunch`` per model entry (the words of the container's command, its
environment, where, its image), and the entries it skipped with why. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

from draftguard.check.launch.built import node_get as _get
from draftguard.check.launch.shell import Word

CONTAINER_PORT = "8000"  # the chart's chart.container-port default


@dataclass
class StackLaunch:
    words: list[Word]
    env: dict[str, tuple[str, int]]
    where: str
    image: str | None
    image_line: int
    skipped: list[str] = field(default_factory=list)


def _has(node: Any, key: str) -> bool:
    return _get(node, key) is not None


def _line(node: Any) -> int:
    return node.start_mark.line + 1


def _scalar(node: Any) -> str | None:
    return node.value if isinstance(node, yaml.ScalarNode) else None


def _true(node: Any) -> bool:
    """Helm's truthiness of a scalar: false, 0, "", null are false."""
    value = _scalar(node)
    return value is not None and value.strip().lower() not in ("", "false", "0", "null", "~", "no", "off")


# vllmConfig keys the chart turns into a flag and its value, in the template's order.
VALUED = (("maxModelLen", "--max-model-len"), ("dtype", "--dtype"), ("tensorParallelSize", "--tensor-parallel-size"),
          ("maxNumSeqs", "--max-num-seqs"), ("gpuMemoryUtilization", "--gpu_memory_utilization"),
          ("maxLoras", "--max_loras"))


def is_stack(doc: Any) -> bool:
    """A production-stack values file: ``servingEngineSpec.modelSpec`` is a list."""
    return isinstance(_get(_get(doc, "servingEngineSpec"), "modelSpec"), yaml.SequenceNode)


def production_stack(doc: Any, path: str) -> tuple[list[StackLaunch], list[str]]:
    """The ``vllm serve`` command each modelSpec entry renders, and the entries not read (with why)."""
    engine_spec = _get(doc, "servingEngineSpec")
    if _has(engine_spec, "enableEngine") and not _true(_get(engine_spec, "enableEngine")):
        return [], [f"{path}:{_line(_get(engine_spec, 'enableEngine'))}: servingEngineSpec.enableEngine is off"]
    out, skipped = [], []
    for spec in _get(engine_spec, "modelSpec").value:
        name = _scalar(_get(spec, "name")) or "?"
        if _has(spec, "raySpec"):
            skipped.append(f"{path}:{_line(spec)}: modelSpec {name} runs as a Ray cluster (raySpec), not read")
            continue
        url = _get(spec, "modelURL")
        at = _line(spec)
        words = [Word("vllm", at), Word("serve", at)]
        if _scalar(url) is not None:
            words.append(Word(url.value, _line(url)))
        words += [Word("--host", at), Word("0.0.0.0", at), Word("--port", at), Word(CONTAINER_PORT, at)]
        for key, flag in (("enableLoRA", "--enable-lora"), ("enableTool", "--enable-auto-tool-choice")):
            if _true(_get(spec, key)):
                words.append(Word(flag, _line(_get(spec, key))))
        if (parser := _get(spec, "toolCallParser")) is not None and _true(parser):
            words += [Word("--tool-call-parser", _line(parser)), Word(parser.value, _line(parser))]
        config = _get(spec, "vllmConfig")
        env: dict[str, tuple[str, int]] = {}
        if isinstance(config, yaml.MappingNode):
            if (chunked := _get(config, "enableChunkedPrefill")) is not None:
                words.append(Word("--enable-chunked-prefill" if _true(chunked) else "--no-enable-chunked-prefill",
                                  _line(chunked)))
            caching = _get(config, "enablePrefixCaching")
            words.append(Word("--enable-prefix-caching" if _true(caching) else "--no-enable-prefix-caching",
                              _line(caching) if caching is not None else _line(config)))
            for key, flag in VALUED:
                if (node := _get(config, key)) is not None and _scalar(node) is not None:
                    words += [Word(flag, _line(node)), Word(node.value, _line(node))]
            extra = _get(config, "extraArgs")
            for item in extra.value if isinstance(extra, yaml.SequenceNode) else []:
                if _scalar(item) is not None:
                    words.append(Word(item.value, _line(item)))
            v0 = _get(config, "v0")
            if _scalar(v0) == "1":
                env["VLLM_USE_V1"] = ("0", _line(v0))
        cache = _get(spec, "lmcacheConfig")
        if _true(_get(cache, "enabled")):
            role = _scalar(_get(cache, "kvRole")) or "kv_both"
            words += [Word("--kv-transfer-config", _line(cache)),
                      Word('{"kv_connector":"LMCacheConnectorV1","kv_role":"%s"}' % role, _line(cache))]
        if (template := _get(spec, "chatTemplate")) is not None and _true(template):
            words += [Word("--chat-template", _line(template)), Word(f"/templates/{template.value}", _line(template))]
        entries = _get(spec, "env")
        for item in entries.value if isinstance(entries, yaml.SequenceNode) else []:
            key, value = _scalar(_get(item, "name")), _get(item, "value")
            if key and _scalar(value) is not None:
                env[key] = (value.value, _line(value))
        repo, tag = _get(spec, "repository"), _get(spec, "tag")
        image = f"{_scalar(repo)}:{_scalar(tag)}" if _scalar(repo) and _scalar(tag) else _scalar(repo)
        out.append(StackLaunch(words, env, f"modelSpec {name}", image, _line(repo) if repo is not None else at))
    return out, skipped
