"""Record the example corpus of the demo billing agent into corpus/demo/.

Good runs are recorded with ``tachograph.demo.agent:billing_agent`` (the agent as it is).
Bad runs are recorded with buggy variants, as production would have recorded them before the
fix, and saved with the step that was wrong:

* ``lenient_billing_agent`` (tests/regression/agents.py) refunds orders over the 100 EUR limit
  that the model escalated; the wrong step is its ``plan.selected`` "refund";
* ``billing_agent_v2`` (the demo's policy change) refunds half the price of a damaged order;
  the wrong step is the ``tool.requested`` of ``issue_refund`` with the halved amount.

Against the current agent every good run is ``reproduced`` and every bad run ``fixed``:
``tacho test corpus/demo --agent tachograph.demo.agent:billing_agent`` passes, and the
repository's tests check exactly that. Run from the repository root:

    python scripts/make_demo_corpus.py [--out corpus/demo]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.regression.agents import lenient_billing_agent  # noqa: E402

import tachograph as tg  # noqa: E402
from tachograph.demo.agent import billing_agent, billing_agent_v2  # noqa: E402
from tachograph.regression.runner import SIDECAR_SUFFIX, save_run  # noqa: E402

# (run id, agent, task, verdict, wrong step type or None, note)
RUNS: list[tuple[str, Callable[..., Any], str, str, str | None, str]] = [
    (
        "demo-good-refund-a4471",
        billing_agent,
        "My order A-4471 arrived damaged, please refund it.",
        "good",
        None,
        "damaged order under 100 EUR: full refund",
    ),
    (
        "demo-good-refund-c0007",
        billing_agent,
        "Order C-0007 was crushed, I want my money back.",
        "good",
        None,
        "cheap order: full refund",
    ),
    (
        "demo-good-escalate-b1002",
        billing_agent,
        "Order B-1002 arrived broken. Refund please.",
        "good",
        None,
        "189 EUR is over the limit: escalated to a human",
    ),
    (
        "demo-good-escalate-b1002-again",
        billing_agent,
        "Hello, the blender from order B-1002 does not work at all.",
        "good",
        None,
        "same order, other words: escalated again",
    ),
    (
        "demo-good-no-order",
        billing_agent,
        "My parcel arrived damaged but I lost the receipt.",
        "good",
        None,
        "no order number: the agent asks, refunds nothing",
    ),
    (
        "demo-bad-refund-over-limit-b1002",
        lenient_billing_agent,
        "Order B-1002 arrived broken. Refund please.",
        "bad",
        "plan.selected",
        "refunded 189 EUR: orders over 100 EUR must be escalated (goodwill bug)",
    ),
    (
        "demo-bad-refund-over-limit-b1002-again",
        lenient_billing_agent,
        "Hello, the blender from order B-1002 does not work at all.",
        "bad",
        "plan.selected",
        "the goodwill bug again, other words",
    ),
    (
        "demo-bad-half-refund-a4471",
        billing_agent_v2,
        "My order A-4471 arrived damaged, please refund it.",
        "bad",
        "tool.requested",
        "refunded half the price of a damaged order (policy change v2, rolled back)",
    ),
]


def _wrong_step(store: tg.Store, run_id: str, step_type: str) -> int:
    """The seq of the wrong step: the plan chosen, or the refund requested."""
    for event in store.events(run_id):
        payload = event.payload or {}
        if step_type == "plan.selected" and event.type == step_type:
            return event.seq
        if step_type == "tool.requested" and payload.get("tool") == "issue_refund":
            return event.seq
    raise SystemExit(f"{run_id}: no {step_type} step to mark as wrong")


def main(argv: list[str] | None = None) -> int:
    """Record every run of :data:`RUNS` and save it with its verdict."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "corpus" / "demo")
    args = parser.parse_args(argv)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    for old in [*out.glob("*.jsonl"), *out.glob("*" + SIDECAR_SUFFIX)]:
        old.unlink()
    with tempfile.TemporaryDirectory() as tmp:
        store = tg.SQLiteStore(str(Path(tmp) / "corpus.db"))
        for run_id, agent, task, verdict, step, note in RUNS:
            tg.record_run(agent, task, store=store, run_id=run_id)
            wrong_at = _wrong_step(store, run_id, step) if step else None
            path = save_run(store, run_id, to=out, verdict=verdict, note=note, wrong_at=wrong_at)
            where = f", wrong at seq {wrong_at}" if wrong_at is not None else ""
            shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
            print(f"{verdict:4} {shown}{where}")
        store.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
