"""Open stores across ``os.fork``.

A database connection must not cross a fork: a SQLite connection's state, or a PostgreSQL
session's socket, would be shared by two processes. A child that used its parent's
PostgreSQL connection interleaved its messages with the parent's on the one socket, and both
sessions failed or read each other's answers. So the stores register here, and:

- before a fork, every open store's lock is taken, so that no thread of ours is inside the
  database's client at the fork (SQLite may hold a mutex then, which would be held for good
  in the child; a PostgreSQL query would be half sent or half read). Every call a store makes
  to its database is made under its lock, and no code holds two stores' locks at once (reads
  are paged, the lock taken per page), so this waits only for calls in flight;
- after it, the parent lets go of them;
- in the child, each store gets a fresh lock (another thread of the parent may have held
  it), and its ``_after_fork()`` puts the :class:`ForkedConnection` of :func:`set_aside` in
  place of its connection: every use is refused with a
  :class:`~tachograph.errors.StoreUnavailable` that says to open the store again, and
  closing it does nothing (the parent's connection stays the parent's).
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import Any, Protocol

from ..errors import StoreUnavailable

__all__ = ["ForkSafe", "ForkedConnection", "set_aside", "track"]


class ForkSafe(Protocol):
    """What a store registered with :func:`track` has."""

    _lock: Any
    """Held for every call the store makes to its database."""

    def _after_fork(self) -> None:
        """In a forked child (one thread: the forking one), with a fresh lock already: the
        connection replaced by :func:`set_aside`'s stand-in unless it is the child's own."""


class ForkedConnection:
    """Stands in a forked child for a connection its parent opened: every use is refused
    with a :class:`~tachograph.errors.StoreUnavailable` that says what to do; closing it
    does nothing. ``rule`` says why (``"SQLite's connections must not cross a fork"``),
    ``reopen`` how (``"SQLiteStore(path)"``)."""

    def __init__(self, url: str, pid: int, rule: str, reopen: str) -> None:
        self._url = url
        self._pid = pid
        self._rule = rule
        self._reopen = reopen

    def close(self) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        raise StoreUnavailable(
            f"{self._url} was opened by process {self._pid}, and this process "
            f"({os.getpid()}) was forked from it: {self._rule}. Open the store again in "
            f"this process (tachograph.open_store(url) or {self._reopen})",
            location=self._url,
        )


_open: weakref.WeakSet[Any] = weakref.WeakSet()
_held: list[Any] = []
_inherited: list[Any] = []
"""A forked child's copies of its parent's connections: kept, so that the child never uses
nor closes one (closing would run the client's code on state the parent owns)."""


def track(store: ForkSafe) -> None:
    """Register an open store (held weakly): its lock is taken at every fork, and a child
    forked from this process calls its ``_after_fork()``."""
    _open.add(store)


def set_aside(connection: Any, url: str, pid: int, rule: str, reopen: str) -> Any:
    """In a forked child: keep the parent's ``connection`` (never used nor closed here) and
    return the :class:`ForkedConnection` to put in its place (``url``, ``pid``, ``rule``
    and ``reopen`` as it takes them)."""
    _inherited.append(connection)
    return ForkedConnection(url, pid, rule, reopen)


def _before_fork() -> None:
    for store in list(_open):
        store._lock.acquire()
        _held.append(store)


def _after_fork_in_parent() -> None:
    while _held:
        _held.pop()._lock.release()


def _after_fork_in_child() -> None:
    _held.clear()
    for store in list(_open):
        store._lock = threading.RLock()  # of its own: the parent's may be held for good
        store._after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(
        before=_before_fork,
        after_in_parent=_after_fork_in_parent,
        after_in_child=_after_fork_in_child,
    )
