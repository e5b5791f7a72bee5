"""RunHistory's facts, gathered in one pass with its completions, are what a pass of its own
for each finds (the passes replay made before)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tachograph.record.event import Event, new_event
from tachograph.replay.api import overlapping_calls, used_models
from tachograph.replay.history import RunHistory, gather

_KINDS = [
    "tool.requested",
    "tool.completed",
    "tool.failed",
    "model.request",
    "model.response",
    "model.failed",
    "decision",
]

_step = st.tuples(
    st.sampled_from(_KINDS),
    st.sampled_from([None, "k1", "k2", "k3"]),  # idempotency key
    st.sampled_from([None, "m-1", "m-2"]),  # model
    st.sampled_from(["search", "pay"]),  # tool
    st.booleans(),  # dry run
    st.booleans(),  # erased
)


def _events(steps: list[tuple[Any, ...]]) -> list[Event]:
    out: list[Event] = []
    for seq, (kind, key, model, tool, dry, erased) in enumerate(steps):
        payload: dict[str, Any] = {"tool": tool} if kind.startswith("tool.") else {"x": seq}
        if dry:
            payload["dry_run"] = True
        e = new_event(
            run_id="run-1",
            seq=seq,
            type=kind,
            actor="t",
            payload=payload,
            prev_hash=out[-1].hash if out else None,
            idempotency_key=key,
            model=model,
        )
        out.append(replace(e, payload=None, salt=None) if erased else e)
    return out


def _overlapping_reference(events: list[Event]) -> bool:
    open_keys: set[str] = set()
    for e in events:
        if e.idempotency_key is None:
            continue
        if e.type in ("tool.requested", "model.request"):
            if open_keys:
                return True
            open_keys.add(e.idempotency_key)
        elif e.type in ("tool.completed", "tool.failed", "model.response", "model.failed"):
            open_keys.discard(e.idempotency_key)
    return False


@settings(max_examples=300, deadline=None)
@given(st.lists(_step, max_size=40))
def test_gathered_facts_are_what_each_pass_finds(steps: list[tuple[Any, ...]]) -> None:
    events = _events(steps)
    completions, facts = gather(events)
    assert completions == {
        e.idempotency_key: e
        for e in events
        if e.type in ("tool.completed", "tool.failed", "model.response", "model.failed")
        and e.idempotency_key is not None
    }
    assert facts.erased == tuple(e.seq for e in events if e.erased)
    assert facts.used_tools == frozenset(
        str(e.payload.get("tool"))
        for e in events
        if e.type == "tool.requested" and isinstance(e.payload, dict)
    )
    assert facts.used_models == frozenset(
        e.model for e in events if e.type == "model.request" and e.model is not None
    )
    assert facts.dry_run == tuple(
        e.seq
        for e in events
        if e.type == "tool.completed" and (e.payload or {}).get("dry_run") is True
    )
    assert facts.overlapping == _overlapping_reference(events)
    assert overlapping_calls(events) == facts.overlapping
    assert used_models(events) == facts.used_models


def test_a_history_built_without_from_events_gathers_its_facts_when_asked() -> None:
    events = _events(
        [
            ("tool.requested", "k1", None, "search", False, False),
            ("tool.requested", "k2", None, "pay", False, True),
            ("tool.completed", "k1", None, "search", True, False),
        ]
    )
    built = RunHistory.from_events(events, report=None)
    bare = RunHistory(tuple(events), built.report, "events")
    assert bare.known is None
    assert bare.facts == built.facts
    assert bare.known == built.facts  # kept
    assert (bare.erased, bare.used_tools, bare.facts.dry_run) == ((1,), {"search"}, (2,))
    assert bare.facts.overlapping
