"""The live bridge: every recorded event becomes a span event, and GenAI spans around the calls.

:class:`TachographSpanObserver` is a recorder :class:`~tachograph.capture.recorder.Observer`.
For each appended event it adds a span event (named after the event type, with
``tachograph.run_id``, ``tachograph.seq``, ``tachograph.event_id`` and ``tachograph.hash``) to
the span the event happened in, and the event records that span's trace and span ids: the
trace says where and when, the event log says why and what exactly, and each points at the
other.

With ``genai_spans=True`` (the default) the bridge also creates the spans of the OpenTelemetry
GenAI semantic conventions itself: ``invoke_agent {actor}`` (INTERNAL) for the run, made the
current span while the run is recorded so that the agent's own spans nest under it;
``chat {model}`` (CLIENT) from ``model.request`` to ``model.response`` / ``model.failed``; and
``execute_tool {name}`` (INTERNAL) from ``tool.requested`` to its completion. Requests and
completions are matched by idempotency key.

Observability never breaks the host: every failure in here is logged on the
``tachograph.otel`` logger and swallowed (an exporter's own failure is logged by the
OpenTelemetry SDK). A replay records nothing and so emits nothing. A fork records a new run,
which is emitted like any recording, except for the steps it serves from its parent: those are
replays of what already happened, and emit nothing unless ``replayed=True``. A resume emits
its live steps under a fresh ``invoke_agent`` span marked ``tachograph.resumed``.
"""

from __future__ import annotations

import logging
import threading
import weakref
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, TracerProvider

from .._version import __version__
from ..capture.recorder import Observer, Recorder
from ..record.event import Event, EventType
from . import attributes as A
from . import spans as S

__all__ = ["TachographSpanObserver"]

_log = logging.getLogger("tachograph.otel")

_SCOPE = "tachograph"
_SCOPE_VERSION = __version__
# Read per event: constants, as ``EventType.X.value`` is an enum property (~1 us on 3.11).
_RUN_STARTED = EventType.RUN_STARTED.value
_RUN_FINISHED = EventType.RUN_FINISHED.value
_MODEL_REQUEST = EventType.MODEL_REQUEST.value
_MODEL_RESPONSE = EventType.MODEL_RESPONSE.value

Ids = tuple[str | None, str | None]


def _ids(span: Span) -> Ids:
    ctx = span.get_span_context()
    if not ctx.is_valid:
        return None, None
    return f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}"


@dataclass
class _RunState:
    """What the bridge keeps per run being recorded."""

    root: Span | None = None
    token: Any = None
    replay_until: int = 0
    calls: dict[tuple[str, str | None], list[Span]] = field(default_factory=dict)
    spans: dict[str, Span] = field(default_factory=dict)
    call_ids: S.ToolCallIds = field(default_factory=S.ToolCallIds)

    def replayed(self, seq: int) -> bool:
        return 0 < seq <= self.replay_until


def _kind_of(event_type: str) -> str:
    return "model" if event_type.startswith("model.") else "tool"


