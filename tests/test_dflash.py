"""Drafters against their target: each fault in a small drafter/target pair is caught by its rule.

The pairs are written by the tests: Qwen3-style configs, a WordLevel tokenizer, and tiny safetensors
files (safetensors.numpy, no torch) whose shapes follow the drafter's config unless a test breaks them.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
from safetensors.numpy import save_file

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `tests.fakes` under plain `pytest` too

from draftguard.check.drafter import TokenizerFiles, detect_drafter, layer_config  # noqa: E402
from draftguard.check.run import check as check_targets  # noqa: E402
from draftguard.cli import main  # noqa: E402
from tests.fakes import FakeHub, fake_hub  # noqa: E402,F401  (fake_hub is a fixture)

ROOT = Path(__file__).resolve().parents[1]
HIDDEN, VOCAB, TARGET_LAYERS = 32, 48, 4
MASK = 46  # "<|mask|>", a special token of the target's tokenizer


def target_config() -> dict[str, Any]:
    return {
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": HIDDEN,
        "intermediate_size": 64, "num_hidden_layers": TARGET_LAYERS, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 8, "vocab_size": VOCAB,
    }


def drafter_config() -> dict[str, Any]:
    return {
        "architectures": ["DFlashDraftModel"], "model_type": "qwen3", "hidden_size": HIDDEN,
        "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 8, "vocab_size": VOCAB, "num_target_layers": TARGET_LAYERS, "block_size": 4,
        "dtype": "float16",
        "dflash_config": {"target_layer_ids": [0, 2], "mask_token_id": MASK},
        "layer_types": ["sliding_attention", "full_attention"], "sliding_window": 6,
        "use_sliding_window": True, "max_window_layers": 0,
    }


def tokenizer(swap: bool = False) -> dict[str, Any]:
    vocab = {f"t{i}": i for i in range(44)}
    if swap:
        vocab["t1"], vocab["t2"] = 2, 1
    added = [{"id": 44 + i, "content": c, "special": True} for i, c in enumerate(["<|endoftext|>", "<|im_start|>", "<|mask|>"])]
    return {"version": "1.0", "added_tokens": added, "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "t0"}}


def tensors(config: dict[str, Any], *, n_ids: int | None = None, layers: int | None = None,
            q_rows: int | None = None) -> dict[str, np.ndarray]:
    """The z-lab DFlash checkpoint layout, shaped by ``config`` unless a keyword breaks it."""
    h, hd = config["hidden_size"], config["head_dim"]
    heads, kv = config["num_attention_heads"], config["num_key_value_heads"]
    ids = n_ids if n_ids is not None else len(config["dflash_config"]["target_layer_ids"])
    shapes: dict[str, tuple[int, ...]] = {"fc.weight": (h, ids * HIDDEN), "hidden_norm.weight": (h,), "norm.weight": (h,)}
    for i in range(layers if layers is not None else config["num_hidden_layers"]):
        p = f"layers.{i}."
        shapes.update({
            p + "self_attn.q_proj.weight": (q_rows or heads * hd, h), p + "self_attn.k_proj.weight": (kv * hd, h),
            p + "self_attn.v_proj.weight": (kv * hd, h), p + "self_attn.o_proj.weight": (h, heads * hd),
            p + "self_attn.q_norm.weight": (hd,), p + "self_attn.k_norm.weight": (hd,),
            p + "mlp.gate_proj.weight": (64, h), p + "mlp.up_proj.weight": (64, h), p + "mlp.down_proj.weight": (h, 64),
            p + "input_layernorm.weight": (h,), p + "post_attention_layernorm.weight": (h,),
        })
    return {name: np.zeros(shape, dtype=np.float16) for name, shape in shapes.items()}


def write_json(path: Path, value: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=2))
    return path


def make_pair(root: Path, *, drafter: Callable[[dict], None] | None = None,
              target: Callable[[dict], None] | None = None, weights: dict | None = None,
              drafter_files: dict[str, Any] | None = None) -> tuple[Path, Path]:
    """A healthy drafter/target pair under ``root``, with the given edits."""
    d_config, t_config = drafter_config(), target_config()
    healthy = copy.deepcopy(d_config)
    if drafter:
        drafter(d_config)
    if target:
        target(t_config)
    write_json(root / "target" / "config.json", t_config)
    write_json(root / "target" / "tokenizer.json", tokenizer())
    write_json(root / "drafter" / "config.json", d_config)
    shaped_by = d_config if _shapeable(d_config) else healthy
    save_file(tensors(shaped_by, **(weights or {})), str(root / "drafter" / "model.safetensors"))
    for name, content in (drafter_files or {}).items():
        write_json(root / "drafter" / name, content)
    return root / "drafter", root / "target"


def _shapeable(config: dict) -> bool:
    ids = config.get("dflash_config", {}).get("target_layer_ids")
    return isinstance(ids, list) and all(isinstance(i, int) for i in ids)


def check(drafter: Path, target: Path | str | None):
    return check_targets([str(drafter)], drafter_target=str(target) if target else None)


def engine_views(drafter: Path, target: Path):
    """vLLM 0.32.0's views of a pair (light tier), per runner."""
    from draftguard.check.engines import parse_engines

    report = check_targets([str(drafter)], drafter_target=str(target), engines=parse_engines("vllm==0.32.0"))
    return report.targets[0].engine_views


def rules(report, severity: str | None = None) -> set[str]:
    return {f.rule for f in report.findings if severity is None or f.severity.value == severity}


def errors(report) -> set[str]:
    return rules(report, "error")


# --- the healthy pair ---------------------------------------------------------------------------


