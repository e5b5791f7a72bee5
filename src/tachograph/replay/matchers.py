"""How a replay compares what the agent does now with what was recorded.

A :class:`Matcher` holds the recorded steps (intents, decisions and values, in order) and
their completions (by idempotency key). Each step the agent takes is matched against them:
in ``strict`` mode with the next recorded step, in ``key`` mode with the open step of the
same key (or, for steps without a key, the same type and name), so that concurrent calls may
complete in any order. A mismatch becomes a :class:`~tachograph.replay.report.DivergenceItem`: what
was expected, what came, the field-level changes, the nearest candidates, and a paragraph a
person can act on.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from orjson import dumps

from ..capture.boundary import ReplayStopped
from ..providers.normal import compare_requests, is_http_form
from ..record.canonical import canonical, loads
from ..record.event import Event, EventType
from ..record.seal import AS_STORED, Processor
from .diff import Change, diff_values
from .report import Candidate, DivergenceItem, DivergenceKind

__all__ = ["COMPLETIONS", "RESUMED", "UNCOMPARED", "Matcher", "key_suffix", "normalize"]

COMPLETIONS = frozenset(
    {
        EventType.TOOL_COMPLETED.value,
        EventType.TOOL_FAILED.value,
        EventType.MODEL_RESPONSE.value,
        EventType.MODEL_FAILED.value,
    }
)
_VALUE_TYPES = frozenset(
    {
        EventType.CLOCK_READ.value,
        EventType.RANDOM_SEED.value,
        EventType.RANDOM_VALUE.value,
        EventType.EXTERNAL_READ.value,
    }
)
_SERVED = frozenset({EventType.TOOL_REQUESTED.value, EventType.MODEL_REQUEST.value}) | _VALUE_TYPES
# Read per event: constants, as ``EventType.X.value`` is an enum property (~1 us on 3.11).
RESUMED = "tachograph.resume"
"""The event a resume with ``confirm`` appends, durably, before it runs again the effects a
crash left open (``{"open": [seq, ...]}``): a second resume of the run at the same moment
finds the run's head taken and runs nothing. It is the library's, not the agent's: replay
neither serves nor expects it."""
_RUN_STARTED = EventType.RUN_STARTED.value
_RUN_FINISHED = EventType.RUN_FINISHED.value
_MODEL_REQUEST = EventType.MODEL_REQUEST.value
_TOOL_REQUESTED = EventType.TOOL_REQUESTED.value
_TOOL_COMPLETED = EventType.TOOL_COMPLETED.value
UNCOMPARED = frozenset({"meta"})
"""Payload fields recorded but never compared: the metadata a call carried (an MCP request's
``_meta``, a W3C ``traceparent``), which differs from run to run without changing the call."""


def _compared(payload: Any) -> Any:
    if isinstance(payload, dict) and not UNCOMPARED.isdisjoint(payload):
        return {k: v for k, v in payload.items() if k not in UNCOMPARED}
    return payload


def _distance(event: Event, payload: dict[str, Any]) -> float:
    """How many values of ``payload`` differ from ``event``'s (an erased one is farthest)."""
    if event.payload is None:
        return float("inf")
    return len(diff_values(_compared(event.payload), _compared(payload), "$.payload"))


def _shape(event: Event) -> dict[str, Any]:
    return {
        "seq": event.seq,
        "type": event.type,
        "actor": event.actor,
        "idempotency_key": event.idempotency_key,
        "model": event.model,
        "payload": event.payload,
    }


def key_suffix(key: str | None, run_id: str) -> str | None:
    if key is None:
        return None
    prefix = run_id + ":"
    return key[len(prefix) :] if key.startswith(prefix) else key


def normalize(value: Any) -> Any:
    """The value as it would read back from the record (1.0 becomes 1, tuples lists)."""
    return loads(canonical(value))


