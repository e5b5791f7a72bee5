"""A run being recorded: the chain head, the writer behind it, and the durability policy.

The caller's thread builds each event (canonical bytes, digest, hash: the chain must be
extended in order) and hands it to a :class:`Writer`, whose thread appends batches to the store.
``flush`` waits until everything handed over is durable. A write that fails is raised on the
next append or flush as :class:`~tachograph.errors.WriteFailed`, never dropped.
"""

from __future__ import annotations

import atexit
import enum
import logging
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any, Final

from ..errors import RecordingError, StoreUnavailable, WriteFailed
from ..record.event import Event, EventType
from ..record.seal import Processor, Sealer, hide_key_secret, process_payload
from ..store.base import Store
from .seals import RunSeals, SealPlan, SealPolicy, configured_key, kept_error, resolve_policy
from .threads import own_thread
from .vouch import FIELD as UNVOUCHED_FIELD
from .vouch import FOLLOWED, ToolLedger, warn_unvouched

# Plain-str event types: ``EventType.X.value`` is a Python-level property on 3.11, and
# these are read per recorded event.
_RUN_FINISHED: Final = EventType.RUN_FINISHED.value


__all__ = [
    "Durability",
    "Observer",
    "Processor",
    "Recorder",
    "Writer",
    "add_observer",
    "close_writer",
    "remove_observer",
    "store_gone",
    "writer_for",
]

_log = logging.getLogger("tachograph")


class Durability(str, enum.Enum):
    """When recorded events are made durable.

    ``effects`` (default): before every ``write`` or ``irreversible`` tool runs, and at run end.
    ``every``: each event before the recording call returns. ``batch``: whenever the writer
    gets to it, and at run end; fastest, loses the tail of a crashed run.

    Whatever the policy, the intent of a ``write`` or ``irreversible`` tool is durable before
    the tool runs, because the record format requires it (SPEC section 6): ``batch`` adds
    nothing beyond that, so today it behaves as ``effects``.
    """

    EFFECTS = "effects"
    EVERY = "every"
    BATCH = "batch"

    @classmethod
    def parse(cls, value: str | Durability) -> Durability:
        """Return the policy named by ``value`` or fail listing the valid names."""
        try:
            return cls(value)
        except ValueError:
            valid = ", ".join(repr(d.value) for d in cls)
            raise RecordingError(f"unknown durability {value!r}; expected one of {valid}") from None


# Read per recorded event: an enum member through its class costs about 0.14 us on 3.11.
_EVERY: Final = Durability.EVERY


RunKey = tuple[str, str]
"""``(tenant, run_id)``."""


QUEUED_EVENT_BYTES = 2_048
"""What one event waiting for the writer is counted as beside its payload bytes: its
envelope strings, the decoded payload and the objects around them."""


def _event_size(event: Event) -> int:
    """What one queued event counts against :attr:`Writer.max_queue_bytes`."""
    return len(event.payload_bytes or b"") + QUEUED_EVENT_BYTES


def _queued_size(events: Sequence[Event]) -> int:
    return sum(map(_event_size, events))


