"""The cost of recording: one event in memory against an OpenTelemetry span and against the
floor of building it; a recorded read-tool call against the floor of building its two events,
at two run lengths; the peak memory of a long recording against a ten times shorter one; a
decorated tool called outside any run against a plain call."""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson

import tachograph
from tachograph.capture.recorder import Recorder
from tachograph.record.event import Event, new_event
from tachograph.store.audit import AuditEntry, AuditRecord, chain_audit
from tachograph.store.base import CheckpointRow, Receipt, RunInfo, SealRow, Store, StoredRow

from .common import (
    Figure,
    Settings,
    Target,
    interleaved,
    loop_sample,
    measure_of,
    payload_of_size,
    remove_sqlite,
    run_probe,
    scaled,
)

__all__ = ["NullStore", "figures", "timed_calls", "tool_call_floor"]

PAYLOAD_BYTES = 1500
PREV = "sha256:" + "ab" * 32


class NullStore(Store):
    """A store that keeps nothing: isolates the recording path from any disk."""

    url = "null://"

    def append(
        self, events: Sequence[Event], *, durable: bool = True, **options: Any
    ) -> list[Receipt]:
        return []

    def head(self, run_id: str, *, tenant: str = "default") -> tuple[int, str] | None:
        return None

    def read_rows(
        self, run_id: str, *, tenant: str | None = None, from_seq: int = 0
    ) -> Iterator[StoredRow]:
        return iter(())

    def runs(
        self,
        *,
        actor: str | None = None,
        tenant: str | None = None,
        status: str | None = None,
        since: str | None = None,
        until: str | None = None,
        limit: int | None = None,
    ) -> list[RunInfo]:
        return []

    def run_info(self, run_id: str, *, tenant: str | None = None) -> RunInfo:
        raise tachograph.RunNotFound(run_id)

    def count_events(self) -> int:
        return 0

    def append_seals(self, tenant: str, seals: Sequence[SealRow]) -> int:
        return 0

    def read_seals(self, tenant: str, start: int = 0, end: int | None = None) -> list[SealRow]:
        return []

    def seal_count(self, tenant: str) -> int:
        return 0

    def seals_for_run(self, tenant: str, run_id: str) -> list[SealRow]:
        return []

    def put_checkpoint(self, checkpoint: CheckpointRow) -> bool:
        return False

    def latest_checkpoint(self, tenant: str) -> CheckpointRow | None:
        return None

    def erase(self, tenant: str, run_id: str, seqs: Iterable[int], *, audit: AuditEntry) -> int:
        return 0

    def delete_run(self, tenant: str, run_id: str, *, audit: AuditEntry) -> int:
        return 0

    def append_audit(self, entry: AuditEntry) -> AuditRecord:
        return chain_audit(entry, seq=0, prev_hash=None)

    def read_audit(self, *, from_seq: int = 0) -> Iterator[AuditRecord]:
        return iter(())

    def link_subjects(self, tenant: str, run_id: str, links: Iterable[tuple[int, str]]) -> int:
        return 0

    def subject_events(self, tenant: str, subject: str) -> list[tuple[str, int]]:
        return []

    def run_subjects(self, tenant: str, run_id: str) -> list[tuple[int, str]]:
        return []


def _flatten(value: Any, prefix: str, out: dict[str, Any]) -> None:
    """OpenTelemetry attributes take primitives: flatten objects, keep lists of text as JSON."""
    if isinstance(value, dict):
        for key, item in value.items():
            _flatten(item, f"{prefix}.{key}" if prefix else key, out)
    elif isinstance(value, (str, int, float, bool)):
        out[prefix] = value
    else:
        out[prefix] = orjson.dumps(value).decode()


