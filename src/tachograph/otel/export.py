"""After the fact: a recorded run as OpenTelemetry spans, sent over OTLP/HTTP.

A run recorded without any tracing can still be looked at in a tracing backend. The spans are
the ones the live bridge makes (``invoke_agent {actor}``, ``chat {model}``,
``execute_tool {name}``, every event a span event on its span) with the **recorded**
timestamps, and the recorded trace and span ids where the run has them:

* a run recorded with the bridge's GenAI spans keeps its trace id and the span ids its events
  name (exporting it again sends the same ids, which backends treat as the same spans);
* a run recorded inside someone else's span (the bridge without GenAI spans, or the agent's own
  tracing) is exported into that trace, its ``invoke_agent`` span a child of the recorded span;
* a run recorded without tracing gets ids derived from its run id (SHA-256), so exporting it
  twice gives the same trace.

The spans are built on a dedicated ``TracerProvider`` (never the global one) whose id generator
hands out the ids decided here, and sent in one request per run.
"""

from __future__ import annotations

import calendar
import hashlib
import logging
import os
import time
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._version import __version__
from ..record.event import Event, EventType
from ..store.base import Store
from ..views.text import redact_url
from . import attributes as A
from . import spans as S

__all__ = [
    "DEFAULT_ENDPOINT",
    "ExportResult",
    "SpanPlan",
    "build_spans",
    "export_run",
    "plan_ids",
    "resolve_endpoint",
    "ts_to_ns",
]

DEFAULT_ENDPOINT = "http://localhost:4318/v1/traces"
"""Where OTLP/HTTP traces go when nothing else is said (the OTLP default)."""

_TRACES_PATH = "/v1/traces"


class _CredentialsHidden(logging.Filter):
    """The exporter's own log lines (a failed or retried export) without the endpoint's
    password or the values of its credential query parameters: they name the URL, or its
    path and query, as given."""

    def __init__(self, url: str) -> None:
        super().__init__()
        self.secrets = [s for s in _url_secrets(url) if len(s) >= 4]

    def filter(self, record: logging.LogRecord) -> bool:
        if self.secrets:
            text = record.getMessage()
            hidden = text
            for secret in self.secrets:
                hidden = hidden.replace(secret, "***")
            if hidden != text:
                record.msg, record.args = hidden, ()
        return True


def _url_secrets(url: str) -> list[str]:
    """The password and the credential query values of ``url`` (what redact_url hides)."""
    shown = redact_url(url)
    if shown == url:
        return []
    parts = urllib.parse.urlsplit(url)
    found = [parts.password] if parts.password else []
    for key, value in urllib.parse.parse_qsl(parts.query, keep_blank_values=True):
        if value and f"{urllib.parse.quote(key, safe='')}=***" in shown:
            found += [value, urllib.parse.quote(value, safe="")]
    return found


def resolve_endpoint(endpoint: str | None = None, environ: Mapping[str, str] | None = None) -> str:
    """The traces URL: ``endpoint`` as given; else ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` as
    given; else ``OTEL_EXPORTER_OTLP_ENDPOINT`` with ``/v1/traces`` appended; else
    :data:`DEFAULT_ENDPOINT`."""
    env = os.environ if environ is None else environ
    if endpoint:
        return endpoint
    traces = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
    if traces:
        return traces
    base = env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
    if base:
        return base.rstrip("/") + _TRACES_PATH
    return DEFAULT_ENDPOINT


def ts_to_ns(ts: str) -> int:
    """An envelope ``ts`` (``YYYY-MM-DDTHH:MM:SS.ffffffZ``) as integer unix nanoseconds."""
    seconds = calendar.timegm(time.strptime(ts[:19], "%Y-%m-%dT%H:%M:%S"))
    return seconds * 1_000_000_000 + int(ts[20:26]) * 1000


def _derived(size: int, *parts: str) -> str:
    digest = hashlib.sha256("\x1f".join(parts).encode("utf-8")).hexdigest()[: size * 2]
    if int(digest, 16) == 0:  # pragma: no cover - 2**-64 at worst
        digest = "0" * (size * 2 - 1) + "1"
    return digest


@dataclass(frozen=True)
class SpanPlan:
    """The ids the exported spans get, decided from the recorded events."""

    trace_id: str
    root_span_id: str
    parent_span_id: str | None
    """A recorded span the run happened inside (the root's remote parent), if any."""
    call_span_ids: Mapping[int, str]
    """Span id per request event seq."""
    recorded: bool
    """True when the ids are the ones recorded by the live bridge."""