def test_healthy_pair_gives_no_error_or_warning(tmp_path):
    drafter, target = make_pair(tmp_path)
    report = check(drafter, target)
    assert report.errors == []
    # which target, the dtype note, and that vLLM's V1 runner refuses its mixed sliding/full layers
    assert rules(report) == {"DG100", "DG117", "DG124"}
    notes = {f.rule: f for f in report.findings}
    assert "F16" in notes["DG124"].message and notes["DG124"].file == str(drafter / "config.json")
    assert str(target) in notes["DG100"].message and "--target" in notes["DG100"].message


def test_drafter_without_target_runs_the_rules_that_need_none(tmp_path):
    drafter, _ = make_pair(tmp_path, drafter=lambda c: c["dflash_config"].update(target_layer_ids=[2, 0]))
    assert errors(check(drafter, None)) == {"DG101"}


# --- one fault each -------------------------------------------------------------------------------


def _set(path: str, value: Any) -> Callable[[dict], None]:
    def edit(config: dict) -> None:
        node = config
        *parents, last = path.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        if value is _DELETE:
            node.pop(last, None)
        else:
            node[last] = value
    return edit


_DELETE = object()

FAULTS = [
    # (id, drafter edit, target edit, weights edit, expected error rules, rule whose key/line we check)
    ("ids-unordered", _set("dflash_config.target_layer_ids", [2, 0]), None, None, {"DG101"}, "dflash_config.target_layer_ids"),
    ("ids-repeated", _set("dflash_config.target_layer_ids", [2, 2]), None, None, {"DG101"}, "dflash_config.target_layer_ids"),
    ("ids-missing", _set("dflash_config.target_layer_ids", _DELETE), None, {"n_ids": 2}, {"DG101"}, None),
    ("id-one-past-last", _set("dflash_config.target_layer_ids", [1, 4]), None, None, {"DG102"}, "dflash_config.target_layer_ids"),
    ("aux-id-zero", lambda c: c.update(eagle_aux_hidden_state_layer_ids=[0, 2]),
     lambda c: None, None, {"DG103", "DG104"}, "eagle_aux_hidden_state_layer_ids"),
    ("forms-disagree", lambda c: c.update(eagle_aux_hidden_state_layer_ids=[0 + 1, 2]), None, None, {"DG104"},
     "eagle_aux_hidden_state_layer_ids"),
    ("num-target-layers", _set("num_target_layers", 36), None, None, {"DG105"}, "num_target_layers"),
    ("hidden-size", None, _set("hidden_size", 64), None, {"DG106", "DG121"}, "hidden_size"),
    ("vocab-size", _set("vocab_size", 40), None, None, {"DG107", "DG109"}, "vocab_size"),
    ("mask-out-of-vocab", _set("dflash_config.mask_token_id", VOCAB), None, None, {"DG109"}, "dflash_config.mask_token_id"),
    ("mask-missing", _set("dflash_config.mask_token_id", _DELETE), None, None, {"DG109"}, None),
    ("mask-regular-token", _set("dflash_config.mask_token_id", 5), None, None, {"DG110"}, "dflash_config.mask_token_id"),
    ("block-size-missing", _set("block_size", _DELETE), None, None, {"DG111"}, None),
    ("block-size-conflict", _set("dflash_config.block_size", 8), None, None, {"DG112"}, "dflash_config.block_size"),
    ("window-unused", lambda c: [c.pop("layer_types"), c.update(max_window_layers=2)], None, None, {"DG113"}, "sliding_window"),
    ("window-dropped-by-class", _set("use_sliding_window", _DELETE), None, None, {"DG001", "DG005"}, "sliding_window"),
    ("fc-in-features", None, None, {"n_ids": 3}, {"DG121"}, "dflash_config.target_layer_ids"),
    ("layer-count", None, None, {"layers": 3}, {"DG122"}, "num_hidden_layers"),
    ("q-shape", None, None, {"q_rows": 24}, {"DG123"}, "head_dim"),
]


@pytest.mark.parametrize("name, drafter_edit, target_edit, weights, expected, key", FAULTS, ids=[f[0] for f in FAULTS])
def test_each_fault_is_caught_by_its_rule(tmp_path, name, drafter_edit, target_edit, weights, expected, key):
    drafter, target = make_pair(tmp_path, drafter=drafter_edit, target=target_edit, weights=weights)
    report = check(drafter, target)
    assert report.errors == []
    assert errors(report) == expected
    if key is not None:
        finding = next(f for f in report.findings if f.key == key and f.severity.value == "error")
        lines = (drafter / "config.json").read_text().splitlines()
        # The finding points at the offending key's own line in the drafter's config.json.
        assert finding.file == str(drafter / "config.json")
        assert f'"{key.split(".")[-1]}"' in lines[finding.line - 1]


def test_out_of_range_id_explains_the_plus_one_convention(tmp_path):
    drafter, target = make_pair(tmp_path, drafter=_set("dflash_config.target_layer_ids", [1, 4]))
    [finding] = [f for f in check(drafter, target).findings if f.rule == "DG102"]
    assert "[4]" in finding.message and "[0, 4)" in finding.message
    # Said once, plainly (issue 13: "4 = 4 is one past the last layer" read badly): what, why, fix.
    assert "the aux id (layer + 1) of the last layer" in finding.message
    assert finding.message.count("[4]") == 1 and "Fix: subtract 1 from every id" in finding.message


def test_head_dim_that_differs_from_the_target_is_not_warned(tmp_path):
    # DG108 is retired (issue 23): vLLM (PR #45181) and SGLang serve head_dim-128 drafters on head_dim-256
    # Qwen3.6 targets (z-lab/dflash#52), and an MLA drafter's head_dim is qk_rope_head_dim.
    drafter, target = make_pair(tmp_path, drafter=_set("head_dim", 4))
    report = check(drafter, target)
    assert errors(report) == set() and "DG108" not in rules(report)


