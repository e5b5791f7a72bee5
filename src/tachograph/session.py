"""The engine behind every recording call: record live, serve from a record, or both.

One :class:`Session` is current per context (a :class:`contextvars.ContextVar`). It has an
optional *source* (recorded events to serve and compare against) and an optional *recorder*
(where new events go):

=========  ========================  =====================================================
mode       source                    recorder
=========  ========================  =====================================================
record     none                      a new run
replay     the recorded run          none: nothing is written, nothing runs
fork       the parent up to step N   a new run naming its parent; live after step N
resume     the crashed run           the same run, appended after its head; live after it
=========  ========================  =====================================================

Calls are handled in two phases (``begin_*`` and ``end_*``) so that sync and async wrappers
share one engine: ``begin`` either serves the recorded answer or says "go live". How the
agent's steps are matched against the record, and how a mismatch is diagnosed, lives in
:mod:`tachograph.matching`.

The session is found through a context variable: asyncio tasks created inside a run inherit
it, threads do not (``threading.Thread`` starts with an empty context; hand work over with
``asyncio.to_thread`` or ``contextvars.copy_context().run``).
"""

from __future__ import annotations

import contextvars
import hashlib
import importlib
import random
import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .canonical import canonical
from .diff import Change, diff_values
from .errors import ConfirmationRequired, ProfileError, RecordingError
from .events import Effect, Event
from .matching import Matcher, _key_suffix, _normalize, _Stop
from .recorder import Processor, Recorder
from .report import DivergenceKind

__all__ = ["RecordedError", "Served", "Session", "current_session", "error_info", "rebuild_error"]

_current: contextvars.ContextVar[Session | None] = contextvars.ContextVar(
    "tachograph_session", default=None
)


_EFFECTS = frozenset({Effect.WRITE, Effect.IRREVERSIBLE})
"""Tools that change the world: their intent is made durable first, and dry run replaces them."""


def current_session() -> Session | None:
    """The session of the current context, or None outside any run."""
    return _current.get()


@dataclass(slots=True)
class Served:
    """The outcome of ``begin_*``: a recorded answer, or a ticket to go live."""

    live: bool
    value: Any = None
    error: BaseException | None = None
    key: str | None = None
    name: str = ""
    kind: str = ""  # "tool" or "model"
    effect: Effect | None = None
    dry_run: bool = False
    model: str | None = None
    seed: int | None = None
    request: Any = None
    compare_with: Event | None = None  # a pure tool re-run: compare the fresh result with this
    record_completion: bool = True


class RecordedError(Exception):
    """Raised in replay for a recorded failure whose exception type cannot be rebuilt."""

    def __init__(self, type_name: str, message: str) -> None:
        super().__init__(message)
        self.type_name = type_name
        self.recorded_message = message

    def __str__(self) -> str:
        return f"{self.type_name}: {self.recorded_message}"


def error_info(exc: BaseException) -> dict[str, str]:
    """``{type, message}`` for an exception; ``type`` is importable where possible."""
    cls = type(exc)
    if isinstance(exc, RecordedError):
        return {"type": exc.type_name, "message": exc.recorded_message}
    name = (
        cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    )
    return {"type": name, "message": str(exc)}


def rebuild_error(info: dict[str, Any]) -> BaseException:
    """The exception a recorded ``{type, message}`` describes, as faithfully as possible."""
    type_name = str(info.get("type", "Exception"))
    message = str(info.get("message", ""))
    module_name, _, qualname = type_name.rpartition(".")
    try:
        obj: Any = importlib.import_module(module_name or "builtins")
        for part in qualname.split("."):
            obj = getattr(obj, part)
        if isinstance(obj, type) and issubclass(obj, BaseException):
            try:
                return obj(message)
            except Exception:
                exc = obj.__new__(obj)
                exc.args = (message,)
                return exc
    except Exception:
        pass
    return RecordedError(type_name, message)


