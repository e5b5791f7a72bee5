"""The replay engine: serves a recorded run to a session and compares what the agent does.

It implements :class:`~tachograph.capture.boundary.Engine` by composing a
:class:`~tachograph.replay.matchers.Matcher` (which recorded step the agent's step is, and
how a mismatch is diagnosed) with what serving means per mode: replay answers every call from
the record; a fork copies the steps it serves into its own run and goes live after step N; a
resume goes live after the crash point, handling the call the process died in by its effect.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import datetime
import os
import socket
import sys
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from ..capture.boundary import (
    MODEL_CALL,
    TOOL_CALL,
    CallTicket,
    error_info,
)
from ..capture.recorder import Recorder
from ..capture.session import EFFECTS, Session
from ..errors import ConfirmationRequired, ReplayError, TachographError, WriteFailed
from ..record.event import Effect, Event, EventType, now_ts
from ..record.seal import Processor
from .diff import Change, diff_values
from .history import RunHistory
from .matchers import RESUMED, Matcher, normalize
from .report import DivergenceItem, DivergenceKind

__all__ = ["RecordedError", "ReplayEngine", "confirmation_required", "rebuild", "rebuild_error"]

# Read per served call: constants, as ``EventType.X.value`` is an enum property (~1 us on 3.11).
_TOOL_COMPLETED = EventType.TOOL_COMPLETED.value
_MODEL_RESPONSE = EventType.MODEL_RESPONSE.value
_TOOL_FAILED = EventType.TOOL_FAILED.value
# and an enum member, which costs about 0.14 us through its class on 3.11 (the call kinds
# are boundary's TOOL_CALL and MODEL_CALL)
_PURE = Effect.PURE


class RecordedError(Exception):
    """Raised in replay for a recorded failure whose exception type is not rebuilt."""

    def __init__(self, type_name: str, message: str) -> None:
        super().__init__(message)
        self.type_name = type_name
        self.recorded_message = message
        self.recorded_info = {"type": type_name, "message": message}

    def __str__(self) -> str:
        return f"{self.type_name}: {self.recorded_message}"


def rebuild_error(info: dict[str, Any], main: str | None = None) -> BaseException:
    """The exception a recorded ``{type, message}`` describes, without importing anything.

    Builtin exceptions and classes of modules the process has already imported (the agent's
    own, its SDKs', tachograph's) are rebuilt; a name the process does not know becomes a
    :class:`RecordedError` carrying it. The log is never a reason to import a module.
    ``main`` names the module a ``__main__.X`` is looked up in: the agent's module, for a
    run recorded by running the agent's file as a script (see :func:`rebuild`).
    """
    return rebuild(info, main)[0]


def rebuild(info: dict[str, Any], main: str | None = None) -> tuple[BaseException, str | None]:
    """:func:`rebuild_error`, and why the type was not rebuilt (None when it was).

    A run recorded by ``python agent.py`` names the agent's own classes ``__main__.X``; it
    is replayed with the agent imported as a module (``--agent agent:fn``), where
    ``__main__`` is another program: such a name is looked up in ``main`` first.
    """
    type_name = str(info.get("type", "Exception"))
    message = str(info.get("message", ""))
    module_name, _, qualname = type_name.rpartition(".")
    modules = [module_name]
    if module_name == "__main__" and main and main != "__main__":
        modules.insert(0, main)
    whys = []
    for name in modules:
        cls, why = _exception_class(name, qualname)
        if cls is not None:
            return _instance(cls, message), None
        whys.append(why)
    return RecordedError(type_name, message), "; ".join(whys)


def _exception_class(module_name: str, qualname: str) -> tuple[type[BaseException] | None, str]:
    """The exception class ``qualname`` of an imported module, or why there is none."""
    obj: Any = builtins if not module_name else sys.modules.get(module_name)
    if obj is None:
        return None, f"module {module_name!r} is not imported"
    where = f"module {module_name!r}" if module_name else "builtins"
    try:
        for part in qualname.split("."):
            obj = getattr(obj, part, None)
    except Exception:  # a module's __getattr__ may raise anything
        obj = None
    if obj is None:
        return None, f"{where} has no {qualname!r}"
    if isinstance(obj, type) and (issubclass(obj, Exception) or _is_cancellation(obj)):
        return obj, ""
    return None, f"{qualname!r} of {where} is not an exception class"


def _is_cancellation(cls: type) -> bool:
    """Whether ``cls`` is asyncio's ``CancelledError``, which a call recorded as cancelled
    holds (a ``BaseException``, and no other one is rebuilt)."""
    asyncio = sys.modules.get("asyncio")
    return asyncio is not None and issubclass(cls, asyncio.CancelledError)


def _instance(cls: type[BaseException], message: str) -> BaseException:
    try:
        if issubclass(cls, KeyError):
            key = _key_of(message)
            if key is not None:
                return cls(key[0])
        return cls(message)
    except Exception:
        exc = cls.__new__(cls)
        exc.args = (message,)
        return exc


def _key_of(message: str) -> tuple[Any] | None:
    """The key a KeyError's recorded message names: ``str(KeyError(k))`` is ``repr(k)``, so
    the key is the literal the message spells, when rebuilding it gives the message back."""
    try:
        key = ast.literal_eval(message)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    return (key,) if str(KeyError(key)) == message else None


def _weakly(method: Callable[[Event], None]) -> Callable[[Event], None]:
    """``method`` (bound) called through a weak reference to its object: what the engine hands
    the matcher it holds, so that the two make no reference cycle."""
    ref = weakref.WeakMethod(method)

    def call(event: Event) -> None:
        bound = ref()
        if bound is not None:
            bound(event)

    return call


class ReplayEngine:
    """Serves one recorded run (or its first steps) to a session."""

    def __init__(
        self,
        history: RunHistory,
        *,
        mode: str,
        match: str = "strict",
        raise_on_divergence: bool = True,
        live_after_source: bool = False,
        copy_served: bool = False,
        rerun_pure: bool = False,
        confirm: bool = False,
        takeover: bool = False,
        override: tuple[int, Any] | None = None,
        processors: Sequence[Processor] = (),
        events: Sequence[Event] | None = None,
        agent_module: str | None = None,
    ) -> None:
        self.history = history
        self._claimed = False
        self.agent_module = agent_module
        """The module of the agent being replayed, where a recorded ``__main__.X`` is."""
        self._unrebuilt: set[str] = set()
        self._dry_run_intents: list[tuple[int, str]] = []
        self._intents_note: int | None = None
        self.reran: list[dict[str, Any]] = []
        """The open intents a resume ran again live (``seq``, ``tool``, ``effect``, ``key``,
        ``confirmed``, ``outcome``: ``completed``, ``failed`` or ``open``, and ``at``, the
        seq of its completion)."""
        self.appended: list[dict[str, Any]] = []
        """The events appended to the run while :meth:`watch` watched its recorder."""
        self.mode = mode
        self.key_run_id = history.run_id
        self.key_secret = history.key_secret
        self.live_after_source = live_after_source
        self.copy_served = copy_served
        self.rerun_pure = rerun_pure
        self.confirm = confirm
        self.takeover = takeover
        self.override = override
        # The session is held weakly: it holds this engine (``Session.engine``), and a strong
        # reference back made a cycle that kept a replayed run's events in memory after the
        # replay, until the cyclic collector found them (at a cost of a few ms per 5,000
        # events, in whatever code ran next).
        self._session_ref: weakref.ref[Session] | None = None
        self.models_asked: set[str] = set()
        """The exact model ids the agent asked for during this replay."""
        self.matcher = Matcher(
            run_id=history.run_id,
            source=list(events if events is not None else history.events),
            match=match,
            raise_on_divergence=raise_on_divergence,
            live_after_source=live_after_source,
            processors=processors,
            # else a call per step for nothing; weakly, as the session (no cycle)
            on_served=_weakly(self._on_served) if copy_served else None,
        )
        # the matcher's completions by key, read once per served call without its frame
        self._completions = self.matcher.completions
        # whether serve_same_call may serve a call: a replay matched in order that neither
        # re-runs pure tools, nor copies what it serves, nor replaces an answer
        self._same_calls = (
            mode == "replay"
            and match != "key"
            and not rerun_pure
            and not copy_served
            and override is None
        )

    # -- the Engine protocol ---------------------------------------------------------------

    def attach(self, session: Session) -> None:
        """Bind the session this engine serves (the one whose recorder a fork copies into)."""
        self._session_ref = weakref.ref(session)

    @property
    def session(self) -> Session | None:
        """The session this engine serves, while it exists."""
        ref = self._session_ref
        return ref() if ref is not None else None

    def serving(self) -> bool:
        return True

    @property
    def divergences(self) -> list[DivergenceItem]:
        return self.matcher.divergences

    @property
    def served(self) -> int:
        return self.matcher.served

    @property
    def aborted(self) -> bool:
        return self.matcher.aborted

    @property
    def stopped(self) -> bool:
        """Whether the replay was stopped (in whichever of the agent's threads)."""
        return self.matcher.stopped

    def recorded_completion(self, key: str | None) -> Event | None:
        return self.matcher.completion(key)

    def serve_call(self, ticket: CallTicket, stored: bytes | None = None) -> None:
        if ticket.kind is MODEL_CALL and ticket.model is not None:
            self.models_asked.add(ticket.model)
        matched = self.matcher.expect(
            ticket.request_type,
            ticket.payload,
            ticket.key,
            ticket.name,
            model=ticket.model,
            stored=stored,
        )
        if matched is None:
            return  # live: the session records the intent
        key = matched.idempotency_key
        completion = self._completions.get(key) if key is not None else None
        if completion is None:
            self._dangling(ticket, matched)
            return
        payload = completion.payload
        if payload is None and completion.salt is None:  # completion.erased
            self.matcher.diverge(
                DivergenceKind.UNREPLAYABLE,
                completion.seq,
                completion,
                None,
                [],
                f"The recorded answer at seq {completion.seq} was erased; it cannot be served.",
                fatal=True,
            )
        self.matcher.served += 1
        if self.copy_served:
            self._copy_completion(completion)
        if payload is not None and payload.get("dry_run") is True:
            self._session().simulated(completion.seq, "holds a dry-run result")
        if completion.type == _TOOL_COMPLETED and self.override is None and payload is not None:
            value, error = payload.get("result"), None  # self._answer's common case
        else:
            value, error = self._answer(completion)
        if self.rerun_pure and ticket.kind is TOOL_CALL and ticket.effect is _PURE:
            ticket.compare_with = completion
            ticket.record_completion = False
            return
        ticket.served = True
        ticket.value = value
        ticket.error = error
        ticket.completion = completion

    def serve_same_call(
        self,
        session: Session,
        name: str,
        args_jcs: bytes,
        payload: dict[str, Any],
        stored: bytes,
        effect: Effect,
    ) -> CallTicket | None:
        """A replay's common tool call, served in one step: the next recorded step is this
        call with the same stored bytes (``stored``, the request payload as the recorder
        writes it, untouched by the processors) and its recorded completion is a plain
        result (:meth:`Matcher.same_call`, which takes the step). The call's key is then
        derived as :meth:`Session.begin_call` derives it, and the served ticket is handed
        back: what :meth:`serve_call` gives for such a call. ``None``, with nothing consumed
        or derived: anything else (the general path decides, and reports)."""
        if not self._same_calls:
            return None
        completion = self.matcher.same_call(stored)
        if completion is None:
            return None
        # the step is taken: the call's key is counted once, as begin_call counts it
        call_key = session.keys.fresh_key(name, args_jcs)
        if call_key is None:
            call_key = session.make_key(name, payload["args"], None, args_jcs=args_jcs)
        ticket = CallTicket(session, TOOL_CALL, name, payload, call_key, effect, None, None)
        ticket.served = True
        ticket.value = completion.payload.get("result")  # a plain result (same_call)
        ticket.completion = completion
        return ticket

    def serve_step(self, type_: str, payload: dict[str, Any]) -> bool:
        matched = self.matcher.expect(type_, payload, None, None)
        return matched is not None or not self.live_after_source

    def serve_value(self, type_: str, payload: dict[str, Any]) -> tuple[bool, Any]:
        matched = self.matcher.expect(type_, payload, None, None)
        if matched is None:
            return False, None
        recorded = matched.payload or {}
        return True, recorded.get("seed" if type_ == EventType.RANDOM_SEED.value else "value")

    def compare_rerun(self, ticket: CallTicket, result: Any, error: BaseException | None) -> None:
        recorded = ticket.compare_with
        assert recorded is not None
        if error is not None:
            fresh: dict[str, Any] = {"tool": ticket.name, "error": error_info(error)}
            fresh_type = EventType.TOOL_FAILED.value
        else:
            fresh = {"tool": ticket.name, "result": normalize(result)}
            fresh_type = EventType.TOOL_COMPLETED.value
        fresh = self._session().process(fresh_type, fresh)
        recorded_error = (recorded.payload or {}).get("error")
        if error is not None and isinstance(recorded_error, dict):
            self._as_recorded(fresh.get("error"), recorded_error.get("type"))
        changes = diff_values(recorded.payload, fresh, "$.payload")
        if recorded.type != fresh_type:
            changes.insert(0, Change("$.type", recorded.type, fresh_type))
        if changes:
            self.matcher.diverge(
                DivergenceKind.TOOL_IMPLEMENTATION_CHANGED,
                recorded.seq,
                recorded,
                {"type": fresh_type, "payload": fresh},
                changes,
                f"Pure tool {ticket.name!r}, re-run on the recorded arguments, no longer returns "
                "what it returned when recorded: its implementation (or a dependency) changed.",
            )

    def closed_world(self) -> bool:
        """Whether the record is still being served, so that an unrecorded call is refused:
        always in replay; in a fork or resume, until the recorded steps run out."""
        return self.mode == "replay" or self.matcher.remaining

    def unrecorded_call(self, kind: str, detail: dict[str, Any], explanation: str) -> None:
        """Report a connection or spawn the network guard refused (it raises, not us: the
        agent sees a refused connection, and may handle it as such). Once the replay has
        stopped, a thread still running is refused without a report."""
        if self.matcher.stopped:
            return
        self.matcher.divergences.append(
            DivergenceItem(
                DivergenceKind.UNRECORDED_CALL,
                self.matcher.position(),
                None,
                {
                    "type": {
                        "exec": "process.spawn",
                        "send": "network.send",
                        "resolve": "network.resolve",
                    }.get(kind, "network.connect"),
                    "payload": detail,
                },
                (),
                (),
                explanation,
            )
        )

    def unservable(self, completion: Event, explanation: str) -> None:
        """Report that the agent asks more of a served call than its recorded ``completion``
        holds (it reads a stream past where the recording stopped reading it, or no longer
        cancels a call recorded as cancelled): an ``unreplayable`` divergence at the
        completion. Raises :class:`ReplayStopped` unless the replay collects divergences;
        the caller then raises an error into the agent."""
        self.matcher.diverge(
            DivergenceKind.UNREPLAYABLE, completion.seq, completion, None, [], explanation
        )

    def cancelled_in_record(self, completion: Event) -> tuple[float | None, bool]:
        """For a call recorded as cancelled (its ``completion``): the seconds from its
        request to the cancellation, and whether the cancellation was the run's own end
        (the run ended ``aborted`` with no call after it), not the agent's code."""
        events = self.history.events
        finished = self.history.finished
        if completion.type in (EventType.TOOL_REQUESTED.value, EventType.MODEL_REQUEST.value):
            # a call in flight when the run finished (served by _dangling): from its request
            # to the run's end
            elapsed = None
            if finished is not None:
                with contextlib.suppress(ValueError, AttributeError):
                    elapsed = max(0.0, _seconds(finished.ts) - _seconds(completion.ts))
            return elapsed, False
        request = next(
            (
                e
                for e in reversed(events)
                if e.seq < completion.seq and e.idempotency_key == completion.idempotency_key
            ),
            None,
        )
        elapsed = None
        if request is not None:
            with contextlib.suppress(ValueError, AttributeError):
                elapsed = max(0.0, _seconds(completion.ts) - _seconds(request.ts))
        ended = finished is not None and (finished.payload or {}).get("status") == "aborted"
        last = ended and not any(
            e.seq > completion.seq and e.type.startswith(("model.", "tool.")) for e in events
        )
        return elapsed, last

    def check_end(self, status: str, output: Any, error: dict[str, Any] | None) -> None:
        """Compare how the agent ended with how the recorded run ended."""
        finished = self.matcher.finished_event
        recorded_error = ((finished.payload or {}) if finished is not None else {}).get("error")
        if error is not None and isinstance(recorded_error, dict):
            error = dict(error)
            self._as_recorded(error, recorded_error.get("type"))
        self.matcher.check_end(status, output, error)

    def watch(self, recorder: Recorder) -> None:
        """Follow what ``recorder`` appends (a resume's, to the crashed run itself): the report
        says what was appended, and how each open intent run again ended."""
        recorder.listeners.append(_weakly(self._appended))

    def _appended(self, event: Event) -> None:
        payload = event.payload if isinstance(event.payload, dict) else {}
        item: dict[str, Any] = {"seq": event.seq, "type": event.type}
        if event.type.startswith("tool.") and isinstance(payload.get("tool"), str):
            item["tool"] = payload["tool"]
        self.appended.append(item)
        if event.type in (_TOOL_COMPLETED, _TOOL_FAILED) and event.idempotency_key is not None:
            for intent in self.reran:
                if intent["key"] == event.idempotency_key and intent["outcome"] == "open":
                    failed = event.type == _TOOL_FAILED
                    intent.update(outcome="failed" if failed else "completed", at=event.seq)

    # -- serving details -------------------------------------------------------------------

    def _session(self) -> Session:
        session = self.session
        if session is None:
            raise TachographError("the replay engine is not attached to a session")
        return session

    def _on_served(self, event: Event) -> None:
        if self.copy_served:
            self._copy(event)

    def _copy(self, event: Event) -> None:
        session = self._session()
        if session.recorder is None:
            return
        key = event.idempotency_key
        session.recorder.append(
            event.type,
            event.payload,
            processed=True,
            actor=event.actor,
            idempotency_key=session.live_key(key) if key is not None else None,
            model=event.model,
            seed=event.seed,
        )

    def _copy_completion(self, completion: Event) -> None:
        session = self._session()
        if session.recorder is None:
            return
        payload = completion.payload
        if self.override is not None and self.override[0] == completion.seq:
            # the override is new data, not a copy of what the recording processed: it goes
            # through the run's processors (secrets, personal data) as any live payload does
            payload = session.process(completion.type, self._overridden(completion))
        key = completion.idempotency_key
        session.recorder.append(
            completion.type,
            payload,
            processed=True,
            actor=completion.actor,
            idempotency_key=session.live_key(key) if key else None,
            model=completion.model,
            seed=completion.seed,
        )

    def _overridden(self, completion: Event) -> dict[str, Any]:
        assert self.override is not None
        payload = dict(completion.payload or {})
        field_name = "response" if completion.type == EventType.MODEL_RESPONSE.value else "result"
        payload[field_name] = self.override[1]
        payload["overridden"] = True
        return payload

    def _answer(self, completion: Event) -> tuple[Any, BaseException | None]:
        payload = completion.payload or {}
        if self.override is not None and self.override[0] == completion.seq:
            payload = self._overridden(completion)
        if completion.type == _TOOL_COMPLETED:
            return payload.get("result"), None
        if completion.type == _MODEL_RESPONSE:
            return payload.get("response"), None
        info = payload.get("error") or {}
        error, why = rebuild(info, self.agent_module)
        if why is not None:
            self._not_rebuilt(completion.seq, str(info.get("type", "Exception")), why)
        return None, error

    def _not_rebuilt(self, seq: int, type_name: str, why: str) -> None:
        """Note, once per class, a recorded failure served as a :class:`RecordedError`."""
        if type_name in self._unrebuilt:
            return
        self._unrebuilt.add(type_name)
        qualname = type_name.rpartition(".")[2]
        if type_name.startswith("__main__."):
            why += " (the run was recorded with the agent's file run as a script)"
        self.matcher.notes.append(
            f"the failure recorded at seq {seq} is a {type_name!r}, which could not be "
            f"rebuilt: {why}; it was raised as a tachograph RecordedError, which an "
            f"'except {qualname}' does not catch"
        )

    def _as_recorded(self, error: Any, recorded_type: Any) -> None:
        """Name an exception raised now as the recording named the same class: a
        ``__main__.X`` recorded with the agent's file run as a script is the agent
        module's ``X`` once the agent is imported (``--agent module:fn``)."""
        module = self.agent_module
        if (
            isinstance(error, dict)
            and isinstance(recorded_type, str)
            and recorded_type.startswith("__main__.")
            and module is not None
            and error.get("type") == module + recorded_type[len("__main__") :]
        ):
            error["type"] = recorded_type

    def _dangling(self, ticket: CallTicket, request: Event) -> None:
        """The recorded call never completed: the process died while it ran."""
        session = self._session()
        if self.mode != "resume":
            if self.live_after_source:  # a fork whose step N is an open intent: go live
                # The intent was copied into the fork under the fork's own key; the parent may
                # have done the effect already, so effects run in dry run here; reads and
                # pure tools run live, as everywhere in a fork.
                ticket.key = session.live_key(request.idempotency_key or ticket.key or "")
                ticket.intent_recorded = True
                if ticket.effect in EFFECTS:  # a read or pure tool runs live
                    ticket.dry_run = True
                    self._fork_intent(session, ticket, request)
                return
            finished = self.history.finished
            if finished is not None:
                cancel = _cancellation()
                if cancel is not None:
                    # The run finished with this call in flight (asyncio.gather hands the
                    # agent the first failure and leaves the other calls running; the end of
                    # asyncio.run cancelled them): served as it was, a call that does not
                    # answer until it is cancelled (CallTicket.until_cancelled).
                    ticket.served = True
                    ticket.completion = request
                    ticket.error = cancel
                    return
                explanation = (
                    f"The recorded run finished ({(finished.payload or {}).get('status')}) "
                    f"while this call was still in flight (seq {request.seq} has no outcome: "
                    "the agent ended without waiting for it). The record holds no answer to "
                    "serve; the run cannot be resumed (it finished): fork it before this call."
                )
            else:
                explanation = (
                    f"The recorded run ends inside this call (seq {request.seq} has no "
                    "completion: the process died while it ran). Nothing can be served from "
                    "here; use resume to continue the run."
                )
            self.matcher.diverge(
                DivergenceKind.UNREPLAYABLE,
                request.seq,
                request,
                None,
                [],
                explanation,
                fatal=True,
            )
        effect = ticket.effect
        ticket.key = request.idempotency_key
        ticket.intent_recorded = True
        if effect is Effect.IRREVERSIBLE and not self.confirm:
            session.fatal_error = confirmation_required(session.run_id, ticket.name, request)
            self.matcher.stop()
        if effect in EFFECTS and (session.dry_run or not self.confirm):
            ticket.dry_run = True
            assert effect is not None
            self._dry_run_intent(session, request.seq, effect.value)
            return
        if effect in EFFECTS:
            self._claim(session, request)
        self.reran.append(
            {
                "seq": request.seq,
                "tool": ticket.name,
                "effect": effect.value if effect is not None else None,
                "key": request.idempotency_key,
                "confirmed": effect in EFFECTS,
                "outcome": "open",
                "at": None,
            }
        )

    def _fork_intent(self, session: Session, ticket: CallTicket, request: Event) -> None:
        """A fork at a call's intent (step N is its ``tool.requested``) dry-runs the call,
        even a live fork: the intent is the parent's, which may have done the effect. The
        agent acts on that simulated result, so the session goes on in dry run (as after an
        unconfirmed resume), and a note says why."""
        if session.dry_run:
            return  # a dry-run fork: the call and all after it are simulated anyway
        session.dry_run = True
        effect = ticket.effect.value if ticket.effect is not None else "irreversible"
        done = self.history.completion(request.idempotency_key)
        parent = (
            f"the parent run recorded its outcome at seq {done.seq}"
            if done is not None
            else "the parent run's process died while it ran (whether it took effect is unknown)"
        )
        self.matcher.notes.append(
            f"seq {request.seq} ({effect} {ticket.name!r}) was dry-run although the fork is "
            f"live: the fork starts at this call's intent, which is the parent's, and "
            f"{parent}; the agent acts on a simulated result, so every write and irreversible "
            f"tool after it ran in dry run. To run the call live, fork at seq "
            f"{request.seq - 1}"
        )

    def _claim(self, session: Session, request: Event) -> None:
        """Before a confirmed resume runs again an effect the crash left open, take the run:
        one event (:data:`~tachograph.replay.matchers.RESUMED`) appended, durably. Of two
        resumes of the run at the same moment, the store lets one append at the head both
        read; the other stops here, having run nothing (both ran the effect again: a write
        or a payment twice). The run's latest claim, made by a process that still runs on
        this host, is another resume at work: this one stops too; so does one made on
        another host, whose process cannot be asked, unless ``takeover`` says it has ended.
        Taken once."""
        if self._claimed:
            return
        recorder = session.recorder
        assert recorder is not None  # a resume records
        latest = next((e for e in reversed(self.history.events) if e.type == RESUMED), None)
        found = latest.payload if latest is not None and isinstance(latest.payload, dict) else {}
        held = None
        if latest is not None and not self.takeover:
            # the host as this recording stores it (a redactor may have made it a token); a
            # claim whose payload this read may not see (a purpose's policy, an erasure)
            # cannot be asked either
            here = session.process(RESUMED, {"host": socket.gethostname()}).get("host")
            held = _holder(found, here) if found else "unknown"
        if held is not None:
            assert latest is not None
            by = (
                f"process {found.get('pid')!r} on host {found.get('host')!r} "
                f"(since {found.get('at')!r})"
                if found
                else f"the resume that took it at seq {latest.seq} (its claim cannot be read)"
            )
            session.fatal_error = ReplayError(
                f"run {session.run_id!r} is being resumed by {by}; nothing was run. "
                + (
                    "If that process is not a resume (its id was given to another), "
                    if held == "alive"
                    else "This host cannot ask whether it still runs: if it has ended, "
                )
                + "resume with takeover=True (tacho resume --confirm --takeover)",
                run_id=session.run_id,
            )
            self.matcher.stop()
        claim: dict[str, Any] = {"open": request.seq, "host": socket.gethostname()}
        claim.update(pid=os.getpid(), at=now_ts())
        try:
            recorder.append(RESUMED, claim)
            recorder.flush()
        except WriteFailed as exc:
            session.fatal_error = ReplayError(
                f"run {session.run_id!r} was taken by another resume (or appended to) since "
                f"it was read; nothing was run ({exc})",
                run_id=session.run_id,
            )
            self.matcher.stop()
        self._claimed = True

    def _dry_run_intent(self, session: Session, seq: int, effect: str) -> None:
        """An open intent was completed in dry run: the agent acts on its simulated result,
        so the session goes on in dry run. A crash amid concurrent calls leaves several
        intents open: one note names every one, rewritten as each comes."""
        self._dry_run_intents.append((seq, effect))
        session.dry_run = True
        which = "an open" if self.confirm else "an unconfirmed"
        if len(self._dry_run_intents) == 1:
            text = (
                f"seq {seq} ({which} {effect} intent) was dry-run: the agent acts on a "
                "simulated result, so every write and irreversible tool after it ran in dry run"
            )
        else:
            listed = [f"{s} ({e})" for s, e in self._dry_run_intents]
            text = (
                f"the {which.split()[1]} intents at seq {', '.join(listed[:-1])} and "
                f"{listed[-1]} were dry-run: the agent acts on simulated results, so every "
                "write and irreversible tool after them ran in dry run"
            )
        if self._intents_note is None:
            self._intents_note = len(self.matcher.notes)
            self.matcher.notes.append(text)
        else:
            self.matcher.notes[self._intents_note] = text


def _cancellation() -> BaseException | None:
    """An ``asyncio.CancelledError`` when the caller runs in an asyncio task (an async call,
    which can wait to be cancelled), else None."""
    asyncio = sys.modules.get("asyncio")
    if asyncio is None:
        return None
    try:
        task = asyncio.current_task()
    except RuntimeError:  # no running loop in this thread
        return None
    return asyncio.CancelledError() if task is not None else None


def _holder(claim: dict[str, Any], here: Any) -> str | None:
    """Whether the process that made a resume's claim may still hold the run: ``"alive"``
    (it runs on this host, ``here`` as the claim would store it), ``"unknown"`` (made on
    another host, which cannot be asked), or None (it has ended, or it is this process)."""
    pid = claim.get("pid")
    if claim.get("host") != here:
        return "unknown"
    if type(pid) is not int or pid == os.getpid():
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except OSError:  # PermissionError: it runs, under another user
        return "alive"
    return "alive"


def confirmation_required(
    run_id: str, tool: Any, request: Event, others: Sequence[Event] = ()
) -> ConfirmationRequired:
    """The refusal of a resume whose run stopped inside irreversible ``tool`` (``request``,
    its intent with no completion), until it is confirmed. ``others`` are the other open
    intents of write and irreversible tools (a crash amid concurrent calls), which the
    confirmed resume runs again too: the refusal names every one."""
    also = ""
    if others:
        listed = [
            f"seq {e.seq} ({(e.payload or {}).get('effect')} {(e.payload or {}).get('tool')!r}, "
            f"key {e.idempotency_key})"
            for e in others
        ]
        also = " With confirm=True it also runs again " + (
            f"the open intent at {listed[0]}."
            if len(listed) == 1
            else f"the open intents at {', '.join(listed[:-1])} and {listed[-1]}."
        )
    return ConfirmationRequired(
        f"run {run_id!r} stopped while irreversible tool {tool!r} was running (seq "
        f"{request.seq}, key {request.idempotency_key}). Whether it took effect is unknown: "
        "check the outside world, then resume with confirm=True (tacho resume --confirm) to "
        f"run it again, or fork before it.{also}",
        run_id=run_id,
        seq=request.seq,
        key=request.idempotency_key,
    )


def _seconds(ts: str) -> float:
    """A recorded timestamp (RFC 3339, UTC) as seconds since the epoch."""
    return datetime.datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()
