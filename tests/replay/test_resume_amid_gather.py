"""Resume of an async run killed (SIGKILL, a real process) inside an irreversible call amid
concurrent calls, on a real SQLite store and through the real CLI. ``ledger.txt`` counts
what reached the world."""

from __future__ import annotations

import importlib
import json
import subprocess
from pathlib import Path

import pytest

import tachograph as tg
from tachograph.capture import boundary

GATHER = """
import asyncio
import os
import signal

import tachograph as tg


def _ledger(line):
    with open(os.environ["LEDGER"], "a") as f:
        f.write(line + "\\n")
        f.flush()
        os.fsync(f.fileno())


@tg.tool(effect="read")
async def lookup(order_id):
    slow = float(os.environ.get("SLOW_LOOKUP", "0.02"))
    fast = float(os.environ.get("FAST_LOOKUP", "0.005"))
    await asyncio.sleep(slow if order_id == "B-1" else fast)
    return {"order_id": order_id}


@tg.tool(effect="irreversible")
async def charge(card, cents):
    if not os.environ.get("FASTCHARGE"):
        await asyncio.sleep(float(os.environ.get("CHARGE_WAIT", "0.01")))
    _ledger(f"CHARGE {card} {cents}")
    if os.environ.get("KILL_IN_CHARGE"):
        os.kill(os.getpid(), signal.SIGKILL)
    return {"charged": cents}


@tg.tool(effect="write")
async def note(text):
    if os.environ.get("NOTE_RAISES"):
        raise ValueError("the notes service is down")
    _ledger(f"NOTE {text}")
    await asyncio.sleep(0.015)
    return {"noted": text}


async def agent(task):
    text = "yo" if os.environ.get("OTHER_NOTE") else "hi"
    results = await asyncio.gather(
        lookup("B-1"),
        lookup("B-2"),
        charge("4242", 700),
        note(text),
        return_exceptions=bool(os.environ.get("GATHER_ALL")),
    )
    return {"results": [r if isinstance(r, dict) else repr(r) for r in results]}
"""

LOOKUP_1, LOOKUP_2, CHARGE, NOTE = 1, 2, 3, 4