class Matcher:
    """The recorded steps of a run and the matching of the agent's steps against them."""

    def __init__(
        self,
        *,
        run_id: str,
        source: list[Event] | None,
        match: str,
        raise_on_divergence: bool,
        live_after_source: bool,
        processors: Sequence[Processor] = (),
        on_served: Callable[[Event], None] | None = None,
    ) -> None:
        self.match = match
        self.on_served = on_served
        self.processors = tuple(processors)
        self.raise_on_divergence = raise_on_divergence
        self.live_after_source = live_after_source
        self.divergences: list[DivergenceItem] = []
        self.served = 0
        self.aborted = False
        self.stopped = False
        """Whether the replay was stopped: from then on no step, in any of the agent's
        threads, is matched or reported; each raises :class:`ReplayStopped` again."""
        self.source_run_id = run_id
        self._stream: list[Event] = []
        self._completions: dict[str, Event] = {}
        self._consumed: set[int] = set()
        self._cursor = 0
        self.finished_event: Event | None = None
        self.started_event: Event | None = None
        self.notes: list[str] = []
        self.source_events: tuple[Event, ...] = tuple(source or ())
        """Every recorded event this matcher serves from (a fork's prefix)."""
        if source:
            self.source_run_id = source[0].run_id
            for event in source:
                if event.type == _RUN_STARTED:
                    self.started_event = event
                elif event.type == _RUN_FINISHED:
                    self.finished_event = event
                elif event.type == RESUMED:
                    continue  # the library's own claim of the run, no step of the agent
                elif event.type in COMPLETIONS:
                    if event.idempotency_key is not None:
                        self._completions[event.idempotency_key] = event
                else:
                    self._stream.append(event)
        self._left = len(self._stream)
        # read per compared tool call: whether the run was imported from a trace
        self._from_trace = self._imported()
        # key mode: open steps by key (without the run id), so that matching stays linear;
        # strict mode never looks a step up by key
        self._by_key: dict[str, list[Event]] = {}
        if match == "key":
            for event in self._stream:
                suffix = key_suffix(event.idempotency_key, self.source_run_id)
                if suffix is not None:
                    self._by_key.setdefault(suffix, []).append(event)

    def _processed(self, type_: str, payload: dict[str, Any]) -> dict[str, Any]:
        """What the recorder would have stored for this payload: the record was processed
        (redacted) before hashing, so the agent's step is too before it is compared."""
        if not self.processors:
            return payload
        out: dict[str, Any] = normalize(payload)
        for processor in self.processors:
            out = processor(type_, out)
        return out

    def _remaining(self) -> bool:
        return self._left > 0

    @property
    def remaining(self) -> bool:
        """Whether recorded steps are left to serve."""
        return self._left > 0

    def position(self) -> int:
        """The recorded seq at which the agent's next step would be."""
        return self._position()

    def _settle(self, event: Event) -> None:
        """Mark a recorded step as dealt with (served, or skipped after a type change)."""
        if event.seq not in self._consumed:
            self._consumed.add(event.seq)
            self._left -= 1

    def _open(self) -> list[Event]:
        return [e for e in self._stream if e.seq not in self._consumed]

    def _next_expected(
        self, type_: str, payload: dict[str, Any], key: str | None, name: str | None
    ) -> Event | None:
        """The recorded event to compare the agent's step with.

        ``strict``: the next unconsumed event in recorded order. ``key``: the open event with
        the same idempotency key; else, for steps without a key (decisions, values), an open
        event of the same type that is identical, then the one of the same name whose payload
        differs least; else the first open event of the same type (a changed call). None when
        no event of that type is open.
        """
        if self.match != "key":
            while (
                self._cursor < len(self._stream)
                and self._stream[self._cursor].seq in self._consumed
            ):
                self._cursor += 1
            return self._stream[self._cursor] if self._cursor < len(self._stream) else None
        if key is not None:
            suffix = key_suffix(key, self.source_run_id) or ""
            for e in self._by_key.get(suffix, ()):
                if e.seq not in self._consumed:
                    return e
        open_events = self._open()
        same_type = [e for e in open_events if e.type == type_]
        if key is None:
            probe = _identity(type_, payload)
            for e in same_type:
                if e.payload is not None and _identity(type_, e.payload) == probe:
                    return e
        named = [e for e in same_type if name is not None and _name_of(e) == name]
        if len(named) > 1:
            # A changed call of a name called several times (concurrent calls, matched by key):
            # compared with the open call of that name it differs least from, not the first.
            return min(named, key=lambda e: _distance(e, payload))
        if named:
            return named[0]
        return same_type[0] if same_type else None

    def _consume(self, event: Event) -> None:
        self._settle(event)
        self.served += 1
        if self.on_served is not None:  # a fork copies every step it serves
            self.on_served(event)

    def completion(self, key: str | None) -> Event | None:
        """The recorded completion of the call with idempotency key ``key``."""
        return self._completions.get(key) if key is not None else None

    @property
    def completions(self) -> dict[str, Event]:
        """The recorded completions by idempotency key (read, never changed, by the engine)."""
        return self._completions

    @property
    def has_steps(self) -> bool:
        """Whether the record holds any step to serve."""
        return bool(self._stream)

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

    def diverge(
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
        if self.stopped:
            raise ReplayStopped
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
            self.stop()

    def stop(self) -> NoReturn:
        """Stop the replay. A thread the agent started cannot unwind the agent's main thread:
        its next step raises here again, and nothing after the stop is reported."""
        self.stopped = True
        raise ReplayStopped

    def _position(self) -> int:
        """The recorded seq at which the next thing would have been."""
        for e in self._stream[self._cursor :]:
            if e.seq not in self._consumed:
                return e.seq
        if self.finished_event is not None:
            return self.finished_event.seq
        return (self._stream[-1].seq + 1) if self._stream else 1

    def expect(
        self,
        type_: str,
        payload: dict[str, Any],
        key: str | None,
        name: str | None,
        *,
        model: str | None = None,
        stored: bytes | None = None,
    ) -> Event | None:
        """Match the agent's next step against the record. Returns the matched event, or None
        when the step is to be done live (or, in collect mode, has no counterpart). Records
        divergences; raises :class:`ReplayStopped` when the replay cannot go on. ``payload``
        has already been through the recording's processors; ``stored``, when known, is its
        bytes as the recorder would store them (``orjson.dumps`` with ``AS_STORED``)."""
        if self.stopped:
            raise ReplayStopped
        if self.match != "key" and type_ == _TOOL_REQUESTED and self._left > 0:
            if stored is None:
                try:
                    stored = dumps(payload, option=AS_STORED)
                except TypeError:  # orjson.JSONEncodeError is one: the general path decides
                    stored = None
            same = self.same_next_call(stored) if stored is not None else None
            if same is not None:
                self.take(same)
                return same
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
            self.diverge(
                DivergenceKind.UNREPLAYABLE,
                expected.seq,
                expected,
                _actual(type_, payload, name),
                [],
                f"The payload of seq {expected.seq} was erased (retention or privacy), so "
                "this step cannot be compared or served.",
                fatal=True,
            )
        if type_ in _VALUE_TYPES:
            return self._check_value_event(expected, payload)
        changes = self._compare(expected, type_, payload)
        if (
            type_ == _MODEL_REQUEST
            and model is not None
            and expected.model is not None
            and model != expected.model
        ):
            self._model_changed(expected, payload, model, changes)
        elif changes:
            self._payload_changed(expected, type_, payload, name, changes)
        self._consume(expected)
        return expected

    def same_next_call(self, mine: bytes) -> Event | None:
        """Strict matching's common step, found in one frame: the next recorded step, when it
        is a tool call whose stored payload bytes are ``mine``, the agent's payload as the
        recorder writes them (``orjson.dumps`` with ``AS_STORED``, in the payload's own
        order). The same bytes are the same JSON value, so :meth:`_compare` would find no
        change. Not consumed (:meth:`take`). ``None``: anything else, which the general path
        decides (and reports)."""
        if self._from_trace or self._left <= 0:
            return None
        stream = self._stream
        cursor = self._cursor
        consumed = self._consumed
        while cursor < len(stream) and stream[cursor].seq in consumed:
            cursor += 1
        self._cursor = cursor
        if cursor == len(stream):
            return None
        expected = stream[cursor]
        if (
            expected.type != _TOOL_REQUESTED
            or expected.payload is None  # erased: the general path reports it
            or expected.payload_bytes != mine
        ):
            return None
        return expected

    def same_call(self, mine: bytes) -> Event | None:
        """A replay's common tool call, matched and taken in one call: the next recorded
        step is a tool call stored as ``mine`` (see :meth:`same_next_call`) and its recorded
        completion is a plain result (``tool.completed``, not erased, not a dry run). The
        step is consumed, and counted served with its completion (as :meth:`expect` and the
        engine's ``serve_call`` count them); the completion is returned. ``None``, with
        nothing consumed: anything else, which the general path decides (and reports)."""
        if self.stopped:  # the general path raises ReplayStopped
            return None
        expected = self.same_next_call(mine)
        if expected is None:
            return None
        key = expected.idempotency_key
        completion = self._completions.get(key) if key is not None else None
        if completion is None or completion.type != _TOOL_COMPLETED:
            return None
        answer = completion.payload
        if answer is None or answer.get("dry_run") is True:  # erased, or simulated
            return None
        self.take(expected)
        self.served += 1  # its completion, as the engine's serve_call counts it
        return completion

    def take(self, expected: Event) -> None:
        """Consume the step :meth:`same_next_call` found, as :meth:`expect` consumes a step
        it matched (without :meth:`_consume`'s two frames)."""
        consumed = self._consumed
        if expected.seq not in consumed:  # another of the agent's threads may have taken it
            consumed.add(expected.seq)
            self._left -= 1
        self.served += 1
        if self.on_served is not None:
            self.on_served(expected)

    def _model_changed(
        self, expected: Event, payload: dict[str, Any], model: str, changes: list[Change]
    ) -> None:
        """The agent asks another exact model id than the recorded call named."""
        actual = _actual(EventType.MODEL_REQUEST.value, payload, model)
        actual["model"] = model
        self.diverge(
            DivergenceKind.MODEL_CHANGED,
            expected.seq,
            expected,
            actual,
            [Change("$.model", expected.model, model), *changes],
            f"At seq {expected.seq} the agent calls model {model!r} where the recorded run "
            f"called {expected.model!r}. The recorded answer came from the other model, so "
            "from here on the replay shows the old model's answers to the new code; record "
            "the run again to see what the new model does.",
            candidates=self._candidates(EventType.MODEL_REQUEST.value, payload, model),
        )

    def _imported(self) -> bool:
        labels = ((self.started_event.payload or {}) if self.started_event else {}).get("labels")
        return isinstance(labels, dict) and "tachograph.imported" in labels

    def _compare(self, expected: Event, type_: str, payload: dict[str, Any]) -> list[Change]:
        """The changes between a recorded step and the agent's. A model request recorded in
        another form (imported from a trace vs. made over HTTP) is compared in the
        provider-neutral normal form; an imported tool call on its tool and arguments (a
        trace knows neither tachograph's effect classes nor its keys). What the trace did not
        capture is noted, never counted as a match or a mismatch."""
        recorded = expected.payload or {}
        if type_ == _MODEL_REQUEST and is_http_form(recorded) != is_http_form(payload):
            result = compare_requests(recorded, payload)
            if result.not_captured:
                self.notes.append(
                    f"seq {expected.seq}: the recorded request did not capture "
                    f"{', '.join(result.not_captured)}; those were not compared"
                )
            return [Change(path, before, after) for path, before, after in result.changes]
        if type_ == _TOOL_REQUESTED and self._from_trace:
            missing = recorded.get("not_captured") or []
            if "args" in missing:
                self.notes.append(
                    f"seq {expected.seq}: the trace did not capture the arguments of "
                    f"{recorded.get('tool')!r}; they were not compared"
                )
            keep = ("tool",) if "args" in missing else ("tool", "args")
            return diff_values(
                {k: recorded.get(k) for k in keep},
                {k: payload.get(k) for k in keep},
                "$.payload",
            )
        return diff_values(_compared(expected.payload), _compared(payload), "$.payload")

    def _extra(self, type_: str, payload: dict[str, Any], name: str | None) -> None:
        """A step with no recorded counterpart: fatal when it needs a recorded answer."""
        self.diverge(
            DivergenceKind.EXTRA_CALL,
            self._position(),
            None,
            _actual(type_, payload, name),
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
        self.diverge(
            DivergenceKind.TYPE_CHANGED,
            expected.seq,
            expected,
            _actual(type_, payload, name, key),
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
                            self._settle(skipped)
                return e
        if type_ not in _SERVED:
            return None
        self.aborted = True
        self.stopped = True
        raise ReplayStopped

    def _payload_changed(
        self,
        expected: Event,
        type_: str,
        payload: dict[str, Any],
        name: str | None,
        changes: list[Change],
    ) -> None:
        recorded_name = _name_of(expected)
        if type_ == EventType.TOOL_REQUESTED.value and recorded_name != name:
            kind = DivergenceKind.TOOL_CHANGED
            text = (
                f"The agent chose tool {name!r} where the recording chose {recorded_name!r}. "
                "Look at the model response or plan just before this step."
            )
        elif type_ == EventType.TOOL_REQUESTED.value:
            kind = DivergenceKind.ARGS_CHANGED
            effect = next((c for c in changes if c.path == "$.payload.effect"), None)
            others = [c for c in changes if c is not effect]
            text = (
                f"Tool {name!r} was called with different arguments "
                f"({', '.join(c.path for c in others[:3])}). The values come from the agent's "
                "code or from an earlier answer: check what computes them."
                if others
                else ""
            )
            if effect is not None:
                text = (
                    f"The declared effect of tool {name!r} changed ({effect.render()}): its "
                    "@tachograph.tool(effect=...) is not the one recorded, and the effect "
                    "decides how fork and resume treat the call (write and irreversible tools "
                    "run in dry run there)." + (" " + text if text else "")
                )
        elif type_ == EventType.MODEL_REQUEST.value:
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
        self.diverge(
            kind,
            expected.seq,
            expected,
            _actual(type_, payload, name),
            changes,
            text,
            candidates=self._candidates(type_, payload, name),
            # The recorded answer belongs to another tool: serving it would be nonsense.
            fatal=kind is DivergenceKind.TOOL_CHANGED,
        )

    def _check_value_event(self, expected: Event, payload: dict[str, Any]) -> Event:
        # Values are served from the record; only what identifies them is compared.
        probe = {k: v for k, v in payload.items() if k != "value" and k not in UNCOMPARED}
        recorded = {k: v for k, v in (expected.payload or {}).items() if k in probe}
        if expected.type != EventType.RANDOM_SEED.value:
            changes = diff_values(recorded, probe, "$.payload")
            if changes:
                self.diverge(
                    DivergenceKind.DECISION_CHANGED,
                    expected.seq,
                    expected,
                    {"type": expected.type, "payload": payload},
                    changes,
                    f"The agent read {expected.type} from another source than recorded.",
                )
        self._consume(expected)
        return expected

    # -- end -------------------------------------------------------------------------------

    def check_end(self, status: str, output: Any, error: dict[str, Any] | None) -> None:
        """Compare the end of the agent with the recorded end (replay modes)."""
        if self.stopped:
            raise ReplayStopped
        if self._remaining():
            first = next(e for e in self._stream[self._cursor :] if e.seq not in self._consumed)
            left = self._left
            self.diverge(
                DivergenceKind.MISSING_CALLS,
                first.seq,
                first,
                {"type": EventType.RUN_FINISHED.value, "payload": {"status": status}},
                [],
                f"The agent finished while {left} recorded step(s) remained, starting with "
                f"{first.type} at seq {first.seq}: it now stops earlier than it did.",
                candidates=[],
            )
        recorded = self.finished_event
        if recorded is None or self.live_after_source:
            return
        if recorded.erased:
            self.diverge(
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
            now["output"] = normalize(output)
        before = {
            k: v for k, v in (recorded.payload or {}).items() if k in ("status", "output", "error")
        }
        if "output" not in before and "output" in now and now["output"] is None:
            now.pop("output")
        if "output" in ((recorded.payload or {}).get("not_captured") or ()):
            now.pop("output", None)
            before.pop("output", None)
            self.notes.append("the recorded run's final output was not captured; not compared")
        now = self._processed(EventType.RUN_FINISHED.value, now)
        changes = diff_values(before, now, "$.payload")
        if changes:
            self.diverge(
                DivergenceKind.OUTPUT_CHANGED,
                recorded.seq,
                recorded,
                {"type": EventType.RUN_FINISHED.value, "payload": now},
                changes,
                "The agent reached the end with a different result than recorded "
                f"({', '.join(c.path for c in changes[:3])}).",
            )
        else:
            self.served += 1


def _name_of(event: Event) -> str | None:
    payload = event.payload or {}
    if event.type.startswith("tool."):
        return payload.get("tool")
    if event.type.startswith("model."):
        return event.model
    if event.type == EventType.DECISION.value:
        return payload.get("name")
    if event.type == EventType.GUARDRAIL_TRIPWIRE.value:
        return payload.get("guardrail")
    return None


def _probe_name(type_: str, payload: dict[str, Any]) -> str | None:
    """The name of a step the agent takes now, as :func:`_name_of` reads a recorded one."""
    if type_ == EventType.DECISION.value:
        return payload.get("name")
    if type_ == EventType.GUARDRAIL_TRIPWIRE.value:
        return payload.get("guardrail")
    return None


def _identity(type_: str, payload: dict[str, Any]) -> Any:
    """What identifies a step without a key: a value's source (not the value), else all."""
    if type_ in _VALUE_TYPES:
        return {k: v for k, v in payload.items() if k not in ("value", "seed")}
    return normalize(payload)


def _actual(
    type_: str, payload: dict[str, Any], name: str | None, key: str | None = None
) -> dict[str, Any]:
    """What the agent did now, in the shape of a recorded event (model calls name the model)."""
    actual: dict[str, Any] = {"type": type_, "payload": payload}
    if key is not None:
        actual["idempotency_key"] = key
    if type_.startswith("model.") and name is not None:
        actual["model"] = name
    return actual
