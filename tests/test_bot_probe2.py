"""The second probe (issue 25) of `draftguard serve` as a real process, against the loopback fakes
of GitHub and the Hub: each test replays one probe black-box and failed before its fix
(docs/security.md, "Probes")."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

pytest.importorskip("starlette")
pytest.importorskip("huey")
pytest.importorskip("github")

from draftguard.report.comment import parse_sticky  # noqa: E402
from tests.fakes.github import pr_payload  # noqa: E402
from tests.test_bot import BASE, REPO  # noqa: E402
from tests.test_bot_hardening import World, add_pr, world  # noqa: E402,F401

FIXED = (Path(__file__).parent / "data/healthy/qwen3-8b.json").read_text()


def open_pr(world: World, number: int, files: dict, **kw) -> str:
    head = add_pr(world, number, files, **kw)
    assert world.post("pull_request", pr_payload(REPO, number, head, BASE)).status_code == 202
    return head


def light(world: World, number: int) -> str:
    return parse_sticky(world.sticky(number)["body"])["light"]


def conclusion(world: World, head: str) -> str:
    return world.api.runs_for(REPO, head, "draftguard/config")[0]["conclusion"]


# --- B3: a tiny config with a huge layer count under a name the cap did not list ----------------

def test_a_huge_layer_count_under_any_name_is_refused_quickly_and_fails_the_check(world):
    started = time.monotonic()
    mellum = open_pr(world, 201, {"m/config.json": '{"model_type":"mellum","num_mtp_layers":3e7}'})
    cohere = open_pr(world, 202, {"c/config.json": json.dumps({"model_type": "cohere2_moe",
                                                                "first_k_dense_replace": 30000000})})
    world.settle(timeout=40)  # before: both CPU workers held past 100 s
    assert time.monotonic() - started < 40
    for number, head, key in ((201, mellum, "num_mtp_layers"), (202, cohere, "first_k_dense_replace")):
        said = light(world, number)
        assert key in said and "more than 10000 layers" in said, said
        assert conclusion(world, head) == "failure"


# --- B4: a config nested 400 deep ---------------------------------------------------------------

def test_a_deeply_nested_config_is_a_clear_finding_and_replaces_an_earlier_pass(world):
    head_a = open_pr(world, 203, {"d/config.json": FIXED})
    world.settle()
    assert conclusion(world, head_a) == "success"
    deep = FIXED.rstrip().rstrip("}") + ',\n  "x": ' + '{"y": ' * 400 + "1" + "}" * 400 + "\n}"
    head_b = "a" * 39 + "3"
    world.api.set_files(REPO, head_b, {"d/config.json": deep})
    world.api.repos[REPO].pulls[203]["head"] = head_b
    assert world.post("pull_request", pr_payload(REPO, 203, head_b, BASE, action="synchronize")).status_code == 202
    world.settle()
    said = light(world, 203)
    assert "nested more than 32 levels deep" in said and head_b[:7] in said, said
    assert conclusion(world, head_b) == "failure"
    assert "Traceback" not in world.log()
