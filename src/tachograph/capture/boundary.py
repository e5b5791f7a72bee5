"""The capture boundary: the one way a call crosses into the record and back.

Decorators, HTTP transports and framework adapters all do the same three things::

    ticket = begin_call("tool", "issue_refund", args, effect="irreversible")
    if ticket is None:            # no run: do the plain thing
        return fn(**args)
    if ticket.served:             # replay: the record answers, nothing runs
        return ticket.answer()    # (await ticket.answer_async() in async code)
    try:
        result = fn(**args)       # live (or dry run: ticket.dry_run)
    except BaseException as exc:
        if ends_call(exc):        # an Exception, or asyncio's CancelledError
            ticket.fail(exc)
        raise
    return ticket.complete(result)

:func:`begin_call` runs the recording's processors on the request first, derives the
idempotency key and prompt hash from the processed data, then either has the record serve the
answer (replay, and the recorded part of a fork or resume) or writes the intent, durably
before a ``write`` or ``irreversible`` tool runs, and hands back a live ticket.
:func:`wrap_call` makes the sync and async wrappers of a function from one description.
"""

from __future__ import annotations

import contextlib
import contextvars
import enum
import functools
import inspect
import logging
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, NoReturn, Protocol, TypeVar

from ..errors import ProfileError, RecordingError, Unreplayable
from ..record.compiled import NATIVE
from ..record.event import Effect, Event, EventType

_log = logging.getLogger("tachograph")

# Plain-str event types: ``EventType.X.value`` is a Python-level property on 3.11, and
# these are read several times per recorded or served call.
_MODEL_FAILED: Final = EventType.MODEL_FAILED.value
_MODEL_REQUEST: Final = EventType.MODEL_REQUEST.value
_MODEL_RESPONSE: Final = EventType.MODEL_RESPONSE.value
_TOOL_COMPLETED: Final = EventType.TOOL_COMPLETED.value
_TOOL_FAILED: Final = EventType.TOOL_FAILED.value
_TOOL_REQUESTED: Final = EventType.TOOL_REQUESTED.value
VOUCHED_SLACK: float = 0.5
"""Seconds a replayed call recorded as cancelled (or in flight at the run's end) may stay
unanswered beyond the time its recording shows it unanswered, and still be vouched for: a
cancellation later than both twice that time and that time plus this slack is one the record
cannot vouch for (the call might have answered meanwhile), an ``unreplayable`` divergence."""

_REQUESTS: Final = frozenset({_TOOL_REQUESTED, _MODEL_REQUEST})

UNTRACK: Final[Callable[[dict[str, Any]], None] | None] = (
    NATIVE.untrack if NATIVE is not None else None
)
"""``native.untrack``, or ``None`` without the compiled helpers: takes a payload dict that
the recording path built itself (around a call's arguments or answer, held by no one else)
out of the cycle collector's sight. The events that wait for the writer thread hold these
dicts; tracked, they survived the young collections into the oldest generation, and a long
recording paid for full collections that walk the whole heap (with the events, 1.1-1.6 us a
call in the collector at 50,000 calls). A dict a caller handed in is never untracked; one
that later gets a container inserted is tracked again by CPython's dict itself."""


if TYPE_CHECKING:
    from .session import Session

__all__ = [
    "CANCELLED_TYPES",
    "CANCELLED_WAIT",
    "CURRENT_SESSION",
    "MODEL_CALL",
    "TOOL_CALL",
    "CallKind",
    "CallTicket",
    "Engine",
    "ReplayStopped",
    "begin_call",
    "cancelled",
    "ends_call",
    "error_info",
    "recorded_as_cancelled",
    "wrap_call",
]

F = TypeVar("F", bound=Callable[..., Any])

CURRENT_SESSION: contextvars.ContextVar[Session | None] = contextvars.ContextVar(
    "tachograph_session", default=None
)
"""The session of the current context (see :mod:`tachograph.capture.session`)."""


class ReplayStopped(BaseException):
    """Unwinds the agent when a replay cannot go on. A ``BaseException``, so that an agent's
    ``except Exception`` cannot swallow it; replay turns it into a report."""


class CallKind(str, enum.Enum):
    """What crosses the boundary: a tool call or a model call."""

    TOOL = "tool"
    MODEL = "model"

    def __str__(self) -> str:
        return self.value

    @classmethod
    def parse(cls, value: str | CallKind) -> CallKind:
        """The kind named by ``value``, or an error listing the valid names."""
        try:
            return cls(value)
        except ValueError:
            valid = ", ".join(repr(k.value) for k in cls)
            raise RecordingError(f"unknown call kind {value!r}; expected one of {valid}") from None