class Session(Matcher):
    """Record, serve, or both; see the module docstring."""

    def __init__(
        self,
        *,
        mode: str,
        run_id: str,
        actor: str,
        recorder: Recorder | None = None,
        source: list[Event] | None = None,
        match: str = "strict",
        raise_on_divergence: bool = True,
        rerun_pure: bool = False,
        live_after_source: bool = False,
        copy_served: bool = False,
        confirm: bool = False,
        dry_run: bool = False,
        override: tuple[int, Any] | None = None,
        seed: int | None = None,
        processors: Sequence[Processor] = (),
    ) -> None:
        self.mode = mode
        self.run_id = run_id
        self.actor = actor
        self.recorder = recorder
        super().__init__(
            run_id=run_id,
            source=source,
            match=match,
            raise_on_divergence=raise_on_divergence,
            live_after_source=live_after_source,
            processors=recorder.processors if recorder is not None else processors,
        )
        self.rerun_pure = rerun_pure
        self.copy_served = copy_served
        self.confirm = confirm
        self.dry_run = dry_run
        self.override = override
        self.used_dry_run = False
        self.notes: list[str] = []
        self.fatal_error: BaseException | None = None
        self._key_counts: dict[str, int] = {}
        self._key_lock = threading.Lock()
        self._rng: random.Random | None = None
        self._seed = seed
        self._token: contextvars.Token[Session | None] | None = None

    # -- context ---------------------------------------------------------------------------

    def activate(self) -> None:
        """Make this the current session of the context."""
        if _current.get() is not None:
            raise RecordingError("a tachograph run is already active in this context")
        self._token = _current.set(self)

    def deactivate(self) -> None:
        """Restore the previous (empty) context."""
        if self._token is not None:
            _current.reset(self._token)
            self._token = None

    # -- keys ------------------------------------------------------------------------------

    def process(self, type_: str, payload: dict[str, Any]) -> dict[str, Any]:
        """``payload`` as the recording's processors leave it (the object itself when they
        change nothing). Keys and prompt hashes are derived from this form (SPEC section 5),
        so that neither lets anyone confirm a redacted value."""
        out = payload
        for processor in self.processors:
            out = processor(type_, out)
        return out

    def make_key(
        self,
        name: str,
        args: Any,
        custom: Callable[[dict[str, Any]], str] | None,
        *,
        args_jcs: bytes | None = None,
    ) -> str:
        """SPEC section 5: ``{run_id}:{name}:{h}`` (or the tool's own), ``#n`` on repeats.

        While serving, keys are computed against the *source* run, so that they equal the
        recorded ones; a call that goes live in another run (a fork) is re-based onto it by
        :meth:`_live_key`.
        """
        run_id = self.source_run_id if self._serving_possible() else self.run_id
        if custom is not None:
            part = str(custom(args))
        else:
            body = args_jcs if args_jcs is not None else canonical(args)
            part = hashlib.sha256(body).hexdigest()[:16]
        base = f"{run_id}:{name}:{part}"
        with self._key_lock:  # threads handed the context may call tools at the same time
            n = self._key_counts.get(base, 0)
            self._key_counts[base] = n + 1
        return base if n == 0 else f"{base}#{n}"

    def _live_key(self, key: str) -> str:
        """A key computed against the source run, re-based onto the run being recorded."""
        if self.run_id == self.source_run_id:
            return key
        suffix = _key_suffix(key, self.source_run_id)
        return f"{self.run_id}:{suffix}"

    # -- matching (see Matcher) -------------------------------------------------------------

    def _serving_possible(self) -> bool:
        return bool(self._stream) or self.mode in ("replay", "fork", "resume")

    def _on_served(self, event: Event) -> None:
        if self.copy_served and self.recorder is not None:
            self._copy(event)

    def _copy(self, event: Event) -> None:
        assert self.recorder is not None
        key = event.idempotency_key
        if key is not None:
            key = self._live_key(key)
        self.recorder.append(
            event.type,
            event.payload,
            actor=event.actor,
            idempotency_key=key,
            model=event.model,
            seed=event.seed,
        )

    # -- tools and models --------------------------------------------------------------------

    def begin_call(
        self,
        *,
        kind: str,
        name: str,
        request_type: str,
        payload: dict[str, Any],
        key: str,
        effect: Effect | None = None,
        model: str | None = None,
        seed: int | None = None,
    ) -> Served:
        """Start a tool or model call: serve it from the record, or say to run it live."""
        ticket = Served(
            live=True, key=key, name=name, kind=kind, effect=effect, model=model, seed=seed
        )
        matched = (
            self._expect(request_type, payload, key, name) if self._serving_possible() else None
        )
        if matched is None:
            return self._go_live(ticket, request_type, payload)
        completion = self._completions.get(matched.idempotency_key or "")
        if completion is None:
            return self._dangling(ticket, matched)
        if completion.erased:
            self._diverge(
                DivergenceKind.UNREPLAYABLE,
                completion.seq,
                completion,
                None,
                [],
                f"The recorded answer at seq {completion.seq} was erased; it cannot be served.",
                fatal=True,
            )
        self.served += 1
        if self.copy_served and self.recorder is not None:
            self._copy_completion(completion)
        if (completion.payload or {}).get("dry_run") is True:
            self._simulated(completion.seq, "holds a dry-run result")
        value, error = self._answer(completion)
        if kind == "tool" and effect is Effect.PURE and self.rerun_pure:
            ticket.compare_with = completion
            ticket.record_completion = False
            return ticket
        return Served(live=False, value=value, error=error, key=key, name=name, kind=kind)

    def _copy_completion(self, completion: Event) -> None:
        payload = completion.payload
        if self.override is not None and self.override[0] == completion.seq:
            payload = self._overridden(completion)
        assert self.recorder is not None
        key = completion.idempotency_key
        self.recorder.append(
            completion.type,
            payload,
            actor=completion.actor,
            idempotency_key=self._live_key(key) if key else None,
            model=completion.model,
            seed=completion.seed,
        )

    def _overridden(self, completion: Event) -> dict[str, Any]:
        assert self.override is not None
        payload = dict(completion.payload or {})
        field_name = "response" if completion.type == "model.response" else "result"
        payload[field_name] = self.override[1]
        payload["overridden"] = True
        return payload

    def _answer(self, completion: Event) -> tuple[Any, BaseException | None]:
        payload = completion.payload or {}
        if self.override is not None and self.override[0] == completion.seq:
            payload = self._overridden(completion)
        if completion.type == "tool.completed":
            return payload.get("result"), None
        if completion.type == "model.response":
            return payload.get("response"), None
        return None, rebuild_error(payload.get("error") or {})

    def _simulated(self, seq: int, why: str) -> None:
        """The agent now acts on a simulated result. A dry-run result is never taken for a
        real one: whatever this session does live from here on runs in dry run too."""
        if self.recorder is None or self.dry_run:
            return
        self.dry_run = True
        self.notes.append(
            f"seq {seq} {why}: the agent acts on a simulated result, so every write and "
            "irreversible tool after it ran in dry run"
        )

    def _dangling(self, ticket: Served, request: Event) -> Served:
        """The recorded call never completed: the process died while it ran."""
        if self.mode != "resume":
            if self.live_after_source:  # a fork whose step N is an open intent: go live
                # The intent was copied into the fork under the fork's own key; the parent may
                # have done the effect already, so effects run in dry run here.
                ticket.key = self._live_key(request.idempotency_key or ticket.key or "")
                ticket.dry_run = self.dry_run or ticket.effect in _EFFECTS
                return ticket
            self._diverge(
                DivergenceKind.UNREPLAYABLE,
                request.seq,
                request,
                None,
                [],
                f"The recorded run ends inside this call (seq {request.seq} has no completion: "
                "the process died while it ran). Nothing can be served from here; use "
                "resume to continue the run.",
                fatal=True,
            )
        effect = ticket.effect
        ticket.key = request.idempotency_key
        if effect is Effect.IRREVERSIBLE and not self.confirm:
            self.fatal_error = ConfirmationRequired(
                f"run {self.run_id!r} stopped while irreversible tool {ticket.name!r} was running "
                f"(seq {request.seq}, key {request.idempotency_key}). Whether it took effect is "
                "unknown: check the outside world, then resume with confirm=True (tacho resume "
                "--confirm) to run it again, or fork before it.",
                run_id=self.run_id,
                seq=request.seq,
                key=request.idempotency_key,
            )
            raise _Stop
        if effect in _EFFECTS and (self.dry_run or not self.confirm):
            ticket.dry_run = True
            self._simulated(request.seq, f"(an unconfirmed {effect.value} intent) was dry-run")
        return ticket

    def _go_live(self, ticket: Served, request_type: str, payload: dict[str, Any]) -> Served:
        if self.recorder is None:  # pragma: no cover - replay always has a source or stops
            raise RecordingError("no recorder: cannot run live")
        key = self._live_key(ticket.key) if ticket.key else None
        ticket.key = key
        if ticket.kind == "tool" and self.dry_run and ticket.effect in _EFFECTS:
            ticket.dry_run = True
        # intent before effect (SPEC section 6): on disk before the tool may touch the world
        durable = ticket.effect in _EFFECTS and not ticket.dry_run
        self.recorder.append(
            request_type,
            payload,
            idempotency_key=key,
            model=ticket.model,
            seed=ticket.seed,
            durable=durable,
        )
        return ticket

    def end_call(
        self, ticket: Served, result: Any = None, error: BaseException | None = None
    ) -> Any:
        """Finish a live call: record the completion or failure; returns the result to use."""
        if ticket.compare_with is not None:
            return self._compare_rerun(ticket, result, error)
        if self.recorder is None or not ticket.record_completion:
            return result
        if ticket.kind == "tool":
            if error is not None:
                self.recorder.append(
                    "tool.failed",
                    {"tool": ticket.name, "error": error_info(error)},
                    idempotency_key=ticket.key,
                )
                return None
            payload: dict[str, Any] = {"tool": ticket.name, "result": result}
            if ticket.dry_run:
                payload["dry_run"] = True
                self.used_dry_run = True
            try:
                self.recorder.append("tool.completed", payload, idempotency_key=ticket.key)
            except ProfileError as exc:
                self._unrecordable(ticket, exc, "result", "returned")
            return result
        if error is not None:
            self.recorder.append(
                "model.failed",
                {"error": error_info(error)},
                idempotency_key=ticket.key,
                model=ticket.model,
                seed=ticket.seed,
            )
            return None
        answered = ticket.model
        if isinstance(result, dict) and isinstance(result.get("model"), str):
            answered = result["model"]
        body: dict[str, Any] = {"response": result}
        if isinstance(result, dict) and isinstance(result.get("usage"), dict):
            body["usage"] = result["usage"]
        try:
            self.recorder.append(
                "model.response", body, idempotency_key=ticket.key, model=answered, seed=ticket.seed
            )
        except ProfileError as exc:
            self._unrecordable(ticket, exc, "response", "answered")
        return result

    def _unrecordable(self, ticket: Served, exc: ProfileError, field: str, verb: str) -> None:
        """The call ran but its answer cannot be recorded: close the intent with a failure
        (so the record does not show a crash) and raise an error naming the call and path."""
        path = str(exc.fields.get("path") or "")
        path = path.replace(f"payload.{field}", f"{ticket.name}.{field}", 1)
        message = str(exc).replace(f"payload.{field}", f"{ticket.name}.{field}")
        what = "tool" if ticket.kind == "tool" else "model"
        error = ProfileError(
            f"{what} {ticket.name!r} {verb} a value outside the JSON profile: {message}",
            path=path,
            tool=ticket.name if ticket.kind == "tool" else None,
            model=ticket.model,
        )
        assert self.recorder is not None
        failed = "tool.failed" if ticket.kind == "tool" else "model.failed"
        body: dict[str, Any] = {"error": error_info(error)}
        if ticket.kind == "tool":
            body = {"tool": ticket.name, **body}
        self.recorder.append(
            failed,
            body,
            idempotency_key=ticket.key,
            model=ticket.model if ticket.kind == "model" else None,
        )
        raise error

    def _compare_rerun(self, ticket: Served, result: Any, error: BaseException | None) -> Any:
        recorded = ticket.compare_with
        assert recorded is not None
        if error is not None:
            fresh: dict[str, Any] = {"tool": ticket.name, "error": error_info(error)}
            fresh_type = "tool.failed"
        else:
            fresh = {"tool": ticket.name, "result": _normalize(result)}
            fresh_type = "tool.completed"
        fresh = self._processed(fresh_type, fresh)
        changes = diff_values(recorded.payload, fresh, "$.payload")
        if recorded.type != fresh_type:
            changes.insert(0, Change("$.type", recorded.type, fresh_type))
        if changes:
            self._diverge(
                DivergenceKind.TOOL_IMPLEMENTATION_CHANGED,
                recorded.seq,
                recorded,
                {"type": fresh_type, "payload": fresh},
                changes,
                f"Pure tool {ticket.name!r}, re-run on the recorded arguments, no longer returns "
                "what it returned when recorded: its implementation (or a dependency) changed.",
            )
        if error is not None:
            raise error
        return result

    # -- decisions and values ----------------------------------------------------------------

    def emit(
        self,
        type_: str,
        payload: dict[str, Any],
        *,
        actor: str | None = None,
        durable: bool = False,
    ) -> None:
        """A decision or custom event: compared in replay, recorded when live."""
        canonical(payload, "payload")  # fail on bad input in every mode
        if self._serving_possible():
            matched = self._expect(type_, payload, None, None)
            if matched is not None:
                return
            if not self.live_after_source:
                return
        if self.recorder is not None:
            self.recorder.append(type_, payload, actor=actor, durable=durable)

    def value(
        self,
        type_: str,
        payload: dict[str, Any],
        compute: Callable[[], Any],
        *,
        seed: int | None = None,
    ) -> Any:
        """A value the world supplies (clock, randomness, external read): served when
        recorded, else computed, recorded and returned."""
        served, value = self.serve_value(type_, payload)
        if served:
            return value
        value = compute()
        self.record_value(type_, payload, value, seed=seed)
        return value

    def serve_value(self, type_: str, payload: dict[str, Any]) -> tuple[bool, Any]:
        """Phase one of :meth:`value`: ``(True, recorded value)`` when the record serves it,
        else ``(False, None)`` and the caller computes it (async callers await it)."""
        if self._serving_possible():
            matched = self._expect(type_, payload, None, None)
            if matched is not None:
                recorded = matched.payload or {}
                return True, recorded.get("seed" if type_ == "random.seed" else "value")
        return False, None

    def record_value(
        self, type_: str, payload: dict[str, Any], value: Any, *, seed: int | None = None
    ) -> None:
        """Phase two of :meth:`value`: record a value computed live."""
        if self.recorder is not None:
            body = dict(payload)
            body["seed" if type_ == "random.seed" else "value"] = value
            self.recorder.append(type_, body, seed=seed)

    def recorded_completion(self, key: str | None) -> Event | None:
        """The recorded completion (``*.completed``, ``*.response``, ``*.failed``) of the
        call with idempotency key ``key``, if the run being served has one."""
        return self._completions.get(key) if key is not None else None

    def rng(self) -> random.Random:
        """The run's seeded generator; its seed is recorded once (``random.seed``)."""
        if self._rng is None:
            seed = self.value(
                "random.seed",
                {"source": "tachograph.rng"},
                lambda: (
                    self._seed if self._seed is not None else random.SystemRandom().getrandbits(53)
                ),
            )
            self._rng = random.Random(seed)
        return self._rng

    def uuid4(self) -> uuid.UUID:
        """A random UUID drawn from the recorded stream of values."""
        text = self.value("random.value", {"source": "tachograph.uuid4"}, lambda: str(uuid.uuid4()))
        return uuid.UUID(str(text))

    # -- end -------------------------------------------------------------------------------
