"""The served tool call matched by its stored bytes (``Matcher.same_next_call``) and the
general comparison it stands in front of: the same JSON value in other bytes still reproduces,
a value of another JSON type is still a change, and an erased request is still reported."""

from __future__ import annotations

from typing import Any

import pytest

import tachograph as tg
from tachograph.lifecycle.erasure import erase
from tachograph.record.event import EventType
from tachograph.replay.matchers import Matcher


@tg.tool(effect="read", name="echo_kw")
def echo_kw(**fields: Any) -> dict[str, Any]:
    return {"n": len(fields)}


def _record(store: tg.SQLiteStore, fields: dict[str, Any]) -> str:
    def agent(task: str) -> int:
        return int(echo_kw(**fields)["n"])

    return tg.record_run(tg.agent(name="kw")(agent), "go", store=store).run_id


def _replay(store: tg.SQLiteStore, run_id: str, fields: dict[str, Any]) -> tg.ReplayReport:
    def agent(task: str) -> int:
        return int(echo_kw(**fields)["n"])

    return tg.replay(store, run_id, tg.agent(name="kw")(agent))


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Each look for the agent's call among the recorded steps by its bytes: True where it was
    found there, False where it was left to the general comparison (a call that is not found
    is looked for once more by the general path before it compares)."""
    taken: list[bool] = []
    original = Matcher.same_next_call

    def spy(self: Matcher, mine: bytes) -> Any:
        event = original(self, mine)
        taken.append(event is not None)
        return event

    monkeypatch.setattr(Matcher, "same_next_call", spy)
    return taken


def test_the_same_call_is_taken_by_its_bytes(
    store: tg.SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = _record(store, {"a": 1, "b": "x"})
    taken = _counting(monkeypatch)
    report = _replay(store, run_id, {"a": 1, "b": "x"})
    assert report.reproduced, report.render()
    assert taken == [True]


def test_the_same_value_in_other_bytes_still_reproduces(
    store: tg.SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # keyword arguments in another order: another key order in the payload's bytes
    run_id = _record(store, {"a": 1, "b": "x"})
    taken = _counting(monkeypatch)
    report = _replay(store, run_id, {"b": "x", "a": 1})
    assert report.reproduced, report.render()
    assert taken
    assert True not in taken


@pytest.mark.parametrize(
    ("recorded", "now"),
    [({"a": 1}, {"a": True}), ({"a": 1}, {"a": 2}), ({"a": 1}, {"a": 1, "b": None})],
)
def test_a_changed_value_is_still_a_divergence(
    store: tg.SQLiteStore,
    monkeypatch: pytest.MonkeyPatch,
    recorded: dict[str, Any],
    now: dict[str, Any],
) -> None:
    run_id = _record(store, recorded)
    taken = _counting(monkeypatch)
    report = _replay(store, run_id, now)
    assert not report.reproduced
    assert report.first is not None
    assert report.first.seq == 1
    assert report.first.kind is tg.DivergenceKind.ARGS_CHANGED
    assert taken
    assert True not in taken


def test_an_erased_request_is_reported_not_served(
    store: tg.SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = _record(store, {"a": 1})
    events = store.events(run_id)
    assert events[1].type == EventType.TOOL_REQUESTED.value
    erase(store, run_id, reason="test", seqs=[1])
    taken = _counting(monkeypatch)
    report = _replay(store, run_id, {"a": 1})
    assert not report.reproduced
    assert report.first is not None
    assert report.first.kind is tg.DivergenceKind.UNREPLAYABLE
    assert taken
    assert True not in taken
