"""fold: the state the agent saw at step N, in one linear pass."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

import tachograph as tg
from shop_agents import shop
from shop_agents.ledger import Ledger


def test_state_at_each_step_of_the_shop_run(store: tg.SQLiteStore, ledger: Ledger) -> None:
    tg.record_run(shop.build(), shop.TASK, store=store, run_id="f")
    events = store.events("f")

    at_start = tg.fold(events, upto=0)
    assert at_start.status == "running"
    assert at_start.input == shop.TASK
    assert at_start.last_seq == 0
    assert at_start.events == 1

    asked = tg.fold(events, upto=4)  # the first model.request, not yet answered
    assert [x["seq"] for x in asked.model_exchanges] == [4]
    assert asked.model_exchanges[0]["response"] is None
    assert [p["kind"] for p in asked.pending.values()] == ["model"]
    assert [g["guardrail"] for g in asked.guardrail_trips] == ["input_length"]
    assert asked.guardrail_trips[0]["blocked"] is False

    planned = tg.fold(events, upto=8)
    assert planned.plan == "refund"
    assert planned.model_exchanges[0]["answered_by"] == shop.MODEL_BUILD
    assert [o["tool"] for o in planned.observations] == ["lookup_order"]
    assert planned.observations[0]["result"]["price_cents"] == 2500
    assert planned.pending == {}

    paying = tg.fold(events, upto=13)  # issue_refund requested, not completed
    assert [p["tool"] for p in paying.pending.values()] == ["issue_refund"]
    assert next(iter(paying.pending.values()))["effect"] == "irreversible"
    assert paying.status == "running"
    assert paying.last_seq == 13

    end = tg.fold(events)
    assert end.status == "ok"
    assert end.output == events[-1].payload["output"]
    assert [a["by"] for a in end.accepted] == ["evaluator:policy-v1"]
    assert [d["name"] for d in end.decisions] == ["priority"]
    assert [v["type"] for v in end.values] == ["clock.read", "random.value", "random.seed"]
    assert len(end.model_exchanges) == 2
    assert end.pending == {}
    assert end.last_seq == len(events) - 1
    assert end.events == len(events)
    assert end.actor == "support"


def test_handoffs_rejections_and_custom_reducers(store: tg.SQLiteStore) -> None:
    with tg.record(store, actor="triage", run_id="h"):
        tg.handoff("refunds", reason="a refund case")
        tg.reject_output("human:ops", output="draft 1", reason="too vague")
        tg.emit("acme.review.queued", {"queue": "ops", "priority": 2})
        tg.handoff("mailer")
        tg.emit("acme.review.queued", {"queue": "legal", "priority": 1})
    events = store.events("h")

    def queued(state: tg.State, event: tg.Event) -> None:
        state.custom.setdefault("queues", []).append(event.payload["queue"])

    assert tg.fold(events, upto=1).actor == "refunds"
    assert tg.fold(events, upto=3).actor == "refunds"
    state = tg.fold(events, reducers={"acme.review.queued": queued})
    assert state.actor == "mailer"
    assert [h["to"] for h in state.handoffs] == ["refunds", "mailer"]
    assert state.rejected == [
        {"seq": 2, "by": "human:ops", "output": "draft 1", "reason": "too vague"}
    ]
    assert state.custom == {"queues": ["ops", "legal"]}
    # without a reducer a custom type is ignored, not an error
    assert tg.fold(events).custom == {}


@tg.model("pair-2026-10-01")
async def pair_model(request: dict[str, Any]) -> dict[str, Any]:
    await asyncio.sleep(request["delay"])
    return {"answer": request["n"]}


def test_concurrent_model_answers_go_to_their_own_requests(store: tg.SQLiteStore) -> None:
    async def main() -> None:
        async with tg.record(store, actor="a", run_id="pair"):
            # the first request is answered last
            await asyncio.gather(
                pair_model({"n": 1, "delay": 0.05}), pair_model({"n": 2, "delay": 0.0})
            )

    asyncio.run(main())
    exchanges = tg.fold(store.events("pair")).model_exchanges
    assert [(x["request"]["n"], x["response"]["answer"]) for x in exchanges] == [(1, 1), (2, 2)]
    assert exchanges[0]["response_seq"] > exchanges[1]["response_seq"]


# -- linearity --------------------------------------------------------------------------------

STEP = st.sampled_from(
    [
        "decision",
        "plan",
        "handoff",
        "guardrail",
        "accept",
        "reject",
        "tool",
        "model",
        "complete",
        "clock",
        "custom",
    ]
)


def build_events(steps: list[str], finish: str | None) -> list[tg.Event]:
    events: list[tg.Event] = []
    open_calls: list[tuple[str, str]] = []

    def add(type_: str, payload: dict[str, Any], **kw: Any) -> None:
        events.append(
            tg.new_event(
                run_id="prop",
                seq=len(events),
                type=type_,
                actor="agent",
                payload=payload,
                prev_hash=events[-1].hash if events else None,
                **kw,
            )
        )

    add("run.started", {"input": "x", "env": {}})
    for i, step in enumerate(steps):
        if step == "decision":
            add("decision", {"name": f"d{i}", "chosen": i})
        elif step == "plan":
            add("plan.selected", {"plan": f"p{i}"})
        elif step == "handoff":
            add("handoff", {"from": "agent", "to": f"agent{i}"})
        elif step == "guardrail":
            add("guardrail.tripwire", {"guardrail": "g", "stage": "tool", "blocked": i % 2 == 0})
        elif step in ("accept", "reject"):
            add(f"output.{step}ed", {"by": "human", "output": i})
        elif step == "tool":
            key = f"prop:t:{i}"
            open_calls.append(("tool", key))
            add(
                "tool.requested",
                {"tool": "t", "args": {"i": i}, "effect": "read"},
                idempotency_key=key,
            )
        elif step == "model":
            key = f"prop:m:{i}"
            open_calls.append(("model", key))
            add("model.request", {"request": {"i": i}}, idempotency_key=key, model="m-1")
        elif step == "complete" and open_calls:
            kind, key = open_calls.pop(i % len(open_calls))
            if kind == "tool":
                add("tool.completed", {"tool": "t", "result": i}, idempotency_key=key)
            else:
                add("model.response", {"response": {"i": i}}, idempotency_key=key, model="m-1")
        elif step == "clock":
            add("clock.read", {"value": "2026-10-15T00:00:00.000000Z"})
        else:
            add("acme.thing.done", {"i": i})
    if finish is not None:
        add("run.finished", {"status": finish, "output": "done"})
    return events


class CountingIterator:
    def __init__(self, events: list[tg.Event]) -> None:
        self.pulled = 0
        self._it = iter(events)

    def __iter__(self) -> Iterator[tg.Event]:
        return self

    def __next__(self) -> tg.Event:
        event = next(self._it)
        self.pulled += 1
        return event


@given(
    steps=st.lists(STEP, max_size=40),
    finish=st.sampled_from([None, "ok", "error", "aborted"]),
    data=st.data(),
)
def test_fold_of_a_prefix_equals_fold_upto(
    steps: list[str], finish: str | None, data: st.DataObject
) -> None:
    events = build_events(steps, finish)
    n = data.draw(st.integers(min_value=0, max_value=len(events) - 1))
    assert tg.fold(events[: n + 1]) == tg.fold(events, upto=n)
    # one pass over a one-shot iterator: each event pulled once, and none after seq n + 1
    it = CountingIterator(events)
    assert tg.fold(it, upto=n) == tg.fold(events[: n + 1])
    assert it.pulled == min(n + 2, len(events))
    whole = CountingIterator(events)
    state = tg.fold(whole)
    assert whole.pulled == len(events)
    assert state.last_seq == len(events) - 1
    assert state.status == (finish or "running")


def test_erased_events_are_listed_not_reduced() -> None:
    events = build_events(["tool", "complete", "decision"], "ok")
    erased = [e if e.seq != 2 else dataclasses.replace(e, payload=None, salt=None) for e in events]
    state = tg.fold(erased)
    assert state.erased == [2]
    assert state.observations == []  # the completion was erased
    assert list(state.pending) == ["prop:t:0"]
