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
share one engine: ``begin`` either serves the recorded answer or says "go live".
"""

from __future__ import annotations

import contextvars
import hashlib
import importlib
import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .canonical import canonical, loads
from .diff import Change, diff_values
from .errors import ConfirmationRequired, ProfileError, RecordingError
from .events import Effect, Event
from .recorder import Recorder
from .report import Candidate, DivergenceItem, DivergenceKind

__all__ = ["Served", "Session", "current_session"]

_current: contextvars.ContextVar[Session | None] = contextvars.ContextVar(
    "tachograph_session", default=None
)

_COMPLETIONS = frozenset({"tool.completed", "tool.failed", "model.response", "model.failed"})
_VALUE_TYPES = frozenset({"clock.read", "random.seed", "random.value", "external.read"})


def current_session() -> Session | None:
    """The session of the current context, or None outside any run."""
    return _current.get()


class _Stop(BaseException):
    """Unwinds the agent when a replay cannot go on. A BaseException, so that an agent's
    ``except Exception`` cannot swallow it."""


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


def _shape(event: Event) -> dict[str, Any]:
    return {
        "seq": event.seq,
        "type": event.type,
        "actor": event.actor,
        "idempotency_key": event.idempotency_key,
        "model": event.model,
        "payload": event.payload,
    }


def _key_suffix(key: str | None, run_id: str) -> str | None:
    if key is None:
        return None
    prefix = run_id + ":"
    return key[len(prefix) :] if key.startswith(prefix) else key


def _normalize(value: Any) -> Any:
    """The value as it would read back from the record (1.0 becomes 1, tuples lists)."""
    return loads(canonical(value))


class Session:
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
    ) -> None:
        self.mode = mode
        self.run_id = run_id
        self.actor = actor
        self.recorder = recorder
        self.match = match
        self.raise_on_divergence = raise_on_divergence
        self.rerun_pure = rerun_pure
        self.live_after_source = live_after_source
        self.copy_served = copy_served
        self.confirm = confirm
        self.dry_run = dry_run
        self.override = override
        self.divergences: list[DivergenceItem] = []
        self.served = 0
        self.aborted = False
        self.used_dry_run = False
        self.notes: list[str] = []
        self.fatal_error: BaseException | None = None
        self._key_counts: dict[str, int] = {}
        self.source_run_id = run_id
        self._stream: list[Event] = []
        self._completions: dict[str, Event] = {}
        self._consumed: set[int] = set()
        self._cursor = 0
        self.finished_event: Event | None = None
        self.started_event: Event | None = None
        if source:
            self.source_run_id = source[0].run_id
            for event in source:
                if event.type == "run.started":
                    self.started_event = event
                elif event.type == "run.finished":
                    self.finished_event = event
                elif event.type in _COMPLETIONS:
                    if event.idempotency_key is not None:
                        self._completions[event.idempotency_key] = event
                else:
                    self._stream.append(event)
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

    def make_key(self, name: str, args: Any, custom: Callable[[dict[str, Any]], str] | None) -> str:
        """SPEC section 5: ``{run_id}:{name}:{h}`` (or the tool's own), ``#n`` on repeats.

        While serving, keys are computed against the *source* run, so that they equal the
        recorded ones; a call that goes live in another run (a fork) is re-based onto it by
        :meth:`_live_key`.
        """
        run_id = self.source_run_id if self._serving_possible() else self.run_id
        if custom is not None:
            part = str(custom(args))
        else:
            part = hashlib.sha256(canonical(args)).hexdigest()[:16]
        base = f"{run_id}:{name}:{part}"
        n = self._key_counts.get(base, 0)
        self._key_counts[base] = n + 1
        return base if n == 0 else f"{base}#{n}"

    def _live_key(self, key: str) -> str:
        """A key computed against the source run, re-based onto the run being recorded."""
        if self.run_id == self.source_run_id:
            return key
        suffix = _key_suffix(key, self.source_run_id)
        return f"{self.run_id}:{suffix}"

    # -- matching --------------------------------------------------------------------------

    def _serving_possible(self) -> bool:
        return bool(self._stream) or self.mode in ("replay", "fork", "resume")

    def _remaining(self) -> bool:
        return any(e.seq not in self._consumed for e in self._stream[self._cursor :])

    def _open(self) -> list[Event]:
        return [e for e in self._stream if e.seq not in self._consumed]

    def _next_expected(
        self, type_: str, payload: dict[str, Any], key: str | None, name: str | None
    ) -> Event | None:
        """The recorded event to compare the agent's step with.

        ``strict``: the next unconsumed event in recorded order. ``key``: the open event with
        the same idempotency key; else, for steps without a key (decisions, values), an open
        event of the same type that is identical, then one with the same name; else the first
        open event of the same type (a changed call). None when no event of that type is open.
        """
        if self.match != "key":
            while (
                self._cursor < len(self._stream)
                and self._stream[self._cursor].seq in self._consumed
            ):
                self._cursor += 1
            return self._stream[self._cursor] if self._cursor < len(self._stream) else None
        open_events = self._open()
        if key is not None:
            suffix = _key_suffix(key, self.source_run_id)
            for e in open_events:
                if _key_suffix(e.idempotency_key, self.source_run_id) == suffix:
                    return e
        same_type = [e for e in open_events if e.type == type_]
        if key is None:
            probe = _identity(type_, payload)
            for e in same_type:
                if e.payload is not None and _identity(type_, e.payload) == probe:
                    return e
        for e in same_type:
            if name is not None and _name_of(e) == name:
                return e
        return same_type[0] if same_type else None

    def _consume(self, event: Event) -> None:
        self._consumed.add(event.seq)
        self.served += 1
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

    def _candidates(self, type_: str, payload: dict[str, Any], name: str | None) -> list[Candidate]:
        out = []
        for e in self._stream:
            if e.seq in self._consumed:
                continue
            passed: list[str] = []
            failed: list[str] = []
            (passed if e.type == type_ else failed).append("type")
            if name is not None:
                (passed if _name_of(e) == name else failed).append("name")
            if e.payload is not None:
                same = not diff_values(e.payload, payload, limit=1)
                (passed if same else failed).append("payload")
            out.append(Candidate(e.seq, e.type, tuple(passed), tuple(failed)))
        out.sort(key=lambda c: (len(c.failed), c.seq))
        return out[:3]

    def _diverge(
        self,
        kind: DivergenceKind,
        seq: int,
        expected: Event | None,
        actual: dict[str, Any] | None,
        changes: list[Change],
        explanation: str,
        *,
        candidates: list[Candidate] | None = None,
        fatal: bool = False,
    ) -> None:
        item = DivergenceItem(
            kind,
            seq,
            _shape(expected) if expected is not None else None,
            actual,
            tuple(changes),
            tuple(candidates or ()),
            explanation,
        )
        self.divergences.append(item)
        if fatal or self.raise_on_divergence:
            self.aborted = fatal
            raise _Stop

    def _position(self) -> int:
        """The recorded seq at which the next thing would have been."""
        for e in self._stream[self._cursor :]:
            if e.seq not in self._consumed:
                return e.seq
        if self.finished_event is not None:
            return self.finished_event.seq
        return (self._stream[-1].seq + 1) if self._stream else 1

    def _expect(
        self, type_: str, payload: dict[str, Any], key: str | None, name: str | None
    ) -> Event | None:
        """Match the agent's next step against the record. Returns the matched event, or None
        when the step is to be done live (or, in collect mode, has no counterpart). Records
        divergences; raises :class:`_Stop` when the replay cannot go on."""
        if name is None:
            name = _probe_name(type_, payload)
        expected = self._next_expected(type_, payload, key, name) if self._remaining() else None
        if expected is None:
            if self.live_after_source and not self._remaining():
                return None
            self._extra(type_, payload, name)
            return None
        if expected.type != type_:
            self._type_changed(expected, type_, payload, key, name)
            resynced = self._resync(type_, name, expected)
            if resynced is None:
                return None
            expected = resynced
        if expected.erased:
            self._diverge(
                DivergenceKind.UNREPLAYABLE,
                expected.seq,
                expected,
                {"type": type_, "payload": payload},
                [],
                f"The payload of seq {expected.seq} was erased (retention or privacy), so "
                "this step cannot be compared or served.",
                fatal=True,
            )
        if type_ in _VALUE_TYPES:
            return self._check_value_event(expected, payload)
        changes = diff_values(expected.payload, payload, "$.payload")
        if changes:
            self._payload_changed(expected, type_, payload, name, changes)
        self._consume(expected)
        return expected

    def _extra(self, type_: str, payload: dict[str, Any], name: str | None) -> None:
        """A step with no recorded counterpart: fatal when it needs a recorded answer."""
        self._diverge(
            DivergenceKind.EXTRA_CALL,
            self._position(),
            None,
            {"type": type_, "payload": payload},
            [],
            f"The agent made a {type_} ({name or type_}) that the recorded run never made: "
            "the recording has nothing to serve for it. The agent's control flow changed "
            "before this point, or the run was cut short.",
            candidates=self._candidates(type_, payload, name),
            fatal=type_ in _SERVED,
        )

    def _type_changed(
        self,
        expected: Event,
        type_: str,
        payload: dict[str, Any],
        key: str | None,
        name: str | None,
    ) -> None:
        self._diverge(
            DivergenceKind.TYPE_CHANGED,
            expected.seq,
            expected,
            {"type": type_, "idempotency_key": key, "payload": payload},
            [Change("$.type", expected.type, type_)],
            f"At seq {expected.seq} the recorded agent did {expected.type}"
            f"{' ' + (_name_of(expected) or '') if _name_of(expected) else ''}; now it does "
            f"{type_}{' ' + name if name else ''}. Something before this step changed the "
            "agent's path: compare the model responses and decisions just before it.",
            candidates=self._candidates(type_, payload, name),
        )

    def _resync(self, type_: str, name: str | None, at: Event) -> Event | None:
        """Collect mode, after a type change at ``at``: find the recorded step of the same
        kind further on and continue from there. In strict mode the steps skipped over are
        settled (the type change already reports them). Stops the replay when a call has no
        counterpart left, since nothing could be served to it."""
        for e in self._stream:
            if e.seq in self._consumed or e.seq < at.seq:
                continue
            if e.type == type_ and (name is None or _name_of(e) == name):
                if self.match != "key":
                    for skipped in self._stream:
                        if at.seq <= skipped.seq < e.seq:
                            self._consumed.add(skipped.seq)
                return e
        if type_ not in _SERVED:
            return None
        self.aborted = True
        raise _Stop

    def _payload_changed(
        self,
        expected: Event,
        type_: str,
        payload: dict[str, Any],
        name: str | None,
        changes: list[Change],
    ) -> None:
        recorded_name = _name_of(expected)
        if type_ == "tool.requested" and recorded_name != name:
            kind = DivergenceKind.TOOL_CHANGED
            text = (
                f"The agent chose tool {name!r} where the recording chose {recorded_name!r}. "
                "Look at the model response or plan just before this step."
            )
        elif type_ == "tool.requested":
            kind = DivergenceKind.ARGS_CHANGED
            text = (
                f"Tool {name!r} was called with different arguments "
                f"({', '.join(c.path for c in changes[:3])}). The values come from the agent's "
                "code or from an earlier answer: check what computes them."
            )
        elif type_ == "model.request":
            kind = DivergenceKind.REQUEST_CHANGED
            text = (
                "The model request differs from the recorded one "
                f"({', '.join(c.path for c in changes[:3])}): a prompt, a setting or the "
                "conversation changed. The recorded answer no longer matches this request."
            )
        else:
            kind = DivergenceKind.DECISION_CHANGED
            text = (
                f"The agent's {type_} differs from the recording "
                f"({', '.join(c.path for c in changes[:3])}): its reasoning or rules changed."
            )
        self._diverge(
            kind,
            expected.seq,
            expected,
            {"type": type_, "payload": payload},
            changes,
            text,
            candidates=self._candidates(type_, payload, name),
            # The recorded answer belongs to another tool: serving it would be nonsense.
            fatal=kind is DivergenceKind.TOOL_CHANGED,
        )

    def _check_value_event(self, expected: Event, payload: dict[str, Any]) -> Event:
        # Values are served from the record; only what identifies them is compared.
        probe = {k: v for k, v in payload.items() if k != "value"}
        recorded = {k: v for k, v in (expected.payload or {}).items() if k in probe}
        if expected.type != "random.seed":
            changes = diff_values(recorded, probe, "$.payload")
            if changes:
                self._diverge(
                    DivergenceKind.DECISION_CHANGED,
                    expected.seq,
                    expected,
                    {"type": expected.type, "payload": payload},
                    changes,
                    f"The agent read {expected.type} from another source than recorded.",
                )
        self._consume(expected)
        return expected

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
                ticket.dry_run = self.dry_run or ticket.effect in (
                    Effect.WRITE,
                    Effect.IRREVERSIBLE,
                )
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
        if effect in (Effect.WRITE, Effect.IRREVERSIBLE) and (self.dry_run or not self.confirm):
            ticket.dry_run = True
            self._simulated(request.seq, f"(an unconfirmed {effect.value} intent) was dry-run")
        return ticket

    def _go_live(self, ticket: Served, request_type: str, payload: dict[str, Any]) -> Served:
        if self.recorder is None:  # pragma: no cover - replay always has a source or stops
            raise RecordingError("no recorder: cannot run live")
        key = self._live_key(ticket.key) if ticket.key else None
        ticket.key = key
        if (
            ticket.kind == "tool"
            and self.dry_run
            and ticket.effect
            in (
                Effect.WRITE,
                Effect.IRREVERSIBLE,
            )
        ):
            ticket.dry_run = True
        durable = ticket.effect in (Effect.WRITE, Effect.IRREVERSIBLE) and not ticket.dry_run
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
        if self._serving_possible():
            matched = self._expect(type_, payload, None, None)
            if matched is not None:
                recorded = matched.payload or {}
                return recorded.get("seed" if type_ == "random.seed" else "value")
        value = compute()
        if self.recorder is not None:
            body = dict(payload)
            body["seed" if type_ == "random.seed" else "value"] = value
            self.recorder.append(type_, body, seed=seed)
        return value

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

    def check_end(self, status: str, output: Any, error: dict[str, Any] | None) -> None:
        """Compare the end of the agent with the recorded end (replay modes)."""
        if self._remaining():
            first = next(e for e in self._stream[self._cursor :] if e.seq not in self._consumed)
            left = sum(1 for e in self._stream if e.seq not in self._consumed)
            self._diverge(
                DivergenceKind.MISSING_CALLS,
                first.seq,
                first,
                {"type": "run.finished", "payload": {"status": status}},
                [],
                f"The agent finished while {left} recorded step(s) remained, starting with "
                f"{first.type} at seq {first.seq}: it now stops earlier than it did.",
                candidates=[],
            )
        recorded = self.finished_event
        if recorded is None or self.live_after_source:
            return
        if recorded.erased:
            self._diverge(
                DivergenceKind.UNREPLAYABLE,
                recorded.seq,
                recorded,
                None,
                [],
                f"The payload of run.finished (seq {recorded.seq}) was erased: the final "
                "output cannot be compared.",
            )
            return
        now: dict[str, Any] = {"status": status}
        if error is not None:
            now["error"] = error
        else:
            now["output"] = _normalize(output)
        before = {
            k: v for k, v in (recorded.payload or {}).items() if k in ("status", "output", "error")
        }
        if "output" not in before and "output" in now and now["output"] is None:
            now.pop("output")
        changes = diff_values(before, now, "$.payload")
        if changes:
            self._diverge(
                DivergenceKind.OUTPUT_CHANGED,
                recorded.seq,
                recorded,
                {"type": "run.finished", "payload": now},
                changes,
                "The agent reached the end with a different result than recorded "
                f"({', '.join(c.path for c in changes[:3])}).",
            )
        else:
            self.served += 1


_SERVED = frozenset({"tool.requested", "model.request"}) | _VALUE_TYPES

_DECISIONS = frozenset(
    {
        "plan.selected",
        "guardrail.tripwire",
        "output.accepted",
        "output.rejected",
        "handoff",
        "decision",
    }
)


def _name_of(event: Event) -> str | None:
    payload = event.payload or {}
    if event.type.startswith("tool."):
        return payload.get("tool")
    if event.type.startswith("model."):
        return event.model
    if event.type == "decision":
        return payload.get("name")
    if event.type == "guardrail.tripwire":
        return payload.get("guardrail")
    return None


def _probe_name(type_: str, payload: dict[str, Any]) -> str | None:
    """The name of a step the agent takes now, as :func:`_name_of` reads a recorded one."""
    if type_ == "decision":
        return payload.get("name")
    if type_ == "guardrail.tripwire":
        return payload.get("guardrail")
    return None


def _identity(type_: str, payload: dict[str, Any]) -> Any:
    """What identifies a step without a key: a value's source (not the value), else all."""
    if type_ in _VALUE_TYPES:
        return {k: v for k, v in payload.items() if k not in ("value", "seed")}
    return _normalize(payload)
