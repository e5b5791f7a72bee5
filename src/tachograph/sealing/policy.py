"""The recorder hook: seal a run every N events or T seconds, and when it finishes.

:class:`SealingObserver` is an :class:`~tachograph.recorder.Observer`. After an event it
decides whether a seal is due; if so it waits until the run's events so far are durable (a
seal must never name an event a crash could lose), appends the seal, and issues a checkpoint
when it has a signing key. A crash loses at most the window after the last seal: those events
verify as a chain, and are reported as not covered by any seal.

Defaults: :data:`DEFAULT_EVERY_EVENTS` (1000) events or :data:`DEFAULT_EVERY_SECONDS` (10 s),
whichever comes first, checked as each event is recorded; and always at ``run.finished``.
So the unsealed window of a running run is at most 999 events, or the events recorded since
the last seal when the run has been quiet (the next event, or the run's end, seals them).
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from ..capture.recorder import Observer, Recorder
from ..capture.seals import DEFAULT_EVERY_EVENTS, DEFAULT_EVERY_SECONDS, SealPolicy, keep_error
from ..capture.threads import own_thread
from ..errors import SealingError
from ..record.checkpoint import SigningKey
from ..record.event import Event, EventType
from ..record.merkle import SealLeaf
from ..store.base import Store
from .log import SealLog, load_signing_key

__all__ = ["DEFAULT_EVERY_EVENTS", "DEFAULT_EVERY_SECONDS", "SealPolicy", "SealingObserver"]

_log = logging.getLogger("tachograph")
# Read per event: a constant, as ``EventType.X.value`` is an enum property (~1 us on 3.11).
_RUN_FINISHED = EventType.RUN_FINISHED.value
_IDLE_SECONDS = 1.0
"""How long the sealing thread waits for the next seal before it ends."""


class _ObservedLog(SealLog):
    """A seal log that holds its store weakly: a :class:`SealingObserver` keeps one per store
    and tenant it seals, in a mapping that holds the store weakly too."""

    @property
    def store(self) -> Store:
        store = self._store_ref()
        if store is None:
            raise SealingError("the store of this seal log was freed", what="store")
        return store

    @store.setter
    def store(self, store: Store) -> None:
        self._store_ref = weakref.ref(store)


class SealingObserver(Observer):
    """Seals the runs it observes into their tenant's seal log in the run's own store.

    ``key`` (or the file ``key_path``, or ``TACHOGRAPH_SIGNING_KEY``) signs checkpoints;
    without one, seals are appended and no checkpoint is issued. ``witnesses`` receive each
    checkpoint. ``errors`` collects sealing failures: they are logged, never raised into the
    agent (observability never breaks the host), and a verifier reports the run as unsealed.

    Every recording is sealed by default (:mod:`tachograph.capture.seals`, in the transaction
    of the events): this observer is for a policy of its own with witnesses. A run it
    observes is not sealed by default as well.

    Seals wait in a thread of the observer's, which ends after a second with nothing to seal
    (the next seal starts another): neither the thread nor the observer's logs keep a store
    or the observer alive once the program is done with them.
    """

    seals = True

    def __init__(
        self,
        *,
        policy: SealPolicy | None = None,
        key: SigningKey | None = None,
        key_path: str | None = None,
        log_name: str | None = None,
        witnesses: Sequence[Any] = (),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.policy = policy or SealPolicy()
        self.key = key if key is not None else load_signing_key(key_path)
        self.log_name = log_name
        self.witnesses = list(witnesses)
        self.clock = clock
        self._lock = threading.Lock()
        # Per recorder (one run each, held weakly: a run left unfinished leaves nothing
        # behind), the seq and time of its last seal.
        self._last: weakref.WeakKeyDictionary[Recorder, tuple[int, float]] = (
            weakref.WeakKeyDictionary()
        )
        self._logs: weakref.WeakKeyDictionary[Store, dict[str, SealLog]] = (
            weakref.WeakKeyDictionary()
        )
        self.errors: list[BaseException] = []
        self._queue: queue.Queue[
            tuple[Recorder | None, SealLeaf | None, threading.Event | None]
        ] = queue.Queue()
        self._thread: threading.Thread | None = None
        _observers.add(self)

    def _after_fork(self) -> None:
        """In a forked child: the sealing thread did not come along, and its lock and queue
        may have been held by it at the fork. What was queued is the parent's to seal."""
        self._lock = threading.Lock()
        self._queue = queue.Queue()
        self._thread = None

    def log_for(self, store: Store, tenant: str) -> SealLog:
        """The seal log this observer appends to for ``tenant`` of ``store``."""
        with self._lock:
            logs = self._logs.setdefault(store, {})
            log = logs.get(tenant)
            if log is None:
                # Kept while the store lives (the mapping holds it weakly): the log must not
                # hold it strongly either, or the store would never be freed.
                log = logs[tenant] = _ObservedLog(
                    store,
                    tenant=tenant,
                    key=self.key,
                    log_name=self.log_name,
                    witnesses=self.witnesses,
                )
            return log

    def after(self, recorder: Recorder, event: Event) -> None:
        """Seal ``event`` if the policy says one is due."""
        final = event.type == _RUN_FINISHED
        now = self.clock()
        with self._lock:
            last_seq, last_time = self._last.get(recorder, (-1, now))
            if recorder not in self._last:
                self._last[recorder] = (-1, now)
            due = (
                final
                or event.seq - last_seq >= self.policy.every_events
                or now - last_time >= self.policy.every_seconds
            )
            if not due:
                return
            self._last[recorder] = (event.seq, now)
            if final:
                del self._last[recorder]
        # A seal waits in a thread of its own for its event to be durable, so that the agent
        # never stalls on it mid-run; at run end the agent waits for the final seal.
        done = threading.Event() if final else None
        leaf = SealLeaf(event.tenant, event.run_id, event.seq, event.hash, final)
        self._hand_over(recorder, leaf, done)
        if done is not None:
            done.wait()

    def _hand_over(
        self, recorder: Recorder | None, leaf: SealLeaf | None, done: threading.Event | None
    ) -> None:
        """Queue a seal (or a drain marker) for the thread, starting it if it has ended. Under
        the lock: the thread ends only when it finds the queue empty under the lock, so no
        item is left behind with no thread to take it."""
        with self._lock:
            if self._thread is None:
                self._thread = own_thread(
                    threading.Thread(target=self._work, name="tachograph-sealer", daemon=True)
                )
                self._thread.start()
            self._queue.put((recorder, leaf, done))

    def _work(self) -> None:
        while self._seal_next():
            pass

    def _seal_next(self) -> bool:
        """Take what is queued and seal it; False when nothing came for
        :data:`_IDLE_SECONDS` (the thread ends). A call of its own, so that nothing it held
        (recorders, and through them stores) stays referenced while the thread waits."""
        try:
            first = self._queue.get(timeout=_IDLE_SECONDS)
        except queue.Empty:
            with self._lock:
                if self._queue.empty():
                    self._thread = None
                    return False
            return True
        batch = [first]
        while True:
            try:
                batch.append(self._queue.get_nowait())
            except queue.Empty:
                break
        groups: dict[tuple[int, str], list[tuple[Recorder, SealLeaf]]] = {}
        for recorder, leaf, _ in batch:
            if recorder is None or leaf is None:
                continue  # a drain() marker
            groups.setdefault((id(recorder.store), leaf.tenant), []).append((recorder, leaf))
        for items in groups.values():
            try:
                for recorder, leaf in items:  # the seal must name a durable event
                    recorder.writer.wait(None, run=(leaf.tenant, leaf.run_id))
                log = self.log_for(items[0][0].store, items[0][1].tenant)
                log.seal([leaf for _, leaf in items])
            except Exception as exc:  # observability never breaks the host
                _log.exception("tachograph: sealing failed")  # with its frames, before kept
                keep_error(self.errors, exc)
        for _, _, done in batch:
            if done is not None:
                done.set()
        return True

    def drain(self) -> None:
        """Wait until every seal handed over so far is appended (and checkpointed)."""
        with self._lock:
            if self._thread is None:  # ended: nothing queued
                return
        done = threading.Event()
        self._hand_over(None, None, done)
        done.wait()


_observers: weakref.WeakSet[SealingObserver] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for observer in list(_observers):
        observer._after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
