"""A decorated call the agent's own code cancels (``asyncio.wait_for`` timing out, a task
cancelled) ends with a completion, ``tool.failed`` / ``model.failed`` naming
``asyncio.exceptions.CancelledError``: it is told from a call a crash cut short (a request
with no completion), and its replay waits, as the live call did, for the agent to cancel it
again."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import pytest

import tachograph as tg
from tachograph.capture import boundary
from tachograph.replay.report import DivergenceKind

CANCELLED = {"type": "asyncio.exceptions.CancelledError", "message": ""}


@tg.tool(effect="read")
async def slow_lookup(order: str) -> dict[str, Any]:
    await asyncio.sleep(30)
    return {"order": order, "late": True}


@tg.tool(effect="read")
async def quick_lookup(order: str) -> dict[str, Any]:
    return {"order": order, "total": 30}


@tg.model("gpt-5.6-2026-08-07")
async def slow_model(prompt: str) -> str:
    await asyncio.sleep(30)
    return "late"


def impatient(deadline: float) -> Any:
    async def agent(task: Any) -> Any:
        try:
            found: Any = await asyncio.wait_for(slow_lookup(order="A-1"), deadline)
        except asyncio.TimeoutError:
            found = "timed out"
        try:
            said: Any = await asyncio.wait_for(slow_model("hi"), deadline)
        except asyncio.TimeoutError:
            said = "no answer"
        return {"found": found, "said": said, "quick": await quick_lookup(order="A-2")}

    return agent


def test_a_cancelled_tool_and_model_call_are_recorded_failed(tmp_path: Path) -> None:
    db = str(tmp_path / "runs.db")
    result = tg.record_run(impatient(0.2), None, store=db, run_id="c-1")
    assert result.status == "ok"
    assert result.output == {
        "found": "timed out",
        "said": "no answer",
        "quick": {"order": "A-2", "total": 30},
    }
    recorded = [(e.type, e.payload) for e in tg.open_store(db).events("c-1")]
    kinds = [t for t, _ in recorded]
    assert kinds[1:7] == [
        "tool.requested",
        "tool.failed",
        "model.request",
        "model.failed",
        "tool.requested",
        "tool.completed",
    ]
    assert recorded[2][1] == {"tool": "slow_lookup", "error": CANCELLED}
    assert recorded[4][1]["error"] == CANCELLED

    # every request has its completion: nothing here looks like a crash
    assert tg.open_store(db).verify("c-1").ok


def test_the_replay_waits_for_the_agents_own_deadline(tmp_path: Path) -> None:
    db = str(tmp_path / "runs.db")
    agent = impatient(0.2)
    result = tg.record_run(agent, None, store=db, run_id="c-2")
    report = tg.replay(db, "c-2", agent)
    # reproduced: the served calls waited until the agent's own deadline cancelled them
    # (had nothing cancelled them within the wait, each would be an unreplayable divergence)
    assert report.reproduced, report.render()
    assert report.output == result.output
    assert not report.notes  # the cancellation is rebuilt, not a RecordedError


def test_an_agent_that_no_longer_cancels_the_call_diverges_instead_of_hanging(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = str(tmp_path / "runs.db")
    tg.record_run(impatient(0.2), None, store=db, run_id="c-3")
    cancelled_seq = 2  # the tool.failed of slow_lookup
    monkeypatch.setattr(boundary, "CANCELLED_WAIT", 0.2)
    report = tg.replay(db, "c-3", impatient(600))
    assert not report.reproduced
    first = report.first
    assert first is not None
    assert (first.kind, first.seq) == (DivergenceKind.UNREPLAYABLE, cancelled_seq)
    assert "nothing cancelled it" in first.explanation
    assert "slow_lookup" in first.explanation


def test_a_call_the_runs_own_cancellation_ended_is_where_the_record_ends(
    tmp_path: Path,
) -> None:
    db = str(tmp_path / "runs.db")

    async def agent(task: Any) -> Any:
        return await slow_lookup(order="A-1")

    async def cancelled_from_outside() -> None:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(tg.arecord_run(agent, None, store=db, run_id="c-4"), 0.3)

    asyncio.run(cancelled_from_outside())
    recorded = tg.open_store(db).events("c-4")
    assert [e.type for e in recorded][1:] == ["tool.requested", "tool.failed", "run.finished"]
    assert recorded[-1].payload["status"] == "aborted"
    report = tg.replay(db, "c-4", agent)
    first = report.first
    assert first is not None
    assert first.kind == DivergenceKind.UNREPLAYABLE
    # at once: the explanation of a call nothing cancelled after the wait is another one
    assert "cancelled from outside" in first.explanation
    assert "nothing cancelled it" not in first.explanation


def test_a_sync_tool_that_raises_cancelled_error_itself_is_served_it(tmp_path: Path) -> None:
    """A synchronous call cannot be cancelled from outside: one that raises
    ``CancelledError`` itself is recorded failed and served the error again."""
    db = str(tmp_path / "runs.db")

    @tg.tool(effect="read")
    def gives_up(order: str) -> str:
        raise asyncio.CancelledError

    def agent(task: Any) -> Any:
        try:
            return gives_up(order="A-1")
        except asyncio.CancelledError:
            return "gave up"

    result = tg.record_run(agent, None, store=db, run_id="c-5")
    assert result.output == "gave up"
    recorded = tg.open_store(db).events("c-5")
    assert recorded[2].type == "tool.failed"
    assert recorded[2].payload["error"] == CANCELLED
    assert tg.replay(db, "c-5", agent).reproduced


def test_a_cancellations_message_is_not_recorded(tmp_path: Path) -> None:
    """anyio cancels with "Cancelled via cancel scope 7f... by <Task ... /path/...>": an
    address and local paths, different in every run. The record keeps the type alone."""
    db = str(tmp_path / "runs.db")

    async def agent(task: Any) -> Any:
        call = asyncio.ensure_future(slow_lookup(order="A-1"))
        await asyncio.sleep(0.05)
        call.cancel("Cancelled via cancel scope 7f3a9c by <Task pending /home/me/agent.py:3>")
        try:
            await call
        except asyncio.CancelledError:
            return "cancelled"
        return "answered"

    result = tg.record_run(agent, None, store=db, run_id="c-6")
    assert result.output == "cancelled"
    failed = [e for e in tg.open_store(db).events("c-6") if e.type == "tool.failed"]
    assert [e.payload["error"] for e in failed] == [CANCELLED]
    assert tg.replay(db, "c-6", agent).reproduced


def test_a_cancelled_irreversible_call_stays_a_pending_side_effect(tmp_path: Path) -> None:
    """Cancelled before it answered, a charge may or may not have gone through: the state
    keeps it among the pending side effects (it dropped out, as if it had failed)."""
    from tachograph.replay.fold import fold

    db = str(tmp_path / "runs.db")

    @tg.tool(effect="irreversible")
    async def charge(order: str) -> str:
        await asyncio.sleep(30)
        return "charged"

    async def agent(task: Any) -> Any:
        try:
            return await asyncio.wait_for(charge(order="A-1"), 0.2)
        except asyncio.TimeoutError:
            return await quick_lookup(order="A-1")

    tg.record_run(agent, None, store=db, run_id="c-7")
    events = tg.open_store(db).events("c-7")
    state = fold(events)
    [pending] = state.to_dict()["pending"]
    assert (pending["tool"], pending["effect"]) == ("charge", "irreversible")
    failed = next(e for e in events if e.type == "tool.failed")
    assert pending["cancelled_at"] == failed.seq
    assert [o["tool"] for o in state.to_dict()["observations"]] == ["charge", "quick_lookup"]


def test_an_agent_that_ends_by_its_own_cancellation_replays_as_aborted(tmp_path: Path) -> None:
    """It cancels a call of its own and lets the CancelledError end it: recorded aborted,
    replayed aborted (the replay raised the bare CancelledError, with no report)."""
    db = str(tmp_path / "runs.db")

    async def agent(task: Any) -> Any:
        call = asyncio.ensure_future(slow_lookup(order="A-1"))
        await asyncio.sleep(0.05)
        call.cancel()
        try:
            await call
        except asyncio.CancelledError:
            await quick_lookup(order="A-0")
            raise

    with contextlib.suppress(asyncio.CancelledError):
        tg.record_run(agent, None, store=db, run_id="c-8")
    assert tg.open_store(db).events("c-8")[-1].payload["status"] == "aborted"
    report = tg.replay(db, "c-8", agent)
    assert report.reproduced, report.render()
    assert "CancelledError: " not in report.render()  # no message: no trailing colon


def test_a_call_left_waiting_longer_than_recorded_is_not_vouched_for(tmp_path: Path) -> None:
    """The record says a call went unanswered for as long as it ran before its cancellation
    (or before the run's end), no longer: an agent that now waits far longer before it
    cancels might have had its answer meanwhile, which the record cannot say."""
    db = str(tmp_path / "runs.db")

    async def agent(task: Any) -> Any:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(slow_lookup(order="A-1"), task)
        return "gave up"

    tg.record_run(agent, 0.05, store=db, run_id="c-9")
    assert tg.replay(db, "c-9", agent).reproduced  # the same deadline
    report = tg.replay(db, "c-9", lambda task: agent(1.5))  # a deadline 30 times longer
    assert not report.reproduced
    first = report.first
    assert first is not None
    assert first.kind == DivergenceKind.UNREPLAYABLE
    assert "cannot say whether it would have answered" in first.explanation