class TachographSpanObserver(Observer):
    """Turns recorded events into OpenTelemetry span events (and GenAI spans); see the module.

    ``tracer_provider`` defaults to the global one. ``capture_content=None`` follows
    ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``; message content (requests,
    responses, tool arguments and results, run input and output, decisions' reasons) is put on
    spans only when it is on. ``replayed=True`` also emits the steps a fork serves from its
    parent.
    """

    def __init__(
        self,
        tracer_provider: TracerProvider | None = None,
        *,
        genai_spans: bool = True,
        capture_content: bool | None = None,
        replayed: bool = False,
    ) -> None:
        self.tracer = trace.get_tracer(_SCOPE, _SCOPE_VERSION, tracer_provider=tracer_provider)
        self.genai_spans = genai_spans
        self.capture_content = (
            S.capture_content_from_env() if capture_content is None else capture_content
        )
        self.replayed = replayed
        self._lock = threading.Lock()
        self._runs: weakref.WeakKeyDictionary[Recorder, _RunState] = weakref.WeakKeyDictionary()

    def __repr__(self) -> str:
        return (
            f"TachographSpanObserver(genai_spans={self.genai_spans}, "
            f"capture_content={self.capture_content}, replayed={self.replayed})"
        )

    # -- Observer --------------------------------------------------------------------------

    def before(
        self,
        recorder: Recorder,
        type: str,
        payload: dict[str, Any],
        *,
        idempotency_key: str | None,
        model: str | None,
    ) -> Ids | None:
        """Start the span an event opens and return the ids the event is to carry."""
        try:
            return self._before(recorder, type, payload, idempotency_key, model)
        except Exception:
            _log.exception("tachograph.otel: could not trace a %s event", type)
            return None

    def after(self, recorder: Recorder, event: Event) -> None:
        """Add the event as a span event; end the span it closes."""
        try:
            self._after(recorder, event)
        except Exception:
            _log.exception("tachograph.otel: could not trace event %s", event.seq)

    # -- internals -------------------------------------------------------------------------

    def _state(self, recorder: Recorder) -> _RunState:
        with self._lock:
            state = self._runs.get(recorder)
            if state is None:
                state = self._runs[recorder] = _RunState()
            return state

    def _parent_context(self, state: _RunState) -> Any:
        """The context a new call span starts in: the current span if it is in the run's
        trace (a span of the agent's own, nested under ``invoke_agent``), else the root."""
        current = trace.get_current_span()
        ctx = current.get_span_context()
        if state.root is None:
            return None
        root_ctx = state.root.get_span_context()
        if ctx.is_valid and ctx.trace_id == root_ctx.trace_id:
            return None
        return trace.set_span_in_context(state.root)

    def _ensure_root(self, recorder: Recorder, state: _RunState) -> None:
        """A run we did not see start (a resume, or instrumentation turned on mid-run)."""
        if state.root is not None:
            return
        span = self.tracer.start_span(
            S.agent_span_name(recorder.actor),
            kind=SpanKind.INTERNAL,
            attributes={
                A.GEN_AI_OPERATION_NAME: A.OP_INVOKE_AGENT,
                A.GEN_AI_AGENT_NAME: recorder.actor,
                A.GEN_AI_CONVERSATION_ID: recorder.run_id,
                A.TACHO_RUN_ID: recorder.run_id,
                A.TACHO_RESUMED: True,
                A.TACHO_RESUMED_AT: recorder.next_seq,
            },
        )
        state.root = span
        self._remember(state, span)

    def _remember(self, state: _RunState, span: Span) -> None:
        span_id = _ids(span)[1]
        if span_id is not None:
            with self._lock:
                state.spans[span_id] = span

    def _before(
        self,
        recorder: Recorder,
        type_: str,
        payload: dict[str, Any],
        key: str | None,
        model: str | None,
    ) -> Ids | None:
        state = self._state(recorder)
        if not self.genai_spans:
            return None  # the recorder takes the current span's ids
        if type_ == _RUN_STARTED:
            return self._start_run(recorder, state, payload)
        self._ensure_root(recorder, state)
        assert state.root is not None
        root_ids = _ids(state.root)
        if not self.replayed and state.replayed(recorder.next_seq):
            return root_ids
        if type_ in S.REQUEST_TYPES:
            return self._start_call(recorder, state, type_, payload, key, model)
        if type_ in S.COMPLETION_TYPES:
            with self._lock:
                open_calls = state.calls.get((_kind_of(type_), key))
                span = open_calls[-1] if open_calls else None
            return _ids(span) if span is not None else root_ids
        if type_ == _RUN_FINISHED:
            return root_ids
        current = trace.get_current_span()
        ctx = current.get_span_context()
        if ctx.is_valid and f"{ctx.trace_id:032x}" == root_ids[0]:
            return None  # the current span (ours or the agent's own, under our root)
        return root_ids

    def _start_run(self, recorder: Recorder, state: _RunState, payload: dict[str, Any]) -> Ids:
        probe = _probe_event(recorder, _RUN_STARTED, payload)
        span = self.tracer.start_span(
            S.agent_span_name(recorder.actor),
            kind=SpanKind.INTERNAL,
            attributes=S.agent_start_attributes(
                probe, content=self.capture_content, provider=S.declared_run_provider(probe)
            ),
        )
        parent = payload.get("parent")
        if isinstance(parent, dict) and type(parent.get("seq")) is int:
            state.replay_until = parent["seq"]
        state.root = span
        self._remember(state, span)
        # The run's span is current while the run is recorded, so that the agent's own spans
        # (and other instrumentations') nest under it.
        state.token = otel_context.attach(trace.set_span_in_context(span))
        return _ids(span)

    def _start_call(
        self,
        recorder: Recorder,
        state: _RunState,
        type_: str,
        payload: dict[str, Any],
        key: str | None,
        model: str | None,
    ) -> Ids:
        if type_ == _MODEL_REQUEST:
            seed = payload.get("request", {}).get("seed") if isinstance(payload, dict) else None
            span = self.tracer.start_span(
                S.chat_span_name(model),
                context=self._parent_context(state),
                kind=SpanKind.CLIENT,
                attributes=S.chat_start_attributes(
                    type_,
                    payload,
                    run_id=recorder.run_id,
                    model=model,
                    seed=seed if type(seed) is int else None,
                    content=self.capture_content,
                    declared_provider=S.provider_of(model),
                ),
            )
        else:
            span = self.tracer.start_span(
                S.tool_span_name(payload.get("tool")),
                context=self._parent_context(state),
                kind=SpanKind.INTERNAL,
                attributes=S.tool_start_attributes(
                    payload,
                    key=key,
                    content=self.capture_content,
                    call_id=state.call_ids.claim(payload.get("tool"), payload.get("args")),
                ),
            )
        with self._lock:
            state.calls.setdefault((_kind_of(type_), key), []).append(span)
        self._remember(state, span)
        return _ids(span)

    def _target(self, state: _RunState, event: Event) -> Span | None:
        if event.span_id is not None:
            with self._lock:
                span = state.spans.get(event.span_id)
            if span is not None:
                return span
            current = trace.get_current_span()
            if _ids(current) == (event.trace_id, event.span_id):
                return current
        return None

    def _after(self, recorder: Recorder, event: Event) -> None:
        state = self._state(recorder)
        skipped = not self.replayed and state.replayed(event.seq)
        if not skipped:
            target = self._target(state, event)
            if target is not None:
                target.add_event(
                    event.type, attributes=S.event_attributes(event, content=self.capture_content)
                )
        if not self.genai_spans:
            if event.type == _RUN_FINISHED:
                with self._lock:
                    self._runs.pop(recorder, None)
            return
        if event.type == _MODEL_RESPONSE and isinstance(event.payload, dict):
            state.call_ids.answered(event.payload.get("response"))
        if event.type in S.COMPLETION_TYPES and not skipped:
            self._end_call(state, event)
        elif event.type == _RUN_FINISHED:
            self._end_run(recorder, state, event)

    def _end_call(self, state: _RunState, event: Event) -> None:
        with self._lock:
            open_calls = state.calls.get((_kind_of(event.type), event.idempotency_key))
            span = open_calls.pop() if open_calls else None
            if open_calls == []:
                del state.calls[(_kind_of(event.type), event.idempotency_key)]
            if span is not None:
                state.spans.pop(_ids(span)[1] or "", None)
        if span is None:
            return
        if event.type.startswith("model."):
            span.set_attributes(S.chat_end_attributes(event, content=self.capture_content))
        else:
            span.set_attributes(S.tool_end_attributes(event, content=self.capture_content))
        if event.type.endswith(".failed"):
            span.set_status(
                Status(StatusCode.ERROR, S.error_message(event, content=self.capture_content))
            )
        span.end()

    def _end_run(self, recorder: Recorder, state: _RunState, event: Event) -> None:
        with self._lock:
            self._runs.pop(recorder, None)
            leftovers = [span for spans in state.calls.values() for span in spans]
            state.calls.clear()
            state.spans.clear()
        for span in leftovers:  # calls that never completed: the run ended inside them
            span.set_attribute(A.TACHO_STATUS, A.STATUS_UNFINISHED)
            span.set_status(Status(StatusCode.ERROR, "the run finished before the call did"))
            span.end()
        root = state.root
        if root is None:
            return
        root.set_attributes(S.agent_end_attributes(event, content=self.capture_content))
        payload = event.payload if isinstance(event.payload, dict) else {}
        if payload.get("status") in ("error", "aborted"):
            root.set_status(
                Status(StatusCode.ERROR, S.error_message(event, content=self.capture_content))
            )
        if state.token is not None:
            try:
                otel_context.detach(state.token)
            except Exception:  # a run finished in another context than it started in
                _log.debug("tachograph.otel: could not detach the run's context", exc_info=True)
        root.end()


def _probe_event(recorder: Recorder, type_: str, payload: dict[str, Any]) -> Event:
    """A stand-in event (not recorded, not hashed) to compute span attributes from."""
    return Event(
        1,
        recorder.tenant,
        recorder.run_id,
        recorder.next_seq,
        "",
        "",
        type_,
        recorder.actor,
        None,
        None,
        None,
        None,
        None,
        "",
        None,
        "",
        payload,
        None,
    )
