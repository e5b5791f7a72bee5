"""Tool calls the record cannot vouch for.

A model answer that asks for tool calls (OpenAI ``tool_calls``, a responses ``function_call``,
an Anthropic ``tool_use``) should be followed, before the next model request, by a tool event
of each tool it asked for. When none follows, the agent ran that tool unrecorded (a plain
function, a LangChain ``@tool`` not also decorated with ``@tachograph.tool``), or never ran it:
either way the record does not hold what the tool did, so a replay would run it again and
could not tell. The recorder warns once per tool name, ``run.finished`` carries the list
(``unvouched``), and replay does not call such a run reproduced.

:class:`ToolLedger` follows the calls as events are recorded; :func:`unvouched_calls` reads
them back from a recorded run.
"""

from __future__ import annotations

import itertools
import threading
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

import orjson

from ..providers.toolcalls import RequestedCall, requested_tool_calls
from ..record.event import Event, EventType

# Plain-str event types: ``EventType.X.value`` is a Python-level property on 3.11, and
# these are read several times per recorded or served call.
_DECISION: Final = EventType.DECISION.value
_HANDOFF: Final = EventType.HANDOFF.value
_MODEL_REQUEST: Final = EventType.MODEL_REQUEST.value
_MODEL_RESPONSE: Final = EventType.MODEL_RESPONSE.value
_PLAN_SELECTED: Final = EventType.PLAN_SELECTED.value
_RUN_FINISHED: Final = EventType.RUN_FINISHED.value
_TOOL_REQUESTED: Final = EventType.TOOL_REQUESTED.value


__all__ = [
    "FIELD",
    "FOLLOWED",
    "HOW_TO_RECORD",
    "ToolLedger",
    "UnvouchedCall",
    "UnvouchedScan",
    "UnvouchedToolCall",
    "how_to_record",
    "unvouched_calls",
    "unvouched_in_stored",
]

_MAPS = (dict, Mapping)  # dict first: a recorded payload spares the ABC check

FIELD = "unvouched"
"""The ``run.finished`` payload field that lists the unvouched calls."""

HOW_TO_RECORD = (
    "decorate the function that runs it with @tachograph.tool(effect=...), or use a framework "
    "adapter that records tools (tachograph.integrations.openai_agents), then record the run "
    "again"
)

FOLLOWED: Final = frozenset(
    {
        _DECISION,
        _HANDOFF,
        _MODEL_REQUEST,
        _MODEL_RESPONSE,
        _PLAN_SELECTED,
        _RUN_FINISHED,
        _TOOL_REQUESTED,
    }
)
"""The event types the ledger follows: any other (a tool's completion, a clock read...) is
passed over with one set look-up (the recorder makes it before the call), as it is recorded
by the million."""

# The OpenAI Agents SDK hands off through a tool call named transfer_to_<agent>; the
# integration records it as a ``handoff`` event.
_HANDOFF_PREFIX = "transfer_to_"


class UnvouchedToolCall(UserWarning):
    """Warned while recording: a model asked for a tool call and no tool event followed."""


