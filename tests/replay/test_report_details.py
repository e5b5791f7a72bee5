"""What a report says: the agent's exception (type, message, the agent's own line) in the text
and the JSON of replay, fork, resume and test; the changed region of a long string, with its
offsets; every divergence with ``--collect``; and a report, not an exception, for a run whose
``run.started`` payload was erased."""

from __future__ import annotations

import inspect
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import tachograph as tg
from tachograph.cli.app import cli
from tachograph.regression.corpus import save_run
from tachograph.regression.runner import test_corpus as run_corpus

HERE = Path(__file__).name
MODULE = __name__  # importable by the CLI as MODULE:FUNCTION
REFUNDS: list[dict[str, Any]] = []
TAIL = "The customer wrote at length about the parcel, the box and the courier. " * 3


@tg.tool(effect="read")
def lookup(order: str) -> dict[str, Any]:
    return {"order": order, "total": 30}


@tg.tool(effect="write")
def refund(order: str, amount: int, note: str) -> dict[str, Any]:
    REFUNDS.append({"order": order, "amount": amount})
    return {"refunded": amount}


def agent_v1(task: str) -> dict[str, Any]:
    found = lookup(order=task)
    refund(order=task, amount=found["total"], note=TAIL + "Refund of 30.00 approved.")
    return {"done": True}


def agent_raises(task: str) -> dict[str, Any]:
    found = lookup(order=task)
    raise ValueError(f"amount {found['total']} is over the limit")


RAISE_LINE = inspect.getsourcelines(agent_raises)[1] + 2


def agent_note(task: str) -> dict[str, Any]:
    found = lookup(order=task)
    refund(order=task, amount=found["total"], note=TAIL + "Refund of 15.00 approved.")
    return {"done": True}


def agent_twice_changed(task: str) -> dict[str, Any]:
    lookup(order=task + "-X")
    refund(order=task, amount=31, note=TAIL + "Refund of 30.00 approved.")
    return {"done": False}


V1 = tg.Agent(fn=agent_v1, name="details", code_version="details-1")
RAISES = tg.Agent(fn=agent_raises, name="details", code_version="details-1")


@pytest.fixture(autouse=True)
def _refunds() -> Iterator[None]:
    REFUNDS.clear()
    yield
    REFUNDS.clear()


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "runs.db"
    tg.record_run(V1, "A-1", store=path, run_id="r1")
    return path


def tacho(db: Path, *args: str) -> Any:
    return CliRunner().invoke(cli, ["--store", str(db), *args], catch_exceptions=False)


def where(error: dict[str, Any] | None) -> str:
    assert error is not None
    assert error["type"] == "ValueError"
    assert error["message"] == "amount 30 is over the limit"
    return str(error["frame"])


def test_replay_shows_the_agents_exception(db: Path) -> None:
    report = tg.replay(db, "r1", RAISES)
    assert report.verdict == "diverged"
    assert where(report.error).endswith(f"{HERE}:{RAISE_LINE}")
    assert "the agent raised ValueError: amount 30 is over the limit (at " in report.render()
    assert report.to_dict()["error"]["frame"] == report.error["frame"]  # type: ignore[index]

    result = tacho(db, "replay", "r1", "--agent", f"{MODULE}:agent_raises")
    assert result.exit_code == 1
    assert "ValueError: amount 30 is over the limit (at " in result.output
    assert f"{HERE}:{RAISE_LINE})" in result.output
    data = json.loads(
        tacho(db, "replay", "r1", "--agent", f"{MODULE}:agent_raises", "--json").stdout
    )
    assert where(data["error"]).endswith(f"{HERE}:{RAISE_LINE}")


def test_fork_shows_the_agents_exception(db: Path) -> None:
    report = tg.fork(db, "r1", 2, RAISES)
    assert report.final_status == "error"
    assert where(report.error).endswith(f"{HERE}:{RAISE_LINE}")
    assert "(finished error: ValueError: amount 30 is over the limit (at " in report.render()
    # what the fork recorded is the SPEC's {type, message}, without the frame
    with tg.open_store(db) as store:
        finished = store.events(report.new_run_id or "")[-1].payload
    assert finished["error"] == {"type": "ValueError", "message": "amount 30 is over the limit"}

    result = tacho(db, "fork", "r1", "--at", "2", "--agent", f"{MODULE}:agent_raises", "--json")
    assert result.exit_code == 1
    assert where(json.loads(result.stdout)["error"]).endswith(f"{HERE}:{RAISE_LINE}")


def test_resume_shows_the_agents_exception(tmp_path: Path) -> None:
    path = tmp_path / "crash.db"
    rec = tg.record(path, actor="details", input="A-1", run_id="crashed")
    run = rec.start()
    lookup(order="A-1")  # then the process "dies": no run.finished
    run.session.deactivate()
    run.recorder.flush()
    rec.release()
    result = tacho(path, "resume", "crashed", "--agent", f"{MODULE}:agent_raises", "--json")
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert data["final_status"] == "error"
    assert where(data["error"]).endswith(f"{HERE}:{RAISE_LINE}")