# The two kinds as plain names, for every per-call test of a call's kind (here, in the
# session, the decorators and the replay engine): an enum member read through its class
# costs about 0.14 us on 3.11, a module global a fraction of that.
TOOL_CALL: Final = CallKind.TOOL
MODEL_CALL: Final = CallKind.MODEL


def error_info(exc: BaseException) -> dict[str, str]:
    """``{type, message}`` for an exception; ``type`` is ``module.Class`` outside builtins.

    A cancellation's message is not kept: anyio writes its cancel scope's memory address and
    the cancelling task (with local paths) into it, which is neither the record's business
    nor the same in two runs, so that a replay would diverge on it."""
    recorded = getattr(exc, "recorded_info", None)
    if isinstance(recorded, dict) and isinstance(recorded.get("type"), str):
        return {"type": recorded["type"], "message": str(recorded.get("message", ""))}
    cls = type(exc)
    name = (
        cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    )
    return {"type": name, "message": "" if cancelled(exc) else str(exc)}


CANCELLED_WAIT: float = 10.0
"""Seconds of grace a replayed call that was recorded as cancelled waits for the agent to
cancel it, beyond twice the time the recorded call ran before it was cancelled.

The recording says that the agent cancelled the call before it answered (an
``asyncio.wait_for`` timeout, say) and when; the replay then serves neither an answer nor
an error, and waits, as the live call did, until the agent's own code cancels it (at its
own deadline, however long). If nothing does within twice the recorded wait and this
grace, the agent no longer cancels the call, and the replay reports it (an
``unreplayable`` divergence) instead of hanging. A call cancelled by the run's own end (a
run cancelled from outside, which ended ``aborted``) is reported at once: the record ends
inside it."""


CANCELLED_TYPES: Final = frozenset({"asyncio.exceptions.CancelledError", "asyncio.CancelledError"})
"""How a recorded error names a cancellation (``error.type``)."""


def cancelled(exc: BaseException) -> bool:
    """Whether ``exc`` is asyncio's ``CancelledError`` (asyncio is not imported for it)."""
    asyncio = sys.modules.get("asyncio")
    return asyncio is not None and isinstance(exc, asyncio.CancelledError)


def ends_call(exc: BaseException) -> bool:
    """Whether a call that raised ``exc`` is recorded as failed: any ``Exception``, and a
    cancellation (``asyncio.CancelledError``: an ``asyncio.wait_for`` that timed out, a
    cancelled task), which is how the agent's own code ended the call. Anything else
    (``KeyboardInterrupt``, ``SystemExit``, ``GeneratorExit``) leaves the call without a
    completion, as the process dying would."""
    return isinstance(exc, Exception) or cancelled(exc)


def recorded_as_cancelled(error: BaseException | None) -> bool:
    """Whether a served failure is a cancellation (rebuilt, or named when asyncio is not
    imported in the replay)."""
    return error is not None and error_info(error)["type"] in CANCELLED_TYPES


