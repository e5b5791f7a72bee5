"""Workers started ahead of a verification (``prestart``): real spawned processes, taken by
the next verification that needs as many, set up for its store by its tasks, and ended when
none takes them."""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tachograph.capture.vouch import UnvouchedScan
from tachograph.store import SQLiteStore, parallel, verify_all
from tachograph.store.parallel import (
    prestart,
    stop_prestarted,
    verify_all_parallel,
    verify_stored_parallel,
)
from tachograph.testing import build_run


@pytest.fixture(autouse=True)
def _nothing_left_started() -> Iterator[None]:
    yield
    stop_prestarted()


def _pids(spawned: Any) -> list[int]:
    return list(spawned.pool._processes or {})


def _gone(pid: int) -> bool:
    """Whether process ``pid`` has ended (a zombie waiting to be reaped has ended)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def _ready(spawned: Any) -> None:
    """Wait until every worker of ``spawned`` has started (run its initializer)."""
    for _ in range(spawned.count):
        spawned.pool.submit(parallel._started).result(timeout=120)


def _no_spawning_now(monkeypatch: pytest.MonkeyPatch) -> None:
    """From here on a pool that starts its own workers fails the test."""

    def refuses(*_: object) -> None:
        raise AssertionError("the verification started workers of its own")

    monkeypatch.setattr(parallel, "_Spawned", refuses)


_SLEPT: list[bool] = []


class _SlowStartHere(UnvouchedScan):
    """The unvouched-calls scan, its first run or chunk in this process a third of a second
    slower: time for the pool's feeder to hand the workers their first tasks, which they
    then run (a task handed out is no longer this process's to take)."""

    __slots__ = ()

    def begin(self) -> Any:
        import multiprocessing
        import time

        if multiprocessing.parent_process() is None and not _SLEPT:
            _SLEPT.append(True)
            time.sleep(0.3)
        return super().begin()


def _task_results(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every task result of the pools from here on: ``None`` is a task that failed (as every
    task of a worker that could not open the store fails), whose runs the caller verified
    again serially."""
    results: list[Any] = []
    run = parallel._Pool.run

    def recorded(self: Any, *args: Any) -> list[Any]:
        got = run(self, *args)
        results.extend(got)
        return got

    monkeypatch.setattr(parallel._Pool, "run", recorded)
    return results


def _ahead(workers: int) -> Any:
    """``prestart(workers)``, and the workers it started."""
    prestart(workers)
    ahead = parallel._prestarted
    assert ahead is not None
    return ahead


def _until(done: Any, seconds: float = 60) -> bool:
    """Whether ``done()`` became true within ``seconds`` (polled)."""
    import time

    deadline = time.monotonic() + seconds
    while not done() and time.monotonic() < deadline:
        time.sleep(0.02)
    return bool(done())


def _store(path: Path, runs: int, events: int) -> SQLiteStore:
    store = SQLiteStore(path)
    for i in range(runs):
        store.append(build_run(f"r{i:03d}", events))
    return store


def test_a_store_is_verified_by_the_workers_started_ahead(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ahead = _ahead(3)
    assert ahead.count == 2
    pids = _pids(ahead)
    assert len(pids) == 2
    _no_spawning_now(monkeypatch)
    with _store(tmp_path / "s.db", 200, 30) as store:
        serial = [r.to_dict() for r in verify_all(store, scans=[UnvouchedScan()])]
        results = _task_results(monkeypatch)
        counted: list[int] = []
        _SLEPT.clear()
        reports = list(
            verify_all_parallel(store, workers=3, progress=counted.append, scans=[_SlowStartHere()])
        )
        assert [r.to_dict() for r in reports] == serial
        assert len(reports) == 200
        assert all(r.ok for r in reports)
        assert sum(counted) == 200 * 30
    # no task failed (the workers held tasks while this process was slow in its first one):
    # no run was verified again serially
    assert len(results) == 6
    assert None not in results
    assert parallel._prestarted is None  # taken, and closed with the call's pool
    assert all(_gone(pid) for pid in pids)


def test_workers_started_ahead_set_themselves_up_for_the_store_of_their_first_task(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A tampered run, verified in chunks by a worker that had no store when it started: its
    # report is the serial verifier's (the worker read the store and its scans).
    prestart(2)
    _no_spawning_now(monkeypatch)
    path = tmp_path / "s.db"
    _store(path, 1, 120).close()
    db = sqlite3.connect(path, isolation_level=None)  # a forger's: the guards dropped
    for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type='trigger'").fetchall():
        db.execute(f"DROP TRIGGER {name}")
    db.execute("UPDATE events SET type = 'tool.result' WHERE seq = 77")
    db.close()
    with SQLiteStore(path) as store:
        run_id = store.run_keys()[0][1]
        serial = list(verify_all(store, scans=[UnvouchedScan()]))
        results = _task_results(monkeypatch)
        _SLEPT.clear()
        parallel_report = verify_stored_parallel(
            store, run_id, workers=2, chunk=20, scans=[_SlowStartHere()]
        )
    # every chunk read as the serial reading would (one that could not be, as in a worker
    # without its store, sends the run to the serial verifier)
    assert len(results) > 2
    assert all(r is not None and r.consistent for r in results)
    assert not parallel_report.ok
    assert parallel_report.to_dict() == serial[0].to_dict()


def test_workers_started_ahead_in_another_number_are_ended_not_used(tmp_path: Path) -> None:
    ahead = _ahead(3)
    pids = _pids(ahead)
    with _store(tmp_path / "s.db", 30, 10) as store:
        got = [r.to_dict() for r in verify_all_parallel(store, workers=2)]
        assert got == [r.to_dict() for r in verify_all(store)]
    assert parallel._prestarted is None
    assert pids
    assert all(_gone(pid) for pid in pids)


def test_workers_no_verification_took_are_ended_at_once() -> None:
    prestart(2)
    prestart(2)  # one set waits at a time: the second call starts nothing
    ahead = parallel._prestarted
    assert ahead is not None
    pids = _pids(ahead)
    assert len(pids) == 1
    stop_prestarted()
    assert parallel._prestarted is None
    assert all(_gone(pid) for pid in pids)
    stop_prestarted()  # nothing left: nothing to do


def test_prestart_of_one_process_starts_nothing() -> None:
    prestart(1)
    assert parallel._prestarted is None


@pytest.mark.skipif(not hasattr(signal, "pthread_sigmask"), reason="POSIX signals")
def test_a_worker_started_ahead_leaves_ctrl_c_to_its_caller() -> None:
    # Ctrl-C at a terminal reaches every process of the group: the caller ends its workers;
    # a worker that took it would die printing its own traceback.
    import signal

    ahead = _ahead(2)
    _ready(ahead)
    (pid,) = _pids(ahead)
    os.kill(pid, signal.SIGINT)
    ahead.pool.submit(parallel._started).result(timeout=120)  # it still answers
    assert ahead.alive()


@pytest.mark.skipif(not hasattr(signal, "pthread_sigmask"), reason="POSIX signals")
def test_a_worker_given_ctrl_c_as_it_starts_leaves_it_to_its_caller(
    capfd: pytest.CaptureFixture[str],
) -> None:
    # The worker ignores SIGINT once its initializer runs, a tenth of a second or more
    # after its start: a Ctrl-C before that ended it with a traceback of whatever it was
    # importing, and broke the pool. Workers start with SIGINT held (ctrl_c_held).
    import signal

    ahead = _ahead(3)
    pids = _pids(ahead)
    assert len(pids) == 2
    for pid in pids:  # at once: each is still starting its interpreter
        os.kill(pid, signal.SIGINT)
    _ready(ahead)  # every worker still answers
    assert ahead.alive()
    assert "Traceback" not in capfd.readouterr().err


@pytest.mark.skipif(not hasattr(signal, "pthread_sigmask"), reason="POSIX signals")
def test_ctrl_c_held_holds_sigint_back_from_the_processes_started_in_it() -> None:
    import multiprocessing
    import signal
    from concurrent.futures import ProcessPoolExecutor

    from tachograph.store.parallel import ctrl_c_held, end_pool, leave_ctrl_c_to_caller

    pool = ProcessPoolExecutor(
        1, mp_context=multiprocessing.get_context("spawn"), initializer=leave_ctrl_c_to_caller
    )
    try:
        with ctrl_c_held():
            started = pool.submit(os.getpid)
        for pid in list(pool._processes or {}):  # at once, as it starts
            os.kill(pid, signal.SIGINT)
        worker = started.result(timeout=120)
        assert pool.submit(os.getpid).result(timeout=120) == worker  # the same one, alive
    finally:
        end_pool(pool)
    assert _until(lambda: _gone(worker))
    # and this thread has SIGINT back
    assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, set())


_ORPHANED = """
import sys, time
from tachograph.store import parallel
parallel.prestart(3)
ahead = parallel._prestarted
for _ in range(ahead.count):
    ahead.pool.submit(parallel._started).result(timeout=120)
print(" ".join(str(pid) for pid in ahead.pool._processes), flush=True)
time.sleep(120)
"""


def test_workers_started_ahead_end_when_their_parent_is_killed(
    python: str, child_env: dict[str, str]
) -> None:
    # A parent killed before it could end them (SIGKILL; SIGTERM before the command line
    # handles it) would leave its workers waiting on the pool's pipe for ever.
    import signal
    import subprocess

    parent = subprocess.Popen(
        [python, "-c", _ORPHANED], stdout=subprocess.PIPE, text=True, env=child_env
    )
    pids: list[int] = []
    try:
        assert parent.stdout is not None
        pids = [int(pid) for pid in parent.stdout.readline().split()]
        assert len(pids) == 2
        parent.kill()
        parent.wait(timeout=60)
        assert _until(lambda: all(_gone(pid) for pid in pids))
    finally:
        parent.kill()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # fork with threads (3.12+)
def test_a_process_forked_after_prestart_does_not_take_its_parents_workers() -> None:
    # The executor's threads do not cross a fork: a task the child gave those workers would
    # never be done.
    _ahead(2)
    child = os.fork()
    if child == 0:  # pragma: no cover - the child
        os._exit(0 if parallel._prestarted is None else 1)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert parallel._prestarted is not None  # the parent's are still its own


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # fork with threads (3.12+)
def test_a_child_forked_while_the_pool_holds_its_lock_does_not_wait_for_it() -> None:
    # A thread of the parent may hold the executor's lock at the fork (its own thread does,
    # now and then): a child that let the parent's pool be collected would take that lock in
    # the executor's callback and wait for ever. Held here for the fork, every time.
    import signal
    import time

    _ahead(2)
    assert parallel._prestarted is not None
    lock = parallel._prestarted.pool._shutdown_lock
    with lock:
        child = os.fork()
        if child == 0:  # pragma: no cover - the child
            os._exit(0 if parallel._prestarted is None else 1)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        pid, status = os.waitpid(child, os.WNOHANG)
        if pid:
            break
        time.sleep(0.05)
    else:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
        pytest.fail("the forked child waited for the lock its parent held at the fork")
    assert os.waitstatus_to_exitcode(status) == 0
    assert parallel._prestarted is not None  # the parent's are still its own


def test_workers_started_ahead_with_one_dead_are_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Taken with a dead worker, the pool would be broken at its first task and this process
    # would verify everything alone.
    import signal

    ahead = _ahead(2)
    _ready(ahead)
    (pid,) = _pids(ahead)
    os.kill(pid, signal.SIGKILL)
    assert _until(lambda: not ahead.alive())
    started: list[int] = []
    real = parallel._Spawned

    def counted(count: int, setup: Any) -> Any:
        started.append(count)
        return real(count, setup)

    monkeypatch.setattr(parallel, "_Spawned", counted)
    with _store(tmp_path / "s.db", 30, 10) as store:
        got = [r.to_dict() for r in verify_all_parallel(store, workers=2)]
        assert got == [r.to_dict() for r in verify_all(store)]
    assert started == [1]  # a new worker, not the broken pool
    assert parallel._prestarted is None
