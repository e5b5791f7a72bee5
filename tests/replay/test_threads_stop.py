"""A replay stops at the first divergence in whichever thread of the agent it happens: a review
found a divergence in a ``threading.Thread`` printed as a ``ReplayStopped`` traceback (through
``threading.excepthook``), while the agent's main thread went on and its next step was
reported as a second, bogus divergence (``type_changed`` at the same seq), although the replay
was not collecting. A ThreadPoolExecutor task already carried the stop back to the main thread
through its future.

Real threads in real replays of runs recorded in a real SQLite store."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

import tachograph as tg
from tachograph.replay.report import DivergenceKind


def _agent(then: str, offset: int, seen: list[str]) -> Any:
    """Looks ``x + offset`` up in a thread, joins it, then does ``then`` in its main thread:
    a recorded decision, an error for the result the thread did not make, or just return."""

    @tg.tool(effect="read", name="lookup")
    def lookup(x: int) -> int:
        return x * 10

    @tg.agent(name=f"threaded-{then}", tools=[lookup], code_version="1")
    def agent(x: int) -> int:
        found: list[int] = []
        thread = threading.Thread(target=lambda: found.append(lookup(x + offset)))
        thread.start()
        thread.join()
        seen.append("joined")
        if then == "decision":
            tg.select_plan("answer")
        elif then == "error":
            found[0]  # an IndexError once the thread stopped
        seen.append("went on")
        return found[0] if found else -1

    return agent


@pytest.fixture
def uncaught(monkeypatch: pytest.MonkeyPatch) -> list[threading.ExceptHookArgs]:
    """What reaches ``threading.excepthook`` (which prints a traceback to stderr)."""
    caught: list[threading.ExceptHookArgs] = []
    monkeypatch.setattr(threading, "excepthook", caught.append)
    return caught


@pytest.mark.parametrize("then", ["decision", "error", "return"])
def test_a_divergence_in_a_thread_stops_the_replay_there_and_is_reported_once(
    tmp_path: Path, then: str, uncaught: list[threading.ExceptHookArgs]
) -> None:
    db = tmp_path / "runs.db"
    recorded = tg.record_run(_agent(then, 0, []), 3, store=db)
    assert recorded.output == 30
    seen: list[str] = []
    report = tg.replay(db, recorded.run_id, _agent(then, 1, seen))
    assert [(d.kind, d.seq) for d in report.divergences] == [(DivergenceKind.ARGS_CHANGED, 1)], (
        report.render()
    )
    assert "then:" not in report.render()
    assert report.first is not None
    assert report.first.changes[0].path == "$.payload.args.x"
    assert uncaught == []  # the stop was not printed as the thread's traceback
    # the main thread's next recorded step stopped it; an error it ran into, or its output
    # once it returned, is not compared with the record: the replay had stopped
    assert seen == (["joined", "went on"] if then == "return" else ["joined"])
    assert report.output is None
    assert report.error is None


def test_a_fork_stops_at_a_divergence_in_a_thread_and_ends_aborted(
    tmp_path: Path, uncaught: list[threading.ExceptHookArgs]
) -> None:
    db = tmp_path / "runs.db"
    recorded = tg.record_run(_agent("decision", 0, []), 3, store=db)
    seen: list[str] = []
    report = tg.fork(db, recorded.run_id, 3, _agent("decision", 1, seen))
    assert [(d.kind, d.seq) for d in report.divergences] == [(DivergenceKind.ARGS_CHANGED, 1)], (
        report.render()
    )
    assert uncaught == []
    assert seen == ["joined"]
    assert report.final_status == "aborted"


def test_collecting_goes_on_past_a_divergence_in_a_thread(
    tmp_path: Path, uncaught: list[threading.ExceptHookArgs]
) -> None:
    db = tmp_path / "runs.db"
    recorded = tg.record_run(_agent("decision", 0, []), 3, store=db)
    seen: list[str] = []
    report = tg.replay(db, recorded.run_id, _agent("decision", 1, seen), collect=True)
    assert [d.kind for d in report.divergences] == [DivergenceKind.ARGS_CHANGED]
    assert seen == ["joined", "went on"]  # the thread was served the recorded answer
    assert report.output == 30
    assert uncaught == []
