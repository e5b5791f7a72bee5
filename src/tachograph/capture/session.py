"""The session behind every recording call: record live, serve from a record, or both.

One :class:`Session` is current per context (a :class:`contextvars.ContextVar`). It has an
optional *recorder* (where new events go) and an optional *engine* (an
:class:`~tachograph.capture.boundary.Engine` that serves recorded answers and compares what
the agent does with the record; :mod:`tachograph.replay` provides it):

=========  ========================  =====================================================
mode       engine                    recorder
=========  ========================  =====================================================
record     none                      a new run
replay     the recorded run          none: nothing is written, nothing runs
fork       the parent up to step N   a new run naming its parent; live after step N
resume     the crashed run           the same run, appended after its head; live after it
=========  ========================  =====================================================

The session is found through a context variable: asyncio tasks created inside a run inherit
it, threads do not (``threading.Thread`` starts with an empty context; hand work over with
``asyncio.to_thread`` or ``contextvars.copy_context().run``).
"""

from __future__ import annotations

import contextvars
import os
import random
import threading
import uuid
import weakref
from collections.abc import Callable, Sequence
from typing import Any, Final

from ..errors import ProfileError, RecordingError
from ..privacy.redactor import Redactor
from ..record.canonical import canonical
from ..record.event import Effect, EventType
from ..record.seal import (
    KeyDeriver,
    Processor,
    key_args,
    process_payload,
    prompt_hash,
    stored_untouched,
    untouched_words,
    with_prompt_hash,
)
from .boundary import (
    CURRENT_SESSION,
    TOOL_CALL,
    UNTRACK,
    CallKind,
    CallTicket,
    Engine,
    error_info,
)
from .recorder import Recorder
from .threads import follow_threads, unfollow_threads

# Plain-str event types: ``EventType.X.value`` is a Python-level property on 3.11, and
# these are read several times per recorded or served call.
_MODEL_REQUEST: Final = EventType.MODEL_REQUEST.value
_RANDOM_SEED: Final = EventType.RANDOM_SEED.value
_RANDOM_VALUE: Final = EventType.RANDOM_VALUE.value
_TOOL_REQUESTED: Final = EventType.TOOL_REQUESTED.value


__all__ = ["EFFECTS", "Session", "current_session", "error_info", "prompt_hash"]

_current = CURRENT_SESSION

EFFECTS = frozenset({Effect.WRITE, Effect.IRREVERSIBLE})
"""Tools that change the world: their intent is made durable first, and dry run replaces them."""

# Read per call (as boundary's TOOL_CALL): an ``Effect`` member through its class costs about
# 0.14 us on 3.11 and its ``.value`` 0.2 us; a module global or a dict look-up a fraction.
_IRREVERSIBLE: Final = Effect.IRREVERSIBLE
_WRITE: Final = Effect.WRITE
_EFFECT_NAMES: Final = {e: e.value for e in Effect}


_SESSIONS: weakref.WeakSet[Session] = weakref.WeakSet()
"""The sessions alive in this process, for :func:`_after_fork_in_child`."""


def _after_fork_in_child() -> None:
    """A child forked while another thread of the parent numbered a repeated call's key holds
    that session's key lock for good: each session gets a new one, so that the child's own
    call gets as far as the recorder, which refuses it (the run has one writer: see
    ``capture/recorder.py``)."""
    for session in list(_SESSIONS):
        session._key_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def current_session() -> Session | None:
    """The session of the current context, or None outside any run."""
    return _current.get()


