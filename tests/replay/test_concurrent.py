"""Concurrent tool calls (asyncio.gather): key-matching replay reproduces whatever the
completion order, in recording and in replay; strict replay notices a different order."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

import tachograph as tg
from shop_agents import fanout

ORDERS = fanout.TASK["orders"]


@pytest.fixture(autouse=True)
def jitter() -> Iterator[None]:
    saved = fanout.JITTER
    fanout.CALLS.clear()
    yield
    fanout.JITTER = saved


def completion_order(store: tg.SQLiteStore, run_id: str) -> list[str]:
    return [
        e.payload["result"]["order_id"]
        for e in store.events(run_id)
        if e.type == "tool.completed" and "price_cents" in e.payload["result"]
    ]


def test_key_matching_reproduces_whatever_the_completion_order(store: tg.SQLiteStore) -> None:
    for i in range(4):
        fanout.JITTER = fanout._random_jitter
        run_id = f"fan-{i}"
        asyncio.run(tg.arecord_run(fanout.triage, fanout.TASK, store=store, run_id=run_id))
        recorded_calls = dict(fanout.CALLS)
        for _ in range(3):
            report = tg.replay(store, run_id, fanout.triage, match="key")
            assert report.reproduced, report.render()
            assert report.served == report.events
            assert report.output == store.events(run_id)[-1].payload["output"]
        assert dict(fanout.CALLS) == recorded_calls  # no tool or model body ran in replay


def test_a_different_order_breaks_strict_matching_but_not_key_matching(
    store: tg.SQLiteStore,
) -> None:
    slow_first = {o: 0.01 * (len(ORDERS) - i) for i, o in enumerate(ORDERS)}
    fanout.JITTER = slow_first.__getitem__  # recorded: the last order finishes first
    asyncio.run(tg.arecord_run(fanout.triage, fanout.TASK, store=store, run_id="fan"))
    assert completion_order(store, "fan") == list(reversed(ORDERS))

    fanout.JITTER = lambda order_id: 0.01 * ORDERS.index(order_id)  # now the first does
    calls = dict(fanout.CALLS)
    strict = tg.replay(store, "fan", fanout.triage, match="strict")
    assert not strict.reproduced
    assert strict.first is not None
    assert strict.first.kind in (
        tg.DivergenceKind.ARGS_CHANGED,
        tg.DivergenceKind.TYPE_CHANGED,
    )
    keyed = tg.replay(store, "fan", fanout.triage, match="key")
    assert keyed.reproduced, keyed.render()
    assert [r["route"] for r in keyed.output["routes"]] == ["refund", "review", "refund", "review"]
    assert dict(fanout.CALLS) == calls


def test_key_matching_still_finds_a_changed_decision(store: tg.SQLiteStore) -> None:
    fanout.JITTER = lambda order_id: 0.0
    asyncio.run(tg.arecord_run(fanout.triage, fanout.TASK, store=store, run_id="fan"))
    recorded = store.events("fan")
    decision = next(
        e for e in recorded if e.type == "decision" and e.payload["name"] == "route:C-3"
    )

    async def _branch(order_id: str) -> dict[str, str]:
        order = await fanout.fetch_order(order_id)
        scored = await fanout.score(order)
        route = "refund" if scored["score"] < 5 else "review"  # the threshold changed
        tg.decide(f"route:{order_id}", route, chosen_from=["refund", "review"])
        return {"order_id": order_id, "route": route}

    @tg.agent(name="triage")
    async def stricter(task: dict[str, object]) -> object:
        routes = await asyncio.gather(*(_branch(o) for o in ORDERS))
        answer = await fanout.triage_model({"messages": [{"role": "user", "content": routes}]})
        return {"routes": routes, "summary": answer["text"]}

    report = tg.replay(store, "fan", stricter, match="key", collect=True)
    kinds = [(d.kind, d.seq) for d in report.divergences]
    assert (tg.DivergenceKind.DECISION_CHANGED, decision.seq) in kinds
    item = next(d for d in report.divergences if d.seq == decision.seq)
    assert [(c.path, c.old, c.new) for c in item.changes] == [
        ("$.payload.chosen", "refund", "review")
    ]


def test_a_replay_stop_unwinds_concurrent_branches(store: tg.SQLiteStore) -> None:
    """An unreplayable step inside one gathered branch stops the whole async agent cleanly."""
    import sqlite3

    fanout.JITTER = lambda order_id: 0.0
    asyncio.run(tg.arecord_run(fanout.triage, fanout.TASK, store=store, run_id="fan"))
    done = next(
        e
        for e in store.events("fan")
        if e.type == "tool.completed" and e.payload["result"].get("order_id") == "C-3"
    )
    db = sqlite3.connect(store.path)
    db.execute(
        "UPDATE payloads SET body=NULL, salt=NULL "
        "WHERE id=(SELECT id FROM events WHERE event_id=?)",
        (done.event_id,),
    )
    db.commit()
    db.close()
    calls = dict(fanout.CALLS)
    report = tg.replay(store, "fan", fanout.triage, match="key")
    assert report.first is not None
    assert (report.first.kind, report.first.seq) == (tg.DivergenceKind.UNREPLAYABLE, done.seq)
    assert report.aborted
    assert dict(fanout.CALLS) == calls