class Engine(Protocol):
    """What serves recorded answers to a session (implemented by :mod:`tachograph.replay`).

    Capture knows only this protocol, so that recording never depends on replay.
    """

    key_run_id: str
    """The run whose keys the record holds (the source run, while serving)."""
    key_secret: bytes | None
    live_after_source: bool

    def serving(self) -> bool:
        """Whether recorded steps may still be served."""

    @property
    def stopped(self) -> bool:
        """Whether the replay was stopped (a divergence): the calls still in flight are
        ended by the stop, not by the agent's code."""

    def serve_call(self, ticket: CallTicket, stored: bytes | None = None) -> None:
        """Serve ``ticket`` from the record (``ticket.served``), or leave it live; may raise
        :class:`ReplayStopped`. ``stored``, when known, is the request payload's bytes as
        the recorder stores them (``seal.stored_untouched``)."""

    def serve_same_call(
        self,
        session: Session,
        name: str,
        args_jcs: bytes,
        payload: dict[str, Any],
        stored: bytes,
        effect: Effect,
    ) -> CallTicket | None:
        """Serve a tool call whose request ``payload`` (stored as ``stored``, untouched by
        the processors; its arguments' JCS ``args_jcs``) is the next recorded step, in one
        step, its key derived; or ``None``, with nothing consumed or derived, for
        :meth:`serve_call` to decide."""

    def serve_step(self, type_: str, payload: dict[str, Any]) -> bool:
        """Match a decision or custom event; True when it must not be recorded."""

    def serve_value(self, type_: str, payload: dict[str, Any]) -> tuple[bool, Any]:
        """``(True, value)`` when the record serves a clock, random or external value."""

    def compare_rerun(self, ticket: CallTicket, result: Any, error: BaseException | None) -> None:
        """A pure tool re-run in replay: compare its fresh answer with the recorded one."""

    def recorded_completion(self, key: str | None) -> Event | None:
        """The recorded completion of the call with idempotency key ``key``."""

    def unservable(self, completion: Event, explanation: str) -> None:
        """Report that a served call is asked for more than its recorded ``completion``
        holds; may raise :class:`ReplayStopped`."""

    def cancelled_in_record(self, completion: Event) -> tuple[float | None, bool]:
        """For a call recorded as cancelled (its ``completion``): the seconds from its
        request to the cancellation, and whether the cancellation was the run's own end
        (the run ended ``aborted`` with no call after it), not the agent's code."""


