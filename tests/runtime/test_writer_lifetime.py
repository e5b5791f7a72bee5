"""A store the program drops without closing it is freed once its writer is done with it:
its writer thread ends and its connection closes, and nothing queued or due is lost first.
The same for a store sealed by a :class:`~tachograph.sealing.SealingObserver`, and for the
observer and its sealing thread."""

from __future__ import annotations

import gc
import logging
import sqlite3
import subprocess
import sys
import threading
import time
import weakref
from pathlib import Path
from typing import Any

import pytest

import tachograph as tg
from tachograph.capture.recorder import Recorder, writer_for
from tachograph.sealing import SealingObserver, SealPolicy


def _writer_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "tachograph-writer"]


def _wait_until_freed(ref: weakref.ref[object], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        gc.collect()
        if ref() is None:
            return True
        time.sleep(0.01)
    return False


def _rows(path: Path, sql: str, *args: object) -> list[tuple[object, ...]]:
    """What an independent SQLite connection (not the store's) reads."""
    db = sqlite3.connect(path)
    try:
        return list(db.execute(sql, args).fetchall())
    finally:
        db.close()


def test_stores_dropped_without_close_free_their_writer_and_connection(tmp_path: Path) -> None:
    """Ten stores, each recorded into and dropped: none stays alive, no writer thread is left,
    and every run is on disk in full. Each used to keep its writer thread, its connection and
    itself alive for the life of the process (a server opening a store per request ran out of
    file descriptors)."""
    before = len(_writer_threads())
    refs: list[weakref.ref[object]] = []
    threads = []
    for i in range(10):
        store = tg.SQLiteStore(tmp_path / f"s{i}.db")
        with tg.record(store, actor="a", run_id=f"r{i}"):
            for n in range(20):
                tg.decide("step", n)
        threads.append(writer_for(store)._thread)
        refs.append(weakref.ref(store))
        del store
    assert all(_wait_until_freed(r) for r in refs)
    for thread in threads:
        if thread is not None:
            thread.join(10)
            assert not thread.is_alive()
    assert len(_writer_threads()) <= before
    for i in range(10):
        types = [r[0] for r in _rows(tmp_path / f"s{i}.db", "SELECT type FROM events ORDER BY seq")]
        assert types == ["run.started", *(["decision"] * 20), "run.finished"]


def test_events_queued_when_the_store_is_dropped_are_still_written(tmp_path: Path) -> None:
    """The writer holds the store while events wait for it: the program may drop the store
    and its recorder right after appending (no flush), and every event still reaches disk
    before the store is freed."""
    path = tmp_path / "queued.db"
    store = tg.SQLiteStore(path)
    recorder = Recorder(store, run_id="q", actor="a", durability="batch", seal=False)
    writer = writer_for(store)
    writer.linger = 1.0  # the events are still queued when the references go
    for n in range(300):
        recorder.append("decision", {"name": "step", "value": n})
    assert writer.queued > 0
    ref = weakref.ref(store)
    thread = writer._thread
    del store, recorder
    assert _wait_until_freed(ref)
    assert thread is not None
    thread.join(10)
    assert not thread.is_alive()
    assert not writer.unreported()
    seqs = [r[0] for r in _rows(path, "SELECT seq FROM events WHERE run_id='q' ORDER BY seq")]
    assert seqs == list(range(300))


def test_a_seal_due_later_is_still_written_after_the_store_is_dropped(tmp_path: Path) -> None:
    """A run left quiet is due a seal some time after its last event: the writer holds the
    store until it has written that seal, then lets it go."""
    path = tmp_path / "sealed.db"
    store = tg.SQLiteStore(path)
    policy = SealPolicy(every_events=10_000, every_seconds=1.0)
    tracked = time.monotonic()  # the seal is due a second after the run is tracked
    recorder = Recorder(store, run_id="s", actor="a", seal=policy)
    for n in range(5):
        recorder.append("decision", {"name": "step", "value": n})
    recorder.flush()  # stored, and not sealed: the run is neither finished nor 10,000 long
    writer = writer_for(store)
    assert writer.seals.next_due() is not None
    ref = weakref.ref(store)
    del store, recorder
    gc.collect()
    alive = ref() is not None
    if time.monotonic() - tracked < 0.9:  # the seal cannot have been written yet
        assert alive  # held for the seal that is due
    assert _wait_until_freed(ref)
    sealed = _rows(path, "SELECT run_id, seq FROM seals")
    assert ("s", 4) in [(r[0], r[1]) for r in sealed]


def test_a_store_recorded_into_durably_is_freed_too(tmp_path: Path) -> None:
    """With ``durability="every"`` each event is committed on the caller's thread and the
    writer thread may never start: the writer must not hold the store either."""
    path = tmp_path / "every.db"
    store = tg.SQLiteStore(path)
    with tg.record(store, actor="a", run_id="e", durability="every", seal=False):
        tg.decide("step", 1)
    ref = weakref.ref(store)
    del store
    assert _wait_until_freed(ref)
    types = [r[0] for r in _rows(path, "SELECT type FROM events ORDER BY seq")]
    assert types == ["run.started", "decision", "run.finished"]


def test_a_store_still_referenced_keeps_its_writer(tmp_path: Path) -> None:
    """Idle is not gone: a store the program still holds keeps its writer, which takes the
    next run's events."""
    store = tg.SQLiteStore(tmp_path / "held.db")
    with tg.record(store, actor="a", run_id="one"):
        tg.decide("step", 1)
    writer = writer_for(store)
    gc.collect()
    time.sleep(0.05)
    with tg.record(store, actor="a", run_id="two"):
        tg.decide("step", 2)
    assert writer_for(store) is writer
    assert [e.type for e in store.events("two")] == [
        "run.started",
        "decision",
        "run.finished",
    ]
    store.close()


def _observed_run(store: tg.SQLiteStore, observer: SealingObserver, run_id: str) -> None:
    recorder = Recorder(store, run_id=run_id, actor="a", observers=[observer])
    recorder.append("run.started", {"input": run_id, "env": {}})
    for n in range(8):
        recorder.append("decision", {"name": "step", "chosen": n})
    recorder.append("run.finished", {"status": "ok"})
    recorder.flush()
    observer.drain()


def test_a_sealing_observer_lets_go_of_its_stores_and_its_thread_ends(tmp_path: Path) -> None:
    """One observer for many stores (a policy set up once): each store dropped after its run
    is freed, with its seals on disk. The observer's logs held each store for good, and its
    thread held the last recorder (and so its store) until the next seal."""
    observer = SealingObserver(policy=SealPolicy(every_events=3, every_seconds=3600))
    refs: list[weakref.ref[object]] = []
    for i in range(5):
        store = tg.SQLiteStore(tmp_path / f"o{i}.db")
        _observed_run(store, observer, f"run-{i}")
        assert observer.log_for(store, "default").store is store  # the store, not a proxy
        refs.append(weakref.ref(store))
        del store
    assert all(_wait_until_freed(r) for r in refs)
    assert not observer.errors
    for i in range(5):
        seals = _rows(tmp_path / f"o{i}.db", "SELECT run_id, seq FROM seals ORDER BY idx")
        assert (f"run-{i}", 9) in seals  # the final seal, on the last event
    # The thread ends a second after the last seal, and the observer with it once dropped.
    ref = weakref.ref(observer)
    del observer
    assert _wait_until_freed(ref)


def test_sealing_threads_do_not_pile_up(tmp_path: Path) -> None:
    """An observer per run: each one's thread ends once it is idle, and a drain after that
    returns at once; a run sealed after the thread ended starts another."""
    threads = []
    for i in range(3):
        observer = SealingObserver(policy=SealPolicy(every_events=3, every_seconds=3600))
        _observed_run(tg.SQLiteStore(tmp_path / f"p{i}.db"), observer, f"run-{i}")
        threads.append(observer._thread)
    for thread in threads:
        assert thread is not None
        thread.join(10)
        assert not thread.is_alive()
    observer.drain()  # nothing queued, no thread: returns
    store = tg.SQLiteStore(tmp_path / "again.db")
    _observed_run(store, observer, "again")
    assert ("again", 9) in _rows(tmp_path / "again.db", "SELECT run_id, seq FROM seals")
    store.close()


def test_a_claim_that_takes_the_queue_lets_go_of_the_store(tmp_path: Path) -> None:
    """Events queued (the writer thread lingering over them, holding the store), then a
    durable event that takes them into its own commit: the writer thread, left with nothing,
    must not keep the store. It did: it had pinned the store for the queued events and, asleep
    while the claim ran, never let go."""
    path = tmp_path / "claimed.db"
    store = tg.SQLiteStore(path)
    recorder = Recorder(store, run_id="c", actor="a", durability="batch", seal=False)
    writer = writer_for(store)
    writer.linger = 3600.0  # only the claim ends the wait
    for n in range(3):
        recorder.append("decision", {"name": "step", "value": n})
    assert writer.queued == 3
    recorder.append("decision", {"name": "step", "value": 3}, durable=True)
    assert writer.queued == 0
    ref = weakref.ref(store)
    del store, recorder
    assert _wait_until_freed(ref)
    seqs = [r[0] for r in _rows(path, "SELECT seq FROM events WHERE run_id='c' ORDER BY seq")]
    assert seqs == [0, 1, 2, 3]


def test_a_store_whose_writes_failed_is_freed_too(tmp_path: Path) -> None:
    """A refused batch is kept to be reported to its run (``WriteFailed``); the error kept
    must not keep the store alive through the frames of its traceback."""
    store = tg.SQLiteStore(tmp_path / "failed.db")
    recorder = Recorder(store, run_id="f", actor="a", durability="batch", seal=False)
    recorder.append("decision", {"name": "step", "value": 0})
    recorder.flush()
    store.close()  # under the recording: the next batch is refused
    recorder.append("decision", {"name": "step", "value": 1})
    writer = writer_for(store)
    writer.drain()
    failures = writer.unreported()
    assert list(failures) == [("default", "f")]
    error = failures[("default", "f")]
    assert isinstance(error, tg.StoreUnavailable)
    assert "is closed" in str(error)
    assert error.__traceback__ is None  # kept without frames (logged at debug level)
    ref = weakref.ref(store)
    del store, recorder, failures, error
    assert _wait_until_freed(ref)


class _SealsFailOnce(tg.SQLiteStore):
    """The real SQLite store, refusing its first seals alone (a lock held elsewhere, say)."""

    refused = 0

    def append_seals(self, tenant: str, rows: Any) -> int:
        if not self.refused:
            self.refused += 1
            raise sqlite3.OperationalError("database is locked")
        return super().append_seals(tenant, rows)


def test_a_store_whose_seal_failed_once_is_freed_after_the_retry(tmp_path: Path) -> None:
    """A quiet run's seal refused once is kept as an error and tried again a period later;
    once sealed, the store is freed: the kept error does not hold it (the frame that caught
    it held the store in a variable)."""
    path = tmp_path / "seal-once.db"
    store = _SealsFailOnce(path)
    policy = SealPolicy(every_events=10_000, every_seconds=0.2)
    recorder = Recorder(store, run_id="s", actor="a", seal=policy)
    for n in range(3):
        recorder.append("decision", {"name": "step", "value": n})
    recorder.flush()
    writer = writer_for(store)
    ref = weakref.ref(store)
    del store, recorder
    assert _wait_until_freed(ref)
    assert len(writer.seals.errors) == 1
    assert ("s", 2) in _rows(path, "SELECT run_id, seq FROM seals")


def test_a_sealing_observer_whose_seal_failed_lets_go_of_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The observer keeps the failure in ``errors`` (the run is reported unsealed); the
    error must not keep the recorder, and through it the store, alive. (The failure is
    logged with its traceback; pytest's log capture keeps each record, traceback and all,
    to the end of the test, so the record is kept from it here.)"""
    monkeypatch.setattr(logging.getLogger("tachograph"), "propagate", False)
    observer = SealingObserver(policy=SealPolicy(every_events=3, every_seconds=3600))
    store = _SealsFailOnce(tmp_path / "observed-once.db")
    _observed_run(store, observer, "run")
    assert len(observer.errors) == 1
    ref = weakref.ref(store)
    del store
    assert _wait_until_freed(ref)


def test_a_kept_error_keeps_no_frames_and_leaves_the_agents_exception_alone() -> None:
    """A kept error drops its traceback and its causes' (a traceback keeps each frame it
    passed through and the frames above them, with their variables); one raised while the
    agent's own exception is handled (a ``with`` block's exit records the run's end) is
    unlinked from it, and the agent's exception keeps its frames for its debugger."""
    from tachograph.capture.seals import kept_error

    def agent_code() -> None:
        marker = "the agent's variable"
        raise ValueError(marker)

    def store_code() -> None:
        held = "the store's variable"
        try:
            raise OSError(held)
        except OSError as low:
            raise RuntimeError("refused") from low

    try:
        agent_code()
    except ValueError as exc:
        agent_error = exc
        try:
            store_code()
        except RuntimeError as inner:
            kept = kept_error(inner)
    assert str(kept) == "refused"
    assert kept.__traceback__ is None
    cause = kept.__cause__
    assert isinstance(cause, OSError)
    assert cause.__traceback__ is None
    assert cause.__context__ is None  # was the agent's ValueError: unlinked
    tb = agent_error.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    assert tb is not None
    assert tb.tb_frame.f_locals.get("marker") == "the agent's variable"