def plan_ids(events: Sequence[Event]) -> SpanPlan:
    """Decide trace and span ids for a run; see the module docstring."""
    first = events[0]
    requests = [e for e in events if e.type in S.REQUEST_TYPES]
    bridged = (
        first.trace_id is not None
        and first.span_id is not None
        and any(r.span_id is not None and r.span_id != first.span_id for r in requests)
    )
    if bridged and first.trace_id is not None and first.span_id is not None:
        trace_id, root, parent = first.trace_id, first.span_id, None
    elif first.trace_id is not None and first.span_id is not None:
        trace_id = first.trace_id
        root = _derived(8, first.tenant, first.run_id, "root")
        parent = first.span_id
    else:
        trace_id = _derived(16, first.tenant, first.run_id)
        root = _derived(8, first.tenant, first.run_id, "root")
        parent = None
    used = {root}
    calls: dict[int, str] = {}
    for request in requests:
        span_id = request.span_id
        if not bridged or span_id is None or span_id in used or request.trace_id != trace_id:
            span_id = _derived(8, first.tenant, first.run_id, str(request.seq))
        used.add(span_id)
        calls[request.seq] = span_id
    return SpanPlan(trace_id, root, parent, calls, bridged)


def _completion_of(events: Sequence[Event]) -> dict[int, Event]:
    """Request seq -> its completion, matched by idempotency key (in order, for repeats)."""
    open_: dict[tuple[str, str | None], list[Event]] = {}
    out: dict[int, Event] = {}
    for event in events:
        kind = event.type.split(".", 1)[0]
        if event.type in S.REQUEST_TYPES:
            open_.setdefault((kind, event.idempotency_key), []).append(event)
        elif event.type in S.COMPLETION_TYPES:
            pending = open_.get((kind, event.idempotency_key))
            if pending:
                out[pending.pop(0).seq] = event
    return out


def build_spans(
    events: Sequence[Event],
    *,
    capture_content: bool = False,
    resource_attributes: Mapping[str, Any] | None = None,
) -> list[Any]:
    """The run as finished SDK spans (``ReadableSpan``), not yet exported."""
    from opentelemetry import trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, SpanProcessor, TracerProvider
    from opentelemetry.sdk.trace.id_generator import IdGenerator
    from opentelemetry.trace import (
        NonRecordingSpan,
        SpanContext,
        SpanKind,
        Status,
        StatusCode,
        TraceFlags,
    )

    if not events or events[0].type != EventType.RUN_STARTED.value:
        raise ValueError("a run to export must begin with run.started")
    plan = plan_ids(events)

    class _Ids(IdGenerator):
        next_span_id = 0

        def generate_trace_id(self) -> int:
            return int(plan.trace_id, 16)

        def generate_span_id(self) -> int:
            return self.next_span_id

    class _Collect(SpanProcessor):
        def __init__(self) -> None:
            self.spans: list[ReadableSpan] = []

        def on_end(self, span: ReadableSpan) -> None:
            self.spans.append(span)

    ids = _Ids()
    collect = _Collect()
    attrs = {"service.name": "tachograph"}
    attrs.update(resource_attributes or {})
    # A run can hold far more events than the default 128 span events per span.
    limits = SpanLimits(max_events=max(1024, 2 * len(events)))
    provider = TracerProvider(resource=Resource.create(attrs), id_generator=ids, span_limits=limits)
    provider.add_span_processor(collect)
    tracer = provider.get_tracer("tachograph", __version__)

    first, last = events[0], events[-1]
    context = None
    if plan.parent_span_id is not None:
        remote = SpanContext(
            int(plan.trace_id, 16),
            int(plan.parent_span_id, 16),
            is_remote=True,
            trace_flags=TraceFlags(TraceFlags.SAMPLED),
        )
        context = trace.set_span_in_context(NonRecordingSpan(remote))
    ids.next_span_id = int(plan.root_span_id, 16)
    # From the record alone, never from this process's declared models: the same run
    # exports the same spans wherever it is exported from.
    root_attrs = S.agent_start_attributes(
        first, content=capture_content, provider=S.run_provider(events)
    )
    root = tracer.start_span(
        S.agent_span_name(first.actor),
        context=context,
        kind=SpanKind.INTERNAL,
        attributes=root_attrs,
        start_time=ts_to_ns(first.ts),
    )
    root_ctx = trace.set_span_in_context(root)
    completions = _completion_of(events)
    owner: dict[int, Any] = {}  # event seq -> span it belongs to
    call_ids = S.ToolCallIds()
    for request in events:
        if request.type == EventType.MODEL_RESPONSE.value and isinstance(request.payload, dict):
            call_ids.answered(request.payload.get("response"))
        if request.seq not in plan.call_span_ids:
            continue
        ids.next_span_id = int(plan.call_span_ids[request.seq], 16)
        payload = request.payload if isinstance(request.payload, dict) else {}
        if request.type == EventType.MODEL_REQUEST.value:
            span = tracer.start_span(
                S.chat_span_name(request.model),
                context=root_ctx,
                kind=SpanKind.CLIENT,
                attributes=S.chat_start_attributes(
                    request.type,
                    payload,
                    run_id=request.run_id,
                    model=request.model,
                    seed=request.seed,
                    content=capture_content,
                ),
                start_time=ts_to_ns(request.ts),
            )
        else:
            span = tracer.start_span(
                S.tool_span_name(payload.get("tool")),
                context=root_ctx,
                kind=SpanKind.INTERNAL,
                attributes=S.tool_start_attributes(
                    payload,
                    key=request.idempotency_key,
                    content=capture_content,
                    call_id=call_ids.claim(payload.get("tool"), payload.get("args")),
                ),
                start_time=ts_to_ns(request.ts),
            )
        owner[request.seq] = span
        done = completions.get(request.seq)
        if done is not None:
            owner[done.seq] = span
    for event in events:
        target = owner.get(event.seq, root)
        target.add_event(
            event.type,
            attributes=S.event_attributes(event, content=capture_content),
            timestamp=ts_to_ns(event.ts),
        )
    for request_seq, span in sorted(
        ((seq, owner[seq]) for seq in plan.call_span_ids), key=lambda item: item[0]
    ):
        done = completions.get(request_seq)
        if done is None:  # an intent with no completion: the run stopped inside this call
            span.set_attribute(A.TACHO_STATUS, A.STATUS_UNFINISHED)
            span.set_status(Status(StatusCode.ERROR, "no completion was recorded"))
            span.end(end_time=ts_to_ns(last.ts))
            continue
        if done.type.startswith("model."):
            span.set_attributes(S.chat_end_attributes(done, content=capture_content))
        else:
            span.set_attributes(S.tool_end_attributes(done, content=capture_content))
        if done.type.endswith(".failed"):
            span.set_status(
                Status(StatusCode.ERROR, S.error_message(done, content=capture_content))
            )
        span.end(end_time=ts_to_ns(done.ts))
    if last.type == EventType.RUN_FINISHED.value:
        root.set_attributes(S.agent_end_attributes(last, content=capture_content))
        payload = last.payload if isinstance(last.payload, dict) else {}
        if payload.get("status") in ("error", "aborted"):
            root.set_status(
                Status(StatusCode.ERROR, S.error_message(last, content=capture_content))
            )
    else:
        root.set_attribute(A.TACHO_STATUS, A.STATUS_UNFINISHED)
    root.end(end_time=ts_to_ns(last.ts))
    provider.shutdown()
    return collect.spans


