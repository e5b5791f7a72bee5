"""The cost of the OpenTelemetry bridge: recording with it on against off, and proof that a
process where it is off (the default) pays nothing for it."""

from __future__ import annotations

import time
from typing import Any

import tachograph

from .common import Figure, Settings, Target, interleaved, measure_of, payload_of_size, scaled
from .record import NullStore

__all__ = ["figures"]

MODEL = "claude-sonnet-4-5-20250929"


@tachograph.model(MODEL, provider="anthropic")
def _ask(request: dict[str, Any]) -> dict[str, Any]:
    response: dict[str, Any] = payload_of_size(900, index=len(request["messages"]))["response"]
    return response


@tachograph.tool(effect="pure", name="bench_quote")
def _quote(sku: str) -> dict[str, Any]:
    return {"sku": sku, "price_cents": 1299, "currency": "EUR"}


def _agent(turns: int) -> int:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "quote the basket"}]
    total = 0
    for i in range(turns):
        reply = _ask({"model": MODEL, "max_tokens": 512, "messages": messages[-4:]})
        messages.append({"role": "assistant", "content": reply["content"][0]["text"][:80]})
        total += _quote(f"sku-{i}")["price_cents"]
    return total


def figures(settings: Settings) -> list[Figure]:
    """The two bridge figures."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    import tachograph.otel as bridge

    started = time.perf_counter()
    turns = scaled(50, settings.scale, minimum=5)
    events = 2 + 4 * turns
    store = NullStore()
    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    repeats = settings.repeats or 21

    def run_with(observers: Any) -> float:
        t0 = time.perf_counter_ns()
        with tachograph.record(
            store,
            actor="bench",
            input=None,
            observers=observers,
            durability="batch",
            code_version="bench",
        ) as run:
            run.output = _agent(turns)
        elapsed = time.perf_counter_ns() - t0
        exporter.clear()
        return elapsed / events

    observer = bridge.TachographSpanObserver(provider)
    on, off = interleaved(lambda: run_with([observer]), lambda: run_with([]), repeats=repeats)
    on_m = measure_of("recording with the bridge on (GenAI spans + span events)", on, "ns")
    off_m = measure_of("recording with no observers", off, "ns")
    on_ratio = on_m.median / off_m.median

    # The default: observers=None takes the process-wide list, which instrument() would
    # fill; the bridge is imported here but not instrumented.
    bridge.uninstrument()
    default, none = interleaved(lambda: run_with(None), lambda: run_with([]), repeats=repeats)
    default_m = measure_of("recording with the default observers (bridge off)", default, "ns")
    none_m = measure_of("recording with observers=[]", none, "ns")
    off_ratio = default_m.median / none_m.median
    seconds = round(time.perf_counter() - started, 2)
    return [
        Figure(
            key="bridge_on_off",
            title=f"recording with the OpenTelemetry bridge on vs off ({events}-event runs)",
            subject=on_m,
            baseline=off_m,
            ratio=on_ratio,
            ratio_label="bridge on / off, per event",
            targets=[],
            extra={
                "events_per_run": events,
                "added_per_event_ns": on_m.median - off_m.median,
                "seconds": seconds,
            },
            profile_fn=lambda: [run_with([observer]) for _ in range(5)],
        ),
        Figure(
            key="bridge_off_free",
            title="bridge off pays nothing: default observers vs none",
            subject=default_m,
            baseline=none_m,
            ratio=off_ratio,
            ratio_label="default / no observers, per event",
            targets=[Target("default / no observers", off_ratio, "<=", 1.05)],
            extra={"events_per_run": events, "seconds": seconds},
            profile_fn=lambda: [run_with(None) for _ in range(5)],
        ),
    ]