class CallTicket:
    """One call across the boundary: served from the record, or live and to be completed.

    ``served`` says the record answered (:meth:`answer` returns it or raises the recorded
    error). Otherwise the call runs (``dry_run`` says to simulate it instead of touching the
    world) and :meth:`complete` or :meth:`fail` records how it ended.
    """

    __slots__ = (
        "_done",
        "compare_with",
        "completion",
        "dry_run",
        "effect",
        "error",
        "intent_recorded",
        "key",
        "kind",
        "model",
        "name",
        "payload",
        "record_completion",
        "request_type",
        "seed",
        "served",
        "session",
        "value",
    )

    def __init__(
        self,
        session: Session,
        kind: CallKind,
        name: str,
        payload: dict[str, Any],
        key: str,
        effect: Effect | None,
        model: str | None,
        seed: int | None,
        /,
    ) -> None:
        # positional only: a class called with keywords gets them as a new dict, which cost
        # about 0.4 us of a ticket's 0.75 (one per call, recorded or served)
        self.session = session
        self.kind = kind
        self.name = name
        self.request_type = _TOOL_REQUESTED if kind is TOOL_CALL else _MODEL_REQUEST
        self.payload = payload
        """The request payload as recorded (after processors)."""
        self.key: str | None = key
        self.effect = effect
        self.model = model
        self.seed = seed
        self.served = False
        self.value: Any = None
        self.error: BaseException | None = None
        self.completion: Event | None = None
        """The recorded completion that served this call, when served."""
        self.dry_run = False
        self.compare_with: Event | None = None
        self.record_completion = True
        self.intent_recorded = False
        """True when the intent is already in the run (a resumed call whose process died)."""
        self._done = False

    @property
    def live(self) -> bool:
        """True when the call must run (or be simulated) now."""
        return not self.served

    def answer(self) -> Any:
        """The served answer: the recorded value, or the recorded error raised."""
        if self.error is not None:
            raise self.error
        return self.value

    def unservable(self, explanation: str) -> NoReturn:
        """Report that the agent asks of this served call what its record does not hold (an
        ``unreplayable`` divergence at its completion, which may stop the replay) and raise
        :class:`~tachograph.errors.Unreplayable` into the agent."""
        engine = self.session.engine
        if engine is not None and self.completion is not None:
            engine.unservable(self.completion, explanation)
        raise Unreplayable(explanation, key=self.key)

    def not_cancelled(self, why: str, *, name: str | None = None) -> NoReturn:
        """A call recorded as cancelled that the agent does not cancel in the replay."""
        seq = self.completion.seq if self.completion is not None else "?"
        if self.completion is not None and self.completion.type in _REQUESTS:
            self.unservable(
                f"The call of {name or self.name!r} was still in flight when the recorded run "
                f"finished (seq {seq} has no outcome: the agent ended without waiting for it, "
                f"as asyncio.gather does once a call fails); in this replay the agent waits "
                f"for it ({why}). The record holds no answer to serve."
            )
        self.unservable(
            f"The call of {name or self.name!r} was cancelled by the agent when it was "
            f"recorded (seq {seq}: asyncio.CancelledError) before it answered; in this "
            f"replay the agent did not cancel it ({why}). The record holds no answer to serve."
        )

    async def until_cancelled(self, what: str, *, name: str | None = None) -> NoReturn:
        """For a served call recorded as cancelled: wait, as the recorded call did, until the
        agent cancels it (the ``CancelledError`` goes up from the wait), and report it if
        nothing does within twice the recorded wait and :data:`CANCELLED_WAIT`. A call the
        run's own end cancelled (the run ended ``aborted``) is reported at once."""
        import asyncio  # an async call: asyncio is imported already

        engine = self.session.engine
        elapsed, ended = (
            engine.cancelled_in_record(self.completion)
            if engine is not None and self.completion is not None
            else (None, False)
        )
        if ended:
            self.unservable(
                f"The call of {name or self.name!r} was under way when the recorded run was "
                "cancelled from outside (it ended aborted): the record ends inside this "
                "call, and holds no answer to serve."
            )
        wait = CANCELLED_WAIT + 2 * (elapsed or 0.0)
        completion = self.completion
        in_flight = completion is not None and completion.type in _REQUESTS
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            await asyncio.sleep(wait)
        except asyncio.CancelledError:
            if engine is None or completion is None:
                raise
            waited = loop.time() - started
            who = name or self.name
            problem = None
            if in_flight and not self.session.agent_returned:
                # recorded in flight when the run finished: only the run's end cancelled it;
                # the agent's own code cancelling it now (a deadline) is not what happened
                problem = (
                    f"The recorded run finished with the call of {who!r} still in flight "
                    f"(seq {completion.seq} has no outcome); in this replay the agent "
                    "cancelled it while it still ran. The record holds no answer, nor a "
                    "cancellation by the agent, to serve."
                )
            elif elapsed is not None and waited > max(2 * elapsed, elapsed + VOUCHED_SLACK):
                # The record says the call had not answered after `elapsed` seconds, no more:
                # a call left waiting far longer in this replay might have answered meanwhile.
                problem = (
                    f"The call of {who!r} went unanswered for {elapsed:.3g} s when it was "
                    f"recorded (seq {completion.seq}), then was cancelled; in this replay it "
                    f"was cancelled only after {waited:.3g} s. The record cannot say whether "
                    "it would have answered in between."
                )
            if problem is not None:
                if not self.session.agent_returned:
                    self.unservable(problem)  # raised into the agent, which still runs
                # the loop's end cancelled it: reported, and the cancellation goes on
                with contextlib.suppress(ReplayStopped):
                    engine.unservable(completion, problem)
            raise
        self.not_cancelled(f"{what}; nothing cancelled it within {wait:.3g} s", name=name)

    async def cancelled_again(self, *, name: str | None = None) -> None:
        """For a served async call: when it was recorded as cancelled, wait until the agent
        cancels it again (:meth:`until_cancelled`), as it did live; else return at once."""
        if recorded_as_cancelled(self.error):
            await self.until_cancelled("it was cancelled before it answered", name=name)

    def not_cancellable(self, *, name: str | None = None, what: str = "call") -> None:
        """For a served synchronous call: one recorded as cancelled (by an async run) cannot
        be cancelled here, which is reported (:meth:`not_cancelled`) rather than served."""
        if recorded_as_cancelled(self.error):
            self.not_cancelled(f"a synchronous {what} cannot be cancelled", name=name)

    async def answer_async(self) -> Any:
        """:meth:`answer` for an async call: one recorded as cancelled waits until the agent
        cancels it again (:meth:`until_cancelled`), as it did live."""
        await self.cancelled_again()
        return self.answer()

    def complete(
        self,
        result: Any,
        *,
        model: str | None = None,
        usage: Any = None,
    ) -> Any:
        """Record the live result (``tool.completed`` / ``model.response``); returns it.

        For a model call the envelope's ``model`` is ``model``, else the id the response
        names, else the one requested; ``usage`` defaults to the response's own ``usage``.
        """
        if self.compare_with is not None:
            engine = self.session.engine
            if engine is not None:
                engine.compare_rerun(self, result, None)
            return result
        if not self._may_record():
            return result
        if self.kind is TOOL_CALL:
            payload: dict[str, Any] = {"tool": self.name, "result": result}
            if self.dry_run:
                payload["dry_run"] = True
                self.session.used_dry_run = True
            self._append(_TOOL_COMPLETED, payload, None, "result", "returned")
            return result
        answered = model or self.model
        if model is None and isinstance(result, dict) and isinstance(result.get("model"), str):
            answered = result["model"]
        body: dict[str, Any] = {"response": result}
        if usage is None and isinstance(result, dict) and isinstance(result.get("usage"), dict):
            usage = result["usage"]
        if usage is not None:
            body["usage"] = usage
        self._append(_MODEL_RESPONSE, body, answered, "response", "answered")
        return result

    def fail(
        self,
        exc: BaseException | None = None,
        *,
        info: dict[str, Any] | None = None,
        response: Any = None,
        model: str | None = None,
    ) -> None:
        """Record that the call failed (``tool.failed`` / ``model.failed``).

        ``info`` replaces the ``{type, message}`` drawn from ``exc``; ``response`` keeps what
        came back with the failure (an HTTP error response).
        """
        if self.compare_with is not None:
            engine = self.session.engine
            if engine is not None and exc is not None:
                engine.compare_rerun(self, None, exc)
            return
        is_cancellation = (exc is not None and cancelled(exc)) or (
            info is not None and info.get("type") in CANCELLED_TYPES
        )
        if is_cancellation and self.session.abandoned():
            # the resume stopped (a divergence) and its shutdown cancels the calls still in
            # flight: the agent did not end them. Left open, as a crash leaves them; recorded
            # as cancelled, the next resume would serve a cancellation no agent makes again.
            self._done = True
            return
        if not self._may_record():
            return
        error = dict(info) if info is not None else error_info(exc or RuntimeError("failed"))
        if self.kind is TOOL_CALL:
            self._append(_TOOL_FAILED, {"tool": self.name, "error": error}, None, None, None)
            return
        body: dict[str, Any] = {"error": error}
        if response is not None:
            body["response"] = response
        self._append(_MODEL_FAILED, body, model or self.model, None, None)

    def _may_record(self) -> bool:
        if self._done:
            raise RecordingError(
                f"the call of {self.name!r} (key {self.key}) was already completed",
                key=self.key,
            )
        self._done = True
        return self.session.recorder is not None and self.record_completion

    def _append(
        self,
        type_: str,
        payload: dict[str, Any],
        model: str | None,
        field: str | None,
        verb: str | None,
    ) -> None:
        recorder = self.session.recorder
        assert recorder is not None
        if UNTRACK is not None:
            UNTRACK(payload)  # built in this module, held by no one else
        is_model = self.kind is MODEL_CALL
        try:
            recorder.append(
                type_,
                payload,
                idempotency_key=self.key,
                model=model if is_model else None,
                seed=self.seed if is_model else None,
            )
        except ProfileError as exc:
            if field is None or verb is None:
                raise
            self._unrecordable(exc, field, verb)
        except RecordingError:
            if not recorder.finished:
                raise
            self._after_the_end(type_, payload)

    def _after_the_end(self, type_: str, payload: dict[str, Any]) -> None:
        """The call ended after its run finished: the agent finished (``asyncio.gather``
        hands it the first failure and leaves the other calls running) with the call still
        in flight, which the record keeps as its intent with no outcome. A cancellation
        (``asyncio.run`` cancels what is left at its end) is the run's end, not news; any
        other outcome is logged, not raised into the task (it was a traceback per call at
        the shutdown of ``asyncio.run``)."""
        error = payload.get("error")
        if isinstance(error, dict) and error.get("type") in CANCELLED_TYPES:
            return
        _log.warning(
            "tachograph: %s %r (key %s) ended after run %r finished; its outcome (%s) is not "
            "recorded: the run's record ends with the call in flight",
            "tool" if self.kind is TOOL_CALL else "model",
            self.name,
            self.key,
            self.session.run_id,
            type_,
        )

    def _unrecordable(self, exc: ProfileError, field: str, verb: str) -> None:
        """The call ran but its answer cannot be recorded: close the intent with a failure
        (so the record does not show a crash) and raise an error naming the call and path."""
        path = str(exc.fields.get("path") or "")
        path = path.replace(f"payload.{field}", f"{self.name}.{field}", 1)
        message = str(exc).replace(f"payload.{field}", f"{self.name}.{field}")
        is_tool = self.kind is TOOL_CALL
        error = ProfileError(
            f"{'tool' if is_tool else 'model'} {self.name!r} {verb} a value outside the JSON "
            f"profile: {message}",
            path=path,
            tool=self.name if is_tool else None,
            model=self.model,
        )
        recorder = self.session.recorder
        assert recorder is not None
        body: dict[str, Any] = {"error": error_info(error)}
        if is_tool:
            body = {"tool": self.name, **body}
        recorder.append(
            _TOOL_FAILED if is_tool else _MODEL_FAILED,
            body,
            idempotency_key=self.key,
            model=None if is_tool else self.model,
        )
        raise error


