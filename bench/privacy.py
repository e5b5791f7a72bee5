"""The cost of redaction: recording with the default secrets processor against recording
without it (``redact_secrets=False``), and the same with the PII policy switched on."""

from __future__ import annotations

import time
from typing import Any

import tachograph
from tachograph.privacy import KeyRing, pii_policy

from .common import Figure, Settings, Target, interleaved, measure_of, payload_of_size, scaled
from .record import NullStore

__all__ = ["figures"]

MODEL = "claude-sonnet-4-5-20250929"


@tachograph.model(MODEL, provider="anthropic")
def _ask(request: dict[str, Any]) -> dict[str, Any]:
    response: dict[str, Any] = payload_of_size(900, index=len(request["messages"]))["response"]
    return response


@tachograph.tool(effect="pure", name="bench_lookup")
def _lookup(order: str, note: str) -> dict[str, Any]:
    return {"order": order, "status": "shipped", "carrier": "DHL", "note": note}


def _agent(turns: int) -> int:
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "Where is my order A-1001? It was due on Monday."}
    ]
    total = 0
    for i in range(turns):
        reply = _ask({"model": MODEL, "max_tokens": 512, "messages": messages[-4:]})
        messages.append({"role": "assistant", "content": reply["content"][0]["text"][:80]})
        total += len(_lookup(f"A-{1000 + i}", "customer asked twice, be polite")["status"])
    return total


def figures(settings: Settings) -> list[Figure]:
    """``privacy_secrets`` (the default) and ``privacy_pii`` (the policy, reported)."""
    started = time.perf_counter()
    turns = scaled(50, settings.scale, minimum=5)
    events = 2 + 4 * turns
    store = NullStore()
    repeats = settings.repeats or 21
    policy = pii_policy(KeyRing.generate())

    def run_with(**options: Any) -> float:
        t0 = time.perf_counter_ns()
        with tachograph.record(
            store, actor="bench", input=None, observers=[], durability="batch",
            code_version="bench", **options,
        ) as run:  # fmt: skip
            run.output = _agent(turns)
        return (time.perf_counter_ns() - t0) / events

    on, off = interleaved(
        lambda: run_with(), lambda: run_with(redact_secrets=False), repeats=repeats
    )
    on_m = measure_of("recording with the default secrets processor", on, "ns")
    off_m = measure_of("recording with redact_secrets=False", off, "ns")
    pii, bare = interleaved(
        lambda: run_with(processors=[policy]),
        lambda: run_with(redact_secrets=False),
        repeats=repeats,
    )
    pii_m = measure_of("recording with pii_policy (all detectors + secrets)", pii, "ns")
    bare_m = measure_of("recording with no processors", bare, "ns")
    seconds = round(time.perf_counter() - started, 2)
    secrets_ratio = on_m.median / off_m.median
    return [
        Figure(
            key="privacy_secrets",
            title=f"the default secrets processor: on vs off ({events}-event runs)",
            subject=on_m,
            baseline=off_m,
            ratio=secrets_ratio,
            ratio_label="secrets on / off, per event",
            # A ceiling, not a goal: docs/privacy.md says what would bring it near 1.
            targets=[Target("secrets on / off", secrets_ratio, "<=", 2.0)],
            extra={
                "events_per_run": events,
                "added_per_event_ns": on_m.median - off_m.median,
                "seconds": seconds,
            },
            profile_fn=lambda: [run_with() for _ in range(5)],
        ),
        Figure(
            key="privacy_pii",
            title=f"the PII policy: on vs no processors ({events}-event runs)",
            subject=pii_m,
            baseline=bare_m,
            ratio=pii_m.median / bare_m.median,
            ratio_label="PII policy / none, per event",
            targets=[Target("PII policy / none", pii_m.median / bare_m.median, "<=", 4.0)],
            extra={
                "events_per_run": events,
                "added_per_event_ns": pii_m.median - bare_m.median,
                "seconds": seconds,
            },
            profile_fn=lambda: [run_with(processors=[policy]) for _ in range(5)],
        ),
    ]
