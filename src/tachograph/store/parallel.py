"""Verification in several processes: runs spread over them, and one large run in chunks.

``workers=N`` is N processes at work: the calling process and N - 1 spawned workers. The
calling process takes its share of the tasks (groups of small runs, chunks of a large one)
from the last back while the workers take theirs from the first on, so that it does not sit
idle while they start and work, and one process fewer is started.

Every check of SPEC section 8 except the link (check 4) looks at one row alone, and the link
of a row needs only the recomputed hash of the row before it. So a run is cut into chunks of
consecutive seqs; the process that checks a chunk re-hashes the last row of the previous
chunk (the boundary hash), checks its own rows exactly as
:class:`~tachograph.record.verify.LineChecker` checks a whole run, and returns its failures,
erased seqs and last hash. The calling process then checks the links between chunks (each
chunk's boundary hash is the previous chunk's last hash), merges the failures in position
order and holds the chain against the run's summary.

The result is the serial verifier's, report for report: whenever a chunk sees anything that
would make its positions differ from the serial reading (a seq that is missing, repeated,
out of order or not an integer, a row the store cannot read, chunks that do not join), the
run is verified again serially and that report is returned; so is every run whose task
failed, or never ran because a worker died (killed, out of memory) and broke the pool. Only
SQLite files are opened in workers (each worker opens the file itself); any other store is
verified serially.

A spawned worker imports the library before it can check anything (about a tenth of a
second). :func:`prestart` starts a verification's workers ahead of it, while the program
does its own work (``tacho verify --workers N`` calls it before it loads the command line);
the next verification with as many processes takes them, and each task tells a worker the
store and scans it is for. :func:`stop_prestarted` ends workers no verification took.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import functools
import math
import multiprocessing
import multiprocessing.connection
import os
import pickle
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..record.scan import Part, RowScan, Scanning, join_parts
from ..record.verify import Failure, LineChecker, VerifyReport
from .base import Store
from .sqlite import SQLiteStore

__all__ = [
    "ctrl_c_held",
    "end_pool",
    "leave_ctrl_c_to_caller",
    "parallel_url",
    "prestart",
    "sendable",
    "stop_prestarted",
    "verify_all_parallel",
    "verify_stored_parallel",
]

CHUNK_MIN = 25_000
"""The default smallest chunk: a run shorter than twice this is verified whole by one worker
(or in this process)."""
CHUNKS_PER_WORKER = 4
"""Chunks per worker for one large run: some balance, and progress between chunks."""
GROUP_EVENTS = 20_000
"""Small runs are handed to workers in groups of about this many events."""
_PROGRESS_EVERY = 5_000
_STUCK_AFTER = 2.0
"""Seconds a worker may lie dead with the pool not broken before the feeder ends the pool
(:meth:`_Pool._unstick`): the executor breaks it within milliseconds of a death, unless its
thread is reading a result the dead worker had begun to send."""
_MAX_FAILURES = 100


def _nowhere(task: int, n: int) -> None:
    """Progress that goes nowhere (a process that is not a worker of a pool)."""


@dataclass(slots=True)
class _Source:
    """What a task reads with: the store, the scans and where its progress goes (``report(
    task, n)``: ``n`` more rows of task ``task`` checked)."""

    store: Store | None
    """``None`` in a worker that could not open the store (its tasks fail)."""
    scans: tuple[RowScan, ...] | None
    """``None`` in a worker that could not unpickle them (its tasks fail too)."""
    report: Callable[[int, int], None]


_worker = _Source(None, (), _nowhere)
"""In a worker process: what its tasks read with (set by ``_init_worker`` and ``_set_up``)."""
_worker_setup: tuple[str, bytes] | None = None
"""In a worker process: the store URL and pickled scans ``_worker`` was set up with."""


def parallel_url(store: Store) -> str | None:
    """The URL a worker process opens to read the same store, or ``None`` if it cannot."""
    if type(store) is SQLiteStore and store.path != ":memory:":
        # Absolute: a worker need not share the parent's working directory.
        return "sqlite:///" + str(Path(store.path).resolve())
    return None


# -- in the workers --------------------------------------------------------------------------


@contextlib.contextmanager
def ctrl_c_held() -> Iterator[None]:
    """Start worker processes in this block: Ctrl-C (SIGINT) is held back from them until
    they call :func:`leave_ctrl_c_to_caller`.

    Ctrl-C at a terminal reaches the whole process group, workers included. A spawned
    process starts with the signal mask of the thread that started it, so with SIGINT
    blocked in this thread for the block, a Ctrl-C in a worker's first tenth of a second
    (the interpreter's start, its imports: before it can say how it takes SIGINT) waits
    instead of ending the worker with a traceback of whatever it was importing. CPython
    starts its resource tracker so. This process still takes the Ctrl-C: another of its
    threads receives it and the main thread raises KeyboardInterrupt as usual; threads
    started in the block keep SIGINT blocked, as a thread inherits its starter's mask.
    Nothing is held where threads have no signal mask (Windows)."""
    mask = getattr(signal, "pthread_sigmask", None)
    if mask is None:
        yield
        return
    before = mask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        mask(signal.SIG_SETMASK, before)


def leave_ctrl_c_to_caller() -> None:
    """In a worker started in :func:`ctrl_c_held`: Ctrl-C from now on does nothing here, nor
    one held since the start. The caller decides what ends (it ends its workers); a worker
    that took Ctrl-C would print its own traceback and break its pool.

    A handler that does nothing, not ``SIG_IGN``: an ignored signal stays ignored in every
    process started from this one, even after ``exec``, so a program an agent's module starts
    in a ``tacho test`` worker would outlive a Ctrl-C; a handler is reset at ``exec``. (A
    system call it interrupts is resumed: PEP 475.)"""
    signal.signal(signal.SIGINT, _left_to_caller)
    mask = getattr(signal, "pthread_sigmask", None)
    if mask is not None:
        mask(signal.SIG_UNBLOCK, {signal.SIGINT})  # one held since the start: handled here


def _left_to_caller(signum: int, frame: Any) -> None:
    """SIGINT in a worker: its caller's (see :func:`leave_ctrl_c_to_caller`)."""


def _init_worker(progress: Any, setup: tuple[str, bytes] | None) -> None:
    leave_ctrl_c_to_caller()
    _watch_parent()
    _worker.report = functools.partial(_put, progress)
    # A worker ends when the pool sends it the sign to stop, after its last result went out
    # (on a pipe written synchronously: nothing of it waits in a thread) and multiprocessing
    # ran its own exit functions. Python's finalization after that frees every object and
    # module one by one, 25-45 ms for which the caller's close waits: the worker leaves
    # before it. Its read-only store connection needs no closing (the caller's outlives it);
    # the exit functions registered before this one (logging's shutdown) do not run, and the
    # exit code is 0: the executor reads neither.
    atexit.register(_leave)
    # A worker started ahead of its pool (``prestart``) has no store yet: its first task
    # brings it.
    if setup is not None:
        _set_up(setup)


def _watch_parent() -> None:
    """End this worker when its parent ends. A parent killed before it could end its workers
    (SIGKILL; SIGTERM before the command line handles it; a worker started ahead and waiting
    for its first task) would leave it waiting on the pool's pipe for ever."""
    parent = multiprocessing.parent_process()
    sentinel = getattr(parent, "sentinel", None)
    if sentinel is None:
        return

    def watch() -> None:
        multiprocessing.connection.wait([sentinel])
        os._exit(1)

    threading.Thread(target=watch, name="tachograph-parent-watch", daemon=True).start()


def _set_up(setup: tuple[str, bytes]) -> None:
    """Open the store at ``setup``'s URL and unpickle its scans (importing their modules).

    Nothing may raise here: an initializer that raises breaks the pool. A worker that could
    not open the store or unpickle the scans fails each task it is given, and the parent
    verifies those runs itself."""
    global _worker_setup
    url, scans = setup
    _worker_setup = setup
    old, _worker.store = _worker.store, None
    if old is not None:
        with contextlib.suppress(Exception):
            old.close()
    try:
        from .registry import open_store

        _worker.store = open_store(url, create=False)
    except Exception:
        _worker.store = None
    try:
        _worker.scans = pickle.loads(scans)
    except Exception:
        _worker.scans = None


def _put(channel: Any, task: int, n: int) -> None:
    if n:
        channel.put((task, n))


def _in_worker(setup: tuple[str, bytes], fn: Callable[..., Any], task: int, *args: Any) -> Any:
    """A task as a worker runs it: ``fn(source, task, *args)`` with the worker's source, set
    up first for the task's store and scans if it is not (a worker started ahead)."""
    if setup != _worker_setup:
        _set_up(setup)
    return fn(_worker, task, *args)


def _leave() -> None:
    """A worker's last exit function (see ``_init_worker``): its output flushed, it ends."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(0)


def sendable(scans: Sequence[RowScan]) -> bool:
    """Whether ``scans`` can be sent to a spawned worker: they pickle, and their types are
    not defined in ``__main__`` (which the workers do not import: see ``_Pool``). Otherwise
    the verification with workers is made in the calling process."""
    if any(type(scan).__module__ == "__main__" for scan in scans):
        return False
    try:
        pickle.dumps(tuple(scans))
    except Exception:
        return False
    return True


@dataclass(frozen=True, slots=True)
class _Chunk:
    """What a worker found in one chunk of a run."""

    start: int
    count: int
    consistent: bool
    boundary: str | None
    failures: tuple[Failure, ...]
    erased: tuple[int, ...]
    last: str | None
    head: str | None
    scanned: tuple[Part, ...] = ()


_PAGE = 1_000
"""Rows a worker checks (``LineChecker.feed_many``) and scans at a time."""


def _verify_chunk(
    source: _Source,
    task: int,
    tenant: str,
    run_id: str,
    first: tuple[Any, Any],
    start: int,
    end: int | None,
) -> _Chunk:
    """Check rows ``start`` to ``end`` (exclusive; ``None``: to the end) of one run."""
    checker = LineChecker(max_failures=_MAX_FAILURES)
    checker.run_id, checker.tenant = first
    boundary: str | None = None
    done = pending = 0

    def broken() -> _Chunk:
        return _Chunk(start, done, False, None, (), (), None, None)

    store, scans = source.store, source.scans
    if store is None or scans is None:
        return broken()  # the store or the scans did not reach this worker: the parent decides
    scanning = Scanning(scans) if scans else None

    try:
        rows = store.read_rows(run_id, tenant=tenant, from_seq=max(0, start - 1))
        try:
            it = iter(rows)
            if start > 0:
                row = next(it, None)
                if row is None or type(row[2]) is not int or row[2] != start - 1:
                    return broken()
                # The boundary: what the serial checker holds after the previous chunk's last
                # row (its recomputed hash, or nothing if it failed check 1).
                checker.position = start - 1
                checker.feed_row(row)
                boundary = checker.prev_recomputed
                checker.failures.clear()
                checker.erased.clear()
            # Pages of rows whose seqs are exactly the positions the serial checker would
            # give them (anything else: the serial verifier decides), checked as it checks
            # its pages and handed to the scans.
            page: list[Any] = []
            expected = checker.position
            while True:
                page.clear()
                for row in it:
                    if expected == end:
                        break  # the next chunk's first row: that chunk checks it
                    seq = row[2]
                    if type(seq) is not int or seq != expected:
                        return broken()
                    page.append(row)
                    expected += 1
                    if len(page) == _PAGE:
                        break
                if not page:
                    break
                checker.feed_many(page)
                if scanning is not None:
                    scanning.feed(page)
                done += len(page)
                pending += len(page)
                if pending >= _PROGRESS_EVERY:
                    source.report(task, pending)
                    pending = 0
                if len(page) < _PAGE or expected == end:
                    break
        finally:
            close = getattr(rows, "close", None)
            if close is not None:
                close()
    except Exception:
        # Whatever went wrong, the serial verifier decides how it reads in the report.
        return broken()
    source.report(task, pending)
    if end is not None and checker.position != end:
        return broken()
    return _Chunk(
        start,
        done,
        True,
        boundary,
        tuple(checker.failures),
        tuple(checker.erased),
        checker.prev_recomputed,
        checker.head,
        scanning.outcomes() if scanning is not None else (),
    )


def _verify_runs(source: _Source, task: int, keys: Sequence[tuple[str, str]]) -> list[VerifyReport]:
    """Verify whole runs, serially, one after the other."""
    from .verify import verify_stored

    store, scans = source.store, source.scans
    if store is None or scans is None:
        raise RuntimeError("this worker could not open the store or unpickle the scans")
    reports = []
    pending = [0]

    def advance(n: int) -> None:
        pending[0] += n
        if pending[0] >= _PROGRESS_EVERY:
            source.report(task, pending[0])
            pending[0] = 0

    for tenant, run_id in keys:
        reports.append(verify_stored(store, run_id, tenant=tenant, progress=advance, scans=scans))
    source.report(task, pending[0])
    return reports


# -- in the parent ---------------------------------------------------------------------------


@contextlib.contextmanager
def _main_hidden() -> Iterator[None]:
    """Hide the caller's main module from workers spawned in the block.

    A spawned worker re-imports the caller's main module unless it has no spec and no file:
    a script without an ``if __name__ == "__main__"`` guard would run again in every worker.
    The workers need nothing from it."""
    main = sys.modules.get("__main__")
    hidden = {a: getattr(main, a) for a in ("__spec__", "__file__") if hasattr(main, a)}
    for attr in hidden:
        setattr(main, attr, None)
    try:
        yield
    finally:
        for attr, value in hidden.items():
            setattr(main, attr, value)


def _started() -> None:
    """A task that does nothing: one per worker makes the pool start them all at once."""


class _Spawned:
    """``count`` spawned worker processes (a
    :class:`~concurrent.futures.ProcessPoolExecutor`) and their progress channel, started
    as soon as this is made: each worker imports the library, and with ``setup`` (a store
    URL and pickled scans) opens the store and unpickles the scans, while this process goes
    on with its own work."""

    def __init__(self, count: int, setup: tuple[str, bytes] | None) -> None:
        self.count = count
        # spawn, not fork: the parent may hold SQLite connections and threads (a progress bar).
        ctx = multiprocessing.get_context("spawn")
        self.progress: Any = ctx.SimpleQueue()
        self.broken = False
        self.pool = ProcessPoolExecutor(
            count, mp_context=ctx, initializer=_init_worker, initargs=(self.progress, setup)
        )
        # The executor starts a worker when a task finds none idle: the workers start now.
        try:
            with _main_hidden(), ctrl_c_held():
                for _ in range(count):
                    self.pool.submit(_started)
        except BrokenProcessPool:
            self.broken = True  # a worker died as the others started: the caller does it all
        except BaseException:
            # (a Ctrl-C held in ctrl_c_held is raised as it ends) the workers are ended, not
            # left starting: each would find the pool's semaphores gone with this process
            # and print a traceback of its own
            end_pool(self.pool)
            raise

    def alive(self) -> bool:
        """Whether every worker is still there and the pool not broken (a worker that died
        breaks it, a moment later)."""
        if self.broken or getattr(self.pool, "_broken", False):
            return False
        return all(process.is_alive() for process in _worker_processes(self.pool))

    def terminate(self) -> None:
        """Stop now: pending tasks are cancelled and the workers ended (not waited for in
        what they do; their processes are joined)."""
        end_pool(self.pool)


def end_pool(pool: ProcessPoolExecutor) -> None:
    """End ``pool`` now: its pending tasks cancelled, its workers ended (not waited for in
    what they do; their processes are joined), and nothing of it left for the interpreter's
    exit to wait on. ``shutdown`` waits for the tasks that are running, and for every task
    already handed to the pool unless told to cancel them; a caller interrupted (Ctrl-C,
    with workers that leave it to their caller) ends its workers with this instead."""
    # Read first: the process table, the result pipe and the thread go with the shutdown.
    processes = _worker_processes(pool)
    writer = _result_writer(pool)
    thread = _manager_thread(pool)
    reader = _feeder_reader(pool)  # the shutdown drops the executor's queues too
    stop = getattr(pool, "terminate_workers", None)  # Python 3.14
    if stop is not None:
        stop()
    else:
        # Before 3.14 the executor has no public way to end running workers.
        pool.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            if process.is_alive():
                process.terminate()
    for process in processes:
        process.join()
    # The executor's thread may be reading a result a worker began to send before it
    # died (see _Pool._unstick): with the workers gone, this process's writing end of
    # the pipe is the last one, and closing it ends that read (else the interpreter's
    # exit, which joins that thread, would wait for ever).
    if writer is not None:
        with contextlib.suppress(Exception):
            writer.close()
    # The executor's thread ends once it sees its workers gone: a few milliseconds, waited
    # for here (polled, not joined: an interrupted join could mark the thread ended before
    # 3.12). Left running, it could close its wake-up pipe as CPython's exit function writes
    # to it (CPython checks, then writes), which printed "Exception ignored ... Bad file
    # descriptor" at the exit of an interrupted command (once in a few runs on 3.10).
    if not _ended(thread, 0.5) and reader is not None:
        # Before 3.11 the executor's thread can wait on its feeder thread, blocked writing
        # tasks to a full pipe that no worker reads (see _feeder_reader): only then
        # is the reading end closed here. Closed unasked, it raced the feeder thread's own
        # close of it (one of them failed, EBADF, or closed whatever had the number since).
        _close(reader)
    _ended(thread, 5.0)


def _ended(thread: threading.Thread | None, seconds: float) -> bool:
    """Whether ``thread`` is absent or ends within ``seconds`` (polled, not joined)."""
    deadline = time.monotonic() + seconds
    while thread is not None and thread.is_alive():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.002)
    return True


def _feeder_reader(pool: ProcessPoolExecutor) -> Any:
    """The end to close, before Python 3.11, for the executor's shutdown to finish once
    its workers are gone (``None`` from 3.11). The thread that writes tasks to the
    workers' pipe can block on a full pipe (a task of a group of many small runs can be
    larger than the pipe holds), and this process keeps the pipe's reading end open, so
    the write never fails. 3.11 closes that end when the pool breaks (CPython
    gh-94777); :func:`end_pool` closes it for it."""
    if sys.version_info >= (3, 11):
        return None
    return getattr(getattr(pool, "_call_queue", None), "_reader", None)


def _manager_thread(pool: ProcessPoolExecutor) -> threading.Thread | None:
    """The executor's own thread, which hands out tasks and collects results (``None``
    before the first task and once it has dropped it, at its shutdown)."""
    thread: threading.Thread | None = getattr(pool, "_executor_manager_thread", None)
    return thread


def _worker_processes(pool: ProcessPoolExecutor) -> list[Any]:
    """The executor's worker processes as it holds them now (none once it has dropped its
    table, at its shutdown; the executor has no public way to list them)."""
    return list((getattr(pool, "_processes", None) or {}).values())


def _result_writer(pool: ProcessPoolExecutor) -> Any:
    """This process's writing end of the executor's result pipe (``None`` where the
    executor has none as known, or no longer has it)."""
    return getattr(getattr(pool, "_result_queue", None), "_writer", None)


_prestarted: _Spawned | None = None
_prestart_lock = threading.Lock()


_forked_off: list[_Spawned] = []
"""In a forked child: the parent's workers started ahead, kept and never used (see
:func:`_forget_prestarted`)."""


def _forget_prestarted() -> None:
    """In a child forked from this process: the workers are the parent's, and the executor's
    threads did not cross the fork (a task given to them would never be done).

    The parent's pool is set aside, not let go: collected here, the executor would wake its
    thread under a lock that a thread of the parent may have held at the fork, and the child
    would wait for that lock for ever."""
    global _prestarted, _prestart_lock
    if _prestarted is not None:
        _forked_off.append(_prestarted)
    _prestarted = None
    _prestart_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_prestarted)


def prestart(workers: int) -> None:
    """Start the ``workers - 1`` worker processes of a verification with ``workers`` processes
    (:func:`verify_all_parallel`, :func:`verify_stored_parallel`) now, ahead of it.

    A spawned worker spends about a tenth of a second importing the library before it can
    check anything; started ahead (``tacho verify --workers N`` over a store's runs starts
    them first thing, before it parses its options and opens the store), they import while
    this process does its own work. The next verification in this process with ``workers``
    processes takes them if all are alive, and sets them up for its store with its first
    task. Workers that no verification took are ended by :func:`stop_prestarted` (else they
    end with this process). Does nothing for ``workers`` below 2, or if workers started
    ahead are already waiting."""
    global _prestarted
    if workers < 2:
        return
    with _prestart_lock:
        if _prestarted is None:
            _prestarted = _Spawned(workers - 1, None)


def stop_prestarted() -> None:
    """End the workers :func:`prestart` started that no verification took (at once: they
    may still be importing)."""
    global _prestarted
    with _prestart_lock:
        spawned, _prestarted = _prestarted, None
    if spawned is not None:
        spawned.terminate()


def _take_prestarted(count: int) -> _Spawned | None:
    """The workers started ahead, if they are ``count`` and all alive; others are ended
    (they would only wait, or a dead one would leave this process all the work)."""
    global _prestarted
    with _prestart_lock:
        spawned, _prestarted = _prestarted, None
    if spawned is None:
        return None
    if spawned.count != count or not spawned.alive():
        spawned.terminate()
        return None
    return spawned


class _Pool:
    """``workers`` processes that verify: this one and ``workers - 1`` spawned workers that
    have the store open, with a progress channel.

    This process takes its share of each call's tasks (:meth:`run`): it would otherwise wait
    while the workers work, and one worker fewer is one start fewer (about a tenth of a
    second of importing, time in which this process already verifies).

    The workers are a :class:`~concurrent.futures.ProcessPoolExecutor`: a worker that dies
    holding a task (killed, out of memory) breaks the pool, and every task handed out to the
    workers and not done fails (``None``, and the caller verifies those runs itself) instead
    of waiting for ever; this process runs the tasks not yet handed out."""

    def __init__(self, store: Store, url: str, workers: int, scans: Sequence[RowScan] = ()) -> None:
        if workers < 2:
            raise ValueError("a pool needs two processes or more (this one and a worker)")
        self.store = store
        self.scans = tuple(scans)
        self.spawned = workers - 1
        # Each task carries the store's URL and the pickled scans, for a worker started ahead
        # (``prestart``) to set itself up with; one started here gets them with its start and
        # opens the store and unpickles the scans (importing their modules) while this
        # process lists the runs.
        self.setup = (url, pickle.dumps(self.scans))
        self.workers = _take_prestarted(self.spawned) or _Spawned(self.spawned, self.setup)
        self.pool = self.workers.pool
        self.progress: Any = self.workers.progress
        self.broken = self.workers.broken
        self.dead_since: float | None = None
        """When the feeder first saw a worker dead and the pool not broken (see _unstick)."""
        self.unstuck = False
        """Whether the feeder ended the workers of a pool a half-sent result held."""

    def run(
        self,
        calls: Sequence[tuple[Callable[..., Any], tuple[Any, ...]]],
        sizes: Sequence[int],
        progress: Callable[[int], None] | None,
    ) -> list[Any]:
        """Run ``calls`` (each ``fn(source, task, *args)``) in the workers and in this
        process; results in call order, ``None`` for a task that failed (or that was handed
        out to the workers and not done when one died).

        The workers take the tasks from the first on, this process from the last back,
        until the two meet. A thread of this process hands the workers a task as one ends,
        with at most two a worker handed out at a time (one near the end): a task handed
        out is one this process can no longer take. Once the pool is broken (a worker
        died), this process runs every task not yet handed out.

        Progress comes from the workers as they go; a finished task is topped up to its size
        (its ``done`` count), so the total is exact however the messages interleave.
        """
        count = len(calls)
        handles: list[Future[Any] | None] = [None] * count
        reported = [0] * count
        finished = [False] * count
        results: list[Any] = [None] * count
        claims = _Claims(count)
        feeder = threading.Thread(
            target=self._feed,
            args=(calls, claims, handles),
            name="tachograph-verify-feeder",
            daemon=True,
        )

        def finish(i: int, result: Any) -> None:
            results[i] = result
            finished[i] = True
            if progress is not None:
                done = _done_of(result, sizes[i])
                if done > reported[i]:
                    progress(done - reported[i])
                reported[i] = done

        raised: list[BaseException] = []

        def report_here(task: int, n: int) -> None:
            try:
                if progress is not None and n:
                    reported[task] += n
                    progress(n)
                self._drain(reported, finished, progress)  # and the workers' progress meanwhile
            except BaseException as exc:
                raised.append(exc)  # the caller's, not the task's: raised after the task
                raise

        here = _Source(self.store, self.scans, report_here)
        feeder.start()
        try:
            while True:
                i = claims.last()
                # (an Event, not the thread's join: before Python 3.12 an interrupted join
                # could mark a running thread as ended)
                if i is None and not claims.fed.is_set():
                    self._drain(reported, finished, progress)
                    claims.fed.wait(0.05)
                    continue
                if i is None:
                    i = claims.last()  # a task the feeder gave back as it stopped
                    if i is None:
                        break
                fn, args = calls[i]
                try:
                    result = fn(here, i, *args)
                except Exception:
                    result = None  # as for a worker's task that fails: the caller decides
                if raised:  # the progress callback's error, which the task may have caught
                    raise raised[0]
                finish(i, result)
        finally:
            claims.close()  # on an error or an interrupt: the feeder hands out nothing more
        # The feeder ends once every task it handed out is done. A worker sends a task's
        # progress before its result: every message of these tasks is in the channel now.
        # Read them, or the next call (whose task numbers start at 0 again) would count them
        # as its own.
        self._drain(reported, finished, progress)
        for i, handle in enumerate(handles):
            if handle is None:
                continue
            if not handle.done():  # the pool broke and forgot it (see _abandoned)
                finish(i, None)
                continue
            try:
                result = handle.result()
            except Exception:
                # a task that failed, whose result would not pickle (a forged payload
                # nested past the recursion limit), or that a dead worker held: None, and
                # the caller verifies its runs in this process
                result = None
            finish(i, result)
        self.broken = self.broken or claims.broken or _is_broken(handles)
        return results

    def _feed(
        self,
        calls: Sequence[tuple[Callable[..., Any], tuple[Any, ...]]],
        claims: _Claims,
        handles: list[Future[Any] | None],
    ) -> None:
        """The feeder thread of :meth:`run`: tasks from the first on to the workers."""
        running: set[Future[Any]] = set()
        try:
            while True:
                # Two tasks a worker (the one it runs, the next one waiting) while there are
                # many left, one near the end.
                left = claims.left()
                while len(running) < self.spawned * (2 if left > 2 * self.spawned else 1):
                    i = claims.first()
                    if i is None:
                        break
                    fn, args = calls[i]
                    try:
                        handle = self.pool.submit(_in_worker, self.setup, fn, i, *args)
                    except (BrokenProcessPool, RuntimeError):  # broken, or shut down
                        claims.give_back()
                        claims.mark_broken()
                        return
                    handles[i] = handle
                    running.add(handle)
                    left = claims.left()
                if not running:
                    return
                wait(running, timeout=0.25, return_when=FIRST_COMPLETED)
                done = _done(running)
                running -= done
                if _is_broken(list(done)):
                    claims.mark_broken()
                self._unstick(claims)
                running -= self._abandoned(running, claims)
        finally:
            # Return only once every task handed out is done (the pool fails a broken
            # pool's tasks; an interrupted call's workers are ended by the caller).
            try:
                while running:
                    wait(running, timeout=0.25)
                    running -= _done(running)
                    self._unstick(claims)
                    running -= self._abandoned(running, claims)
            finally:
                claims.fed.set()

    def _unstick(self, claims: _Claims) -> None:
        """A worker that died while it wrote a result leaves the executor's thread reading
        the rest of it, for ever (it reads a result whole, and this process holds the pipe's
        writing end too, so the read never ends): the pool is never broken, and its tasks
        never done. Once a worker has been dead for :data:`_STUCK_AFTER` seconds and the
        pool is still not broken, every worker is ended and this process's writing end of
        the result pipe closed: the executor's read then ends, and it breaks the pool as for
        any death (its tasks fail; the calling process verifies their runs itself)."""
        if claims.broken or self.unstuck:
            return
        processes = _worker_processes(self.pool)
        try:
            # a sentinel is ready once its process has ended (without reaping it)
            dead = multiprocessing.connection.wait([p.sentinel for p in processes], timeout=0)
        except (OSError, ValueError):  # a process closed under us: the pool is ending
            return
        now = time.monotonic()
        if not dead:
            self.dead_since = None
            return
        if self.dead_since is None:
            self.dead_since = now
            return
        if now - self.dead_since < _STUCK_AFTER:
            return
        writer = _result_writer(self.pool)
        if writer is None:  # not CPython's executor as known: nothing to close
            return
        self.unstuck = True
        # The pool is broken from here on: the tasks handed out are no longer waited for
        # once the executor's thread has ended (_abandoned), which the close below brings.
        claims.mark_broken()
        for process in processes:
            with contextlib.suppress(Exception):
                process.kill()
        with contextlib.suppress(Exception):
            writer.close()

    def _abandoned(self, running: set[Future[Any]], claims: _Claims) -> set[Future[Any]]:
        """The tasks of ``running`` to stop waiting for: none until the pool is broken, nor
        while the executor may still fail them (its manager thread alive; where it cannot be
        seen, for a second after the break was), then all of them, cancelled where they can
        be.
        Before Python 3.12 the executor fails and forgets its tasks without the lock that
        ``submit`` holds, so a task handed out as the pool broke can be left pending for
        ever; the caller verifies its runs itself, as for any task that failed."""
        if not running or claims.broken_since is None:
            return set()
        manager = _manager_thread(self.pool)
        if manager is not None:
            if manager.is_alive():
                return set()
        elif time.monotonic() - claims.broken_since < 1.0:
            return set()
        for handle in running:
            handle.cancel()
        return set(running)

    def _drain(
        self,
        reported: list[int],
        finished: list[bool],
        progress: Callable[[int], None] | None,
    ) -> None:
        while not self.progress.empty():
            task, n = self.progress.get()
            if progress is not None and not finished[task]:
                reported[task] += n
                progress(n)

    def close(self) -> None:
        if self.broken:
            # Its workers are of no more use, and one started as it broke may have been left
            # running by the executor (before Python 3.12): ended, not waited for.
            self.terminate()
            return
        self.pool.shutdown(wait=True)

    def terminate(self) -> None:
        """Stop now (an error or an interrupt in this process): pending tasks are cancelled
        and the workers ended, not waited for."""
        self.workers.terminate()

    def __enter__(self) -> _Pool:
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is not None:
            self.terminate()
        else:
            self.close()


def _close(reader: Any) -> None:
    if reader is not None:
        with contextlib.suppress(OSError):
            reader.close()


def _is_broken(handles: Sequence[Future[Any] | None]) -> bool:
    """Whether a task failed because the pool broke (the tasks handed out all done)."""
    for handle in handles:
        if handle is None or handle.cancelled():
            continue
        if isinstance(handle.exception(), BrokenProcessPool):
            return True
    return False


def _done(handles: set[Future[Any]]) -> set[Future[Any]]:
    """The futures of ``handles`` that are done. Not what ``wait`` returns as done: a task the
    executor cancels as it shuts down (``cancel_futures``) is done, but never in ``wait``'s
    done set (it is never "notified")."""
    return {handle for handle in handles if handle.done()}


class _Claims:
    """The tasks of one :meth:`_Pool.run` not yet taken: the feeder takes them from the
    first on for the workers, the calling process from the last back."""

    def __init__(self, count: int) -> None:
        self._lock = threading.Lock()
        self._head = 0
        self._tail = count
        self._feeding = True
        self.broken_since: float | None = None
        """When the feeder saw the pool broken (``time.monotonic``), or ``None``."""
        self.fed = threading.Event()
        """Set by the feeder as it ends, every task it handed out done."""

    @property
    def broken(self) -> bool:
        return self.broken_since is not None

    def left(self) -> int:
        with self._lock:
            return self._tail - self._head

    def first(self) -> int | None:
        """The next task for a worker, ``None`` once there is none (or no more feeding)."""
        with self._lock:
            if not self._feeding or self._head >= self._tail:
                return None
            self._head += 1
            return self._head - 1

    def last(self) -> int | None:
        """The next task for the calling process, ``None`` once there is none."""
        with self._lock:
            if self._head >= self._tail:
                return None
            self._tail -= 1
            return self._tail

    def give_back(self) -> None:
        """The task :meth:`first` gave last could not be handed out: the calling process
        runs it (the feeder, the only one to call :meth:`first`, stops after it)."""
        with self._lock:
            self._head -= 1

    def mark_broken(self) -> None:
        """The pool is broken: the feeder takes nothing more, the calling process the rest."""
        with self._lock:
            self._feeding = False
            if self.broken_since is None:
                self.broken_since = time.monotonic()

    def close(self) -> None:
        """Nobody takes anything more (the call ended, or stopped on an error)."""
        with self._lock:
            self._feeding = False
            self._head = self._tail


def _named(report: VerifyReport, source: str | None) -> VerifyReport:
    return report if report.source == source else dataclasses.replace(report, source=source)


def _done_of(result: Any, size: int) -> int:
    if isinstance(result, _Chunk):
        return result.count
    if isinstance(result, list):
        return sum(r.events for r in result)
    return size


def _plan(events: int, workers: int, chunk: int) -> list[tuple[int, int | None]]:
    """Chunks ``(start, end)`` of a run of ``events`` rows; the last one reads to the end."""
    count = max(1, min(workers * CHUNKS_PER_WORKER, events // chunk))
    size = math.ceil(events / count)
    bounds = [(start, start + size) for start in range(0, events, size)]
    return [*bounds[:-1], (bounds[-1][0], None)]


def _merge(
    chunks: Sequence[_Chunk | None],
    first: tuple[Any, Any],
    summary: Any,
    source: str | None,
    scans: Sequence[RowScan] = (),
) -> VerifyReport | None:
    """The report of a run from its chunks, or ``None`` if they do not join up."""
    checker = LineChecker(source=source, max_failures=_MAX_FAILURES)
    checker.run_id, checker.tenant = first
    previous: _Chunk | None = None
    for chunk in chunks:
        if chunk is None or not chunk.consistent:
            return None
        # The link between chunks: the boundary hash a worker derived from the previous
        # chunk's last row is the hash the previous worker ended on.
        if previous is not None and chunk.boundary != previous.last:
            return None
        room = _MAX_FAILURES - len(checker.failures)
        checker.failures.extend(chunk.failures[:room])
        checker.erased.extend(chunk.erased)
        checker.position = chunk.start + chunk.count
        checker.prev_recomputed = chunk.last
        if chunk.head is not None:
            checker.head = chunk.head
        previous = chunk
    if checker.position == 0:
        return None
    checker.hold_against(summary)
    report = checker.report()
    if not scans:
        return report
    scanned = join_parts(scans, report.run_id, [c.scanned for c in chunks if c is not None])
    return dataclasses.replace(report, scanned=scanned)


def _first_row(store: Store, tenant: str, run_id: str) -> tuple[Any, Any] | None:
    rows = store.read_rows(run_id, tenant=tenant)
    try:
        row = next(iter(rows), None)
    finally:
        close = getattr(rows, "close", None)
        if close is not None:
            close()
    return None if row is None else (row[1], row[0])


def _chunked(
    pool: _Pool,
    store: Store,
    tenant: str,
    run_id: str,
    summary: Any,
    workers: int,
    chunk: int,
    progress: Callable[[int], None] | None,
    scans: Sequence[RowScan],
) -> VerifyReport:
    from .verify import verify_stored

    try:
        first = _first_row(store, tenant, run_id)
    except Exception:
        first = None
    if first is not None:
        plan = _plan(summary.events, workers, chunk)
        calls = [(_verify_chunk, (tenant, run_id, first, start, end)) for start, end in plan]
        sizes = [(end if end is not None else summary.events) - start for start, end in plan]
        chunks = pool.run(calls, sizes, progress)
        report = _merge(chunks, first, summary, store.url, scans)
        if report is not None:
            return report
    # Something would read differently in chunks: the serial verifier gives the report.
    return verify_stored(store, run_id, tenant=tenant, scans=scans)


def verify_stored_parallel(
    store: Store,
    run_id: str,
    *,
    tenant: str | None = None,
    workers: int,
    progress: Callable[[int], None] | None = None,
    chunk: int = CHUNK_MIN,
    scans: Sequence[RowScan] = (),
) -> VerifyReport:
    """:func:`~tachograph.store.verify_stored` with ``workers`` processes (see the module).

    A run of at least ``2 * chunk`` events is cut into chunks of at least ``chunk`` events,
    each scanned by ``scans`` in its worker."""
    from .verify import run_summary, verify_stored

    url = parallel_url(store)
    summary = run_summary(store, run_id, tenant=tenant)
    if (
        url is None
        or workers < 2
        or summary is None
        or summary.events < 2 * chunk
        or not sendable(scans)
    ):
        return verify_stored(store, run_id, tenant=tenant, progress=progress, scans=scans)
    with _Pool(store, url, workers, scans) as pool:
        return _chunked(
            pool, store, summary.tenant, summary.run_id, summary, workers, chunk, progress, scans
        )


GROUPS_PER_WORKER = 8
"""Groups of small runs per worker at least (while a group holds at least
:data:`GROUP_MIN_EVENTS`): the last group a worker takes runs while the others may be done,
so the smaller the groups the less the workers wait for each other at the end."""
GROUP_MIN_EVENTS = 1_000


def _group_events(total: int, workers: int) -> int:
    """The events per group for ``total`` events of small runs over ``workers``: at most
    :data:`GROUP_EVENTS`, and small enough for :data:`GROUPS_PER_WORKER` groups each (13
    groups of 20,000 events for two workers left one worker with a group more than the
    other, 8% of the work done alone)."""
    share = -(-total // (workers * GROUPS_PER_WORKER))
    return max(GROUP_MIN_EVENTS, min(GROUP_EVENTS, share))


def verify_all_parallel(
    store: Store,
    *,
    tenant: str | None = None,
    workers: int,
    progress: Callable[[int], None] | None = None,
    chunk: int = CHUNK_MIN,
    scans: Sequence[RowScan] = (),
) -> Iterator[VerifyReport]:
    """:func:`~tachograph.store.verify_all` with ``workers`` processes: large runs in chunks,
    small runs in groups, reports in the serial order; ``scans`` read every run's rows in
    the workers."""
    from .verify import run_summary, verify_all, verify_stored

    url = parallel_url(store)
    if url is None or workers < 2 or not sendable(scans):
        yield from verify_all(store, tenant=tenant, progress=progress, scans=scans)
        return
    reports: dict[tuple[str, str], VerifyReport] = {}
    # The workers start first: each spends about a tenth of a second importing, time in
    # which this process lists the runs (the listing of every run with events reads the
    # whole events index: 81 ms of a 1 s verification of 250,000 events).
    with _Pool(store, url, workers, scans) as pool:
        keys = [k for k in store.run_keys() if tenant is None or k[0] == tenant]
        sizes = {(i.tenant, i.run_id): i.events for i in store.runs(tenant=tenant)}
        large = [k for k in keys if sizes.get(k, 0) >= 2 * chunk]
        small = [k for k in keys if sizes.get(k, 0) < 2 * chunk]
        group_events = _group_events(sum(max(1, sizes.get(k, 0)) for k in small), workers)
        groups: list[list[tuple[str, str]]] = []
        total = group_events + 1
        for key in small:
            if total > group_events:
                groups.append([])
                total = 0
            groups[-1].append(key)
            total += max(1, sizes.get(key, 0))
        results = pool.run(
            [(_verify_runs, (group,)) for group in groups],
            [sum(sizes.get(k, 0) for k in group) for group in groups],
            progress,
        )
        for group, found in zip(groups, results, strict=True):
            if found is None:  # the group's task failed: its runs are verified here
                found = [verify_stored(store, r, tenant=t, scans=scans) for t, r in group]
            # A worker opened the store by its absolute URL: the reports name it as the
            # caller does, as one process would have.
            found = [_named(report, store.url) for report in found]
            reports.update(zip(group, found, strict=True))
        for run_tenant, run_id in large:
            summary = run_summary(store, run_id, tenant=run_tenant)
            if summary is None:  # gone since it was listed: as the serial verifier sees it
                reports[(run_tenant, run_id)] = verify_stored(
                    store, run_id, tenant=run_tenant, scans=scans
                )
                continue
            reports[(run_tenant, run_id)] = _chunked(
                pool, store, run_tenant, run_id, summary, workers, chunk, progress, scans
            )
    for key in keys:
        yield reports[key]