_EXIT_SCRIPT = """
import atexit
import gc
import sys
import threading

holder = {}


def hold():
    # After tachograph's own exit handler (the last registered runs first): a daemon thread
    # takes the writer's lock and keeps it, as a writer thread does that the exit stops
    # while it holds the lock.
    writer = holder.pop("writer")
    got = threading.Event()

    def grab():
        writer._lock.acquire()
        got.set()
        threading.Event().wait()

    threading.Thread(target=grab, daemon=True).start()
    got.wait(10)


atexit.register(hold)

import tachograph as tg
from tachograph.capture.recorder import writer_for


class Box:
    pass


def main():
    store = tg.SQLiteStore(sys.argv[1])
    with tg.record(store, actor="a"):
        tg.decide("step", 1)
    holder["writer"] = writer_for(store)
    box = Box()
    box.cycle = box  # freed only by the collection the interpreter makes as it exits
    box.store = store


gc.disable()
main()
print("recorded", flush=True)
"""


def test_a_store_freed_as_the_interpreter_exits_does_not_hang_the_exit(tmp_path: Path) -> None:
    """The writer's store-freed callback took the writer's lock; a daemon writer thread
    stopped by the exit while it held that lock never releases it, and a store freed by the
    exit's last collection then hung the process for good (``tacho demo`` on a read-only
    folder, now and then). A real process, with the lock held as that thread holds it."""
    script = tmp_path / "exit.py"
    script.write_text(_EXIT_SCRIPT, encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "s.db")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "recorded" in proc.stdout
    assert _rows(tmp_path / "s.db", "SELECT count(*) FROM events") == [(3,)]