def test_a_shape_mismatch_says_when_head_dim_was_derived(tmp_path):
    # issue 23: DG123 gave "head_dim 8" without saying config.json never stated it.
    drafter, target = make_pair(tmp_path, weights={"q_rows": 24})
    config = json.loads((drafter / "config.json").read_text())
    del config["head_dim"]
    write_json(drafter / "config.json", config)
    [finding] = [f for f in check(drafter, target).findings if f.rule == "DG123"]
    assert "not in config.json" in finding.message and "Fix: add \"head_dim\"" in finding.message


def test_a_layer_count_from_a_folder_named_target_reads_plainly(tmp_path):
    # issue 23: "the target target has 28 layers".
    drafter, target = make_pair(tmp_path, drafter=_set("dflash_config.target_layer_ids", [1, 4]))
    assert target.name == "target"
    messages = " ".join(f.message for f in check(drafter, target).findings)
    assert "the target target" not in messages and f"the target at {target} has 4 layers" in messages


def test_an_unused_drafter_window_is_said_once(tmp_path):
    # issue 23: DG113 (error) and DG006 (warning) reported the same unused window twice.
    drafter, target = make_pair(tmp_path, drafter=lambda c: [c.pop("layer_types"), c.update(max_window_layers=2)])
    found = [f.rule for f in check(drafter, target).findings if f.key == "sliding_window"]
    assert found == ["DG113"]


def test_an_mla_target_has_no_head_dim_to_compare(tmp_path):
    # DeepseekV3Config's head_dim is qk_rope_head_dim (the rotary part of a key), so the real
    # SpecForge DeepSeek-V3 head (128) against its real target (64) was a false DG108.
    corpus = Path(__file__).parent / "data"
    drafter = corpus / "real-drafters" / "specforge-deepseek-v3-671b-eagle3"
    target = corpus / "real-configs" / "deepseek-ai--deepseek-v3"
    report = check(str(drafter), str(target))
    assert "DG108" not in {f.rule for f in report.findings}
    assert "DG100" in {f.rule for f in report.findings}  # it was checked against the target


def test_sliding_windows_kept_per_layer_come_from_the_fidelity_view(tmp_path):
    drafter, target = make_pair(tmp_path, drafter=_set("use_sliding_window", _DELETE))
    report = check(drafter, target)
    [result] = report.targets
    assert [(a.declared, a.effective) for a in result.attention] == [("sliding(6)", "full"), ("full", "full")]
    assert "DG113" not in rules(report)  # DG005 says it once


def test_tokenizer_with_another_vocabulary_is_an_error(tmp_path):
    drafter, target = make_pair(tmp_path, drafter_files={"tokenizer.json": tokenizer(swap=True)})
    report = check(drafter, target)
    assert errors(report) == {"DG130"}
    [finding] = [f for f in report.findings if f.rule == "DG130"]
    assert finding.file == str(drafter / "tokenizer.json") and "'t1'" in finding.message


def test_identical_tokenizer_is_fine(tmp_path):
    drafter, target = make_pair(tmp_path, drafter_files={"tokenizer.json": tokenizer()})
    assert errors(check(drafter, target)) == set()


def test_mask_token_beyond_the_tokenizer_is_an_unused_row_and_allowed(tmp_path):
    # z-lab drafters use len(tokenizer) as the mask id: a padded embedding row no text produces.
    drafter, target = make_pair(tmp_path, drafter=_set("dflash_config.mask_token_id", 47))
    assert errors(check(drafter, target)) == set()


# --- formats ------------------------------------------------------------------------------------


def speculators_config(aux: list[int], verifier: str | None = None) -> dict[str, Any]:
    layers = {k: v for k, v in drafter_config().items() if k not in ("architectures", "dflash_config", "block_size",
                                                                     "num_target_layers", "dtype")}
    config: dict[str, Any] = {
        "architectures": ["DFlashSpeculator"], "speculators_model_type": "dflash", "model_type": "speculators",
        "transformer_layer_config": layers, "aux_hidden_state_layer_ids": aux, "block_size": 4,
        "mask_token_id": MASK, "draft_vocab_size": VOCAB,
    }
    if verifier:
        config["speculators_config"] = {"algorithm": "dflash", "verifier": {"name_or_path": verifier}}
    return config


def test_speculators_format_is_resolved_through_its_layer_config(tmp_path):
    config = speculators_config([1, 3])
    config["transformer_layer_config"].pop("use_sliding_window")
    write_json(tmp_path / "d" / "config.json", config)
    report = check_targets([str(tmp_path / "d")])
    assert report.errors == []
    [result] = report.targets
    assert result.config_class == "Qwen3Config"
    keys = {f.key for f in report.findings if f.rule == "DG001"}
    assert keys == {"transformer_layer_config.sliding_window"}
    finding = next(f for f in report.findings if f.rule == "DG001")
    line = (tmp_path / "d" / "config.json").read_text().splitlines()[finding.line - 1]
    assert '"sliding_window"' in line


def test_speculators_aux_ids_are_target_ids_plus_one(tmp_path):
    _, target = make_pair(tmp_path)
    ok = write_json(tmp_path / "ok" / "config.json", speculators_config([1, 3])).parent
    assert errors(check(ok, target)) == set()
    shifted = write_json(tmp_path / "bad" / "config.json", speculators_config([1, 5])).parent
    report = check(shifted, target)
    assert errors(report) == {"DG102"}
    assert "[1, 4]" in next(f for f in report.findings if f.rule == "DG102").message


def test_speculators_verifier_names_the_target(tmp_path):
    _, target = make_pair(tmp_path)
    drafter = write_json(tmp_path / "spec" / "config.json", speculators_config([1, 5], verifier=str(target))).parent
    assert errors(check(drafter, None)) == {"DG102"}