class Writer:
    """Appends events to one store from a background thread, in batches.

    A batch the store refuses is retried run by run, so that only the runs whose events were
    refused fail: each of them raises :class:`~tachograph.errors.WriteFailed` on its next
    append or flush (its chain in memory is ahead of the store for good), while other runs
    recorded through the same store go on.

    The writer holds its store only while it has work for it (events queued, or seals due
    later): idle, it holds it weakly, so that a store the program drops without closing is
    freed (its connection closed) and the writer thread ends.
    """

    def __init__(
        self,
        store: Store,
        *,
        max_batch: int = 512,
        max_queue: int = 4_096,
        max_queue_bytes: int = 32 * 1024 * 1024,
        linger: float = 0.001,
    ) -> None:
        self._store = _weak_store(store, self)
        self._pinned: Store | None = None
        """The store, held while the writer thread has work for it (see :meth:`_pin`)."""
        self.url = store.url
        self.max_batch = max_batch
        self.linger = max(linger, 0.0)
        """Seconds the writer thread lets newly queued events wait before it commits them,
        when nobody waits for them (no flush, no durable event behind them) and fewer than a
        batch are queued. A durable event that comes meanwhile (the intent of the next write
        tool) takes them into its own commit on its caller's thread: a run of write-tool calls
        costs one commit per call, not two (the completion of one call, then the intent of
        the next, each waiting for the other). 0 commits at once."""
        self.max_queue = max(max_queue, 1)
        """Events that may wait for the writer thread: past it, :meth:`submit` blocks until
        the store catches up (memory stays bounded when the store is slower than the agent).
        Eight batches: enough for the writer to batch, and a few tens of MiB of small events
        at most (a queued event costs a few KiB in memory beside its payload)."""
        self.max_queue_bytes = max(max_queue_bytes, 1)
        """The same bound in bytes (payload bytes plus :data:`QUEUED_EVENT_BYTES` per event),
        so that large payloads (long model answers) cannot pile up by the gigabyte under the
        count. A single event larger than the bound still goes through, alone."""
        # The condition's own lock, held directly on the hot paths (the per-event submit, a
        # durable event's claim): ``with`` on the lock is C-level, on the condition a Python
        # call, and the condition's ``__enter__`` and ``__exit__`` only take and release this
        # lock, so waiting and notifying under either is the same.
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._queue: list[Event] = []
        self._queued_bytes = 0
        self._submitted = 0
        self._written = 0
        self._failed: dict[RunKey, BaseException] = {}
        self._reported: set[RunKey] = set()
        self._thread: threading.Thread | None = None
        self._closed = False
        # While a caller appends claimed events on its own thread, ``_claimed`` holds them
        # and the writer thread waits, so that the store still sees events in ticket order.
        # ``_busy``: the writer thread is appending a batch.
        self._claimed: list[Event] | None = None
        self._busy = False
        # When the oldest queued event was queued (``time.monotonic``), for the linger; and
        # how many callers wait for the writer (a flush, a durable event, a submit held back
        # by a full queue): then no linger.
        self._queued_at = 0.0
        self._waiters = 0
        self._pid = os.getpid()
        """The process that made this writer: the one whose runs it writes."""
        self._forked = False
        """This is a forked child's copy (see :meth:`_after_fork`)."""
        self.seals = RunSeals()
        """Which runs this writer seals, and when (:mod:`tachograph.capture.seals`)."""

    @property
    def store(self) -> Store:
        """The store this writer appends to."""
        store = self._store()
        if store is None:  # only the writer's own work reaches here, and it pins the store
            raise WriteFailed(f"{self.url} was freed before the writer was done with it")
        return store

    def _pin(self) -> None:
        """Hold the store until the writer thread is idle (under the lock): events queued or
        seals due must reach it even if the program drops the store meanwhile."""
        if self._pinned is None:
            self._pinned = self._store()

    def _store_freed(self) -> None:
        """The store was freed (the weak reference's callback): nothing was pending for it,
        since the writer pins the store while it has work. Stop the thread.

        Not while the interpreter exits: the writer thread is a daemon, and one stopped by
        the exit while it held the lock (waking from a timed wait, say) never lets it go, so
        a store freed by the exit's last collection hung the process for good (``tacho
        demo`` on a read-only folder did, now and then). Nothing is pending, and the thread
        ends with the process."""
        if sys.is_finalizing():
            return
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    @property
    def queued(self) -> int:
        """Events submitted and waiting for the writer thread (at most :attr:`max_queue`)."""
        with self._cond:
            return len(self._queue)

    @property
    def queued_bytes(self) -> int:
        """What the waiting events count against :attr:`max_queue_bytes`."""
        with self._cond:
            return self._queued_bytes

    def claim(self, event: Event) -> int | None:
        """Take over the store for ``event`` and everything queued before it, if the writer
        thread is not appending; returns the event's ticket, or None (then :meth:`submit`).

        After a successful claim the caller must call :meth:`write_claimed`. A durable event
        is so written on the caller's thread, with the events queued ahead of it, in one
        commit: no hand-off to the writer thread and back, and no second commit for the
        events that were waiting.
        """
        run = (event.tenant, event.run_id)
        with self._lock:
            if run in self._failed:
                raise self._failure(run)
            if self._closed:
                raise self._closed_error()
            if self._busy or self._claimed is not None:
                return None
            self._claimed = [*self._queue, event]
            self._submitted += 1
            return self._submitted

    def write_claimed(self) -> None:
        """Append the claimed events on this thread; raise :class:`WriteFailed` if the last
        one (the caller's) was lost."""
        with self._lock:
            claimed = self._claimed
            if claimed is None:
                raise WriteFailed("nothing was claimed")
            failed_runs = bool(self._failed)
        # Out of the lock, the work over every claimed event (up to a full queue): while the
        # claim holds the store, no other append can add a failed run.
        live = (
            [e for e in claimed if (e.tenant, e.run_id) not in self._failed]
            if failed_runs
            else claimed
        )
        ahead = len(claimed) - 1
        ahead_bytes = _queued_size(claimed[:ahead]) if ahead else 0
        due = self.seals.next_due()
        failed: dict[RunKey, BaseException] = {}
        try:
            failed = self._append(live) if live else {}
        finally:
            with self._lock:
                if ahead:
                    self._queued_bytes -= ahead_bytes
                    del self._queue[:ahead]
                self._queued_at = 0.0  # queued during this commit: due at once
                self._written += len(claimed)
                self._failed.update(failed)
                self._claimed = None
                # Wake the writer thread only if it has something to do now: events queued
                # during this commit, a flush waiting, a failure to report or a seal due at
                # another time than the one it waits for. Else it sleeps on: a woken writer
                # takes the GIL from this thread on its way back to sleep, between the
                # intent's commit and the tool's body (the one moment a write tool waits for).
                after = self.seals.next_due()
                if after is not None or self._queue:
                    self._pin()  # the writer thread has work for the store
                else:
                    # Nothing left for the writer thread (this claim took what was queued,
                    # maybe while the thread, waiting for the claim, kept the pin): let go.
                    # This caller holds the store, so it is not freed here.
                    self._pinned = None
                if after is not None and self._thread is None and not self._closed:
                    # Every event so far came through here (durability="every"): no thread
                    # yet to seal a run left quiet, which would wait for its close.
                    self._start_thread()
                if self._queue or self._waiters or failed or after != due:
                    self._cond.notify_all()
        event = claimed[-1]
        run = (event.tenant, event.run_id)
        if run in self._failed:
            with self._lock:
                raise self._failure(run)

    def submit(self, event: Event) -> int:
        """Queue one event; returns a ticket for :meth:`wait`."""
        lock = self._lock  # not ``with``: its __enter__ and __exit__ calls cost 0.1 us more
        lock.acquire()
        try:
            if self._failed:  # the run's key is built only when some run has failed
                run = (event.tenant, event.run_id)
                if run in self._failed:
                    raise self._failure(run)
            if self._closed:
                raise self._closed_error()
            if self._thread is None:
                self._start_thread()
            # Back-pressure: a full queue waits for the writer thread (a timed wait, so that
            # Ctrl-C still gets through), unless this very thread holds the store.
            while (
                self._queue
                and (
                    len(self._queue) >= self.max_queue or self._queued_bytes >= self.max_queue_bytes
                )
                and threading.current_thread() is not self._thread
            ):
                self._cond.notify_all()
                self._waiters += 1  # so that a claim that empties the queue wakes it
                try:
                    self._cond.wait(0.25)
                finally:
                    self._waiters -= 1
                run = (event.tenant, event.run_id)
                if run in self._failed:
                    raise self._failure(run)
                if self._closed:
                    raise self._closed_error()
            queue = self._queue
            first = not queue
            if first:
                self._queued_at = time.monotonic()
                self._pin()
            queue.append(event)
            held = self._queued_bytes
            # _event_size(event), without its frame
            self._queued_bytes = held + len(event.payload_bytes or b"") + QUEUED_EVENT_BYTES
            self._submitted += 1
            ticket = self._submitted
            if (
                first
                or len(queue) == self.max_batch
                or held < self.max_queue_bytes <= self._queued_bytes
            ):
                # Only the writer thread waits for submits, and with events already queued it
                # is appending, lingering until a deadline, or waiting for a claim to end:
                # waking it for every event would only hand it the GIL to go back to sleep.
                # Woken when the queue fills a batch, it takes batch after batch while a
                # batch is queued: so only the submit that fills it wakes it (the queue grows
                # one event at a time). When every submit past that point woke it again,
                # three submits in four paid for a notify while the writer thread waited for
                # the GIL (15,664 of 20,000 in a run of read-tool calls).
                self._cond.notify_all()
            return ticket
        finally:
            lock.release()

    def _start_thread(self) -> None:
        """Start the writer thread (under the lock, once)."""
        self._thread = own_thread(
            threading.Thread(target=self._run, name="tachograph-writer", daemon=True)
        )
        self._thread.start()

    def wait(self, ticket: int | None = None, *, run: RunKey | None = None) -> None:
        """Block until the event with ``ticket`` (default: everything submitted) is handled;
        raise :class:`WriteFailed` if events of ``run`` (default: of any run) were lost."""
        with self._cond:
            target = self._submitted if ticket is None else ticket
            if self._written < target:
                self._waiters += 1
                self._cond.notify_all()  # a lingering writer thread commits now
                try:
                    while self._written < target:
                        # A timed wait: an untimed one cannot be interrupted by Ctrl-C on POSIX.
                        self._cond.wait(0.25)
                finally:
                    self._waiters -= 1
            failed = [run] if run is not None and run in self._failed else []
            if run is None:
                failed = list(self._failed)
            if failed:
                raise self._failure(failed[0])

    flush = wait

    def drain(self) -> None:
        """Block until everything submitted is handled, without raising (for exit)."""
        with self._cond:
            self._waiters += 1
            self._cond.notify_all()
            try:
                while self._written < self._submitted:
                    self._cond.wait()
            finally:
                self._waiters -= 1

    def _after_fork(self) -> None:
        """In a child process just forked (one thread: the forking one). The writer thread
        did not come along, and its lock may have been held by it at the fork; the events
        queued belong to the parent, which writes them. Nothing of the parent's runs is
        written from here: each run's chain has one writer, and the child's events would
        take the seqs the parent gives its own (the parent's next append was refused as a
        conflict and its run left incomplete)."""
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._thread = None
        self._queue = []
        self._queued_bytes = 0
        self._written = self._submitted
        self._claimed = None
        self._busy = False
        self._waiters = 0
        self._pinned = None
        self._closed = True
        self._forked = True

    def _closed_error(self) -> WriteFailed:
        if not self._forked:
            return WriteFailed("the writer is closed")
        return forked_error(self._pid, self.url)

    def _failure(self, run: RunKey) -> WriteFailed:
        error = self._failed[run]
        self._reported.add(run)
        return WriteFailed(
            f"events of run {run[1]!r} could not be written to {self.url}: "
            f"{_reason(error)}; "
            "the run is incomplete",
            cause=error,
            run_id=run[1],
        )

    def unreported(self) -> dict[RunKey, BaseException]:
        """Failures no caller has been told about yet."""
        with self._cond:
            return {k: v for k, v in self._failed.items() if k not in self._reported}

    def _run(self) -> None:
        while True:
            with self._cond:
                quiet = False
                while (
                    (not self._queue and not self._closed)
                    or self._claimed is not None
                    or self._lingers()
                ):
                    due = self.seals.next_due() if self.seals.active else None
                    now = time.monotonic()
                    if due is not None and due <= now and self._claimed is None:
                        quiet = True  # a quiet run's stored events are due a seal
                        break
                    if self._queue and self._claimed is None:
                        # lingering: until the queued events are ``linger`` old
                        until = self._queued_at + self.linger
                        due = until if due is None else min(due, until)
                    elif due is None and self._claimed is None and self._pinned is not None:
                        # Idle until further notice: let go of the store, so that a program
                        # that drops it frees it (which ends this thread: _store_freed). Its
                        # last reference may go right here, and the callback run on this
                        # thread (the lock is reentrant): look again before waiting.
                        self._pinned = None
                        continue
                    self._cond.wait(None if due is None else max(due - now, 0.0002))
                closing = not quiet and not self._queue
                self._busy = True
                if not (quiet or closing):
                    batch = self._queue[: self.max_batch]
                    failed_runs = bool(self._failed)
            if quiet or closing:
                # At close, seal what every unfinished run has stored since its last seal.
                now = time.monotonic()
                self._seal_alone(self.seals.quiet(float("inf") if closing else now), now)
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()
                if closing:
                    return
                continue
            # The work over each event of the batch, out of the lock the agent's thread takes
            # for every event it submits, and the filter only when a run has failed (a loop
            # over up to a batch, on the GIL the agent shares). While this thread is busy no
            # claim is granted, so no other append can add a failed run meanwhile. Later
            # events of a failed run would only be refused in turn: skip them (they still
            # count as handled, in queue order, so tickets stay in step).
            live = (
                [e for e in batch if (e.tenant, e.run_id) not in self._failed]
                if failed_runs
                else batch
            )
            batch_bytes = _queued_size(batch)
            failed = self._append(live) if live else {}
            with self._cond:
                self._queued_bytes -= batch_bytes
                del self._queue[: len(batch)]
                self._queued_at = 0.0  # what is left waited for this commit: no linger
                self._written += len(batch)
                self._failed.update(failed)
                # Not held while this thread waits for the next batch: the events (and
                # their payloads, a model's whole answers among them) stayed in memory
                # until then. Let go before a flush waiting for them returns.
                del batch, live
                self._busy = False
                self._cond.notify_all()

    def _lingers(self) -> bool:
        """Whether the writer thread holds back the queued events a little longer (under
        the lock): see :attr:`linger`."""
        return (
            bool(self._queue)
            and not self._closed
            and not self._waiters
            and len(self._queue) < self.max_batch
            and self._queued_bytes < self.max_queue_bytes
            and time.monotonic() < self._queued_at + self.linger
        )

    def _seal_alone(self, plan: SealPlan, now: float) -> None:
        """Append seals of events already stored (no events with them)."""
        if not plan.rows:
            return
        store = self.store
        try:
            for tenant, rows in plan.rows.items():
                store.append_seals(tenant, rows)
        except Exception as exc:  # observability never breaks the host; retried next time
            self.seals.note_error(exc)
            if store.closed:
                # closed under a recording that was not finished: it will never take them
                runs = sorted({run for run, _seq, _final in plan.sealed})
                for run in runs:
                    self.seals.forget(run)
                _log.warning(
                    "tachograph: %s was closed while run(s) %s were recorded: their last "
                    "events stay unsealed",
                    self.url,
                    ", ".join(run_id for _tenant, run_id in runs),
                )
                return
            self.seals.postpone(plan, now)
            _log.warning("tachograph: appending seals to %s failed: %s", self.url, exc)
            return
        self.seals.committed(plan, now)
        self.seals.checkpoint(plan, store)

    def _append(self, batch: list[Event]) -> dict[RunKey, BaseException]:
        """Append a batch (with the seals due); on refusal retry it run by run. Returns the
        runs that failed."""
        now = time.monotonic()
        plan = self.seals.plan(batch, now) if self.seals.active else None
        try:
            self._store_batch(batch, plan, now)
        except BaseException as exc:  # surfaced to the run's caller on its next call
            first_error = kept_error(exc)
        else:
            return self._detached(batch)
        groups: dict[RunKey, list[Event]] = {}
        for event in batch:
            groups.setdefault((event.tenant, event.run_id), []).append(event)
        if len(groups) == 1:
            return {next(iter(groups)): first_error}
        failed: dict[RunKey, BaseException] = {}
        for run, events in groups.items():
            try:
                self._store_batch(events, self.seals.plan(events, now) if plan else None, now)
            except BaseException as exc:
                failed[run] = kept_error(exc)
        return {
            **self._detached([e for e in batch if (e.tenant, e.run_id) not in failed]),
            **failed,
        }

    def _detached(self, written: list[Event]) -> dict[RunKey, BaseException]:
        """The runs of events just committed, failed, if the store file they went to is no
        longer at its path (removed, or another put there): SQLite goes on writing to the
        removed file, so every event was acknowledged and none is where anyone will read it.
        Checked after each commit (a ``stat`` of the path), so that the run fails at its
        next append or flush, a durable intent before its effect, not only at its end."""
        gone = store_gone(self.store) if written else None
        if gone is None:
            return {}
        error = StoreUnavailable(gone, location=self.url)
        return {(e.tenant, e.run_id): error for e in written}

    def _store_batch(self, batch: list[Event], plan: SealPlan | None, now: float) -> None:
        """Append events and the seals that name them: in one transaction where the store
        can (``seals_with_events``), else the seals right after the events."""
        store = self.store
        if plan is None or not plan.rows:
            store.append(batch)
        elif store.seals_with_events:
            store.append_sealed(batch, plan.rows)
        else:
            store.append(batch)
            self._seal_alone(plan, now)
            return
        if plan is not None:
            self.seals.committed(plan, now)
            if plan.keys:
                self.seals.checkpoint(plan, store)

    def close(self) -> None:
        """Write what is queued, seal what unfinished runs stored since their last seal,
        then stop the thread."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join()
        if self.seals.active:  # events written on callers' threads (claims) only
            self._seal_alone(self.seals.quiet(float("inf")), time.monotonic())
        with self._cond:
            self._pinned = None  # nothing more will be written through this writer


def store_gone(store: Store) -> str | None:
    """Why what ``store`` wrote is no longer where it is read from (:meth:`Store.detached`),
    or None; an engine whose check fails is logged, and its answer taken for None: a check
    that cannot be made says nothing about the commits before it."""
    try:
        return store.detached()
    except Exception:
        _log.exception("tachograph: checking whether %s is still there failed", store.url)
        return None


def _weak_store(store: Store, writer: Writer) -> weakref.ref[Store]:
    """A weak reference to ``writer``'s store that tells the writer when the store is freed
    (the callback holds the writer weakly too: no cycle through the reference)."""
    writer_ref = weakref.ref(writer)

    def freed(_: object) -> None:
        live = writer_ref()
        if live is not None:
            live._store_freed()

    return weakref.ref(store, freed)


_writers: weakref.WeakKeyDictionary[Store, Writer] = weakref.WeakKeyDictionary()
_writers_lock = threading.Lock()


def writer_for(store: Store) -> Writer:
    """The one writer of a store in this process."""
    with _writers_lock:
        writer = _writers.get(store)
        if writer is None:
            writer = _writers[store] = Writer(store)
        return writer


def forked_error(pid: int, url: str) -> WriteFailed:
    """What a forked child is told when it would add to a run of the process ``pid``."""
    return WriteFailed(
        f"this process ({os.getpid()}) is not process {pid}, which records its runs into "
        f"{url}: it was forked from it, and a run's chain has one writer, so it cannot add "
        "to them. Call the tool in the recording process (threads are followed), or record "
        "the child's work as a run of its own, in a process started with the 'spawn' or "
        "'forkserver' method"
    )


_PID = os.getpid()
"""This process, as the fork hook last saw it: a recorder made in another refuses events."""


def _after_fork_in_child() -> None:
    """A forked child inherits the parent's writers without their threads: each is told it
    was forked (its runs refuse further events with an error that says why) and forgotten,
    so that a run the child starts gets a writer of its own."""
    global _writers_lock, _PID
    _PID = os.getpid()
    _writers_lock = threading.Lock()  # the parent may have held it at the fork
    for writer in list(_writers.values()):
        writer._after_fork()
    _writers.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _reason(error: BaseException) -> str:
    # a KeyboardInterrupt has no message: its name says what stopped the write
    return str(error) or type(error).__name__


def close_writer(store: Store) -> None:
    """Write what is queued for ``store`` and stop its writer thread (the store stays open).

    Failures nobody was told about are raised, as a flush would.
    """
    with _writers_lock:
        writer = _writers.pop(store, None)
    if writer is None:
        return
    writer.close()
    lost = writer.unreported()
    if lost:
        (_, run_id), error = next(iter(lost.items()))
        raise WriteFailed(
            f"events of run {run_id!r} could not be written to {store.url}: {_reason(error)}",
            cause=error,
            run_id=run_id,
        )


def close_all_writers() -> None:
    """Stop every writer thread of this process after writing what is queued (stores stay
    open; the next recording starts a new writer). Failures are logged, not raised: this is
    for settling the process (before a memory measurement, say), not for one run's outcome."""
    with _writers_lock:
        stores = list(_writers.keys())
    for store in stores:
        try:
            close_writer(store)
        except WriteFailed as exc:
            _log.warning("tachograph: %s", exc)