def _otel_span_fn(payload: dict[str, Any]) -> tuple[Any, Any]:
    """A function that records one SDK span carrying the payload, and the exporter to clear."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("tachograph.bench")
    attributes: dict[str, Any] = {
        "tachograph.run_id": "bench-run",
        "tachograph.seq": 1,
        "tachograph.type": "model.response",
        "tachograph.actor": "bench",
        "gen_ai.request.model": "claude-sonnet-4-5-20250929",
        "tachograph.idempotency_key": "bench-run:claude:0123456789abcdef",
    }
    _flatten(payload, "gen_ai", attributes)
    usage = payload["response"]["usage"]
    content = payload["response"]["content"][0]["text"]

    def span() -> None:
        s = tracer.start_span("chat claude-sonnet-4-5-20250929", attributes=attributes)
        s.add_event("gen_ai.usage", {"input_tokens": usage["input_tokens"], "output": 300})
        s.add_event("gen_ai.choice", {"index": 0, "finish_reason": "end_turn", "text": content})
        s.end()

    return span, exporter


def _record_event_figure(settings: Settings) -> Figure:
    payload = payload_of_size(PAYLOAD_BYTES, index=7)
    size = len(tachograph.canonical(payload))

    def event() -> Event:
        return new_event(
            run_id="bench-run",
            seq=1,
            type="model.response",
            actor="bench",
            payload=payload,
            prev_hash=PREV,
            idempotency_key="bench-run:claude:0123456789abcdef",
            model="claude-sonnet-4-5-20250929",
            checked=True,
        )

    span, exporter = _otel_span_fn(payload)
    inner = 400
    repeats = settings.repeats or 31

    def span_sample() -> float:
        sample = loop_sample(span, inner)()
        exporter.clear()
        return sample

    subj, base = interleaved(loop_sample(event, inner), span_sample, repeats=repeats)
    subject = measure_of("new_event (canonical bytes, digest, hash, ULID, ts)", subj, "ns")
    baseline = measure_of("OpenTelemetry SDK span: attributes + 2 events", base, "ns")

    # The whole recording call, as agent code pays it: Recorder.append with the writer behind
    # it (the store discards, so no disk is involved).
    recorder = Recorder(NullStore(), run_id="bench-run", actor="bench", durability="batch")
    seq_event = recorder.append("run.started", {"input": None, "env": {}})
    del seq_event

    def append() -> None:
        recorder.append(
            "model.response",
            payload,
            idempotency_key="bench-run:claude:0123456789abcdef",
            model="claude-sonnet-4-5-20250929",
        )

    rec, base2 = interleaved(loop_sample(append, inner), span_sample, repeats=repeats)
    recorder.flush()
    rec_m = measure_of("Recorder.append", rec, "ns")
    span2 = measure_of("span", base2, "ns")
    ratio = baseline.median / subject.median
    return Figure(
        key="record_event",
        title=f"record one event ({size} B payload, in memory)",
        subject=subject,
        baseline=baseline,
        ratio=ratio,
        ratio_label="span cost / event cost",
        targets=[
            Target("median event cost (us)", subject.median / 1000, "<", 12.0),
            Target("times cheaper than the span", ratio, ">=", 4.0),
        ],
        extra={
            "payload_canonical_bytes": size,
            "recorder_append_ns": rec_m.to_dict(),
            "span_ns_beside_recorder_append": span2.to_dict(),
            "recorder_append_span_ratio": span2.median / rec_m.median,
        },
        profile_fn=lambda: [event() for _ in range(20_000)],
    )


def _event_floor(payload: dict[str, Any], kind: str, key: str | None, model: str | None) -> Any:
    """The floor of building one event: a random salt, the payload's sorted orjson bytes, the
    salted digest, the envelope's sorted orjson bytes and their hash. What no recorder of this
    format can skip (it omits the ULID, the clock and every check)."""
    dumps, sort, sha256, urandom = orjson.dumps, orjson.OPT_SORT_KEYS, hashlib.sha256, os.urandom

    def build() -> str:
        salt = urandom(16)
        h = sha256(salt)
        h.update(dumps(payload, option=sort))
        envelope = {
            "v": 1,
            "tenant": "default",
            "run_id": "bench-run",
            "seq": 1,
            "event_id": "01KBEXAMPLE000000000000000",
            "ts": "2026-12-01T00:00:00.000000Z",
            "type": kind,
            "actor": "bench",
            "trace_id": None,
            "span_id": None,
            "idempotency_key": key,
            "model": model,
            "seed": None,
            "payload_digest": "sha256:" + h.hexdigest(),
            "prev_hash": PREV,
        }
        return "sha256:" + sha256(dumps(envelope, option=sort)).hexdigest()

    return build


def _event_build_figure(settings: Settings) -> Figure:
    payload = payload_of_size(PAYLOAD_BYTES, index=7)
    key, model = "bench-run:claude:0123456789abcdef", "claude-sonnet-4-5-20250929"

    def event() -> Event:
        return new_event(
            run_id="bench-run",
            seq=1,
            type="model.response",
            actor="bench",
            payload=payload,
            prev_hash=PREV,
            idempotency_key=key,
            model=model,
            checked=True,
        )

    floor = _event_floor(payload, "model.response", key, model)
    inner = 400
    subj, base = interleaved(
        loop_sample(event, inner), loop_sample(floor, inner), repeats=settings.repeats or 31
    )
    subject = measure_of("new_event", subj, "ns")
    baseline = measure_of("floor: salt, sorted orjson, two SHA-256", base, "ns")
    ratio = subject.median / baseline.median
    return Figure(
        key="event_build",
        title="build one event against its floor (1.5 KB payload)",
        subject=subject,
        baseline=baseline,
        ratio=ratio,
        ratio_label="event cost / floor",
        targets=[Target("times the floor", ratio, "<=", 1.5)],
        profile_fn=lambda: [event() for _ in range(20_000)],
    )


@tachograph.tool(effect="read", name="bench_read")
def _read_tool(i: int) -> dict[str, int]:
    return {"item": i, "stock": i % 97}


def timed_calls(calls: int) -> float:
    """Nanoseconds per call of ``calls`` read-tool calls in one recorded run, up to the moment
    the writer thread has handed all their events to the store (a store that discards).

    The flush is timed too: without it, the writer's work on the last events (a few
    milliseconds' worth, most of a short run's) fell after the clock stopped, so short runs
    looked cheaper than long ones. Run start and end (two events, a commit) are left out.
    """
    with tachograph.record(NullStore(), actor="bench") as run:
        t0 = time.perf_counter_ns()
        total = 0
        for i in range(calls):
            total += _read_tool(i)["stock"]
        run.flush()
        elapsed = time.perf_counter_ns() - t0
    return elapsed / calls


def tool_call_floor() -> Callable[[], None]:
    """The floor of a recorded read-tool call: building its two events (``event_build``'s
    floor on the ``tool.requested`` and ``tool.completed`` payloads of one call)."""
    request = {"tool": "bench_read", "args": {"i": 123}, "effect": "read"}
    result = {"tool": "bench_read", "result": {"item": 123, "stock": 26}}
    key = "bench-run:bench_read:0123456789abcdef"
    req_floor = _event_floor(request, "tool.requested", key, None)
    res_floor = _event_floor(result, "tool.completed", key, None)

    def floor() -> None:
        req_floor()
        res_floor()

    return floor


def _tool_call_figure(settings: Settings) -> Figure:
    short = scaled(1_000, settings.scale, minimum=200)
    long = scaled(100_000, settings.scale, minimum=2_000)
    floor = tool_call_floor()
    repeats = settings.repeats or 15
    # The long runs are spread among the short ones (a few short runs and floors, then one
    # long run, in turn), so that a neighbour's load or a drift of the machine weighs on
    # both lengths alike: measured one block after the other, their ratio was mostly drift.
    blocks = max(3, repeats // 5)
    subj: list[float] = []
    base: list[float] = []
    longs: list[float] = []
    for block in range(blocks):
        s, b = interleaved(
            lambda: timed_calls(short),
            loop_sample(floor, short),
            repeats=-(-repeats // blocks),
            warmup=0 if block else 1,
        )
        subj += s
        base += b
        longs.append(timed_calls(long))
    subject = measure_of(f"recorded read-tool call, runs of {short} calls", subj, "ns")
    baseline = measure_of("floor: build its two events", base, "ns")
    long_m = measure_of(f"recorded read-tool call, runs of {long} calls", longs, "ns")
    ratio = subject.median / baseline.median
    growth = long_m.median / subject.median
    return Figure(
        key="tool_call",
        title="a recorded read-tool call (two events through the decorators)",
        subject=subject,
        baseline=baseline,
        ratio=ratio,
        ratio_label="call cost / floor of its two events",
        targets=[
            Target("times the floor of its two events", ratio, "<=", 2.5),
            Target(f"per-call cost, {long} calls over {short}", growth, "<=", 1.1),
        ],
        extra={"long_run": long_m.to_dict(), "growth": growth},
        profile_fn=lambda: timed_calls(short),
    )


RECPROBE = Path(__file__).with_name("recprobe.py")


def _recording_peak(path: Path, events: int) -> dict[str, Any]:
    remove_sqlite(path)
    return run_probe(RECPROBE, path, events)


def _record_memory_figure(settings: Settings) -> Figure:
    workdir = Path(settings.workdir) / "record"
    workdir.mkdir(parents=True, exist_ok=True)
    small = scaled(100_000, settings.scale, minimum=2_000)
    large = scaled(1_000_000, settings.scale, minimum=20_000)
    small_r = _recording_peak(workdir / "small.db", small)
    large_r = _recording_peak(workdir / "large.db", large)
    subject = measure_of(
        f"peak RSS recording {large_r['events']} events", [large_r["peak_rss_kb"]], "KiB"
    )
    baseline = measure_of(
        f"peak RSS recording {small_r['events']} events", [small_r["peak_rss_kb"]], "KiB"
    )
    ratio = subject.median / baseline.median
    return Figure(
        key="record_memory",
        title="recording memory: a ten times longer run",
        subject=subject,
        baseline=baseline,
        ratio=ratio,
        ratio_label="peak RSS, long run / short run",
        targets=[Target("flat", ratio, "<=", 1.2)],
        extra={"small": small_r, "large": large_r},
        # in this process, where the time of a recording goes (its memory is in ``extra``)
        profile_fn=lambda: timed_calls(2_000),
    )


def float_payload(index: int = 7) -> dict[str, Any]:
    """The record_event payload with what sent it to the exact encoder: integral floats (as a
    model's usage, prices or scores arrive) and non-ASCII keys."""
    payload = payload_of_size(PAYLOAD_BYTES, index=index)
    payload["response"]["temperature"] = 1.0
    payload["usage"]["cost_usd"] = 25.0
    payload["usage"]["scores"] = [1.0, 0.5, 3.0, 12.0]
    payload["response"]["métadonnées"] = {"clé": 2.0, "größe": 1500.0, "名前": "claude"}
    return payload


def _canonical_floats_figure(settings: Settings) -> Figure:
    from tachograph.record.canonical import canonical_exact

    payload = float_payload()
    inner = 400
    repeats = settings.repeats or 31
    assert tachograph.canonical(payload) == canonical_exact(payload)

    def floor() -> bytes:
        # what orjson alone costs on the same value (not JCS: it prints 25.0)
        return orjson.dumps(payload, option=orjson.OPT_SORT_KEYS)

    subj, base = interleaved(
        loop_sample(lambda: tachograph.canonical(payload), inner),
        loop_sample(floor, inner),
        repeats=repeats,
    )
    exact, base2 = interleaved(
        loop_sample(lambda: canonical_exact(payload), inner // 4),
        loop_sample(floor, inner),
        repeats=max(5, repeats // 3),
    )
    subject = measure_of("canonical(): integral floats, non-ASCII keys", subj, "ns")
    baseline = measure_of("orjson.dumps(OPT_SORT_KEYS) of the same value", base, "ns")
    exact_m = measure_of("canonical_exact() (the path such payloads took before)", exact, "ns")
    floor2 = measure_of("orjson beside canonical_exact", base2, "ns")
    ratio = subject.median / baseline.median
    exact_over_fast = (exact_m.median / floor2.median) / ratio
    return Figure(
        key="canonical_floats",
        title="canonical bytes with integral floats and non-ASCII keys",
        subject=subject,
        baseline=baseline,
        ratio=ratio,
        ratio_label="canonical / orjson floor",
        # such payloads took the exact encoder before: the fast path must be well clear of it
        targets=[Target("times faster than the exact encoder", exact_over_fast, ">=", 3.0)],
        extra={
            "exact_ns": exact_m.to_dict(),
            "exact_over_floor": exact_m.median / floor2.median,
            "exact_over_fast": exact_over_fast,
        },
        profile_fn=lambda: [tachograph.canonical(payload) for _ in range(20_000)],
    )


@tachograph.tool(effect="pure")
def _decorated(x: int) -> int:
    return x


def _plain(x: int) -> int:
    return x


def _tool_overhead_figure(settings: Settings) -> Figure:
    inner = 20_000
    repeats = settings.repeats or 31
    subj, base = interleaved(
        loop_sample(lambda: _decorated(3), inner),
        loop_sample(lambda: _plain(3), inner),
        repeats=repeats,
    )
    subject = measure_of("@tool(effect='pure') call, no run active", subj, "ns")
    baseline = measure_of("plain function call", base, "ns")
    overhead = subject.median - baseline.median
    return Figure(
        key="tool_overhead",
        title="decorated tool call outside any run",
        subject=subject,
        baseline=baseline,
        ratio=subject.median / baseline.median,
        ratio_label="decorated / plain",
        targets=[Target("overhead per call (us)", overhead / 1000, "<", 1.0)],
        extra={"overhead_ns": overhead},
        profile_fn=lambda: [_decorated(3) for _ in range(200_000)],
    )


def figures(settings: Settings) -> list[Figure]:
    """The recording-cost figures."""
    started = time.perf_counter()
    out = [
        _record_event_figure(settings),
        _event_build_figure(settings),
        _canonical_floats_figure(settings),
        _tool_call_figure(settings),
        _tool_overhead_figure(settings),
        _record_memory_figure(settings),
    ]
    for fig in out:
        fig.extra.setdefault("seconds", round(time.perf_counter() - started, 2))
    return out