def test_eagle3_format_is_recognised_and_checked():
    fmt = detect_drafter({"model_type": "llama", "eagle_aux_hidden_state_layer_ids": [1, 16, 29]})
    assert fmt is not None and fmt.kind == "eagle3" and not fmt.is_dflash
    assert detect_drafter({"model_type": "qwen3", "hidden_size": 8}) is None
    assert layer_config({"model_type": "qwen3"}) == ({"model_type": "qwen3"}, "")


def test_eagle3_aux_ids_are_checked_against_the_target(tmp_path):
    _, target = make_pair(tmp_path)
    config = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": HIDDEN,
              "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2,
              "head_dim": 8, "vocab_size": VOCAB, "draft_vocab_size": 32}
    good = write_json(tmp_path / "e-ok" / "config.json", {**config, "eagle_aux_hidden_state_layer_ids": [1, 2, 4]}).parent
    assert errors(check(good, target)) == set()
    bad = write_json(tmp_path / "e-bad" / "config.json", {**config, "eagle_aux_hidden_state_layer_ids": [0, 2, 5]}).parent
    report = check(bad, target)
    assert errors(report) == {"DG102", "DG103"}  # 5 is past [1, 4]; 0 is the embedding output
    assert not {"DG109", "DG111"} & rules(report)  # no mask token or block size in EAGLE-3


def test_block_size_inside_dflash_config_is_enough(tmp_path):
    def move(c: dict) -> None:
        c["dflash_config"]["block_size"] = c.pop("block_size")
    drafter, target = make_pair(tmp_path, drafter=move)
    assert errors(check(drafter, target)) == set()


# --- where the target comes from ------------------------------------------------------------------


def test_target_from_draftguard_yml(tmp_path):
    drafter, target = make_pair(tmp_path, drafter=_set("num_target_layers", 36))
    (drafter / ".draftguard.yml").write_text("# the target\ntarget: ../target\n")
    report = check(drafter, None)
    assert errors(report) == {"DG105"}
    [note] = [f for f in report.findings if f.rule == "DG100"]
    assert (note.file, note.line) == (str(drafter / ".draftguard.yml"), 2)
    assert str(target) in note.message


def test_example_pair_is_healthy_and_finds_its_target_through_settings():
    example = ROOT / "examples" / "dflash-pair"
    report = check_targets([str(example / "drafter")])
    assert report.errors == [] and errors(report) == set() and rules(report, "warning") == set()
    [note] = [f for f in report.findings if f.rule == "DG100"]
    assert str(example / "target") in note.message
    assert sum(p.stat().st_size for p in example.rglob("*") if p.is_file()) < 20_000  # stays tiny


def test_example_pair_files_are_what_the_script_writes(tmp_path):
    import runpy
    import shutil

    copy_dir = tmp_path / "dflash-pair"
    shutil.copytree(ROOT / "examples" / "dflash-pair", copy_dir)
    runpy.run_path(str(copy_dir / "regenerate.py"), run_name="__main__")
    for path in (ROOT / "examples" / "dflash-pair").rglob("*"):
        if path.is_file() and path.suffix != ".py":
            assert (copy_dir / path.relative_to(ROOT / "examples" / "dflash-pair")).read_bytes() == path.read_bytes(), path


def test_explicit_target_wins_over_settings(tmp_path):
    drafter, target = make_pair(tmp_path)
    (drafter / ".draftguard.yml").write_text("target: ../missing-target\n")
    assert check(drafter, target).errors == []


