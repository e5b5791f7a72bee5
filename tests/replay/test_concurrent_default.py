"""Concurrent calls replay by default, and a divergence inside a task group reports the same
as anywhere else (the ExceptionGroup around the replay's stop is unwrapped)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from typing import Any

import pytest

import tachograph as tg
from shop_agents import fanout
from tachograph.replay.api import overlapping_calls


@pytest.fixture(autouse=True)
def jitter() -> Iterator[None]:
    saved = fanout.JITTER
    fanout.CALLS.clear()
    yield
    fanout.JITTER = saved


@tg.model("duo-2026-01-01", provider="scripted")
async def duo(request: dict[str, Any]) -> dict[str, Any]:
    await asyncio.sleep(fanout.JITTER(request["q"]))
    return {"text": f"answer to {request['q']}"}


@tg.agent(name="duo")
async def two_models(task: Any) -> Any:
    a, b = await asyncio.gather(duo({"q": "A-1"}), duo({"q": "B-2"}))
    return [a["text"], b["text"]]


def test_two_concurrent_model_calls_reproduce_20_of_20_by_default(store: tg.SQLiteStore) -> None:
    fanout.JITTER = fanout._random_jitter
    asyncio.run(tg.arecord_run(two_models, None, store=store, run_id="duo"))
    assert overlapping_calls(store.events("duo"))
    verdicts = [tg.replay(store, "duo", two_models) for _ in range(20)]
    assert [r.reproduced for r in verdicts] == [True] * 20, verdicts[0].render()
    assert any("concurrent calls" in n for n in verdicts[0].notes)
    # a sequential run keeps strict matching (and no note)
    tg.record_run(lambda task: "x", None, store=store, run_id="seq", actor="agent")
    assert not overlapping_calls(store.events("seq"))
    assert tg.replay(store, "seq", lambda task: "x").notes == ()


@pytest.mark.skipif(sys.version_info < (3, 11), reason="asyncio.TaskGroup is 3.11+")
def test_a_divergence_inside_a_task_group_reports_as_anywhere_else(
    store: tg.SQLiteStore,
) -> None:
    fanout.JITTER = lambda order_id: 0.0
    asyncio.run(tg.arecord_run(fanout.triage, fanout.TASK, store=store, run_id="fan"))

    @tg.agent(name="triage")
    async def changed_in_group(task: dict[str, Any]) -> Any:
        async with asyncio.TaskGroup() as group:  # type: ignore[attr-defined,unused-ignore]
            for o in ["A-1", "B-2", "C-3", "X-9"]:  # one order changed
                group.create_task(fanout.fetch_order(o))
        return None

    @tg.agent(name="triage")
    async def changed_plain(task: dict[str, Any]) -> Any:
        await asyncio.gather(*(fanout.fetch_order(o) for o in ["A-1", "B-2", "C-3", "X-9"]))
        return None

    grouped = tg.replay(store, "fan", changed_in_group)
    plain = tg.replay(store, "fan", changed_plain)
    assert not grouped.reproduced
    assert grouped.first is not None
    assert plain.first is not None
    assert grouped.first.kind is plain.first.kind is tg.DivergenceKind.ARGS_CHANGED
    assert grouped.first.seq == plain.first.seq
    assert grouped.first.changes == plain.first.changes
    assert grouped.error is None  # not mistaken for an agent error
