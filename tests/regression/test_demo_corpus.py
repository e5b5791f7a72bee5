"""The repository's own example corpus (corpus/demo), replayed as CI replays it.

Against ``tachograph.demo.agent:billing_agent`` every good run is ``reproduced`` and every
bad run ``fixed``: the bad runs were recorded by buggy variants (the goodwill bug of
tests/regression/agents.py, and the demo's half-refund policy change), and the current agent
no longer takes their wrong step. The documented verdicts are :data:`DOCUMENTED`.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

import tachograph as tg
from tachograph.regression.runner import Verdict, load_corpus

from .conftest import REPO
from .test_cli import tacho, tacho_exe

DEMO = REPO / "corpus" / "demo"
AGENT = "tachograph.demo.agent:billing_agent"

DOCUMENTED: dict[str, tuple[str, int | None]] = {
    "demo-bad-half-refund-a4471": ("fixed", 9),
    "demo-bad-refund-over-limit-b1002": ("fixed", 8),
    "demo-bad-refund-over-limit-b1002-again": ("fixed", 8),
    "demo-good-escalate-b1002": ("reproduced", None),
    "demo-good-escalate-b1002-again": ("reproduced", None),
    "demo-good-no-order": ("reproduced", None),
    "demo-good-refund-a4471": ("reproduced", None),
    "demo-good-refund-c0007": ("reproduced", None),
}


def test_ci_replays_the_example_corpus_and_it_passes() -> None:
    proc = tacho("test", "corpus/demo", "--agent", AGENT, "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(proc.stdout)
    assert {r["name"]: (r["outcome"], r["seq"]) for r in data["results"]} == DOCUMENTED
    assert data["ok"] is True


def test_the_example_corpus_is_well_formed() -> None:
    entries = load_corpus(DEMO)
    assert [e.name for e in entries] == sorted(DOCUMENTED)
    for entry in entries:
        assert entry.problem is None
        assert entry.note
        [report] = tg.verify_jsonl(entry.path)
        assert report.ok, report.render()
        assert report.run_id == entry.run_id == entry.name
        assert report.erased == ()
        if entry.verdict is Verdict.BAD:
            assert entry.wrong_at is not None
            lines = entry.path.read_text().splitlines()
            wrong = json.loads(lines[entry.wrong_at])
            assert wrong["type"] in ("plan.selected", "tool.requested")
            if wrong["type"] == "plan.selected":  # refunded where it should have escalated
                assert wrong["payload"]["plan"] == "refund"
            else:
                assert wrong["payload"]["tool"] == "issue_refund"


AGENT_MODULE = """\
import tachograph as tg
from tachograph.demo import agent as demo

REFUND_SHARE = {share}


@tg.agent(
    name="billing_agent",
    models=[demo.MODEL],
    prompts={{"billing_system": demo.SYSTEM}},
    tools=[demo.lookup_order, demo.issue_refund, demo.escalate_to_human],
    code_version="demo-1",
)
def billing_agent(task):
    return demo._run(task, refund_share=REFUND_SHARE)
"""


def test_a_deliberate_regression_fails_naming_run_and_step_and_reverting_it_passes(
    tmp_path: Path,
) -> None:
    module = tmp_path / "shop_agent.py"
    env = {k: v for k, v in os.environ.items() if k != "TACHOGRAPH_STORE"}
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # the edit keeps the file's size: no stale .pyc

    def run() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*tacho_exe(), "test", str(DEMO), "--agent", "shop_agent:billing_agent"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )

    module.write_text(AGENT_MODULE.format(share="1.0"))
    assert run().returncode == 0

    module.write_text(AGENT_MODULE.format(share="0.5"))  # the regression: half refunds
    broken = run()
    assert broken.returncode == 1
    assert (
        "demo-good-refund-a4471: CHANGED (good run): decisions differ from the recording at "
        "seq 9 (args_changed)"
    ) in broken.stdout
    assert "$.payload.args.amount_cents: 2500 -> 1250" in broken.stdout
    assert "demo-bad-half-refund-a4471: STILL WRONG (bad run): the wrong step at seq 9" in (
        broken.stdout
    )

    module.write_text(AGENT_MODULE.format(share="1.0"))  # reverted
    fixed = run()
    assert fixed.returncode == 0, fixed.stdout
    assert "5 reproduced, 3 fixed. PASSED" in fixed.stdout


@pytest.mark.parametrize("workers", ["1", "4"])
def test_the_demo_policy_change_is_caught(workers: str) -> None:
    proc = tacho(
        "test",
        "corpus/demo",
        "--agent",
        "tachograph.demo.agent:billing_agent_v2",
        "--json",
        "--workers",
        workers,
    )
    assert proc.returncode == 1
    failing = {
        r["name"]: (r["outcome"], r["seq"])
        for r in json.loads(proc.stdout)["results"]
        if not r["passed"]
    }
    assert failing == {
        "demo-bad-half-refund-a4471": ("still_wrong", 9),
        "demo-good-refund-a4471": ("changed", 9),
        "demo-good-refund-c0007": ("changed", 9),
    }
