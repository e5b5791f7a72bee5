"""Threads an agent starts inside a run carry the run with them.

A run lives in a :mod:`contextvars` context, which a new thread does not inherit: a tool an
agent calls from a ``threading.Thread`` or a ``concurrent.futures.ThreadPoolExecutor`` (and so
from ``loop.run_in_executor``) would run unrecorded while recording, and, while replaying,
run live, its effect firing, while the replay reported nothing. While at least one run is
active in the process, these entry points are wrapped:

* ``Thread.start`` from a context that holds a run runs the thread in a copy of that context
  (``asyncio.to_thread`` and ``copy_context().run`` already do). A replay that stops in
  such a thread ends the thread without a traceback; the stop is not lost, as the replay
  stays stopped and the agent's next step in its main thread stops too;
* ``ThreadPoolExecutor.submit`` from such a context runs the task in a copy of it. The pool's
  worker threads themselves are started without it: they outlive the task, and the run;
* ``_thread.start_new_thread`` called directly runs its function in a copy of the context.

A thread started *before* the run, or a pool worker handed work by other means, is not
followed (docs/replay.md). Threads of tachograph's own (the writer, the sealing timer) are
marked and left out: their I/O is not the agent's.
"""

from __future__ import annotations

import _thread
import concurrent.futures
import contextvars
import threading
from collections.abc import Callable
from typing import Any

from .boundary import CURRENT_SESSION, ReplayStopped

__all__ = ["follow_threads", "own_thread", "unfollow_threads"]

_lock = threading.Lock()
_count = 0
_original_start = threading.Thread.start
_original_submit = concurrent.futures.ThreadPoolExecutor.submit
_original_start_new_thread = _thread.start_new_thread
_HAS_START_NEW = hasattr(_thread, "start_new")
_OWN = "_tachograph_own_thread"
# set while a pool's submit runs: the worker thread it may start is not the task
_submitting: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "tachograph_submitting", default=False
)


def own_thread(thread: threading.Thread) -> threading.Thread:
    """Mark ``thread`` as tachograph's own: it never carries a run's context."""
    setattr(thread, _OWN, True)
    return thread


def _start(self: threading.Thread) -> None:
    if (
        CURRENT_SESSION.get() is not None
        and not getattr(self, _OWN, False)
        and not _submitting.get()
    ):
        context = contextvars.copy_context()
        run = self.run

        def run_in_context() -> None:
            try:
                context.run(run)
            except ReplayStopped:
                # The replay stopped in this thread: it ends here, quietly (not through
                # threading.excepthook, as a traceback); the run's next step in any other
                # thread stops it too (the matcher stays stopped).
                pass

        self.run = run_in_context  # type: ignore[method-assign]
    _original_start(self)


def _submit(
    self: concurrent.futures.ThreadPoolExecutor, fn: Any, /, *args: Any, **kwargs: Any
) -> concurrent.futures.Future[Any]:
    if CURRENT_SESSION.get() is None:
        return _original_submit(self, fn, *args, **kwargs)
    context = contextvars.copy_context()
    token = _submitting.set(True)
    try:
        return _original_submit(self, context.run, fn, *args, **kwargs)
    finally:
        _submitting.reset(token)


def _start_new_thread(function: Callable[..., Any], args: Any, *kwargs: Any) -> int:
    # ``_thread.start_new_thread`` called directly (``threading`` keeps its own reference):
    # the function runs in a copy of the caller's context, as a Thread's run does
    if CURRENT_SESSION.get() is None:
        return _original_start_new_thread(function, args, *kwargs)
    context = contextvars.copy_context()

    def run_in_context(*a: Any, **k: Any) -> None:
        try:
            context.run(function, *a, **k)
        except ReplayStopped:
            pass  # as in a Thread: the replay stays stopped

    return _original_start_new_thread(run_in_context, args, *kwargs)


def follow_threads() -> None:
    """Wrap the entry points (reference counted: one call per active run)."""
    global _count
    with _lock:
        _count += 1
        if _count == 1:
            threading.Thread.start = _start  # type: ignore[method-assign]
            concurrent.futures.ThreadPoolExecutor.submit = _submit  # type: ignore[method-assign,assignment]
            _thread.start_new_thread = _start_new_thread
            if _HAS_START_NEW:  # the older alias of the same function
                setattr(_thread, "start_new", _start_new_thread)  # noqa: B010


def unfollow_threads() -> None:
    """Undo :func:`follow_threads` once the last active run ends."""
    global _count
    with _lock:
        _count = max(0, _count - 1)
        if _count == 0:
            threading.Thread.start = _original_start  # type: ignore[method-assign]
            concurrent.futures.ThreadPoolExecutor.submit = _original_submit  # type: ignore[method-assign]
            _thread.start_new_thread = _original_start_new_thread
            if _HAS_START_NEW:
                setattr(_thread, "start_new", _original_start_new_thread)  # noqa: B010