def begin_call(
    kind: CallKind | str,
    name: str,
    request: Any,
    *,
    effect: Effect | str | None = None,
    key: str | Callable[[Any], Any] | None = None,
    model: str | None = None,
    seed: int | None = None,
    schema_version: str | None = None,
    extra: dict[str, Any] | None = None,
) -> CallTicket | None:
    """Start a call in the current run; ``None`` outside any run.

    ``request`` is the tool's arguments (an object) or the model request. ``key`` is the
    call's own idempotency key, or a function deriving the key part from the (processed)
    arguments; by default SPEC section 5's keyed hash. ``extra`` adds fields to the request's
    payload (an HTTP transport adds ``http``; an MCP session adds ``meta``, which replay
    records but never compares); keys are derived from the arguments alone. ``effect`` defaults to
    ``irreversible`` for tools: a tool nobody classified must be assumed to be dangerous.
    """
    session = CURRENT_SESSION.get()
    if session is None:
        return None
    # the decorators and adapters pass the enums themselves: skip the parsing then
    call_kind = kind if kind.__class__ is CallKind else CallKind.parse(kind)
    if effect is not None and effect.__class__ is not Effect:
        effect = Effect.parse(effect)
    return session.begin_call(
        call_kind,
        name,
        request,
        effect=effect,
        key=key,
        model=model,
        seed=seed,
        schema_version=schema_version,
        extra=extra,
    )