def test_target_that_cannot_be_fetched_is_bad_input(tmp_path, capsys):
    drafter, _ = make_pair(tmp_path)
    assert main(["check", str(drafter), "--target", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "target from --target" in err[0] and "nowhere" in err[0]


def test_target_given_for_a_plain_model_is_bad_input(tmp_path, capsys):
    _, target = make_pair(tmp_path)
    assert main(["check", str(target), "--target", str(target)]) == 2
    assert "not a drafter" in capsys.readouterr().err


def test_cli_exit_codes_and_json(tmp_path, capsys):
    drafter, target = make_pair(tmp_path)
    assert main(["check", str(drafter), "--target", str(target), "--format", "json"]) == 0
    capsys.readouterr()
    broken, _ = make_pair(tmp_path / "b", drafter=_set("dflash_config.target_layer_ids", [1, 4]))
    assert main(["check", str(broken), "--target", str(target), "--format", "json"]) == 1
    out = json.loads(capsys.readouterr().out)
    [finding] = [f for f in out["findings"] if f["rule"] == "DG102"]
    assert finding["name"] == "layer-id-out-of-range" and finding["line"] is not None


def test_check_never_imports_torch(tmp_path):
    """Through the console entry point, as users run it; torch may or may not be installed."""
    drafter, target = make_pair(tmp_path)
    code = (
        "import atexit, sys\n"
        "atexit.register(lambda: print('TORCH' if sys.modules.get('torch') is not None else 'NO-TORCH'))\n"
        f"sys.argv = ['draftguard', 'check', {str(drafter)!r}, '--target', {str(target)!r}]\n"
        "from draftguard.cli import entry\n"
        "entry()\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[-1] == "NO-TORCH"


# --- the Hub --------------------------------------------------------------------------------------


def _repo_files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}


def test_hub_pair_is_checked_with_few_requests_and_no_weight_bytes(tmp_path, fake_hub):
    drafter, target = make_pair(tmp_path, drafter=_set("dflash_config.target_layer_ids", [1, 4]),
                                weights={"n_ids": 2})
    fake_hub.add("acme/drafter", _repo_files(drafter))
    fake_hub.add("acme/target", _repo_files(target))
    report = check_targets(["acme/drafter"], drafter_target="acme/target")
    assert report.errors == []
    assert errors(report) == {"DG102"}
    finding = next(f for f in report.findings if f.rule == "DG102")
    assert finding.file == "acme/drafter@main/config.json" and finding.line is not None
    by_kind: dict[str, int] = {}
    for request in fake_hub.requests:
        kind = "weights" if "safetensors" in (request.path or "") else request.path
        by_kind[kind] = by_kind.get(kind, 0) + 1
    # At most 3 per repo and file: the size asked first (a HEAD: B2 of issue 25, nothing over the
    # limit is downloaded), then huggingface_hub's own HEAD and GET.
    assert all(count <= 6 for count in by_kind.values()), by_kind
    weight_gets = [r for r in fake_hub.requests if r.method == "GET" and r.path == "model.safetensors"]
    assert weight_gets and all(r.range is not None and r.range.startswith("bytes=0-") for r in weight_gets)


def test_cli_checks_a_hub_pair_through_hf_endpoint(tmp_path):
    """The installed command in a real process, pointed at the fake Hub by HF_ENDPOINT alone."""
    import os

    drafter, target = make_pair(tmp_path, drafter=_set("dflash_config.target_layer_ids", [1, 4]), weights={"n_ids": 2})
    with FakeHub({"acme/drafter": {"main": _repo_files(drafter)}, "acme/target": {"main": _repo_files(target)}}) as hub:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "DRAFTGUARD_"))}
        env.update(hub.env(str(tmp_path / "cache")))
        proc = subprocess.run([sys.executable, "-m", "draftguard", "check", "acme/drafter", "--target", "acme/target",
                               "--format", "json"], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
        weight_requests = hub.requests_for("acme/drafter", ".safetensors")
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr == ""
    out = json.loads(proc.stdout)
    assert {f["rule"] for f in out["findings"] if f["severity"] == "error"} == {"DG102"}
    assert [(r.method, bool(r.range)) for r in weight_requests] == [("HEAD", False), ("GET", True)]


def test_offline_hub_pair_checks_configs_from_cache_and_says_what_it_skipped(tmp_path, fake_hub, monkeypatch):
    from huggingface_hub import constants

    drafter, target = make_pair(tmp_path, drafter=_set("num_target_layers", 36))
    fake_hub.add("acme/drafter", _repo_files(drafter))
    fake_hub.add("acme/target", {"config.json": (target / "config.json").read_bytes()})
    online = check_targets(["acme/drafter"], drafter_target="acme/target")
    assert errors(online) == {"DG105"} and "DG125" not in rules(online)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    offline = check_targets(["acme/drafter"], drafter_target="acme/target")
    assert offline.errors == [] and errors(offline) == {"DG105"}  # configs from the cache
    [note] = [f for f in offline.findings if f.rule == "DG125"]
    assert "model.safetensors" in note.message and "offline" in note.message
    assert "DG124" not in rules(offline)  # no weights were read, so nothing is said about them


def test_hub_speculators_verifier_is_fetched(tmp_path, fake_hub):
    _, target = make_pair(tmp_path)
    fake_hub.add("acme/target", _repo_files(target))
    fake_hub.add("acme/spec", {"config.json": json.dumps(speculators_config([1, 3], "acme/target")).encode()})
    report = check_targets(["acme/spec"])
    assert report.errors == [] and errors(report) == set()
    assert any(r.repo == "acme/target" and r.path == "config.json" for r in fake_hub.requests)


def test_hub_target_missing_is_bad_input(tmp_path, fake_hub):
    drafter, _ = make_pair(tmp_path)
    fake_hub.add("acme/drafter", _repo_files(drafter))
    report = check_targets(["acme/drafter"], drafter_target="acme/gone")
    [error] = report.errors
    assert "target from --target" in error.message and "acme/gone" in error.message


def test_tokenizer_files_read_added_tokens_from_either_file():
    config = json.dumps({"added_tokens_decoder": {"7": {"content": "<m>", "special": True}}}).encode()
    tok = TokenizerFiles.from_bytes(None, config)
    assert tok.vocab() is None and tok.added() == {7: ("<m>", True)}
    unigram = TokenizerFiles.from_bytes(json.dumps({"model": {"type": "Unigram", "vocab": [["a", 0.0], ["b", -1.0]]}}).encode())
    assert unigram.vocab() == {"a": 0, "b": 1} and unigram.token_of(1) == "b"


def test_tokenizer_vocab_in_an_unusual_layout_is_still_found():
    # "model" first and a decoy "vocab" key elsewhere: the partial decode must not be fooled.
    text = json.dumps({"model": {"type": "WordLevel", "vocab": {"x": 0, "y": 1}},
                       "decoder": {"vocab": "not a vocabulary"}}).encode()
    assert TokenizerFiles.from_bytes(text).vocab() == {"x": 0, "y": 1}
    odd = json.dumps({"post_processor": {"model": {"vocab": ["no"]}}, "model": {"vocab": {"z": 0}}}).encode()
    assert TokenizerFiles.from_bytes(odd).vocab() == {"z": 0}


REMOTE_DRAFTER_CLASS = '''
from transformers import PretrainedConfig


class AcmeDrafterConfig(PretrainedConfig):
    model_type = "acme_drafter"

    def __init__(self, hidden_size=32, **kwargs):
        # The repo's own class halves the width it is given: the model code sees hidden_size // 2.
        self.hidden_size = hidden_size // 2
        super().__init__(**kwargs)
'''


def test_drafter_rules_read_the_values_its_own_config_class_resolves(tmp_path, monkeypatch):
    """With --trust-remote-code the drafter rules judge what the repo's class resolves, not the raw
    file (they re-resolved without remote code, fell back to raw values, and missed this)."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    drafter, target = make_pair(tmp_path)
    config = json.loads((drafter / "config.json").read_text())
    config.update(model_type="acme_drafter", auto_map={"AutoConfig": "configuration_acme.AcmeDrafterConfig"})
    (drafter / "config.json").write_text(json.dumps(config, indent=2))
    (drafter / "configuration_acme.py").write_text(REMOTE_DRAFTER_CLASS)
    report = check_targets([str(drafter)], drafter_target=str(target), trust_remote_code=True)
    assert not report.errors, report.errors
    # The drafter rules (not only the fidelity check's DG001) see the resolved width of 16.
    [size] = [f for f in report.findings if f.rule == "DG106"]
    assert (size.raw, size.resolved) == (16, HIDDEN)
    assert "DG121" in {f.rule for f in report.findings}  # fc projects to 32, the drafter is 16 wide


# --- a Hub drafter's own .draftguard.yml ------------------------------------------------------------


def test_hub_drafter_reads_target_from_its_draftguard_yml(tmp_path, fake_hub):
    drafter, target = make_pair(tmp_path, drafter=_set("num_target_layers", 36))
    fake_hub.add("acme/target", _repo_files(target))
    fake_hub.add("acme/drafter", {**_repo_files(drafter), ".draftguard.yml": b"# the target\ntarget: acme/target\n"})
    report = check_targets(["acme/drafter"])
    assert report.errors == [] and errors(report) == {"DG105"}
    [note] = [f for f in report.findings if f.rule == "DG100"]
    assert (note.file, note.line) == ("acme/drafter@main/.draftguard.yml", 2)
    assert "acme/target" in note.message


def test_hub_draftguard_yml_is_read_at_the_drafters_revision(tmp_path, fake_hub):
    drafter, target = make_pair(tmp_path, drafter=_set("num_target_layers", 36))
    fake_hub.add("acme/target", _repo_files(target))
    fake_hub.add("acme/drafter", _repo_files(drafter))  # main: no settings, no target
    fake_hub.add("acme/drafter", {**_repo_files(drafter), ".draftguard.yml": b"target: acme/target\n"}, revision="v1")
    assert errors(check_targets(["acme/drafter"])) == set()
    at_v1 = check_targets(["acme/drafter"], revision="v1")
    assert errors(at_v1) == {"DG105"}
    assert any(r.path == ".draftguard.yml" and r.revision == "v1" for r in fake_hub.requests_for("acme/drafter"))


def test_hub_drafter_without_draftguard_yml_is_checked_without_a_target(tmp_path, fake_hub):
    drafter, _ = make_pair(tmp_path, drafter=_set("num_target_layers", 36))
    fake_hub.add("acme/drafter", _repo_files(drafter))
    report = check_targets(["acme/drafter"])
    assert report.errors == [] and errors(report) == set() and "DG100" not in rules(report)


def test_hub_draftguard_yml_may_name_only_a_hub_target(tmp_path, fake_hub):
    drafter, _ = make_pair(tmp_path)
    fake_hub.add("acme/drafter", {**_repo_files(drafter), ".draftguard.yml": b"target: ../../etc\n"})
    [error] = check_targets(["acme/drafter"]).errors
    assert "acme/drafter@main/.draftguard.yml" in error.message and "not a Hub repo id" in error.message


def test_hub_drafter_offline_without_cached_settings_is_still_checked(tmp_path, fake_hub, monkeypatch):
    from huggingface_hub import constants, hf_hub_download

    drafter, target = make_pair(tmp_path, drafter=_set("num_target_layers", 36))
    fake_hub.add("acme/target", _repo_files(target))
    fake_hub.add("acme/drafter", {**_repo_files(drafter), ".draftguard.yml": b"target: acme/target\n"})
    hf_hub_download("acme/drafter", "config.json")  # only config.json is in the cache
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    report = check_targets(["acme/drafter"])
    assert report.errors == [] and errors(report) == set() and "DG100" not in rules(report)
    assert "DG125" in rules(report)  # the weights were not read either, and it says so


# --- reduced draft vocabulary (speculators d2t / t2d) ---------------------------------------------

DRAFT_VOCAB = 32


def vocab_tensors(*, d2t: int | None = DRAFT_VOCAB, t2d: int | None = VOCAB, head: int | None = DRAFT_VOCAB,
                  embed: int | None = VOCAB) -> dict[str, np.ndarray]:
    """A speculators checkpoint's vocabulary tensors with these lengths (None: not shipped)."""
    out: dict[str, np.ndarray] = {}
    if d2t is not None:
        out["d2t"] = np.zeros((d2t,), dtype=np.int64)
    if t2d is not None:
        out["t2d"] = np.zeros((t2d,), dtype=np.bool_)
    if head is not None:
        out["lm_head.weight"] = np.zeros((head, HIDDEN), dtype=np.float16)
    if embed is not None:
        out["embed_tokens.weight"] = np.zeros((embed, HIDDEN), dtype=np.float16)
    return out


def reduced_vocab_drafter(root: Path, *, draft_vocab: Any = DRAFT_VOCAB, **shapes: int | None) -> Path:
    config = speculators_config([1, 3])
    config["draft_vocab_size"] = draft_vocab
    folder = write_json(root / "config.json", config).parent
    save_file(vocab_tensors(**shapes), str(folder / "model.safetensors"))
    return folder


def test_reduced_draft_vocabulary_with_matching_tensors_is_healthy(tmp_path):
    _, target = make_pair(tmp_path)
    report = check(reduced_vocab_drafter(tmp_path / "d"), target)
    assert report.errors == [] and errors(report) == set()


VOCAB_FAULTS = [
    # (id, draft_vocab_size, tensor lengths, (raw, resolved) of the finding, tensor the message names)
    ("draft-vocab-above-target", VOCAB + 16, {"d2t": VOCAB + 16, "head": VOCAB + 16}, (VOCAB + 16, VOCAB), None),
    ("draft-vocab-not-positive", 0, {}, (0, None), None),
    ("d2t-shape", DRAFT_VOCAB, {"d2t": VOCAB}, ([VOCAB], [DRAFT_VOCAB]), "`d2t`"),
    ("t2d-shape", DRAFT_VOCAB, {"t2d": DRAFT_VOCAB}, ([DRAFT_VOCAB], [VOCAB]), "`t2d`"),
    ("lm-head-rows", DRAFT_VOCAB, {"head": VOCAB}, ([VOCAB, HIDDEN], [DRAFT_VOCAB, HIDDEN]), "`lm_head.weight`"),
    ("embed-rows", DRAFT_VOCAB, {"embed": DRAFT_VOCAB}, ([DRAFT_VOCAB, HIDDEN], [VOCAB, HIDDEN]), "`embed_tokens.weight`"),
    ("d2t-missing", DRAFT_VOCAB, {"d2t": None, "t2d": None}, (DRAFT_VOCAB, VOCAB), "no `d2t`"),
]


@pytest.mark.parametrize("name, draft_vocab, shapes, values, names", VOCAB_FAULTS, ids=[f[0] for f in VOCAB_FAULTS])
def test_each_draft_vocabulary_fault_is_caught(tmp_path, name, draft_vocab, shapes, values, names):
    _, target = make_pair(tmp_path)
    drafter = reduced_vocab_drafter(tmp_path / "d", draft_vocab=draft_vocab, **shapes)
    report = check(drafter, target)
    assert report.errors == [] and errors(report) == {"DG131"}
    [finding] = [f for f in report.findings if f.rule == "DG131"]
    assert (finding.raw, finding.resolved) == values
    assert finding.key == "draft_vocab_size" and finding.file == str(drafter / "config.json")
    assert '"draft_vocab_size"' in (drafter / "config.json").read_text().splitlines()[finding.line - 1]
    if names:
        assert names in finding.message and "model.safetensors" in finding.message


def test_draft_vocabulary_without_a_target_is_judged_against_the_drafters_vocab(tmp_path):
    drafter = reduced_vocab_drafter(tmp_path / "d", draft_vocab=VOCAB + 1, d2t=VOCAB + 1, head=VOCAB + 1)
    report = check(drafter, None)
    [finding] = [f for f in report.findings if f.rule == "DG131"]
    assert "transformer_layer_config.vocab_size" in finding.message and finding.resolved == VOCAB


def test_full_draft_vocabulary_needs_no_mapping(tmp_path):
    _, target = make_pair(tmp_path)
    drafter = reduced_vocab_drafter(tmp_path / "d", draft_vocab=VOCAB, d2t=None, t2d=None, head=VOCAB)
    assert errors(check(drafter, target)) == set()


def test_hub_draft_vocabulary_shapes_come_from_headers_only(tmp_path, fake_hub):
    _, target = make_pair(tmp_path)
    drafter = reduced_vocab_drafter(tmp_path / "d", d2t=VOCAB)
    fake_hub.add("acme/target", _repo_files(target))
    fake_hub.add("acme/spec", _repo_files(drafter))
    report = check_targets(["acme/spec"], drafter_target="acme/target")
    assert errors(report) == {"DG131"}
    weight_gets = [r for r in fake_hub.requests_for("acme/spec", ".safetensors") if r.method == "GET"]
    assert weight_gets and all(r.range is not None for r in weight_gets)


# --- issue 13: rules from public incidents, on the small pair -------------------------------------


def test_mask_token_that_the_target_pads_with_is_an_error_from_generation_config(tmp_path):
    drafter, target = make_pair(tmp_path)
    write_json(target / "generation_config.json", {"bos_token_id": 44, "pad_token_id": MASK})
    [finding] = [f for f in check(drafter, target).findings if f.rule == "DG116"]
    assert finding.severity.value == "error" and "pad_token_id in generation_config.json" in finding.message
    assert "#2461" in finding.message and finding.key == "dflash_config.mask_token_id"


def test_mask_token_that_the_tokenizer_names_as_eos_is_an_error(tmp_path):
    drafter, target = make_pair(tmp_path)
    write_json(target / "tokenizer_config.json", {
        "added_tokens_decoder": {"46": {"content": "<|mask|>", "special": True}}, "eos_token": "<|mask|>"})
    [finding] = [f for f in check(drafter, target).findings if f.rule == "DG116"]
    assert "eos_token in tokenizer_config.json" in finding.message


def test_mask_token_equal_to_the_drafters_own_pad_is_caught_without_a_target(tmp_path):
    drafter, _ = make_pair(tmp_path, drafter=_set("pad_token_id", MASK))
    report = check(drafter, None)
    assert "DG116" in errors(report)
    healthy, _ = make_pair(tmp_path / "ok", drafter=_set("pad_token_id", 44))
    assert "DG116" not in rules(check(healthy, None))


def test_dflash_ids_one_above_the_usual_list_are_a_warning_naming_both(tmp_path):
    def deeper(config):
        config["num_hidden_layers"], config["max_window_layers"] = 12, 12
    # build_target_layer_ids(12, 2) is [1, 9]: [2, 10] is that list shifted by one.
    drafter, target = make_pair(tmp_path, target=deeper, drafter=lambda c: (
        c.update(num_target_layers=12), c["dflash_config"].update(target_layer_ids=[2, 10])))
    report = check(drafter, target)
    [finding] = [f for f in report.findings if f.rule == "DG115"]
    assert finding.severity.value == "warning" and "[2, 10]" in finding.message and "[1, 9]" in finding.message
    assert errors(report) == set()
    usual, target = make_pair(tmp_path / "usual", target=deeper, drafter=lambda c: (
        c.update(num_target_layers=12), c["dflash_config"].update(target_layer_ids=[1, 9])))
    assert "DG115" not in rules(check(usual, target))


def test_speculators_ids_are_not_held_to_zlab_defaults(tmp_path):
    # issue 23: DG115 expects z-lab's build_target_layer_ids only of trainers known to use it. The
    # speculators library's resolve_target_layer_ids defaults to [2, N//2, N-3], not z-lab's list, so
    # [1, 9] on 12 layers (z-lab's list for 2 draft layers) says nothing about a shift there.
    def deeper(config):
        config["num_hidden_layers"], config["max_window_layers"] = 12, 12
    drafter, target = make_pair(tmp_path, target=deeper)
    spec = write_json(tmp_path / "spec" / "config.json", speculators_config([1, 9])).parent
    assert "DG115" not in rules(check(spec, target))
    # The same list under z-lab's own DFlashDraftModel, as aux ids, is z-lab's list moved by one.
    zlab = json.loads((drafter / "config.json").read_text())
    zlab["eagle_aux_hidden_state_layer_ids"] = [1, 9]
    zlab["dflash_config"]["target_layer_ids"] = [0, 8]
    write_json(drafter / "config.json", zlab)
    assert "DG115" in rules(check(drafter, target), "warning")


def test_missing_dflash_ids_name_each_engines_fallback(tmp_path):
    def deeper(config):
        config["num_hidden_layers"], config["max_window_layers"] = 12, 12
    drafter, target = make_pair(tmp_path, target=deeper, drafter=_set("dflash_config.target_layer_ids", _DELETE))
    [finding] = [f for f in check(drafter, target).findings if f.rule == "DG101"]
    assert "vLLM 0.32 reads target layers [1, 5, 8]" in finding.message
    assert "fails at the first forward unless the drafter has 3 layers" in finding.message
    # SGLang 0.5.23 builds z-lab's list itself (it no longer refuses): it agrees with the trainer here.
    assert "SGLang 0.5.23 reads target layers [1, 9]" in finding.message and "refuses" not in finding.message
    assert "build_target_layer_ids(12, 2)" in finding.message
    assert "[1, 9]" in finding.message and "These differ" in finding.message


def test_eagle3_head_without_ids_is_a_warning_not_bad_input(tmp_path, capsys):
    _, target = make_pair(tmp_path)
    head = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": HIDDEN,
            "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2,
            "vocab_size": VOCAB, "draft_vocab_size": 32}
    drafter = write_json(tmp_path / "head" / "config.json", head).parent
    report = check(drafter, target)
    assert errors(report) == set() and rules(report, "warning") == {"DG114"}
    note = next(f for f in report.findings if f.rule == "DG100")
    assert "Checked as an EAGLE-3 drafter" in note.message  # "an", not "a EAGLE-3"
    assert main(["check", str(drafter), "--target", str(target)]) == 0