@atexit.register
def _flush_all() -> None:  # pragma: no cover - runs at interpreter exit
    for writer in list(_writers.values()):
        writer.drain()
        for (_, run_id), error in writer.unreported().items():
            print(f"tachograph: events of run {run_id!r} lost: {error}", file=sys.stderr)


_NO_TRACE: tuple[str | None, str | None] = (None, None)


def _nothing_seen() -> None:
    return None


_otel_seen: tuple[Callable[[], object], tuple[str | None, str | None]] = (
    _nothing_seen,
    _NO_TRACE,
)
"""A weak reference to the last OpenTelemetry context looked at, and the ids drawn from it. A
context is immutable (setting a value makes a new one) and so is its span's context: the same
context object always gives the same ids. Held weakly: the span is not kept alive by it, and
a context freed since cannot be mistaken for a new one at the same address."""


def _otel_context() -> tuple[str | None, str | None]:
    """Trace and span ids of the current OpenTelemetry span, if OpenTelemetry is in use.

    The current context is looked up every time; the span behind it only when the context
    changed since the previous event (a run's events mostly share one): about 150 ns instead
    of 320 per event with the SDK loaded and no span (``bench/`` imports it)."""
    global _otel_seen
    context_mod = sys.modules.get("opentelemetry.context")
    if context_mod is None:
        return _NO_TRACE
    try:
        current = context_mod.get_current()
        seen = _otel_seen  # one read: another thread may replace it meanwhile
        if seen[0]() is current:
            return seen[1]
        trace_mod = sys.modules.get("opentelemetry.trace")
        if trace_mod is None:
            return _NO_TRACE
        ctx = trace_mod.get_current_span(current).get_span_context()
        ids = (f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}") if ctx.is_valid else _NO_TRACE
    except Exception:  # observability never breaks the host
        return _NO_TRACE
    try:
        _otel_seen = (weakref.ref(current), ids)
    except TypeError:  # a context that cannot be referenced weakly: looked up every time
        pass
    return ids


