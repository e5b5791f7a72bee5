"""A LangGraph checkpointer backed by the tachograph log (extra ``tachograph[langchain]``).

::

    from tachograph.integrations.langgraph import TachographSaver

    graph = builder.compile(checkpointer=TachographSaver())

Every change to the checkpoints (``put``, ``put_writes``, ``delete_thread``; LangGraph's
optional ``delete_for_runs``, ``copy_thread`` and ``prune`` are not offered) crosses the
capture boundary as a ``write`` call named ``langgraph.checkpoint.<operation>``:
``tool.requested`` with what identifies it (thread, namespace, step, source; a task's path
and channels), then ``tool.completed`` with
what was stored (the checkpoint, its metadata and versions as LangGraph's serializer writes
them, base64). Inside a tachograph run they are part of the run, hashed and chained with the
model and tool calls they follow; in replay they are served like any recorded write (the
graph's own copy of its state is kept in memory either way, so the graph runs on). Outside a
run they go to a journal run of their own in ``store`` (a fresh in-memory store when none is
given), opened on the first write and finished by :meth:`TachographSaver.close`.

:meth:`TachographSaver.from_run` rebuilds the checkpoints of a recorded run, verified as replay
verifies it, and with them the answers of the run's model and tool calls, thread by thread.
A graph resumed from one of those checkpoints (``graph.invoke(Command(resume=...), config)``,
or ``graph.invoke(None, config)`` after a crash) runs the interrupted node again, as LangGraph
always does; the calls that node makes again are answered from the log by
:class:`~tachograph.integrations.langchain.TachographMiddleware` instead of reaching the model
or repeating the tool. Each recorded answer is reused once per time it was recorded.

Reading is served from memory (the conformance suite of ``langgraph-checkpoint-conformance``
passes). Limit: processors (redaction) see the identifying fields, not inside the serialized
checkpoint.
"""

from __future__ import annotations

import base64
import threading
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

try:
    from langgraph.checkpoint.memory import InMemorySaver
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "tachograph.integrations.langgraph needs langgraph: pip install 'tachograph[langchain]'"
    ) from exc

from ..capture.agent import record
from ..capture.boundary import CallKind, CallTicket
from ..capture.session import Session, current_session
from ..errors import ProfileError, ReplayError
from ..record.canonical import canonical
from ..record.event import Effect, Event, EventType
from ..store.base import Store
from ..store.registry import open_store
from ..store.verify import read_verified

__all__ = ["OPERATIONS", "TachographSaver"]

_PREFIX = "langgraph.checkpoint."
OPERATIONS = ("put", "put_writes", "delete_thread")
"""The checkpointer's writes, each recorded as the call ``langgraph.checkpoint.<name>``."""


def _typed(serde: Any, value: Any) -> dict[str, str]:
    kind, data = serde.dumps_typed(value)
    return {"type": kind, "data": base64.b64encode(data).decode("ascii")}


def _untyped(serde: Any, value: Mapping[str, Any]) -> Any:
    return serde.loads_typed((value["type"], base64.b64decode(value["data"])))


def _plain(mapping: Any) -> dict[str, Any]:
    """The entries of ``mapping`` that are inside the JSON profile (LangGraph's own ``__``
    entries, callbacks and other objects left out)."""
    out: dict[str, Any] = {}
    for key, value in (mapping or {}).items():
        if not isinstance(key, str) or key.startswith("__"):
            continue
        try:
            canonical(value)
        except (ProfileError, TypeError, ValueError):
            continue
        out[key] = value
    return out


def _config(config: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"configurable": _plain(config.get("configurable"))}
    if config.get("metadata"):
        body["metadata"] = _plain(config.get("metadata"))
    return body


def _scalar(value: Any) -> Any:
    return value if isinstance(value, (str, int, float, bool)) or value is None else str(value)