@dataclass(frozen=True, slots=True)
class UnvouchedCall:
    """A tool call a model answer asked for, with no tool event to account for it."""

    tool: str
    seq: int
    """The seq of the ``model.response`` that asked for it."""
    call_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON form (as in the ``run.finished`` payload)."""
        return {"tool": self.tool, "seq": self.seq, "call_id": self.call_id}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> UnvouchedCall | None:
        tool, seq = data.get("tool"), data.get("seq")
        if not isinstance(tool, str) or type(seq) is not int:
            return None
        call_id = data.get("call_id")
        return cls(tool, seq, call_id if isinstance(call_id, str) else None)


def how_to_record(tools: Iterable[str]) -> str:
    """One sentence naming the tools and how to get them recorded."""
    names = ", ".join(repr(t) for t in sorted(set(tools)))
    return f"to record {names}: {HOW_TO_RECORD}"


class ToolLedger:
    """Follows the tool calls that model answers ask for, event by event (thread-safe).

    A call is vouched for by a ``tool.requested`` of the same tool name (or, for an Agents
    SDK ``transfer_to_*`` call, a ``handoff``) recorded after the answer. An agent that
    overrides the model records the choice (``plan.selected`` or ``decision``) and calls
    another tool instead: that recorded substitution vouches for the call too. Whatever is
    still open when the next model request is recorded, or the run ends, is unvouched.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: list[UnvouchedCall] = []
        # The tool calls that matched no open call, counted with ``next``: one step under the
        # GIL, so that the common call, with nothing open, is counted without the lock (which
        # cost a recorded tool call 0.2 of its 21 us). ``settle`` reads it (a read counts one
        # too) and keeps where the next round starts.
        self._unmatched = itertools.count()
        self._round_start = 0
        self._decided = False
        self.unvouched: list[UnvouchedCall] = []

    def observe(self, type_: str, payload: Any, seq: int) -> list[UnvouchedCall]:
        """Account for one recorded event; returns the calls it left unvouched."""
        if type_ not in FOLLOWED:
            return []
        if type_ == _TOOL_REQUESTED and not self._open:
            # Nothing asked for is open (a tool-only agent, or every asked call made): as if
            # observed under the lock at the moment ``_open`` was read.
            next(self._unmatched)
            return []
        if type_ == _MODEL_RESPONSE:
            if type(payload) is _Asked:  # read from a stored row beforehand (UnvouchedScan)
                calls = payload.calls
            else:
                response = payload.get("response") if isinstance(payload, _MAPS) else None
                calls = requested_tool_calls(response)
            if calls:
                with self._lock:
                    self._open.extend(UnvouchedCall(c.tool, seq, c.call_id) for c in calls)
            return []
        if type_ == _TOOL_REQUESTED:
            # a plain dict (every recorded payload) spares the ABC check of Mapping
            is_map = type(payload) is dict or isinstance(payload, Mapping)
            name = payload.get("tool") if is_map else None
            with self._lock:
                for i, call in enumerate(self._open):
                    if call.tool == name:
                        del self._open[i]
                        break
                else:
                    next(self._unmatched)
            return []
        if type_ in (_PLAN_SELECTED, _DECISION):
            with self._lock:
                self._decided = True
            return []
        if type_ == _HANDOFF:
            with self._lock:
                for i, call in enumerate(self._open):
                    if call.tool.startswith(_HANDOFF_PREFIX):
                        del self._open[i]
                        break
            return []
        aborted = (
            type_ == _RUN_FINISHED
            and isinstance(payload, _MAPS)
            and payload.get("status") == "aborted"
        )
        if aborted:
            # Stopped from outside (Ctrl-C, a fork stopped at a divergence): the calls still
            # open were never made, rather than made unrecorded.
            with self._lock:
                self._open = []
            return []
        if type_ in (_MODEL_REQUEST, _RUN_FINISHED):
            return self.settle()
        return []

    def settle(self) -> list[UnvouchedCall]:
        """Close every open call: none of them was vouched for."""
        with self._lock:
            read = next(self._unmatched)
            other_tools = read - self._round_start  # since the last settle
            self._round_start = read + 1
            if self._decided and other_tools:
                del self._open[:other_tools]  # substituted by a recorded choice
            self._decided = False
            if not self._open:
                return []
            left, self._open = self._open, []
            self.unvouched.extend(left)
            return left


def warn_unvouched(calls: Iterable[UnvouchedCall], run_id: str, warned: set[str]) -> None:
    """Warn once per tool name (``warned`` holds the names already warned about)."""
    for call in calls:
        if call.tool in warned:
            continue
        warned.add(call.tool)
        warnings.warn(
            UnvouchedToolCall(
                f"run {run_id!r}: the model asked for tool {call.tool!r} (seq {call.seq}) and "
                f"no tool event followed: the record cannot vouch for what it did, and a "
                f"replay would run it again. To record it, {HOW_TO_RECORD}."
            ),
            stacklevel=4,
        )


def unvouched_calls(events: Iterable[Event]) -> tuple[UnvouchedCall, ...]:
    """The unvouched tool calls of a recorded run, read from its events.

    Computed from the model answers and tool events (so that a run recorded before the field
    existed is judged too), together with what ``run.finished`` lists (an answer erased since
    is still known from there). A run without ``run.finished`` is judged up to its last model
    request. A run held whole (a list or tuple, as replay holds it) is looked over first; any
    other iterable is read in one pass, in constant memory.
    """
    if isinstance(events, (list, tuple)) and _MODEL_RESPONSE not in [e.type for e in events]:
        # Only a model answer opens a call to vouch for: in a run without one (a tool-only
        # agent) the ledger would find nothing, and only what run.finished lists counts.
        events = [event for event in events if event.type == _RUN_FINISHED]
    return _unvouched(events)


class _Seen(NamedTuple):
    type: str
    payload: Any
    seq: int


