"""Every recording is sealed by default (tachograph.capture.seals), with real files and processes.

The writer appends each seal in the transaction of the batch it names; without a signing key
the seals are unsigned, and ``tacho verify`` says how far each run is sealed, with no
checkpoint; with ``TACHOGRAPH_SIGNING_KEY`` set it issues a signed checkpoint after each batch
of seals.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import tachograph as tg
from tachograph.capture.recorder import Recorder, close_writer
from tachograph.capture.seals import SealPolicy
from tachograph.record.merkle import SealLeaf
from tachograph.sealing import SealingObserver
from tachograph.store import SQLiteStore

from .helpers import make_key, tacho


def _verify(db: Path, *args: str) -> tuple[int, dict[str, dict[str, object]], str]:
    data = tacho("verify", "--json", *args, store=db)
    text = tacho("verify", *args, store=db).output
    parsed = json.loads(data.output)
    return data.exit_code, {r["run_id"]: r for r in parsed["runs"]}, text


def _agent_run(db: Path, run_id: str, steps: int, **kw: object) -> None:
    with tg.record(str(db), actor="agent", run_id=run_id, **kw):  # type: ignore[arg-type]
        for i in range(steps):
            tg.decide("step", i)


def test_tg_record_seals_without_a_key_and_verify_says_how_far(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TACHOGRAPH_SIGNING_KEY", raising=False)
    db = tmp_path / "t.db"
    _agent_run(db, "plain", 30)
    with SQLiteStore(db) as store:
        events = store.run_info("plain").events
        (seal,) = store.seals_for_run("default", "plain")
        assert seal.seq == events - 1
        assert SealLeaf.from_bytes(seal.leaf).final
        assert store.latest_checkpoint("default") is None
    code, runs, text = _verify(db)
    assert code == 0
    assert runs["plain"]["seal"]["status"] == "unsigned"
    assert runs["plain"]["seal"]["sealed_seq"] == events - 1
    assert runs["plain"]["sealed"] is False  # no checkpoint vouches for it
    assert f"sealed up to seq {events - 1} (final), no checkpoint (1 seal(s) wait" in text


def test_without_a_key_a_cut_tail_after_a_seal_still_fails(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    with SQLiteStore(db) as store:
        recorder = Recorder(
            store,
            run_id="cut",
            actor="agent",
            observers=[],
            durability="every",
            seal=SealPolicy(every_events=5, every_seconds=3600),
        )
        recorder.append("run.started", {"input": "x", "env": {}})
        for i in range(11):
            recorder.append("decision", {"name": "step", "chosen": i})
        recorder.flush()
        close_writer(store)
        assert [s.seq for s in store.seals_for_run("default", "cut")] == [4, 9, 11]
    raw = sqlite3.connect(db, isolation_level=None)
    for trigger in ("events_append_only_delete", "payloads_no_delete"):
        raw.execute(f"DROP TRIGGER {trigger}")
    head = raw.execute("SELECT hash FROM events WHERE run_id='cut' AND seq=7").fetchone()[0]
    raw.execute("DELETE FROM payloads WHERE id IN (SELECT id FROM events WHERE seq>=8)")
    raw.execute("DELETE FROM events WHERE run_id='cut' AND seq>=8")
    raw.execute("UPDATE runs SET events=8, head_hash=? WHERE run_id='cut'", (head,))
    raw.close()
    code, runs, _ = _verify(db)
    assert code == 1
    assert runs["cut"]["status"] == "failed"
    assert "before the sealed seq 9: its tail was cut" in str(runs["cut"]["seal"]["reason"])


def test_with_a_configured_key_every_batch_of_seals_gets_a_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key, key_file = make_key(tmp_path / "keys")
    monkeypatch.setenv("TACHOGRAPH_SIGNING_KEY", str(key_file))
    db = tmp_path / "store" / "t.db"
    db.parent.mkdir()
    _agent_run(db, "a", 20)
    _agent_run(db, "b", 5)
    with SQLiteStore(db) as store:
        checkpoint = store.latest_checkpoint("default")
        assert checkpoint is not None
        assert checkpoint.size == store.seal_count("default") == 2
    code, runs, text = _verify(db, "--key", str(key.verifier))
    assert code == 0
    assert runs["a"]["seal"]["status"] == runs["b"]["seal"]["status"] == "sealed"
    assert runs["b"]["seal"]["final"] is True
    assert f"by checkpoint of size 2, signed by {key.name}" in text


def test_opting_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "t.db"
    _agent_run(db, "off", 3, seal=False)
    monkeypatch.setenv("TACHOGRAPH_SEAL", "off")
    _agent_run(db, "env-off", 3)
    with SQLiteStore(db) as store:
        assert store.seal_count("default") == 0
    _, runs, _ = _verify(db)
    assert runs["off"]["seal"]["status"] == "unsealed"


def _quiet_run(store: SQLiteStore, run_id: str, every_events: int) -> Recorder:
    """A run sealed every ``every_events`` events or 0.2 s, with two events stored."""
    recorder = Recorder(
        store,
        run_id=run_id,
        actor="agent",
        observers=[],
        seal=SealPolicy(every_events=every_events, every_seconds=0.2),
    )
    recorder.append("run.started", {"input": "x", "env": {}})
    recorder.append("decision", {"name": "step", "chosen": 1})
    recorder.flush()
    return recorder


def _wait_for_seals(store: SQLiteStore, run_id: str, count: int) -> None:
    """Until the writer thread has stored ``count`` seals of the run (30 s at most)."""
    deadline = time.monotonic() + 30
    while len(store.seals_for_run("default", run_id)) < count and time.monotonic() < deadline:
        time.sleep(0.05)


def test_a_quiet_run_is_sealed_by_the_writer_on_its_own(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "t.db") as store:
        _quiet_run(store, "quiet", every_events=1000)
        # No further event: the writer thread seals the stored events once 0.2 s have passed.
        _wait_for_seals(store, "quiet", 1)
        (seal,) = store.seals_for_run("default", "quiet")
        assert seal.seq == 1
        assert not SealLeaf.from_bytes(seal.leaf).final
        close_writer(store)


def test_a_quiet_run_whose_last_event_its_caller_appended_is_sealed_too(tmp_path: Path) -> None:
    """A durable event on an idle writer is appended on its caller's thread; when it leaves
    the run with unsealed events where it had none, the writer thread (asleep with nothing
    due) is woken to seal them once the period has passed."""
    with SQLiteStore(tmp_path / "t.db") as store:
        recorder = _quiet_run(store, "claimed", every_events=2)
        # seq 1 was sealed with its batch (every two events): nothing is pending
        assert [s.seq for s in store.seals_for_run("default", "claimed")] == [1]
        recorder.append("acme.intent", {"n": 1}, durable=True)  # on this thread: a claim
        _wait_for_seals(store, "claimed", 2)
        assert [s.seq for s in store.seals_for_run("default", "claimed")] == [1, 2]
        close_writer(store)


def test_a_quiet_run_with_every_event_durable_is_sealed_without_a_close(tmp_path: Path) -> None:
    """With ``durability="every"`` each event is appended on its caller's thread, so the
    writer thread was never started and a run left quiet waited for its close to be sealed;
    the first claim that leaves a seal due now starts the thread that will make it."""
    with SQLiteStore(tmp_path / "t.db") as store:
        recorder = Recorder(
            store,
            run_id="every",
            actor="agent",
            observers=[],
            durability="every",
            seal=SealPolicy(every_events=1000, every_seconds=0.2),
        )
        recorder.append("run.started", {"input": "x", "env": {}})
        recorder.append("decision", {"name": "step", "chosen": 1})
        assert store.run_info("every").events == 2  # on disk already: no flush needed
        _wait_for_seals(store, "every", 1)
        assert [s.seq for s in store.seals_for_run("default", "every")] == [1]
        close_writer(store)


def test_a_sealing_observer_replaces_the_default_sealing(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "t.db") as store:
        observer = SealingObserver()
        recorder = Recorder(store, run_id="obs", actor="agent", observers=[observer])
        assert recorder.seal_policy is None
        recorder.append("run.started", {"input": "x", "env": {}})
        recorder.append("run.finished", {"status": "ok"})
        recorder.flush()
        observer.drain()
        assert [s.seq for s in store.seals_for_run("default", "obs")] == [1]


CRASHER = textwrap.dedent(
    """
    import os, signal, sys
    from tachograph.capture.recorder import Recorder
    from tachograph.capture.seals import SealPolicy
    from tachograph.store import SQLiteStore

    store = SQLiteStore(sys.argv[1])
    recorder = Recorder(store, run_id="crashed", actor="agent", observers=[],
                        durability="every", seal=SealPolicy(every_events=5, every_seconds=3600))
    recorder.append("run.started", {"input": "x", "env": {}})
    for i in range(12):
        recorder.append("decision", {"name": "step", "chosen": i})
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


def test_a_crashed_runs_last_seal_covers_what_came_before(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    proc = subprocess.run([sys.executable, "-c", CRASHER, str(db)], check=False)
    assert proc.returncode == -signal.SIGKILL
    with SQLiteStore(db) as store:
        assert store.run_info("crashed").events == 13
        assert [s.seq for s in store.seals_for_run("default", "crashed")] == [4, 9]
    code, runs, text = _verify(db)
    assert code == 0
    seal = runs["crashed"]["seal"]
    assert seal["status"] == "unsigned"
    assert seal["sealed_seq"] == 9
    assert seal["unsealed_events"] == 3  # the window no seal covers: seq 10, 11, 12
    assert "sealed up to seq 9, no checkpoint" in text
    assert "3 later event(s) not yet sealed" in text
    assert os.path.exists(db)