Begin = Callable[
    [tuple[Any, ...], dict[str, Any]], "tuple[CallTicket | None, Callable[..., Any] | None]"
]
"""``begin(args, kwargs) -> (ticket or None, how to run the call live)``; ``None`` for how:
``fn`` called as the caller called it (no partial to build, the common live call)."""


def wrap_call(
    fn: F,
    begin: Begin,
    *,
    served: Callable[[CallTicket], Any] | None = None,
    finish: Callable[[CallTicket, Any], Any] | None = None,
) -> F:
    """The wrapper of ``fn`` (sync or async, as ``fn`` is) that crosses the boundary.

    ``begin(args, kwargs)`` returns the ticket (``None`` outside a run) and the callable that
    runs the call live (a dry-run stand-in, or ``fn`` with the key injected), or ``None``
    for ``fn`` called with the caller's arguments.
    ``served(ticket)`` turns a served answer into the caller's value (default
    :meth:`CallTicket.answer`); ``finish(ticket, result)`` records a live result (default
    :meth:`CallTicket.complete`) and returns what the caller gets.
    """
    serve = served or CallTicket.answer

    def done(ticket: CallTicket, result: Any) -> Any:
        if finish is not None:
            return finish(ticket, result)
        return ticket.complete(result)

    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            if CURRENT_SESSION.get() is None:  # no run: the plain call, at the least cost
                return await fn(*args, **kwargs)
            ticket, run = begin(args, kwargs)
            if ticket is None:
                return await fn(*args, **kwargs)
            if ticket.served:
                await ticket.cancelled_again()
                return serve(ticket)
            try:
                result = fn(*args, **kwargs) if run is None else run()
                if inspect.isawaitable(result):
                    result = await result
            except BaseException as exc:
                if ends_call(exc):  # a cancellation too: the agent's code ended the call
                    ticket.fail(exc)
                raise
            return done(ticket, result)

        return async_wrapper  # type: ignore[return-value]

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if CURRENT_SESSION.get() is None:  # no run: the plain call, at the least cost
            return fn(*args, **kwargs)
        ticket, run = begin(args, kwargs)
        if ticket is None:
            return fn(*args, **kwargs)
        if ticket.served:
            return serve(ticket)
        try:
            result = fn(*args, **kwargs) if run is None else run()
        except BaseException as exc:
            if ends_call(exc):
                ticket.fail(exc)
            raise
        return ticket.complete(result) if finish is None else finish(ticket, result)  # done()

    return wrapper  # type: ignore[return-value]