def _tacho(
    python: str, cwd: Path, env: dict[str, str], *args: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(Path(python).parent / "tacho"), "--store", "runs.db", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def killed(tmp_path: Path, python: str, child_env: dict[str, str]) -> tuple[Path, dict[str, str]]:
    """A run killed with SIGKILL inside ``charge``, after its effect, with both lookups,
    the charge and the note open (``B-2`` completed)."""
    (tmp_path / "gather_agent.py").write_text(GATHER)
    ledger = tmp_path / "ledger.txt"
    env = {**child_env, "LEDGER": str(ledger)}
    code = (
        "import asyncio, tachograph as tg, gather_agent as m; "
        "asyncio.run(tg.arecord_run(m.agent, 'go', store='runs.db', run_id='g', "
        "durability='every'))"
    )
    done = subprocess.run(
        [python, "-c", code],
        cwd=tmp_path,
        env={**env, "KILL_IN_CHARGE": "1", "SLOW_LOOKUP": "30"},  # killed long before
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == -9, done.stderr
    assert ledger.read_text().count("CHARGE") == 1
    with tg.SQLiteStore(tmp_path / "runs.db", create=False) as store:
        events = store.events("g")
    requested = [(e.seq, e.type, e.payload["tool"]) for e in events[1:5]]
    assert requested == [
        (LOOKUP_1, "tool.requested", "lookup"),
        (LOOKUP_2, "tool.requested", "lookup"),
        (CHARGE, "tool.requested", "charge"),
        (NOTE, "tool.requested", "note"),
    ]
    assert _open_intents(tmp_path / "runs.db") == [LOOKUP_1, CHARGE, NOTE]  # B-2 answered
    ledger.write_text("")
    return tmp_path, env


def _open_intents(db: Path) -> list[int]:
    with tg.SQLiteStore(db, create=False) as store:
        events = store.events("g")
    done = {e.idempotency_key for e in events if e.type in ("tool.completed", "tool.failed")}
    return [e.seq for e in events if e.type == "tool.requested" and e.idempotency_key not in done]


def test_a_resume_that_diverges_after_running_the_charge_keeps_its_completion(
    killed: tuple[Path, dict[str, str]], python: str
) -> None:
    """The charge ran live again, then a later concurrent call diverged: its completion was
    lost when the store closed under it, the report said nothing was appended (a claim
    was), and the next confirmed resume charged a third time."""
    cwd, env = killed
    ledger = cwd / "ledger.txt"
    diverging = {**env, "FASTCHARGE": "1", "OTHER_NOTE": "1"}
    done = _tacho(python, cwd, diverging, "resume", "g", "--agent", "gather_agent:agent",
                  "--confirm", "--json")  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert "lost" not in done.stderr, done.stderr
    report = json.loads(done.stdout)
    assert report["verdict"] == "diverged"
    assert report["first_divergence"]["seq"] == NOTE
    assert report["final_status"] == "unfinished"
    assert ledger.read_text() == "CHARGE 4242 700\n"  # it really ran again
    # the report says what was appended: the claim, and the charge's completion
    appended = [(a["type"], a.get("tool")) for a in report["appended"]]
    assert ("tachograph.resume", None) in appended
    assert ("tool.completed", "charge") in appended
    # and what ran live again, with its outcome
    reran = {r["seq"]: r for r in report["reran"]}
    assert reran[CHARGE]["tool"] == "charge"
    assert reran[CHARGE]["effect"] == "irreversible"
    assert reran[CHARGE]["outcome"] == "completed"
    assert any("seq 3" in n and "charge" in n for n in report["notes"]), report["notes"]
    # the charge's outcome is in the record now: only the lookup and the note stay open
    assert CHARGE not in _open_intents(cwd / "runs.db")
    assert NOTE in _open_intents(cwd / "runs.db")

    # the same resume again: the charge is served from its completion now; only the read
    # runs live, and the stop cancels it unrecorded: this time nothing is appended
    ledger.write_text("")
    text = _tacho(python, cwd, diverging, "resume", "g", "--agent", "gather_agent:agent",
                  "--confirm")  # fmt: skip
    assert text.returncode == 1
    assert "g was left unfinished; nothing was appended" in text.stdout, text.stdout
    assert ledger.read_text() == ""

    # the agent, fixed, resumes: the charge is served from its completion, not run again
    ledger.write_text("")
    again = _tacho(python, cwd, env, "resume", "g", "--agent", "gather_agent:agent", "--confirm",
                   "--json")  # fmt: skip
    assert again.returncode == 0, again.stdout + again.stderr
    assert json.loads(again.stdout)["final_status"] == "ok"
    assert ledger.read_text() == "NOTE hi\n"
    with tg.SQLiteStore(cwd / "runs.db", create=False) as store:
        assert store.verify("g").ok


def test_a_resume_that_diverges_before_the_charge_answers_leaves_it_open(
    killed: tuple[Path, dict[str, str]], python: str
) -> None:
    """The charge is still in flight when a later concurrent call diverges: the stop cancels
    it. That cancellation is the resume's own, not the agent's: it is not recorded (the run
    would then serve a cancellation no agent makes again), and the report says so."""
    cwd, env = killed
    # the charge waits far longer than the stop takes to cancel it (no time is asserted)
    diverging = {**env, "OTHER_NOTE": "1", "CHARGE_WAIT": "30"}
    done = _tacho(python, cwd, diverging, "resume", "g", "--agent", "gather_agent:agent",
                  "--confirm", "--json")  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert "lost" not in done.stderr, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    report = json.loads(done.stdout)
    assert (cwd / "ledger.txt").read_text() == ""  # cancelled before its effect
    reran = {r["seq"]: r for r in report["reran"]}
    assert reran[CHARGE]["outcome"] == "open"
    assert reran[CHARGE]["at"] is None
    assert "seq 3 (irreversible 'charge'" in " ".join(report["notes"])
    assert [a["type"] for a in report["appended"] if a["type"] != "tool.completed"] == [
        "tachograph.resume"
    ]  # (the first lookup may have answered before the stop: a read)
    assert {CHARGE, NOTE} <= set(_open_intents(cwd / "runs.db"))
    text = _tacho(python, cwd, diverging, "resume", "g", "--agent", "gather_agent:agent",
                  "--confirm")  # fmt: skip
    assert text.returncode == 1
    assert "g was left unfinished; calls that went live before the divergence appended seq" in (
        text.stdout
    ), text.stdout
    assert "(tachograph.resume)" in text.stdout
    assert (cwd / "ledger.txt").read_text() == ""


def test_a_confirmed_resume_names_every_call_it_ran_again(
    killed: tuple[Path, dict[str, str]], python: str
) -> None:
    """``reproduced`` with no note, though an irreversible and a write call ran again."""
    cwd, env = killed
    refused = _tacho(python, cwd, env, "resume", "g", "--agent", "gather_agent:agent")
    assert refused.returncode == 2
    # the refusal names every effect --confirm would run again, not only the first
    assert "seq 3" in refused.stderr, refused.stderr
    assert "seq 4 (write 'note'" in refused.stderr, refused.stderr
    assert "'note'" in refused.stderr, refused.stderr
    done = _tacho(python, cwd, env, "resume", "g", "--agent", "gather_agent:agent", "--confirm",
                  "--json")  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["verdict"] == "reproduced"
    reran = {r["seq"]: (r["tool"], r["effect"], r["outcome"]) for r in report["reran"]}
    assert reran == {
        LOOKUP_1: ("lookup", "read", "completed"),
        CHARGE: ("charge", "irreversible", "completed"),
        NOTE: ("note", "write", "completed"),
    }
    assert all(r["key"] for r in report["reran"])
    (note,) = [n for n in report["notes"] if "ran again" in n]
    assert "seq 3 (irreversible 'charge'" in note, note
    assert "seq 4 (write 'note'" in note, note
    assert sorted((cwd / "ledger.txt").read_text().splitlines()) == ["CHARGE 4242 700", "NOTE hi"]


def test_a_gather_whose_call_raises_finishes_the_run_with_the_others_in_flight(
    tmp_path: Path, python: str, child_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``asyncio.gather`` hands the first exception to the agent and leaves the other calls
    running: the run finishes ``error`` with them in flight, and ``asyncio.run`` cancels them
    afterwards. Their cancellation could not be recorded: a RecordingError traceback per
    task at shutdown. Replaying the run with the same code then said the process died in a
    call and advised a resume, which refuses a finished run."""
    (tmp_path / "gather_agent.py").write_text(GATHER)
    env = {
        **child_env,
        "LEDGER": str(tmp_path / "ledger.txt"),
        "NOTE_RAISES": "1",
        # the other calls are still in flight when the note fails, whatever the load
        "SLOW_LOOKUP": "30",
        "FAST_LOOKUP": "30",
        "CHARGE_WAIT": "30",
    }
    code = (
        "import asyncio, tachograph as tg, gather_agent as m\n"
        "try:\n"
        "    asyncio.run(tg.arecord_run(m.agent, 'go', store='runs.db', run_id='g'))\n"
        "except ValueError as e:\n"
        "    print('RAISED', e)\n"
    )
    done = subprocess.run(
        [python, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "RAISED the notes service is down" in done.stdout
    assert "RecordingError" not in done.stderr, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert _open_intents(tmp_path / "runs.db") == [LOOKUP_1, LOOKUP_2, CHARGE]
    with tg.SQLiteStore(tmp_path / "runs.db", create=False) as store:
        assert store.events("g")[-1].payload["status"] == "error"

    replayed = _tacho(python, tmp_path, env, "replay", "g", "--agent", "gather_agent:agent")
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert "REPRODUCED" in replayed.stdout
    assert (tmp_path / "ledger.txt").exists() is False  # nothing ran

    # an agent that now waits for the calls the record ends inside is told so (not to
    # resume, which refuses a finished run)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("GATHER_ALL", "1")
    monkeypatch.setattr(boundary, "CANCELLED_WAIT", 0.2)
    module = importlib.import_module("gather_agent")
    report = tg.replay(str(tmp_path / "runs.db"), "g", module.agent)
    first = report.first
    assert first is not None
    assert first.kind.value == "unreplayable"
    assert first.seq in (LOOKUP_1, LOOKUP_2, CHARGE)
    assert "still in flight when the recorded run finished" in first.explanation
    assert "resume" not in first.explanation
