"""A corpus of fourteen saved runs covering every outcome, recorded for real.

The agent under test in most tests is ``tachograph.demo.agent:billing_agent_v2`` (refunds
capped at half the price). Against it the corpus gives:

reproduced    good-escalate-b1002, good-no-order, good-half-a4471, plain-escalate-b1002
changed       good-refund-a4471, good-refund-c0007                        (seq 9)
fixed         bad-lenient-b1002 (diverges at its wrong step, 8),
              bad-accepted-a4471 (diverges at 9, before its wrong step 13)
still_wrong   bad-half-a4471 (reproduced through 9),
              bad-in-transit-c0007 (wrong at 8, first diverges later, at 9)
unreplayable  erased-a4471, tampered-b1002, crashed-b1002, bad-sidecar-b1002
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import tachograph as tg
from tachograph.demo.agent import billing_agent, billing_agent_v2
from tachograph.regression.runner import save_run

from .agents import lenient_billing_agent

UNDER_TEST = "tachograph.demo.agent:billing_agent_v2"
REPO = Path(__file__).resolve().parents[2]

REFUND_A = "My order A-4471 arrived damaged, please refund it."
REFUND_C = "Order C-0007 was crushed, I want my money back."
ESCALATE_B = "Order B-1002 arrived broken. Refund please."
ESCALATE_B2 = "Hello, the blender from order B-1002 does not work at all."
NO_ORDER = "My parcel arrived damaged but I lost the receipt."

# name -> (agent, task, verdict, wrong_at)
RUNS: dict[str, tuple[Callable[..., Any], str, str, int | None]] = {
    "good-refund-a4471": (billing_agent, REFUND_A, "good", None),
    "good-refund-c0007": (billing_agent, REFUND_C, "good", None),
    "good-escalate-b1002": (billing_agent, ESCALATE_B, "good", None),
    "good-no-order": (billing_agent, NO_ORDER, "good", None),
    "good-half-a4471": (billing_agent_v2, REFUND_A, "good", None),
    "bad-lenient-b1002": (lenient_billing_agent, ESCALATE_B, "bad", 8),
    "bad-half-a4471": (billing_agent_v2, REFUND_A, "bad", 9),
    "bad-accepted-a4471": (billing_agent, REFUND_A, "bad", 13),
    "bad-in-transit-c0007": (billing_agent, REFUND_C, "bad", 8),
    "erased-a4471": (billing_agent, REFUND_A, "good", None),
    "tampered-b1002": (billing_agent, ESCALATE_B, "good", None),
    "crashed-b1002": (billing_agent, ESCALATE_B, "good", None),
    "bad-sidecar-b1002": (billing_agent, ESCALATE_B, "good", None),
    "plain-escalate-b1002": (billing_agent, ESCALATE_B2, "good", None),
}

EXPECTED: dict[str, tuple[str, int | None]] = {
    "good-refund-a4471": ("changed", 9),
    "good-refund-c0007": ("changed", 9),
    "good-escalate-b1002": ("reproduced", None),
    "good-no-order": ("reproduced", None),
    "good-half-a4471": ("reproduced", None),
    "bad-lenient-b1002": ("fixed", 8),
    "bad-half-a4471": ("still_wrong", 9),
    "bad-accepted-a4471": ("fixed", 9),
    "bad-in-transit-c0007": ("still_wrong", 8),
    "erased-a4471": ("unreplayable", None),
    "tampered-b1002": ("unreplayable", None),
    "crashed-b1002": ("unreplayable", 9),
    "bad-sidecar-b1002": ("unreplayable", None),
    "plain-escalate-b1002": ("reproduced", None),
}


def _rewrite_lines(
    path: Path, edit: Callable[[list[dict[str, Any]]], list[dict[str, Any]]]
) -> None:
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    path.write_text("".join(json.dumps(line) + "\n" for line in edit(lines)))


def _erase(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    # Erasure as retention does it: payload and salt gone, digest and chain kept.
    lines[3]["payload"] = None
    lines[3]["salt"] = None
    return lines


def _tamper(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    lines[5]["payload"]["result"]["price_cents"] = 1800
    return lines


def _crash(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    # The process died while escalate_to_human (seq 9) ran: an intent with no completion.
    return lines[:10]


def build_corpus(folder: Path, store_path: Path) -> Path:
    """Record every run of :data:`RUNS` and save it into ``folder``, then damage the few
    that are meant to be unreplayable."""
    store = tg.SQLiteStore(str(store_path))
    for name, (agent, task, verdict, wrong_at) in RUNS.items():
        tg.record_run(agent, task, store=store, run_id=f"run-{name}")
        save_run(
            store,
            f"run-{name}",
            to=folder,
            name=name,
            verdict=verdict,
            wrong_at=wrong_at,
            note=f"test fixture {name}",
        )
    store.close()
    _rewrite_lines(folder / "erased-a4471.jsonl", _erase)
    _rewrite_lines(folder / "tampered-b1002.jsonl", _tamper)
    _rewrite_lines(folder / "crashed-b1002.jsonl", _crash)
    sidecar = folder / "bad-sidecar-b1002.tacho.json"
    meta = json.loads(sidecar.read_text())
    meta["verdict"] = "meh"
    sidecar.write_text(json.dumps(meta))
    (folder / "plain-escalate-b1002.tacho.json").unlink()
    return folder


@pytest.fixture(scope="session")
def corpus_master(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fourteen-run corpus, built once; copy it (``corpus``) before changing it."""
    base = tmp_path_factory.mktemp("corpus-master")
    return build_corpus(base / "corpus", base / "runs.db")


@pytest.fixture
def corpus(corpus_master: Path, tmp_path: Path) -> Path:
    """A private copy of the fourteen-run corpus."""
    target = tmp_path / "corpus"
    shutil.copytree(corpus_master, target)
    return target