class TachographSaver(InMemorySaver):
    """A ``BaseCheckpointSaver`` whose every write is an event of the tachograph log."""

    def __init__(
        self,
        store: Store | str | None = None,
        *,
        serde: Any = None,
        actor: str = "langgraph.checkpointer",
    ) -> None:
        super().__init__(serde=serde)
        self._store = store
        self._actor = actor
        self._journal: record | None = None
        self._journal_run_id: str | None = None
        self._lock = threading.RLock()
        self._loading = False
        self._recorded: dict[str, dict[str, deque[tuple[Any, dict[str, Any]]]]] = {}

    # -- the journal ---------------------------------------------------------------------

    def _session(self) -> Session | None:
        if self._loading:
            return None
        session = current_session()
        if session is not None:
            return session
        with self._lock:
            if self._journal is None:
                store = self._store if self._store is not None else "memory://"
                self._journal = record(store, actor=self._actor)
                run = self._journal.start()
                self._journal_run_id = run.run_id
                # the journal is written to directly, not bound to the caller's context
                run.session.deactivate()
            assert self._journal.run is not None
            return self._journal.run.session

    @property
    def journal_run_id(self) -> str | None:
        """The run the checkpoints written outside any tachograph run go to (once opened)."""
        return self._journal_run_id

    def close(self) -> None:
        """Finish the journal run (if one was opened)."""
        with self._lock:
            journal, self._journal = self._journal, None
        if journal is not None and journal.run is not None:
            journal.run.session.activate()
            journal.__exit__(None, None, None)

    def _begin(self, operation: str, identity: dict[str, Any]) -> CallTicket | None:
        session = self._session()
        if session is None:
            return None
        ticket = session.begin_call(
            CallKind.TOOL, _PREFIX + operation, identity, effect=Effect.WRITE
        )
        return None if ticket.served else ticket

    # -- writes ------------------------------------------------------------------------

    def put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        configurable = config["configurable"]
        identity = {
            "thread_id": str(configurable["thread_id"]),
            "checkpoint_ns": str(configurable.get("checkpoint_ns", "")),
            "step": _scalar((metadata or {}).get("step")),
            "source": _scalar((metadata or {}).get("source")),
        }
        ticket = self._begin("put", identity)
        try:
            saved = super().put(config, checkpoint, metadata, new_versions)
        except Exception as exc:
            if ticket is not None:
                ticket.fail(exc)
            raise
        if ticket is not None:
            ticket.complete(
                {
                    "config": _config(config),
                    "checkpoint_id": str(checkpoint["id"]),
                    "checkpoint": _typed(self.serde, checkpoint),
                    "metadata": _typed(self.serde, metadata),
                    "new_versions": _typed(self.serde, dict(new_versions)),
                }
            )
        return saved

    def put_writes(
        self, config: Any, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        configurable = config["configurable"]
        identity = {
            "thread_id": str(configurable["thread_id"]),
            "checkpoint_ns": str(configurable.get("checkpoint_ns", "")),
            "task_path": str(task_path),
            # LangGraph's own channels (``__resume__``, ``__interrupt__``) depend on whether a
            # call inside the task ran or was answered from the log: not part of what is compared
            "channels": [str(c) for c, _ in writes if not str(c).startswith("__")],
        }
        ticket = self._begin("put_writes", identity)
        try:
            super().put_writes(config, writes, task_id, task_path)
        except Exception as exc:
            if ticket is not None:
                ticket.fail(exc)
            raise
        if ticket is not None:
            ticket.complete(
                {
                    "config": _config(config),
                    "task_id": str(task_id),
                    "writes": _typed(self.serde, [list(w) for w in writes]),
                }
            )

    def _plain_op(self, operation: str, identity: dict[str, Any], apply: Any) -> None:
        ticket = self._begin(operation, identity)
        try:
            apply()
        except Exception as exc:
            if ticket is not None:
                ticket.fail(exc)
            raise
        if ticket is not None:
            ticket.complete({"done": True})

    def delete_thread(self, thread_id: str) -> None:
        self._plain_op(
            "delete_thread",
            {"thread_id": str(thread_id)},
            lambda: super(TachographSaver, self).delete_thread(thread_id),
        )
        with self._lock:
            self._recorded.pop(str(thread_id), None)

    # The async twins of InMemorySaver call the sync methods above, so they record too.

    # -- recorded answers --------------------------------------------------------------

    def remember(self, thread_id: str, identity: str, answer: Any, source: dict[str, Any]) -> None:
        """Keep the answer of a call made in ``thread_id``, for a resumed graph to reuse."""
        with self._lock:
            by_identity = self._recorded.setdefault(thread_id, {})
            by_identity.setdefault(identity, deque()).append((answer, source))

    def recall(self, thread_id: str, identity: str) -> tuple[Any, dict[str, Any]] | None:
        """A recorded answer for the call ``identity`` in ``thread_id`` (taken: each recorded
        answer is reused once), with where it was recorded; None when there is none."""
        with self._lock:
            queue = self._recorded.get(thread_id, {}).get(identity)
            return queue.popleft() if queue else None

    # -- loading a recorded run --------------------------------------------------------

    @classmethod
    def from_run(
        cls,
        store: Store | str,
        run_id: str,
        *,
        tenant: str | None = None,
        serde: Any = None,
    ) -> TachographSaver:
        """A saver holding the checkpoints and call answers of a recorded run.

        The run is read and verified as replay reads it; a run that does not verify is
        refused (:class:`~tachograph.errors.ReplayError`). Checkpoints written from now on go
        to the run being recorded, or to a journal run in ``store``.
        """
        st = store if isinstance(store, Store) else open_store(store, create=False)
        saver = cls(st, serde=serde)
        saver.load(st, run_id, tenant=tenant)
        return saver

    def load(self, store: Store, run_id: str, *, tenant: str | None = None) -> None:
        """Apply the checkpoint writes and keep the call answers of a recorded run."""
        from .langchain import model_identity, tool_identity

        events, report = read_verified(store, run_id, tenant=tenant)
        if not report.ok:
            raise ReplayError(
                f"run {run_id!r} does not verify; its checkpoints are not loaded", run_id=run_id
            )
        completions = {
            e.idempotency_key: e
            for e in events
            if e.type in (EventType.TOOL_COMPLETED.value, EventType.MODEL_RESPONSE.value)
            and e.idempotency_key
        }
        thread: str | None = None
        self._loading = True
        try:
            for event in events:
                done = completions.get(event.idempotency_key or "")
                if event.type == EventType.TOOL_REQUESTED.value and event.payload is not None:
                    name = str(event.payload.get("tool"))
                    args = event.payload.get("args") or {}
                    if name.startswith(_PREFIX):
                        thread = args.get("thread_id", thread)
                        if done is not None:
                            self._apply(name[len(_PREFIX) :], args, done)
                        continue
                    identity = tool_identity(name, args, event.idempotency_key, event.run_id)
                    if done is not None and thread is not None and identity is not None:
                        self._keep(thread, identity, done)
                elif event.type == EventType.MODEL_REQUEST.value and event.payload is not None:
                    request = event.payload.get("request")
                    if done is not None and thread is not None and isinstance(request, dict):
                        self._keep(thread, model_identity(request), done)
        finally:
            self._loading = False

    def _keep(self, thread: str, identity: str, done: Event) -> None:
        body = done.payload or {}
        answer = body.get("result" if done.type == EventType.TOOL_COMPLETED.value else "response")
        self.remember(thread, identity, answer, {"run_id": done.run_id, "seq": done.seq})

    def _apply(self, operation: str, args: dict[str, Any], done: Event) -> None:
        body = done.payload.get("result") if done.payload else None
        if not isinstance(body, dict):
            return  # erased: that checkpoint is gone, as erasure means
        if operation == "put":
            super().put(
                body["config"],
                _untyped(self.serde, body["checkpoint"]),
                _untyped(self.serde, body["metadata"]),
                _untyped(self.serde, body["new_versions"]),
            )
        elif operation == "put_writes":
            writes = [tuple(w) for w in _untyped(self.serde, body["writes"])]
            super().put_writes(body["config"], writes, body["task_id"], args["task_path"])
        elif operation == "delete_thread":
            super().delete_thread(args["thread_id"])
