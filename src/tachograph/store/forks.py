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
- in the child, each store's ``_after_fork()`` gives it a fresh lock and puts a
  :class:`ForkedConnection` in place of its connection: every use is refused with a
  :class:`~tachograph.errors.StoreUnavailable` that says to open the store again, and
  closing it does nothing (the parent's connection stays the parent's).
"""

from __future__ import annotations

import os
import weakref
from typing import Any, Protocol

from ..errors import StoreUnavailable

__all__ = ["ForkSafe", "ForkedConnection", "track"]


class ForkSafe(Protocol):
    """What a store registered with :func:`track` has."""

    _lock: Any
    """Held for every call the store makes to its database."""

    def _after_fork(self) -> None:
        """In a forked child (one thread: the forking one): a fresh lock, and the
        connection replaced by a :class:`ForkedConnection` unless it is the child's own."""


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

    closed = False

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


def track(store: ForkSafe) -> None:
    """Register an open store (held weakly): its lock is taken at every fork, and a child
    forked from this process calls its ``_after_fork()``."""
    _open.add(store)


def _before_fork() -> None:
    for store in list(_open):
        store._lock.acquire()
        _held.append(store)


def _after_fork_in_parent() -> None:
    while _held:
        _held.pop()._lock.release()


def _after_fork_in_child() -> None:
    _held.clear()  # the child's stores get locks of their own
    for store in list(_open):
        store._after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(
        before=_before_fork,
        after_in_parent=_after_fork_in_parent,
        after_in_child=_after_fork_in_child,
    )