def test_corpus_results_show_the_agents_exception(db: Path, tmp_path: Path) -> None:
    folder = tmp_path / "corpus"
    save_run(db, "r1", to=folder, verdict="good", name="r1")
    report = run_corpus(folder, RAISES, workers=1)
    (result,) = report.results
    assert not result.passed
    assert result.replay is not None
    assert where(result.replay["error"]).endswith(f"{HERE}:{RAISE_LINE}")
    assert "ValueError: amount 30 is over the limit (at " in result.render()


def test_a_changed_long_string_shows_the_changed_region(db: Path) -> None:
    report = tg.replay(db, "r1", tg.Agent(fn=agent_note, name="details", code_version="details-1"))
    first = report.first
    assert first is not None
    assert first.kind is tg.DivergenceKind.ARGS_CHANGED
    (line,) = [c.render() for c in first.changes]
    old, new = line.split(" -> ", 1)
    assert "Refund of [30].00 approved." in old
    assert "Refund of [15].00 approved." in new
    assert old.split(": ", 1)[1] != new.split(" (changed", 1)[0]
    start = len(TAIL) + len("Refund of ")
    assert f"changed at characters {start}..{start + 2} of" in line
    assert "Refund of [30].00 approved." in report.render()


@tg.tool(effect="write", name="lookup")
def lookup_now_a_write(order: str) -> dict[str, Any]:
    return {"order": order, "total": 30}


def agent_lookup_declared_write(task: str) -> dict[str, Any]:
    found = lookup_now_a_write(order=task)
    refund(order=task, amount=found["total"], note=TAIL + "Refund of 30.00 approved.")
    return {"done": True}


def test_a_changed_tool_effect_is_explained_as_such(db: Path) -> None:
    agent = tg.Agent(fn=agent_lookup_declared_write, name="details", code_version="details-1")
    first = tg.replay(db, "r1", agent).first
    assert first is not None
    assert (first.kind, first.seq) == (tg.DivergenceKind.ARGS_CHANGED, 1)
    assert [c.render() for c in first.changes] == ['$.payload.effect: "read" -> "write"']
    assert first.explanation.startswith(
        'The declared effect of tool \'lookup\' changed ($.payload.effect: "read" -> "write")'
    )
    assert "different arguments" not in first.explanation


def test_collect_lists_every_divergence(db: Path) -> None:
    agent = tg.Agent(fn=agent_twice_changed, name="details", code_version="details-1")
    report = tg.replay(db, "r1", agent, collect=True)
    kinds = [(d.kind.value, d.seq) for d in report.divergences]
    assert kinds == [("args_changed", 1), ("args_changed", 3), ("output_changed", 5)]
    text = report.render()
    for kind, seq in kinds:
        assert f"seq {seq}: {kind}" in text
    assert "more divergence" not in text
    result = tacho(db, "replay", "r1", "--agent", f"{MODULE}:agent_twice_changed", "--collect")
    assert result.exit_code == 1
    for kind, seq in kinds:
        assert f"seq {seq}: {kind}" in result.output


def test_an_erased_run_started_gives_a_report(db: Path) -> None:
    with sqlite3.connect(db) as conn:
        conn.execute(
            "UPDATE payloads SET body=NULL, salt=NULL WHERE id="
            "(SELECT id FROM events WHERE run_id='r1' AND seq=0)"
        )
    REFUNDS.clear()  # the recording's own refund
    report = tg.replay(db, "r1", V1)
    assert report.verdict == "unreplayable"
    assert report.unreplayable[0]["seq"] == 0
    assert REFUNDS == []  # nothing ran
    result = tacho(db, "replay", "r1", "--agent", f"{MODULE}:agent_v1", "--json")
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert data["verdict"] == "unreplayable"
    assert data["unreplayable"][0]["type"] == "run.started"
    text = tacho(db, "replay", "r1", "--agent", f"{MODULE}:agent_v1").output
    assert "UNREPLAYABLE" in text
    assert "seq 0 (run.started): its payload was erased" in text
    forked = tg.fork(db, "r1", 2, V1)
    assert forked.verdict == "unreplayable"
    assert forked.new_run_id is None


@pytest.mark.parametrize("key", ["S1", "it's", 3, ("a", 1)])
def test_a_recorded_key_error_is_served_back_as_the_same_key_error(key: object) -> None:
    """str(KeyError(k)) is repr(k): rebuilt from its message alone, the key was quoted twice,
    and an agent that reads the missing key from the error diverged on unchanged code."""
    from tachograph.capture.boundary import error_info
    from tachograph.replay.engine import rebuild_error

    original = KeyError(key)
    rebuilt = rebuild_error(error_info(original))
    assert type(rebuilt) is KeyError
    assert rebuilt.args == original.args
    assert str(rebuilt) == str(original)


class OwnError(Exception):
    """An agent's own exception class."""


def test_a_recorded_main_class_is_rebuilt_from_the_agents_module() -> None:
    """A run recorded with the agent's file run as a script names its classes __main__.X;
    replayed with the agent imported, that X is in the agent's module, not in __main__."""
    from tachograph.replay.engine import RecordedError, rebuild, rebuild_error

    info = {"type": "__main__.OwnError", "message": "no"}
    rebuilt = rebuild_error(info, __name__)
    assert type(rebuilt) is OwnError
    assert rebuilt.args == ("no",)
    gone, why = rebuild({"type": "__main__.Gone", "message": "no"}, __name__)
    assert isinstance(gone, RecordedError)
    assert why is not None
    assert f"module {__name__!r} has no 'Gone'" in why