_READS_PAYLOAD: Final = frozenset({_MODEL_RESPONSE, _TOOL_REQUESTED, _RUN_FINISHED})
"""The followed types whose payload the ledger reads; the others only need to be there."""
_UNREAD: Final[dict[str, Any]] = {}
"""The payload of a followed event whose payload the ledger does not read: a plain dict,
which pickles (an :class:`UnvouchedScan` part sends it to the parent); never written to."""


def unvouched_in_stored(events: Iterable[Event]) -> tuple[UnvouchedCall, ...]:
    """:func:`unvouched_calls` of a run read with ``decode=False``, in one pass: only the
    payloads the ledger reads are decoded, one at a time. A payload that is not JSON (a
    tampered row, which verification reports) is passed over as an erased one is."""

    def seen() -> Iterator[_Seen]:
        loads = orjson.loads
        for event in events:
            kind = event.type
            if kind not in FOLLOWED:
                continue
            payload = event.payload
            if payload is None:
                if event.payload_bytes is None:
                    continue  # erased
                if kind not in _READS_PAYLOAD:
                    payload = _UNREAD
                else:
                    try:
                        payload = loads(event.payload_bytes)
                    except (orjson.JSONDecodeError, TypeError):
                        continue
            yield _Seen(kind, payload, event.seq)

    return _unvouched(seen())


class _Asked(NamedTuple):
    """The tool calls a model answer asks for, read from it where it was read (a worker
    process): what the ledger reads of a ``model.response`` payload."""

    calls: tuple[RequestedCall, ...]


class _Stretch:
    """Tool events and recorded choices between two other followed events, as the ledger
    reads them: how many ``tool.requested`` of each tool name, and whether a choice was
    recorded. Within such a stretch their order changes nothing (each takes the earliest
    open call of its own name, or counts as another tool; a choice only sets a flag that the
    next settling reads), so a run of tools and choices of any length is held in the space
    of its tool names."""

    __slots__ = ("decided", "tools")

    def __init__(self) -> None:
        self.tools: dict[str | None, int] = {}
        self.decided = False


def _apply(ledger: ToolLedger, item: _Seen | _Stretch) -> None:
    if type(item) is _Stretch:
        if item.decided:
            ledger.observe(_DECISION, _UNREAD, 0)
        for name, count in item.tools.items():
            payload = {"tool": name}
            for _ in range(count):
                ledger.observe(_TOOL_REQUESTED, payload, 0)
    else:
        assert type(item) is _Seen
        ledger.observe(item.type, item.payload, item.seq)


def _stretch(items: list[_Seen | _Stretch]) -> _Stretch:
    last = items[-1] if items else None
    if type(last) is _Stretch:
        return last
    made = _Stretch()
    items.append(made)
    return made


class _Steps:
    """A part of an :class:`UnvouchedScan`: what the ledger reads of some consecutive stored
    rows, in constant space where it can.

    The ledger's state on entering the part is not known here (an earlier chunk may have
    left calls open), so the followed events up to the part's first settling point (a model
    request, or a run's end that was not an abort: each closes every open call) are kept,
    tools and choices as :class:`_Stretch` values. From there the state is known, that of a
    new ledger: a ledger of the part's own follows the rest, and only what it found and the
    events since its last settling point (which may leave calls open for the next part) are
    kept. Everything kept is plain values (tool names, seqs, the calls a model answer asks
    for), whatever the stored payloads hold. What :func:`unvouched_in_stored` passes over (an
    erased payload, one that is not JSON, one that is JSON ``null``) is passed over here."""

    __slots__ = ("head", "ledger", "listed", "tail")

    def __init__(self) -> None:
        self.head: list[_Seen | _Stretch] = []
        self.ledger: ToolLedger | None = None
        self.tail: list[_Seen | _Stretch] = []
        self.listed: list[UnvouchedCall] = []

    def _tool(self, name: str | None = None, decided: bool = False) -> None:
        if self.ledger is not None:
            if decided:
                self.ledger.observe(_DECISION, _UNREAD, 0)
            else:
                self.ledger.observe(_TOOL_REQUESTED, {"tool": name}, 0)
        stretch = _stretch(self.head if self.ledger is None else self.tail)
        if decided:
            stretch.decided = True
        else:
            stretch.tools[name] = stretch.tools.get(name, 0) + 1

    def _step(self, step: _Seen, settles: bool) -> None:
        if self.ledger is None:
            self.head.append(step)
            if settles:
                self.ledger = ToolLedger()
            return
        self.ledger.observe(step.type, step.payload, step.seq)
        if settles:
            self.tail = []
        else:
            self.tail.append(step)

    def feed(self, rows: Sequence[Any]) -> None:
        loads = orjson.loads
        for row in rows:
            kind = row[5]  # StoredRow.type
            if kind not in FOLLOWED:
                continue
            if row[15] is None:  # StoredRow.payload_bytes
                continue  # erased
            if kind in (_DECISION, _PLAN_SELECTED):
                self._tool(decided=True)
                continue
            if kind == _MODEL_REQUEST:
                self._step(_Seen(kind, _UNREAD, row[2]), True)
                continue
            if kind == _HANDOFF:
                self._step(_Seen(kind, _UNREAD, row[2]), False)
                continue
            try:
                payload = loads(row[15])
            except (orjson.JSONDecodeError, TypeError):
                continue
            if payload is None:
                continue
            is_map = isinstance(payload, _MAPS)
            if kind == _TOOL_REQUESTED:
                name = payload.get("tool") if is_map else None
                self._tool(name if isinstance(name, str) else None)  # never equals a tool
            elif kind == _MODEL_RESPONSE:
                calls = requested_tool_calls(payload.get("response") if is_map else None)
                if calls:  # an answer that asks for nothing changes nothing in the ledger
                    self._step(_Seen(kind, _Asked(calls), row[2]), False)
            else:  # run.finished: the calls it lists, and whether it ended in an abort
                listed = payload.get(FIELD) if is_map else None
                for item in listed if isinstance(listed, list) else ():
                    call = UnvouchedCall.from_dict(item) if isinstance(item, _MAPS) else None
                    if call is not None:
                        self.listed.append(call)
                aborted = is_map and payload.get("status") == "aborted"
                self._step(_Seen(kind, _ABORTED if aborted else _UNREAD, row[2]), not aborted)

    def result(self) -> tuple[Any, ...]:
        middle = None if self.ledger is None else tuple(self.ledger.unvouched)
        return (self.head, middle, self.tail if middle is not None else [], self.listed)