class Session:
    """Record, serve, or both; see the module docstring."""

    def __init__(
        self,
        *,
        mode: str,
        run_id: str,
        actor: str,
        recorder: Recorder | None = None,
        engine: Engine | None = None,
        key_secret: bytes | None = None,
        dry_run: bool = False,
        seed: int | None = None,
        processors: Sequence[Processor] = (),
    ) -> None:
        self.mode = mode
        self.run_id = run_id
        self.actor = actor
        self.recorder = recorder
        self.engine = engine
        self.processors = tuple(recorder.processors if recorder is not None else processors)
        # Redactors never change their input in place (tachograph.privacy.redactor): behind
        # them alone, a request the processors hand back as it was still has the canonical
        # bytes checked before processing, and its key is derived from those.
        self._keeps_input = all(type(p) is Redactor for p in self.processors)
        # what stored_if_untouched looks for in a request, for this fixed tuple
        self._untouched_words = untouched_words(self.processors)
        self.dry_run = dry_run
        self.used_dry_run = False
        self.notes: list[str] = []
        self.fatal_error: BaseException | None = None
        self.agent_returned = False
        """Whether the agent's own coroutine has ended (an async agent replayed under
        ``asyncio.run``): a call it left in flight is cancelled by the loop's end from then."""
        # While a record is being served, keys are derived as the recorded run derived them,
        # so that they equal the recorded ones; a call that goes live in another run (a
        # fork) is re-based onto it by live_key.
        if engine is not None:
            self.keys = KeyDeriver(engine.key_run_id, engine.key_secret)
        else:
            self.keys = KeyDeriver(run_id, key_secret)
        self._key_lock = threading.Lock()
        _SESSIONS.add(self)  # its lock made anew in a forked child
        self._rng: random.Random | None = None
        self._seed = seed
        self._token: contextvars.Token[Session | None] | None = None
        self._unfinished: dict[int, Callable[[], None]] = {}
        self._unfinished_lock = threading.Lock()

    # -- context ---------------------------------------------------------------------------

    def activate(self) -> None:
        """Make this the current session of the context; threads started from it carry it."""
        if _current.get() is not None:
            raise RecordingError("a tachograph run is already active in this context")
        self._token = _current.set(self)
        follow_threads()

    def deactivate(self) -> None:
        """Restore the previous (empty) context. A thread started inside the run that outlives
        it still holds the session: its calls are refused as a task's are (the run finished)."""
        if self._token is not None:
            _current.reset(self._token)
            self._token = None
            unfollow_threads()

    # -- answers still being read ----------------------------------------------------------

    def unfinished(self, finish: Callable[[], None]) -> Callable[[], None]:
        """Keep ``finish`` (what records a call's answer once it has been read, such as a
        stream's) until it runs or the run ends; returns what forgets it again, for the
        finish itself to call."""
        handle = id(finish)
        with self._unfinished_lock:
            self._unfinished[handle] = finish

        def forget() -> None:
            with self._unfinished_lock:
                self._unfinished.pop(handle, None)

        return forget

    def finish_unfinished(self) -> None:
        """Record, before the run ends, every answer the agent began and never finished
        reading (a stream it broke out of without closing it), as what it read of it: at
        the run's end there is nothing more it will read."""
        while True:
            with self._unfinished_lock:
                if not self._unfinished:
                    return
                _, finish = self._unfinished.popitem()
            finish()

    # -- processing and keys ---------------------------------------------------------------

    def process(self, type_: str, payload: dict[str, Any]) -> dict[str, Any]:
        """The payload as it is recorded (and compared): every processor applied."""
        # What the recorder's Sealer.process does, called directly (the processors are its
        # own: see __init__): the run's key secret is never shown to a processor.
        return process_payload(self.processors, type_, payload)

    def make_key(
        self,
        name: str,
        args: Any,
        custom: Callable[[Any], Any] | None = None,
        *,
        args_jcs: bytes | None = None,
    ) -> str:
        """SPEC section 5: ``{run_id}:{name}:{h}`` (or the tool's own), ``#n`` on repeats.
        ``args`` must already be processed (redacted)."""
        with self._key_lock:  # threads handed the context may call tools at the same time
            return self.keys.key(name, args, custom=custom, args_jcs=args_jcs)

    def live_key(self, key: str) -> str:
        """A key derived against the served run, re-based onto the run being recorded."""
        source = self.keys.run_id
        if self.run_id == source:
            return key
        prefix = source + ":"
        suffix = key[len(prefix) :] if key.startswith(prefix) else key
        return f"{self.run_id}:{suffix}"

    def serving(self) -> bool:
        """Whether the engine may still serve recorded steps."""
        return self.engine is not None and self.engine.serving()

    def abandoned(self) -> bool:
        """Whether this is a resume that stopped at a divergence: the crashed run is left
        unfinished, and the calls it still has in flight are ended by the stop, not by the
        agent (their cancellation is not the agent's outcome, and is not recorded)."""
        engine = self.engine
        return self.mode == "resume" and engine is not None and engine.stopped

    # -- calls -----------------------------------------------------------------------------

    def begin_call(
        self,
        kind: CallKind,
        name: str,
        request: Any,
        *,
        effect: Effect | None = None,
        key: str | Callable[[Any], Any] | None = None,
        model: str | None = None,
        seed: int | None = None,
        schema_version: str | None = None,
        extra: dict[str, Any] | None = None,
    ) -> CallTicket:
        """Start a call: processors, then key and prompt hash, then serve or go live."""
        is_tool = kind is TOOL_CALL
        try:
            request_jcs = canonical(request)
        except ProfileError:
            # again, for the error naming the call's own path (built only on this path)
            try:
                canonical(request, f"{name}.args" if is_tool else f"{name}.request")
            except ProfileError as exc:
                raise ProfileError(
                    f"{'tool' if is_tool else 'model'} {name!r}: {exc}",
                    path=exc.fields.get("path"),
                    tool=name if is_tool else None,
                ) from None
            raise  # pragma: no cover - the same value is refused the same way
        processors = self.processors
        if is_tool:
            effect = effect or _IRREVERSIBLE
            effect_name = _EFFECT_NAMES[effect]
            payload: dict[str, Any] = {"tool": name, "args": request, "effect": effect_name}
            if UNTRACK is not None:
                UNTRACK(payload)  # ours alone (see UNTRACK)
            if schema_version is not None:
                payload["schema_version"] = schema_version
            if extra:
                for field_name, value in extra.items():
                    if field_name in payload:
                        raise RecordingError(
                            f"tool {name!r}: extra field {field_name!r} would replace the "
                            "request's own"
                        )
                    payload[field_name] = value
            # self.process(...), without its frame: the payload's stored bytes when the
            # processors hand it back untouched (then compared as they are in replay); with
            # no processor and nothing to serve, neither is needed
            words = self._untouched_words  # stored_if_untouched, its test found once
            stored = (
                stored_untouched(words, payload)
                if words is not None and (processors or self.engine is not None)
                else None
            )
            if stored is None:
                payload = process_payload(processors, _TOOL_REQUESTED, payload)
            elif key is None and self._keeps_input and self.engine is not None:
                # a replay's common call, served in one step (else the general path below)
                served = self.engine.serve_same_call(
                    self, name, request_jcs, payload, stored, effect
                )
                if served is not None:
                    return served
            args = payload.get("args")  # key_args(_TOOL_REQUESTED, payload)
        else:
            payload = {"request": request, **(extra or {})}
            if UNTRACK is not None:
                UNTRACK(payload)  # ours alone (see UNTRACK)
            # the prompt hash and the key come from the processed request (SPEC section 5)
            payload = with_prompt_hash(process_payload(processors, _MODEL_REQUEST, payload))
            args = key_args(_MODEL_REQUEST, payload)
            stored = None
        # The key is derived from the processed arguments' own bytes (SPEC section 5): the
        # bytes checked above only when the processors handed the request back untouched and
        # none of them can have changed it in place (only redactors ran).
        if isinstance(key, str):
            call_key = key
        else:
            same = key is None and args is request and self._keeps_input
            # the first call with these arguments in one compiled step, without the lock;
            # a repeat (or no compiled helper) is numbered by make_key, under it
            first = self.keys.fresh_key(name, request_jcs) if same else None
            call_key = (
                first
                if first is not None
                else self.make_key(name, args, key, args_jcs=request_jcs if same else None)
            )
        ticket = CallTicket(self, kind, name, payload, call_key, effect, model, seed)
        engine = self.engine
        if engine is not None and engine.serving():  # self.serving(), without its frame
            engine.serve_call(ticket, stored)
            if ticket.served or ticket.intent_recorded or ticket.compare_with is not None:
                return ticket
        return self.go_live(ticket)

    def go_live(self, ticket: CallTicket, *, record_intent: bool = True) -> CallTicket:
        """Run the call live: write its intent (durable before an effect) and hand it back."""
        if self.recorder is None:
            raise RecordingError(
                f"nothing to serve {ticket.name!r} from and no run to record it in"
            )
        if ticket.key is not None and self.keys.run_id != self.run_id:  # else kept as is
            ticket.key = self.live_key(ticket.key)
        effect = ticket.effect
        changes_world = effect is _WRITE or effect is _IRREVERSIBLE  # in EFFECTS
        if ticket.kind is TOOL_CALL and self.dry_run and changes_world:
            ticket.dry_run = True
        if record_intent:
            # intent before effect (SPEC section 6): on disk before the tool may touch the world
            durable = changes_world and not ticket.dry_run
            self.recorder.append(
                ticket.request_type,
                ticket.payload,
                processed=True,
                idempotency_key=ticket.key,
                model=ticket.model,
                seed=ticket.seed,
                durable=durable,
            )
        return ticket

    def simulated(self, seq: int, why: str) -> None:
        """The agent now acts on a simulated result. A dry-run result is never taken for a
        real one: whatever this session does live from here on runs in dry run too."""
        if self.recorder is None or self.dry_run:
            return
        self.dry_run = True
        self.notes.append(
            f"seq {seq} {why}: the agent acts on a simulated result, so every write and "
            "irreversible tool after it ran in dry run"
        )

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
        processed = self.process(type_, payload)
        if self.serving():
            assert self.engine is not None
            if self.engine.serve_step(type_, processed):
                return
        if self.recorder is not None:
            self.recorder.append(type_, processed, processed=True, actor=actor, durable=durable)

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
        if self.serving():
            assert self.engine is not None
            return self.engine.serve_value(type_, self.process(type_, payload))
        return False, None

    def record_value(
        self, type_: str, payload: dict[str, Any], value: Any, *, seed: int | None = None
    ) -> None:
        """Phase two of :meth:`value`: record a value computed live."""
        if self.recorder is not None:
            body = dict(payload)
            body["seed" if type_ == _RANDOM_SEED else "value"] = value
            self.recorder.append(type_, body, seed=seed)

    def recorded_completion(self, key: str | None) -> Any:
        """The recorded completion of the call with idempotency key ``key``, if served."""
        return self.engine.recorded_completion(key) if self.engine is not None else None

    def rng(self) -> random.Random:
        """The run's seeded generator; its seed is recorded once (``random.seed``)."""
        if self._rng is None:
            seed = self.value(
                _RANDOM_SEED,
                {"source": "tachograph.rng"},
                lambda: (
                    self._seed if self._seed is not None else random.SystemRandom().getrandbits(53)
                ),
            )
            self._rng = random.Random(seed)
        return self._rng

    def uuid4(self) -> uuid.UUID:
        """A random UUID drawn from the recorded stream of values."""
        text = self.value(_RANDOM_VALUE, {"source": "tachograph.uuid4"}, lambda: str(uuid.uuid4()))
        return uuid.UUID(str(text))
