"""Recorded events and the payload dicts the recording path builds itself stay out of the
cycle collector's sight (the compiled ``native.event`` and ``native.untrack``): the events
waiting for the writer thread had survived the young collections into the oldest
generation, so a long recording paid for full collections that walk the whole heap.

What must not change with it: a dict the caller handed in stays tracked, and reference
cycles of the agent's own objects, reached from a recorded answer, are still collected."""

from __future__ import annotations

import gc
import weakref
from pathlib import Path
from typing import Any

import pytest

import tachograph
from tachograph.capture.recorder import Observer, Recorder
from tachograph.record.compiled import NATIVE
from tachograph.record.event import Event
from tachograph.store import SQLiteStore

compiled_only = pytest.mark.skipif(NATIVE is None, reason="the compiled helpers untrack")


class _Seen(Observer):
    """Whether each event, and its payload, was tracked when the run appended it."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, bool, bool, Any]] = []

    def after(self, recorder: Recorder, event: Event) -> None:
        self.seen.append(
            (event.type, gc.is_tracked(event), gc.is_tracked(event.payload), event.payload)
        )


@tachograph.tool(effect="read", name="gc_lookup")
def _lookup(i: int) -> dict[str, Any]:
    return {"item": i, "tags": ["a", "b"], "nested": {"depth": [1, 2, {"x": i}]}}


@tachograph.model("gc-model-2025-01-01")
def _model(request: dict[str, Any]) -> dict[str, Any]:
    return {"model": "gc-model-2025-01-01", "content": [{"text": "ok"}], "usage": {"in": 1}}


def _agent(user_payload: dict[str, Any]) -> int:
    total = 0
    for i in range(3):
        total += _lookup(i)["item"]
    _model({"messages": [{"role": "user", "content": "hi"}]})
    tachograph.emit("decision", user_payload)
    return total


@compiled_only
def test_events_and_the_paths_own_payloads_are_untracked_a_callers_dict_is_not(
    tmp_path: Path,
) -> None:
    seen = _Seen()
    user_payload = {"choice": "refund", "steps": [{"n": 1}]}  # holds a container: tracked
    assert gc.is_tracked(user_payload)
    with SQLiteStore(tmp_path / "runs.db") as store:
        result = tachograph.record_run(
            tachograph.agent(name="gc_agent", tools=[_lookup])(_agent),
            user_payload,
            store=store,
            actor="t",
            observers=[seen],
        )
        assert result.run_id
    by_type: dict[str, list[tuple[bool, bool, Any]]] = {}
    for type_, event_tracked, payload_tracked, payload in seen.seen:
        by_type.setdefault(type_, []).append((event_tracked, payload_tracked, payload))
    assert not any(tracked for _, tracked, _, _ in seen.seen), "an event was tracked"
    for type_ in ("tool.requested", "tool.completed", "model.request", "model.response"):
        assert len(by_type[type_]) == (3 if type_.startswith("tool") else 1)
        assert not any(payload_tracked for _, payload_tracked, _ in by_type[type_]), type_
    # the caller's own dict (emitted as given: no processor changed it) keeps its tracking
    ((_, decision_tracked, decision_payload),) = by_type["decision"]
    assert decision_payload is user_payload
    assert decision_tracked
    assert gc.is_tracked(user_payload)


class _Node:
    """An object of the agent's own, put into a recorded answer after it was recorded."""

    def __init__(self, answer: dict[str, Any] | None = None) -> None:
        self.answer = answer


def _run_answers(tmp_path: Path, cycle: bool) -> list[weakref.ref[_Node]]:
    """Weak references to objects of the agent's own that only the recorded answers hold
    (with ``cycle``: each also holds its answer back) once the run has ended."""
    refs: list[weakref.ref[_Node]] = []

    def agent(_: Any) -> None:
        for i in range(5):
            answer = _lookup(i)
            node = _Node(answer if cycle else None)
            answer["tags"].append(node)  # the answer's list -> node (-> the answer)
            refs.append(weakref.ref(node))

    with SQLiteStore(tmp_path / "runs.db") as store:
        result = tachograph.record_run(
            tachograph.agent(name="gc_answers", tools=[_lookup])(agent), None, store=store
        )
        # the record holds the answers as they were returned
        results = [
            e.payload["result"]["tags"]
            for e in store.events(result.run_id)
            if e.type == "tool.completed"
        ]
        assert results == [["a", "b"]] * 5
        if cycle:
            gc.collect()
        # while the store is still open and its writer thread waits for more
        return refs


def test_the_writer_does_not_hold_the_last_batch_after_a_run(tmp_path: Path) -> None:
    # Freed by reference counting alone, as soon as the agent let go of its answers. The
    # writer thread kept its last batch of events, and their payloads, in memory while it
    # waited for the next.
    refs = _run_answers(tmp_path, cycle=False)
    assert [ref() for ref in refs] == [None] * 5


def test_a_cycle_through_a_recorded_answer_is_still_collected(tmp_path: Path) -> None:
    refs = _run_answers(tmp_path, cycle=True)
    assert [ref() for ref in refs] == [None] * 5


@compiled_only
def test_untrack_takes_only_an_exact_dict() -> None:
    assert NATIVE is not None

    class Sub(dict[str, Any]):
        pass

    plain: dict[str, Any] = {"a": []}
    sub = Sub(a=[])
    listed: list[Any] = [[]]
    for obj in (plain, sub, listed):
        assert gc.is_tracked(obj)
        assert NATIVE.untrack(obj) is None
    assert not gc.is_tracked(plain)
    assert gc.is_tracked(sub)
    assert gc.is_tracked(listed)
    plain["b"] = {}  # a container inserted: CPython's dict tracks itself again
    assert gc.is_tracked(plain)