@dataclass(frozen=True)
class ExportResult:
    """What :func:`export_run` did."""

    run_id: str
    endpoint: str
    trace_id: str
    spans: int
    span_events: int
    ok: bool
    recorded_ids: bool
    """True when the ids are the ones the live bridge recorded (else derived or nested)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON form (``tacho otel export --json``)."""
        return {
            "run_id": self.run_id,
            "endpoint": self.endpoint,
            "trace_id": self.trace_id,
            "spans": self.spans,
            "span_events": self.span_events,
            "ok": self.ok,
            "recorded_ids": self.recorded_ids,
        }


def export_run(
    store: Store,
    run_id: str,
    *,
    endpoint: str | None = None,
    tenant: str | None = None,
    headers: Mapping[str, str] | None = None,
    timeout: float = 10.0,
    capture_content: bool | None = None,
    service_name: str = "tachograph",
    exporter: Any = None,
    purpose: str = "debug",
) -> ExportResult:
    """Send one recorded run to an OTLP/HTTP endpoint as spans; see the module docstring.

    ``endpoint`` is resolved by :func:`resolve_endpoint`. ``capture_content=None`` follows
    ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``. ``exporter`` replaces the OTLP
    exporter (any OpenTelemetry ``SpanExporter``). A failed export is logged by the exporter
    and reported as ``ok=False``; it is not raised. The run is read for ``purpose`` (default
    ``debug``, as ``tacho otel export``'s) under the purpose policy in force, the read
    recorded in the store audit; payloads the purpose may not read stay off the spans.
    """
    from opentelemetry.sdk.trace.export import SpanExportResult

    from ..lifecycle.purpose import reading

    events = reading(store, purpose).events(run_id, tenant=tenant)
    if not events:
        store.run_info(run_id, tenant=tenant)  # raises RunNotFound with close matches
    content = S.capture_content_from_env() if capture_content is None else capture_content
    spans = build_spans(
        events, capture_content=content, resource_attributes={"service.name": service_name}
    )
    url = resolve_endpoint(endpoint)
    own_exporter = exporter is None
    if exporter is None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter(
            endpoint=url, headers=dict(headers) if headers else None, timeout=timeout
        )
    # a logger's filter sees the records logged to it, not its children's: the exporter's own
    hiding = _CredentialsHidden(url)
    exporter_log = logging.getLogger(type(exporter).__module__)
    exporter_log.addFilter(hiding)
    try:
        outcome = exporter.export(spans)
    finally:
        if own_exporter:
            exporter.shutdown()
        exporter_log.removeFilter(hiding)
    plan = plan_ids(events)
    return ExportResult(
        run_id=run_id,
        endpoint=redact_url(url),  # printed and in --json: no password, no api_key= value
        trace_id=plan.trace_id,
        spans=len(spans),
        span_events=sum(len(s.events) for s in spans),
        ok=outcome is SpanExportResult.SUCCESS,
        recorded_ids=plan.recorded,
    )


def parse_headers(pairs: Iterable[str]) -> dict[str, str]:
    """``KEY=VALUE`` strings as a dict (for ``--header``)."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"header {pair!r} must look like KEY=VALUE")
        out[key.strip()] = value.strip()
    return out