def test_dflash2_drafter_is_told_what_vllms_v1_runner_refuses(tmp_path):
    drafter, target = make_pair(tmp_path, drafter=lambda c: c.update(
        architectures=["DFlash2DraftModel"], layer_types=["sliding_attention"] * 2, max_window_layers=0))
    [note] = [f for f in check(drafter, target).findings if f.rule == "DG117"]
    # vLLM 0.32's own words (vllm/config/vllm.py _get_v1_model_runner_unsupported_features), as the
    # engine view's refusal quotes them.
    assert '"Model Runner V1 does not support: DFlash candidate-head drafts"' in note.message
    assert "DFlash candidate-head drafter (DFlash2DraftModel)" in note.message and "dflash2 drafts" not in note.message
    assert "Triton" in note.message and "0.27.1" in note.message
    [v1] = [v for v in engine_views(drafter, target) if v.runner == "V1"]
    assert v1.refusal == "Model Runner V1 does not support: DFlash candidate-head drafts"
    assert v1.refusal.partition(": ")[2] in note.message  # the finding and the view say the same
    # Both at once: listed as vLLM lists them, in one ValueError.
    both, target = make_pair(tmp_path / "both", drafter=lambda c: c.update(
        architectures=["DFlash2DraftModel"], layer_types=["sliding_attention", "full_attention"], max_window_layers=0))
    [note] = [f for f in check(both, target).findings if f.rule == "DG117"]
    assert ('"Model Runner V1 does not support: mixed sliding/full dflash drafts, DFlash candidate-head drafts"'
            in note.message) and note.key.endswith("layer_types")
    full, target = make_pair(tmp_path / "full", drafter=lambda c: c.update(
        layer_types=["full_attention"] * 2, sliding_window=None, use_sliding_window=False))
    assert "DG117" not in rules(check(full, target))


