"""Import: GenAI traces (OTLP/JSON) recorded as tachograph runs.

Each trace becomes one run (or one run per top-level agent span, when a trace holds several),
so that traces from other instrumentations can be folded, diffed and kept beside native runs.
The run is labelled as imported (``run.started`` labels ``tachograph.imported: "otlp"``,
``tachograph.dialect``, ``tachograph.content_captured``, ``tachograph.imported_at``) and built
with tachograph's own :func:`~tachograph.record.event.new_event`, so it hashes, chains and verifies
like any run.

Mapping (see docs/otel.md): the agent span gives ``run.started`` (at its start) and
``run.finished`` (at its end); each model span ``model.request`` / ``model.response`` (or
``model.failed``); each tool span ``tool.requested`` / ``tool.completed`` (or ``tool.failed``).
Every event keeps the trace id and the span id it came from. What tachograph's own spans mark
``tachograph.status=unfinished`` stays open: an agent span gives no ``run.finished``, a call
span no completion (a crash is never turned into a failure, or into a finished run).

Timestamps: the envelope ``ts`` is "the wall clock at recording", and a trace was recorded by
its instrumentation when the spans happened, so ``ts`` is the span's start (requests) or end
(completions) time, at microsecond precision; the moment of the import is the
``tachograph.imported_at`` label. Events are in time order, so ``ts`` never goes backwards.

Content is present only where the trace captured it: what is missing is listed in the payload's
``not_captured`` (``["messages"]``, ``["message"]``, ``["args"]``, ``["result"]``,
``["input"]``, ``["output"]``), never recorded as empty. A tool's effect is the
``tachograph.effect`` its span names (tachograph's own spans); elsewhere it is unknown, and so
recorded as ``irreversible`` (tachograph's default for an unclassified tool).
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from .._version import __version__
from ..errors import FormatError, ProfileError
from ..privacy.redactor import default_processors
from ..record.canonical import canonical
from ..record.event import Event, EventType, now_ts
from ..record.seal import KeyDeriver, Processor, Sealer
from ..store.base import Store
from . import attributes as A
from .dialects import Step, classify, detect_dialect, extract_steps
from .otlp_json import OtlpSpan, parse_otlp_json

__all__ = ["ImportResult", "ImportedRun", "import_otlp", "runs_from_spans"]

_RECORDER = f"tachograph-{__version__}"


@dataclass(frozen=True)
class ImportedRun:
    """One run built from a trace (not yet stored)."""

    run_id: str
    trace_id: str
    dialect: str
    events: tuple[Event, ...]
    skipped: bool = False
    """True when the store already had this run (importing twice is harmless)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON form (``tacho otel import --json``)."""
        return {
            "run_id": self.run_id,
            "trace_id": self.trace_id,
            "dialect": self.dialect,
            "events": len(self.events),
            "skipped": self.skipped,
        }


@dataclass(frozen=True)
class ImportResult:
    """What :func:`import_otlp` did."""

    source: str
    spans: int
    runs: tuple[ImportedRun, ...] = field(default_factory=tuple)

    @property
    def written(self) -> int:
        """Events written (runs already present are skipped)."""
        return sum(len(r.events) for r in self.runs if not r.skipped)

    def to_dict(self) -> dict[str, Any]:
        """JSON form (``tacho otel import --json``)."""
        return {
            "source": self.source,
            "spans": self.spans,
            "runs": [r.to_dict() for r in self.runs],
            "written": self.written,
        }


def _ts(ns: int) -> str:
    seconds, rest = divmod(ns, 1_000_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{rest // 1000:06d}Z"


def _json_safe(value: Any) -> Any:
    """A trace value inside the record's JSON profile (bytes and odd numbers become text)."""
    try:
        canonical(value)
        return value
    except ProfileError:
        if isinstance(value, bytes):
            return value.hex()
        if isinstance(value, dict):
            return {str(k): _json_safe(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [_json_safe(v) for v in value]
        return str(value)


def _roots(spans: Sequence[OtlpSpan]) -> list[list[OtlpSpan]]:
    """Split one trace's spans into runs: one per top-level agent span (or the whole trace)."""
    by_id = {s.span_id: s for s in spans}

    def agent_ancestor(span: OtlpSpan) -> OtlpSpan | None:
        top = None
        seen: set[str] = set()
        node: OtlpSpan | None = span
        while node is not None and node.span_id not in seen:
            seen.add(node.span_id)
            if classify(node) == "agent":
                top = node
            node = by_id.get(node.parent_span_id or "")
        return top

    groups: dict[str, list[OtlpSpan]] = {}
    loose: list[OtlpSpan] = []
    for span in spans:
        top = agent_ancestor(span)
        if top is None:
            loose.append(span)
        else:
            groups.setdefault(top.span_id, []).append(span)
    if len(groups) <= 1:
        return [list(spans)]
    runs = list(groups.values())
    if any(classify(s) in ("model", "tool") for s in loose):
        runs.append(loose)
    return runs


class _Builder:
    """Chains the events of one imported run through a :class:`Sealer`: the processors
    (redaction) run first, as in a recording, then the digests, envelopes and links."""

    def __init__(
        self,
        run_id: str,
        actor: str,
        tenant: str,
        trace_id: str,
        processors: Sequence[Processor] = (),
    ) -> None:
        self.run_id, self.actor, self.tenant, self.trace_id = run_id, actor, tenant, trace_id
        self.sealer = Sealer(run_id=run_id, actor=actor, tenant=tenant, processors=processors)
        # An imported trace has no key secret: SPEC section 5's SHA-256 form of older runs.
        self._keys = KeyDeriver(run_id, None)
        self.events: list[Event] = []
        self.trace_of: dict[str, str] = {}
        """Span id -> its trace id, when one run is made of several traces."""

    def process(self, type_: str, payload: dict[str, Any]) -> dict[str, Any]:
        """The payload as the processors (redaction) leave it: what is stored and keyed."""
        return self.sealer.process(type_, _json_safe(payload))

    def key(self, name: str, args: Any) -> str:
        """SPEC section 5's default key over ``args`` as processed (the caller passes them
        from a processed payload: a key over raw arguments would let a guess be confirmed),
        ``#n`` on repeats."""
        return self._keys.key(name, args)

    def add(self, type_: str, payload: dict[str, Any], ns: int, span_id: str, **kw: Any) -> None:
        self.events.append(
            self.sealer.seal(
                type_,
                self.process(type_, payload),
                processed=True,
                trace_id=self.trace_of.get(span_id, self.trace_id),
                span_id=span_id,
                ts=_ts(ns),
                **kw,
            )
        )


def _open(span: OtlpSpan) -> bool:
    """A call span that tachograph (export or live bridge) ended without a completion: the
    record has the intent only, so the import does too (``tachograph.status=unfinished``, or,
    in traces written before that attribute, the status message alone)."""
    if span.attributes.get(A.TACHO_STATUS) == A.STATUS_UNFINISHED:
        return True
    return (
        span.status_code == 2
        and span.status_message in A.NO_COMPLETION_MESSAGES
        and A.ERROR_TYPE not in span.attributes
    )


def _error(span: OtlpSpan) -> dict[str, Any]:
    kind = span.attributes.get(A.ERROR_TYPE)
    return {"type": str(kind or "Error"), "message": span.status_message}


def _model_events(
    b: _Builder, step: Step, span: OtlpSpan
) -> list[tuple[int, int, str, dict[str, Any], dict[str, Any]]]:
    model = step["request_model"] or step["model"] or "unknown"
    request: dict[str, Any] = {"model": model}
    request_payload: dict[str, Any] = {"request": request}
    if step["provider"] is not None:
        request_payload["provider"] = step["provider"]
    not_captured: list[str] = []
    if step["input_messages"] is not None:
        request["messages"] = step["input_messages"]
    else:
        not_captured.append("messages")
    if step.get("tools") is not None:
        request["tools"] = step["tools"]
    else:
        not_captured.append("tools")
    request.update(step.get("params") or {})
    if not_captured:
        request_payload["not_captured"] = not_captured
    keyed = b.process(EventType.MODEL_REQUEST.value, request_payload).get("request")
    keyed = keyed if isinstance(keyed, dict) else {}
    key = b.key(model, {k: keyed[k] for k in ("model", "messages") if k in keyed})
    meta = {"idempotency_key": key, "model": model}
    out = [(step["start_ns"], 1, EventType.MODEL_REQUEST.value, request_payload, meta)]
    if _open(span):
        return out
    if span.status_code == 2:
        out.append((step["end_ns"], 1, EventType.MODEL_FAILED.value, {"error": _error(span)}, meta))
        return out
    # The response in the OpenAI chat-completions shape, the one most tools read.
    choice: dict[str, Any] = {"index": 0, "finish_reason": step["finish_reason"]}
    response: dict[str, Any] = {
        "id": step["response_id"],
        "model": step["model"],
        "choices": [choice],
    }
    done: dict[str, Any] = {"response": response}
    if step["output_text"] is not None or step["tool_calls"] is not None:
        message: dict[str, Any] = {"role": "assistant", "content": step["output_text"]}
        if step["tool_calls"]:
            message["tool_calls"] = step["tool_calls"]
        choice["message"] = message
    else:
        done["not_captured"] = ["message"]
    usage = {k: step[k] for k in ("input_tokens", "output_tokens") if isinstance(step[k], int)}
    if usage:
        response["usage"] = usage
        done["usage"] = usage
    answered = {"idempotency_key": key, "model": step["model"] or model}
    out.append((step["end_ns"], 1, EventType.MODEL_RESPONSE.value, done, answered))
    return out


def _tool_events(
    b: _Builder, step: Step, span: OtlpSpan
) -> list[tuple[int, int, str, dict[str, Any], dict[str, Any]]]:
    tool = str(step["tool_name"])
    args = step["tool_args"]
    effect = span.attributes.get(A.TACHO_EFFECT)
    if effect not in A.EFFECTS:
        effect = "irreversible"  # unknown: tachograph's default for an unclassified tool
    requested: dict[str, Any] = {"tool": tool, "effect": effect}
    if isinstance(args, dict):
        requested["args"] = args
    else:
        requested["args"] = {} if args is None else {"value": args}
        if args is None:
            requested["not_captured"] = ["args"]
    if step["tool_call_id"] is not None:
        requested["call_id"] = step["tool_call_id"]
        key = f"{b.run_id}:{tool}:{step['tool_call_id']}"
    else:
        key = b.key(tool, b.process(EventType.TOOL_REQUESTED.value, requested).get("args"))
    meta = {"idempotency_key": key}
    out = [(step["start_ns"], 1, EventType.TOOL_REQUESTED.value, requested, meta)]
    if _open(span):
        return out
    if span.status_code == 2:
        failed: dict[str, Any] = {"tool": tool, "error": _error(span)}
        out.append((step["end_ns"], 1, EventType.TOOL_FAILED.value, failed, meta))
        return out
    done: dict[str, Any] = {"tool": tool, "result": step["tool_result"]}
    if step["tool_result"] is None:
        done["not_captured"] = ["result"]
    out.append((step["end_ns"], 1, EventType.TOOL_COMPLETED.value, done, meta))
    return out


def _run_id(trace_id: str, root: OtlpSpan | None, several: bool) -> str:
    if several and root is not None:
        return f"otel-{trace_id}-{root.span_id}"
    return f"otel-{trace_id}"


def _build_run(
    spans: Sequence[OtlpSpan],
    *,
    several: bool,
    tenant: str,
    source: str | None,
    imported_at: str,
    processors: Sequence[Processor] = (),
) -> ImportedRun:
    dialect = detect_dialect(spans)
    steps = extract_steps(spans)
    by_id = {s.span_id: s for s in spans}
    agents = [s for s in steps if s["kind"] == "agent"]
    agent = next((s for s in agents if by_id[s["span_id"]].parent_span_id not in by_id), None)
    agent = agent or (agents[0] if agents else None)
    root = by_id[agent["span_id"]] if agent else None
    trace_id = (root or min(spans, key=lambda s: s.start_ns)).trace_id
    run_id = _run_id(trace_id, root, several)
    resource_name = spans[0].resource.get("service.name")
    actor = str((agent or {}).get("agent_name") or resource_name or "otel-import")[:128]
    b = _Builder(run_id, actor, tenant, trace_id, processors)
    b.trace_of = {s.span_id: s.trace_id for s in spans}

    calls = [s for s in steps if s["kind"] in ("model", "tool")]
    start = root.start_ns if root else min(s["start_ns"] for s in calls)
    end = root.end_ns if root else max(s["end_ns"] for s in calls)
    models = sorted(
        {
            m
            for s in calls
            if s["kind"] == "model"
            for m in (s["request_model"], s["model"])
            if isinstance(m, str)
        }
    )
    labels = {
        A.LABEL_IMPORTED: "otlp",
        A.LABEL_DIALECT: dialect,
        A.LABEL_CONTENT_CAPTURED: "false" if dialect.endswith("no-content") else "true",
        A.LABEL_IMPORTED_AT: imported_at,
    }
    if source:
        labels[A.LABEL_SOURCE] = source
    original = root.attributes.get(A.TACHO_RUN_ID) if root is not None else None
    if isinstance(original, str) and original:
        labels[A.LABEL_ORIGINAL_RUN_ID] = original
    started: dict[str, Any] = {
        "input": agent["input_text"] if agent else None,
        "env": {
            "code_version": None,
            "runtime": None,
            "recorder": _RECORDER,
            "models": models,
            "prompts": {},
            "tools": {},
        },
        "labels": labels,
    }
    if started["input"] is None:
        started["not_captured"] = ["input"]
    root_span = root.span_id if root else calls[0]["span_id"]
    b.add(EventType.RUN_STARTED.value, started, start, root_span)

    points: list[tuple[int, int, int, str, dict[str, Any], dict[str, Any], str]] = []
    for step in calls:
        span = by_id[step["span_id"]]
        made = (
            _model_events(b, step, span) if step["kind"] == "model" else _tool_events(b, step, span)
        )
        for ns, prio, type_, payload, meta in made:
            points.append((ns, prio, len(points), type_, payload, meta, span.span_id))
    for ns, _prio, _n, type_, payload, meta, span_id in sorted(points):
        b.add(type_, payload, max(ns, start), span_id, **meta)

    # tachograph's own spans say how the run ended (``tachograph.status``): an unfinished
    # run (no run.finished in its record) stays unfinished, an aborted one aborted
    said = root.attributes.get(A.TACHO_STATUS) if root is not None else None
    if said == A.STATUS_UNFINISHED:
        return ImportedRun(run_id, trace_id, dialect, tuple(b.events))
    finished: dict[str, Any]
    if said in ("error", "aborted") or (root is not None and root.status_code == 2):
        assert root is not None
        finished = {"status": said if said == "aborted" else "error", "error": _error(root)}
    else:
        finished = {"status": "ok", "output": agent["output_text"] if agent else None}
        if finished["output"] is None:
            finished["not_captured"] = ["output"]
    last = max([end] + [p[0] for p in points])
    b.add(EventType.RUN_FINISHED.value, finished, last, root_span)
    return ImportedRun(run_id, trace_id, dialect, tuple(b.events))


CONVERSATION_ATTRIBUTES: tuple[str, ...] = (
    A.GEN_AI_CONVERSATION_ID,
    "session.id",
    "traceloop.association.properties.session_id",
)
"""Attributes that name the conversation a span belongs to (GenAI, OpenInference,
OpenLLMetry): traces that share one are one run."""


def _conversation(spans: Sequence[OtlpSpan], names: Sequence[str]) -> str | None:
    for span in sorted(spans, key=lambda s: s.start_ns):
        for name in names:
            value = span.attributes.get(name)
            if isinstance(value, (str, int)) and not isinstance(value, bool) and str(value):
                return f"{name}={value}"
    return None


def _conversations(
    traces: Sequence[list[OtlpSpan]], *, group_by: str | None, gap: float | None
) -> list[list[OtlpSpan]]:
    """Join the traces of one conversation: an instrumentation alone makes each model call
    its own trace. Traces with an agent span stay apart (the agent span is the run); the
    others are joined by a conversation attribute (``group_by``, else
    :data:`CONVERSATION_ATTRIBUTES`), else, with ``gap`` (seconds), when one starts within
    ``gap`` of the previous one's end."""
    names = (group_by,) if group_by else CONVERSATION_ATTRIBUTES
    out: list[list[OtlpSpan]] = []
    by_key: dict[str, list[OtlpSpan]] = {}
    loose: list[list[OtlpSpan]] = []
    for spans in traces:
        if any(classify(s) == "agent" for s in spans):
            out.append(spans)
            continue
        key = _conversation(spans, names)
        if key is None:
            loose.append(spans)
        elif key in by_key:
            by_key[key].extend(spans)
        else:
            by_key[key] = list(spans)
            out.append(by_key[key])
    if gap is None:
        return out + loose
    if not gap >= 0:  # nan too
        raise ValueError(f"gap must be 0 seconds or more, not {gap!r}")
    # past 10^10 seconds (three centuries) every gap between two spans is shorter
    limit = int(min(gap, 1e10) * 1_000_000_000)
    current: list[OtlpSpan] | None = None
    for spans in sorted(loose, key=lambda t: min(s.start_ns for s in t)):
        start = min(s.start_ns for s in spans)
        if current is not None and start - max(s.end_ns for s in current) <= limit:
            current.extend(spans)
        else:
            current = list(spans)
            out.append(current)
    return out


def runs_from_spans(
    spans: Sequence[OtlpSpan],
    *,
    tenant: str = "default",
    source: str | None = None,
    group_by: str | None = None,
    gap: float | None = None,
    processors: Sequence[Processor] = (),
) -> list[ImportedRun]:
    """Build the runs (not stored) for every conversation with GenAI spans among ``spans``:
    one per agent span, else per conversation (see :func:`_conversations`), else per trace.
    Every payload passes through ``processors`` (as a recording's do) before it is hashed."""
    traces: dict[str, list[OtlpSpan]] = {}
    for span in spans:
        traces.setdefault(span.trace_id, []).append(span)
    imported_at = now_ts()
    runs: list[ImportedRun] = []
    for trace_spans in _conversations(list(traces.values()), group_by=group_by, gap=gap):
        groups = _roots(trace_spans)
        for group in groups:
            if not any(classify(s) for s in group):
                continue  # no GenAI span in this trace: nothing to import
            runs.append(
                _build_run(
                    group,
                    several=len(groups) > 1,
                    tenant=tenant,
                    source=source,
                    imported_at=imported_at,
                    processors=processors,
                )
            )
    return runs


def import_otlp(
    store: Store,
    source: str | os.PathLike[str] | IO[bytes] | bytes | Mapping[str, Any],
    *,
    tenant: str | None = None,
    group_by: str | None = None,
    gap: float | None = None,
    processors: Sequence[Processor] = (),
    redact_secrets: bool = True,
) -> ImportResult:
    """Read OTLP/JSON traces (a path, a binary stream, bytes, or a parsed document) and record
    each GenAI conversation as a tachograph run (``group_by``: the attribute naming the
    conversation; ``gap``: join traces without one that follow within so many seconds).
    Runs already in the store are skipped. The runs are of ``tenant``, else of the store's
    tenant (``?tenant=T``), else ``default``.

    Payloads pass through the processors of a recording: ``processors`` after the default
    redaction (secrets; the PII policy with ``TACHOGRAPH_PII=on``), as :func:`record` runs them.
    """
    name: str | None = None
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if not path.is_file():
            raise FormatError(f"no such file: {path}", location=str(path))
        data: Any = path.read_bytes()
        name = path.name
    elif isinstance(source, (bytes, Mapping)):
        data = source
    else:
        data = source.read()
    tenant = store.writing_tenant(tenant)
    spans = parse_otlp_json(data)
    chain = default_processors(processors, redact_secrets=redact_secrets)
    runs = runs_from_spans(
        spans, tenant=tenant, source=name, group_by=group_by, gap=gap, processors=chain
    )
    # A run already stored is skipped only if it is this import's run again (the same
    # steps): one built otherwise under the same id (other traces joined by ``gap`` or
    # ``group_by``) is refused, before anything is written, rather than reported skipped.
    present: set[str] = set()
    for run in runs:
        if store.head(run.run_id, tenant=tenant) is None:
            continue
        stored = [e.type for e in store.read(run.run_id, tenant=tenant, decode=False)]
        built = [e.type for e in run.events]
        if stored != built:
            raise FormatError(
                f"run {run.run_id!r} is already in the store with {len(stored)} events, and "
                f"this import builds it with {len(built)} other steps (traces joined "
                "otherwise, by --gap or --group-by, or an unfinished run that an earlier "
                "version imported as finished): nothing was imported; import into "
                "another store or tenant, or as it was imported before",
                location=name,
            )
        present.add(run.run_id)
    out: list[ImportedRun] = []
    for run in runs:
        if run.run_id in present:
            out.append(ImportedRun(run.run_id, run.trace_id, run.dialect, run.events, True))
            continue
        store.append(list(run.events))
        out.append(run)
    return ImportResult(source=name or "<data>", spans=len(spans), runs=tuple(out))
