"""Public test helpers, and the conformance suite every store engine runs.

:func:`build_run` makes a valid hash chain to append, export or tamper with. The store
conformance suite lives in :mod:`tachograph.testing.conformance` (it needs pytest): subclass
:class:`~tachograph.testing.conformance.StoreConformance` in a test module and implement
``make_store``::

    from tachograph.testing.conformance import StoreConformance

    class TestMyStore(StoreConformance):
        def make_store(self, tmp_path):
            return MyStore(tmp_path / "runs")

Importing this package does not import pytest.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..record.event import Event, EventType, new_event

__all__ = ["build_run", "fixed_ts"]


def fixed_ts(index: int, *, day: str = "2026-10-15") -> str:
    """A deterministic timestamp in the record format: ``index`` seconds after midnight UTC."""
    hours, rest = divmod(index, 3600)
    minutes, seconds = divmod(rest, 60)
    if hours > 23:
        raise ValueError(f"fixed_ts: index {index} is not within one day")
    return f"{day}T{hours:02d}:{minutes:02d}:{seconds:02d}.000000Z"


def _default_payload(seq: int) -> dict[str, Any]:
    return {"name": "step", "chosen": seq, "chosen_from": [seq, seq + 1]}


def build_run(
    run_id: str = "run-1",
    length: int = 3,
    *,
    tenant: str = "default",
    actor: str = "agent",
    status: str | None = None,
    after: tuple[int, str] | None = None,
    ts: Callable[[int], str] | None = None,
    payload: Callable[[int], dict[str, Any]] | None = None,
) -> list[Event]:
    """``length`` events forming a valid chain (SPEC section 3), ready to append.

    The run opens with ``run.started`` (unless ``after``, a ``(seq, hash)`` head such as
    :meth:`Store.head <tachograph.store.Store.head>` returns, continues an existing run), carries
    ``decision`` events, and closes with ``run.finished`` of ``status`` when one is given.
    ``ts(seq)`` and ``payload(seq)`` override the timestamp and the body of the middle events.
    """
    if length < 0:
        raise ValueError("length must not be negative")
    seq, prev = (0, None) if after is None else (after[0] + 1, after[1])
    events: list[Event] = []
    for index in range(length):
        last = index == length - 1
        if seq == 0:
            kind, body = (
                EventType.RUN_STARTED.value,
                {"input": f"input of {run_id}", "env": {"code_version": None}},
            )
        elif last and status is not None:
            kind, body = EventType.RUN_FINISHED.value, {"status": status}
        else:
            kind, body = EventType.DECISION.value, (payload or _default_payload)(seq)
        event = new_event(
            run_id=run_id,
            seq=seq,
            type=kind,
            actor=actor,
            payload=body,
            prev_hash=prev,
            tenant=tenant,
            ts=ts(seq) if ts is not None else None,
        )
        events.append(event)
        seq, prev = seq + 1, event.hash
    return events
