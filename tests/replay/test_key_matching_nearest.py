"""Key matching reports a changed call against the recorded call nearest to it.

A review replayed an agent whose pooled workers each look a value up and store it; changing
the value stored for one item was reported at the first open ``store`` call (another item's),
with a diff of every argument, instead of at that item's own call with the one changed value.
The order of a pool's calls varies; here the agent takes the items in an order of its own,
so that the record holds item 3's call before item 2's, as the review's did."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import tachograph as tg


def _agent(order: list[int], offset_for: int | None) -> Any:
    @tg.tool(effect="read", name="lookup")
    def lookup(i: int) -> int:
        return i * 10

    @tg.tool(effect="write", name="store_value")
    def store_value(i: int, v: int) -> dict[str, int]:
        return {"stored": i}

    @tg.agent(name="pooled", tools=[lookup, store_value], code_version="1")
    def pooled(items: list[int]) -> int:
        for i in order:
            v = lookup(i)
            store_value(i, v + 1 if i == offset_for else v)
        return len(items)

    return pooled


def test_the_changed_call_is_compared_with_its_own_recorded_call(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    result = tg.record_run(_agent([3, 2, 1, 0], None), [0, 1, 2, 3], store=db)
    with tg.open_store(db) as store:
        stores = {
            e.payload["args"]["i"]: e.seq
            for e in store.events(result.run_id)
            if e.type == "tool.requested" and e.payload["tool"] == "store_value"
        }
    assert stores[3] < stores[2]
    report = tg.replay(db, result.run_id, _agent([0, 1, 2, 3], 2), match="key")
    assert not report.reproduced
    first = report.divergences[0]
    assert first.seq == stores[2], report.render()
    assert [(c.path, c.old, c.new) for c in first.changes] == [("$.payload.args.v", 20, 21)]