def test_importing_the_light_check_loads_no_costly_package():
    """The drafter rules are imported at the top like every draftguard module (tests/test_shape.py);
    what costs the cold check time loads at first use: transformers when a config resolves (after
    hide_torch), huggingface_hub at a Hub read, torch never."""
    code = ("import sys; from draftguard.check.run import check as check_targets; "
            "print(sorted(m for m in ('transformers', 'huggingface_hub', 'torch', 'numpy', 'yaml', 'rich') "
            "if m in sys.modules), 'draftguard.check.drafter.check' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert out.strip() == "[] True"


def test_a_speculators_shape_mismatch_says_head_dim_was_derived(tmp_path):
    # issue 23: DG123 named "head_dim 8" as if config.json stated it. In the speculators format only the
    # drafter rule sees the weights, so it must say that the class filled head_dim in.
    config = speculators_config([1, 3])
    config["transformer_layer_config"].pop("head_dim")
    folder = write_json(tmp_path / "spec" / "config.json", config).parent
    shaped = {**drafter_config(), "dflash_config": {"target_layer_ids": [0, 2]}}
    save_file(tensors(shaped, q_rows=24), str(folder / "model.safetensors"))
    [finding] = [f for f in check_targets([str(folder)]).targets[0].findings if f.rule == "DG123"]
    assert "not in config.json: derived by the config class" in finding.message
    assert finding.message.endswith("and state `head_dim`.")