Listener = Callable[[Event], None]


class Observer:
    """Sees every event of every run it is attached to: before it is built, and after.

    ``before`` may return ``(trace_id, span_id)`` to put on the event (for example the ids of
    a span it has just started); ``after`` sees the appended event. Subclass and override
    either. Errors in an observer are logged and never reach the agent.
    """

    seals: bool = False
    """True for an observer that seals runs itself: the run's default sealing is then off."""

    def before(
        self,
        recorder: Recorder,
        type: str,
        payload: dict[str, Any],
        *,
        idempotency_key: str | None,
        model: str | None,
    ) -> tuple[str | None, str | None] | None:
        """Called before an event is built; may return trace context for it."""
        return None

    def after(self, recorder: Recorder, event: Event) -> None:
        """Called after an event has been appended (not necessarily durable yet)."""


_GLOBAL_OBSERVERS: list[Observer] = []


def add_observer(observer: Observer) -> None:
    """Attach an observer to every run recorded from now on in this process."""
    if observer not in _GLOBAL_OBSERVERS:
        _GLOBAL_OBSERVERS.append(observer)


def remove_observer(observer: Observer) -> None:
    """Detach an observer added with :func:`add_observer`."""
    if observer in _GLOBAL_OBSERVERS:
        _GLOBAL_OBSERVERS.remove(observer)


