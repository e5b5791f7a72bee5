"""Fold a run into the state the agent saw at step N.

:func:`fold` is one linear pass. Each event type has a reducer ``(state, event) -> None``;
users add reducers for their own types with ``reducers={"acme.review.queued": fn}``, and
their results go in ``state.custom``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..capture.boundary import CANCELLED_TYPES
from ..record.event import Event, EventType

__all__ = ["Reducer", "State", "fold"]


@dataclass
class State:
    """What the agent had seen and done up to :attr:`last_seq`."""

    run_id: str | None = None
    actor: str | None = None
    """The current actor, after handoffs."""
    status: str = "empty"
    """``empty``, ``running``, ``ok``, ``error`` or ``aborted``."""
    input: Any = None
    env: dict[str, Any] | None = None
    parent: dict[str, Any] | None = None
    labels: dict[str, str] = field(default_factory=dict)
    plan: Any = None
    plans: list[dict[str, Any]] = field(default_factory=list)
    model_exchanges: list[dict[str, Any]] = field(default_factory=list)
    observations: list[dict[str, Any]] = field(default_factory=list)
    """Tool results (and failures), in completion order."""
    pending: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Intents with no completion yet, by idempotency key: pending side effects."""
    guardrail_trips: list[dict[str, Any]] = field(default_factory=list)
    accepted: list[dict[str, Any]] = field(default_factory=list)
    rejected: list[dict[str, Any]] = field(default_factory=list)
    decisions: list[dict[str, Any]] = field(default_factory=list)
    handoffs: list[dict[str, Any]] = field(default_factory=list)
    values: list[dict[str, Any]] = field(default_factory=list)
    """Clock readings, random values and external reads, with their seq."""
    output: Any = None
    error: dict[str, Any] | None = None
    erased: list[int] = field(default_factory=list)
    custom: dict[str, Any] = field(default_factory=dict)
    last_seq: int = -1
    events: int = 0
    dry_run_results: list[int] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON form (documented in docs/cli.md, ``tacho state --json``)."""
        return {
            "run_id": self.run_id,
            "actor": self.actor,
            "status": self.status,
            "last_seq": self.last_seq,
            "events": self.events,
            "input": self.input,
            "parent": self.parent,
            "labels": self.labels,
            "plan": self.plan,
            "plans": self.plans,
            "model_exchanges": self.model_exchanges,
            "observations": self.observations,
            "pending": list(self.pending.values()),
            "guardrail_trips": self.guardrail_trips,
            "accepted": self.accepted,
            "rejected": self.rejected,
            "decisions": self.decisions,
            "handoffs": self.handoffs,
            "values": self.values,
            "output": self.output,
            "error": self.error,
            "erased": self.erased,
            "dry_run_results": self.dry_run_results,
            "custom": self.custom,
        }


Reducer = Callable[[State, Event], None]


def _p(event: Event) -> dict[str, Any]:
    return event.payload if isinstance(event.payload, dict) else {}


def _started(state: State, e: Event) -> None:
    p = _p(e)
    state.status = "running"
    state.input = p.get("input")
    state.env = p.get("env")
    state.parent = p.get("parent")
    state.labels = dict(p.get("labels") or {})


def _finished(state: State, e: Event) -> None:
    p = _p(e)
    state.status = str(p.get("status", "ok"))
    state.output = p.get("output")
    state.error = p.get("error")


def _model_request(state: State, e: Event) -> None:
    state.pending[e.idempotency_key or f"seq:{e.seq}"] = {
        "seq": e.seq,
        "kind": "model",
        "model": e.model,
        "key": e.idempotency_key,
    }
    state.model_exchanges.append(
        {
            "seq": e.seq,
            "model": e.model,
            "key": e.idempotency_key,
            "request": _p(e).get("request"),
            "response": None,
        }
    )


def _model_done(state: State, e: Event) -> None:
    intent = state.pending.pop(e.idempotency_key or "", None)
    # Concurrent calls complete in any order: the answer belongs to the request with its key
    # (the latest open exchange only when the key names none).
    for exchange in reversed(state.model_exchanges):
        if "response_seq" in exchange:
            continue
        if intent is not None and exchange["seq"] != intent["seq"]:
            continue
        if e.type == EventType.MODEL_RESPONSE.value:
            exchange["response"] = _p(e).get("response")
            exchange["answered_by"] = e.model
        else:
            exchange["error"] = _p(e).get("error")
        exchange["response_seq"] = e.seq
        break


def _tool_requested(state: State, e: Event) -> None:
    p = _p(e)
    state.pending[e.idempotency_key or f"seq:{e.seq}"] = {
        "seq": e.seq,
        "kind": "tool",
        "tool": p.get("tool"),
        "args": p.get("args"),
        "effect": p.get("effect"),
        "key": e.idempotency_key,
    }


def _tool_done(state: State, e: Event) -> None:
    p = _p(e)
    intent = state.pending.pop(e.idempotency_key or "", None)
    error = p.get("error")
    if (
        intent is not None
        and intent.get("effect") in ("write", "irreversible")
        and isinstance(error, dict)
        and error.get("type") in CANCELLED_TYPES
    ):
        # cancelled before it answered (a deadline, Ctrl-C under asyncio.run): whether its
        # effect happened is not known, so it stays among the pending side effects
        state.pending[e.idempotency_key or f"seq:{e.seq}"] = {**intent, "cancelled_at": e.seq}
    obs: dict[str, Any] = {"seq": e.seq, "tool": p.get("tool"), "key": e.idempotency_key}
    if intent is not None:
        obs["args"] = intent.get("args")
    if e.type == EventType.TOOL_COMPLETED.value:
        obs["result"] = p.get("result")
        if p.get("dry_run"):
            obs["dry_run"] = True
            state.dry_run_results.append(e.seq)
    else:
        obs["error"] = p.get("error")
    state.observations.append(obs)


def _plan(state: State, e: Event) -> None:
    state.plan = _p(e).get("plan")
    state.plans.append({"seq": e.seq, **_p(e)})


def _handoff(state: State, e: Event) -> None:
    state.actor = _p(e).get("to", state.actor)
    state.handoffs.append({"seq": e.seq, **_p(e)})


def _append_to(name: str) -> Reducer:
    def reduce(state: State, e: Event) -> None:
        getattr(state, name).append({"seq": e.seq, **_p(e)})

    return reduce


def _value(state: State, e: Event) -> None:
    state.values.append({"seq": e.seq, "type": e.type, **_p(e)})


DEFAULT_REDUCERS: dict[str, Reducer] = {
    EventType.RUN_STARTED.value: _started,
    EventType.RUN_FINISHED.value: _finished,
    EventType.MODEL_REQUEST.value: _model_request,
    EventType.MODEL_RESPONSE.value: _model_done,
    EventType.MODEL_FAILED.value: _model_done,
    EventType.TOOL_REQUESTED.value: _tool_requested,
    EventType.TOOL_COMPLETED.value: _tool_done,
    EventType.TOOL_FAILED.value: _tool_done,
    EventType.PLAN_SELECTED.value: _plan,
    EventType.GUARDRAIL_TRIPWIRE.value: _append_to("guardrail_trips"),
    EventType.OUTPUT_ACCEPTED.value: _append_to("accepted"),
    EventType.OUTPUT_REJECTED.value: _append_to("rejected"),
    EventType.DECISION.value: _append_to("decisions"),
    EventType.HANDOFF.value: _handoff,
    EventType.CLOCK_READ.value: _value,
    EventType.RANDOM_SEED.value: _value,
    EventType.RANDOM_VALUE.value: _value,
    EventType.EXTERNAL_READ.value: _value,
}


def fold(
    events: Iterable[Event],
    upto: int | None = None,
    *,
    reducers: Mapping[str, Reducer] | None = None,
) -> State:
    """The state after the event at seq ``upto`` (the whole run when ``None``).

    Erased events are counted and listed, not reduced. Unknown types are ignored unless a
    reducer is given for them.
    """
    table = dict(DEFAULT_REDUCERS)
    if reducers:
        table.update(reducers)
    state = State()
    for event in events:
        if upto is not None and event.seq > upto:
            break
        if state.run_id is None:
            state.run_id = event.run_id
            state.actor = event.actor
        state.events += 1
        state.last_seq = event.seq
        if event.erased:
            state.erased.append(event.seq)
            continue
        reducer = table.get(event.type)
        if reducer is not None:
            reducer(state, event)
    return state