_ABORTED: Final[dict[str, Any]] = {"status": "aborted"}


class UnvouchedScan:
    """:func:`unvouched_in_stored` as a scan (:mod:`tachograph.record.scan`): handed to
    ``verify_stored`` (``scans=[UnvouchedScan()]``), it reads a run's model answers and tool
    events in the same read as its verification, decoding them in the verification's
    workers where it has some; the report's ``scanned["unvouched"]`` is the run's tuple of
    :class:`UnvouchedCall` (``None`` if the run could not be read whole)."""

    __slots__ = ()

    @property
    def name(self) -> str:
        return FIELD

    def begin(self) -> _Steps:
        return _Steps()

    def join(self, run_id: str | None, parts: Sequence[Any]) -> tuple[UnvouchedCall, ...]:
        ledger = ToolLedger()
        listed: list[UnvouchedCall] = []
        for head, middle, tail, part_listed in parts:
            for item in head:
                _apply(ledger, item)
            if middle is not None:
                # the head ended in a settling point, where the part's own ledger began:
                # what it found stands, and the ledger here is where it was after its last
                ledger.unvouched.extend(middle)
                for item in tail:
                    _apply(ledger, item)
            listed.extend(part_listed)
        return _finish(ledger, listed)


def _unvouched(events: Iterable[Event] | Iterable[_Seen]) -> tuple[UnvouchedCall, ...]:
    ledger = ToolLedger()
    listed: list[UnvouchedCall] = []
    # One pass: only a model answer opens a call to vouch for, so in a run without one the
    # ledger never holds an open call and finds nothing; what run.finished lists counts
    # either way.
    observe = ledger.observe
    for event in events:
        payload = event.payload
        if payload is None:
            continue
        kind = event.type
        if kind in FOLLOWED:
            observe(kind, payload, event.seq)
        if kind == _RUN_FINISHED:
            items = payload.get(FIELD) if isinstance(payload, _MAPS) else None
            for item in items if isinstance(items, list) else ():  # a forged 5 lists nothing
                call = UnvouchedCall.from_dict(item) if isinstance(item, _MAPS) else None
                if call is not None:
                    listed.append(call)
    return _finish(ledger, listed)


def _finish(ledger: ToolLedger, listed: list[UnvouchedCall]) -> tuple[UnvouchedCall, ...]:
    # Calls still open at the end of a run that never finished (a crash) are not judged:
    # a resume may yet record them.
    seen_calls = {(c.tool, c.seq) for c in ledger.unvouched}
    out = list(ledger.unvouched) + [c for c in listed if (c.tool, c.seq) not in seen_calls]
    out.sort(key=lambda c: c.seq)
    return tuple(out)