class Recorder:
    """Appends events to one run, extending its chain; thread-safe.

    Events are built by the run's :class:`~tachograph.record.seal.Sealer` (processors, then
    canonical bytes, digest, hash and link) and handed to the store's :class:`Writer`, which
    also seals the run (``seal``: a :class:`~tachograph.capture.seals.SealPolicy`, ``False``
    to opt out, default on unless ``TACHOGRAPH_SEAL=off``).
    """

    def __init__(
        self,
        store: Store,
        *,
        run_id: str,
        actor: str,
        tenant: str | None = None,
        durability: Durability | str = Durability.EFFECTS,
        processors: Sequence[Processor] = (),
        listeners: Sequence[Listener] = (),
        observers: Sequence[Observer] | None = None,
        head: tuple[int, str] | None = None,
        seal: SealPolicy | bool | None = None,
    ) -> None:
        self.store = store
        self._pid = _PID  # the process whose run this is (see _after_fork_in_child)
        # The run's tenant: the one named, else the store's (``?tenant=T``), else "default";
        # one named that the store is not confined to is refused here, before any write.
        self.sealer = Sealer(
            run_id=run_id,
            actor=actor,
            tenant=store.writing_tenant(tenant, run_id=run_id),
            processors=processors,
            head=head,
        )
        self.run_id = self.sealer.run_id
        self.tenant = self.sealer.tenant
        self.actor = self.sealer.actor
        self.durability = Durability.parse(durability)
        self.listeners = list(listeners)
        self.observers = list(_GLOBAL_OBSERVERS if observers is None else observers)
        self.writer = writer_for(store)
        self._lock = threading.Lock()
        self.finished = False
        self._last_ticket = 0
        # Tool calls that model answers ask for, until a tool event vouches for them.
        self.ledger = ToolLedger()
        self._warned: set[str] = set()
        # Every run is sealed by default (tachograph.capture.seals), unless opted out or an
        # observer seals it itself.
        policy = resolve_policy(seal)
        if any(getattr(o, "seals", False) for o in self.observers):
            policy = None
        self.seal_policy = policy
        if policy is not None:
            self.writer.seals.track(
                (self.tenant, self.run_id),
                policy,
                now=time.monotonic(),
                key=configured_key(),
                head=head[0] if head is not None else -1,
            )

    @property
    def processors(self) -> tuple[Processor, ...]:
        """The processors every payload goes through before it is hashed."""
        return self.sealer.processors

    @property
    def next_seq(self) -> int:
        """The seq the next event will have."""
        return self.sealer.next_seq

    @property
    def head_hash(self) -> str | None:
        """The hash of the run's last event."""
        return self.sealer.head_hash

    def append(
        self,
        type: str,
        payload: dict[str, Any],
        *,
        processed: bool = False,
        actor: str | None = None,
        idempotency_key: str | None = None,
        model: str | None = None,
        seed: int | None = None,
        durable: bool = False,
        trace: tuple[str | None, str | None] | None = None,
    ) -> Event:
        """Append one event; with ``durable=True`` return only once it is on disk.

        ``processed=True`` says the payload already went through the processors (the capture
        boundary processes a request before it derives its key).
        """
        if self._pid != _PID:
            # a forked child: before the run's lock, which another thread of the parent may
            # have held at the fork (and then holds for good here)
            raise forked_error(self._pid, self.writer.url)
        if not processed:  # self.sealer.process(...), without its frame
            payload = process_payload(self.sealer.processors, type, payload)
        if type == _RUN_FINISHED:
            self._unvouched(self.ledger.observe(type, payload, self.sealer.next_seq))
            if self.ledger.unvouched:  # the run carries the fact (docs/replay.md)
                payload = {
                    **payload,
                    UNVOUCHED_FIELD: [c.to_dict() for c in self.ledger.unvouched],
                }
        if self.finished:  # checked again under the lock; here so no observer sees it
            raise RecordingError(
                f"run {self.run_id!r} has finished; nothing more can be recorded in it",
                run_id=self.run_id,
            )
        # observers (telemetry) never see the run's key secret (SPEC section 5)
        shown = hide_key_secret(type, payload) if self.observers else payload
        for observer in self.observers:
            try:
                ctx = observer.before(
                    self, type, shown, idempotency_key=idempotency_key, model=model
                )
            except Exception:
                _log.exception("tachograph: observer %r failed before an event", observer)
                ctx = None
            if ctx is not None and trace is None:
                trace = ctx
        if trace is not None:
            trace_id, span_id = trace
        elif "opentelemetry.trace" in sys.modules:  # _otel_context's own first test
            trace_id, span_id = _otel_context()
        else:
            trace_id = span_id = None
        lock = self._lock  # not ``with``: its __enter__ and __exit__ calls cost 0.1 us more
        lock.acquire()
        try:
            if self.finished:
                raise RecordingError(
                    f"run {self.run_id!r} has finished; nothing more can be recorded in it",
                    run_id=self.run_id,
                )
            event = self.sealer.next_event(
                type, payload, actor, idempotency_key, model, seed, trace_id, span_id
            )
            now = durable or self.durability is _EVERY
            claimed = self.writer.claim(event) if now else None
            ticket = self.writer.submit(event) if claimed is None else claimed
            self._last_ticket = ticket
            if type == _RUN_FINISHED:
                self.finished = True
        finally:
            lock.release()
        if type != _RUN_FINISHED and type in FOLLOWED:  # else observe returns at once
            unvouched = self.ledger.observe(type, event.payload, event.seq)
            if unvouched:
                self._unvouched(unvouched)
        if claimed is not None:
            # The writer was idle: append here (outside the run's lock; the writer thread
            # holds back anything queued meanwhile until this event is in the store).
            self.writer.write_claimed()
        elif now:
            self.writer.wait(ticket, run=(self.tenant, self.run_id))
        for observer in self.observers:
            try:
                observer.after(self, event)
            except Exception:  # observability never breaks the host
                _log.exception("tachograph: observer %r failed after an event", observer)
        for listener in self.listeners:
            try:
                listener(event)
            except Exception:
                _log.exception("tachograph: listener %r failed", listener)
        return event

    def flush(self) -> None:
        """Wait until every event appended so far is durable."""
        self.writer.wait(self._last_ticket, run=(self.tenant, self.run_id))

    def _unvouched(self, calls: list[Any]) -> None:
        if calls:
            warn_unvouched(calls, self.run_id, self._warned)
