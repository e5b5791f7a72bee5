"""The recording overhead of the httpx adapter, per raw-HTTP model call.

An agent that calls its model over plain HTTP: a Chat Completions body POSTed with an
``httpx.Client`` (and an ``httpx2.Client`` when httpx2 is installed) to the fake server of the
tests on 127.0.0.1, two calls per run. Recorded, the client is instrumented with
``tachograph.integrations.httpx.instrument`` and each run is a recorded run (SQLite store in
the work folder); plain, a second client of the same library, with its own connection pool,
sends the same requests outside any run; the two are interleaved sample by sample. The ratio
is what recording adds to one call as a user of the adapter sees it, HTTP round trip and the
run's own start and end (over its two calls) included, as in the other adapter figures.

Two targets. With the one-line setup a POST is a ``write`` tool, so its intent is committed
(an fsync) before the request leaves: against a local server that answers in about a
millisecond, that commit is most of the cost. A rule making the POST ``"external"`` records it
as an ``external.read``, which is not made durable first, as the SDK adapters record a model
call; that ratio is measured against its own interleaved baseline. Skips (reports nothing)
when httpx is not installed.
"""

from __future__ import annotations

import importlib
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from .common import (
    Figure,
    Settings,
    Target,
    fake_llm_server,
    interleaved,
    measure_of,
    profile_call,
    scaled,
)

__all__ = ["figures"]

CALLS_PER_RUN = 2
"""Model calls per run: the call that asks for a tool, then the one that answers."""
LONG_RUN = 20
"""Calls in the long run that separates the adapter's per-call cost from the run's own."""
LIMIT = 2.0
"""The target: recording at most doubles the cost of a model call, as for the frameworks."""

BODY: dict[str, Any] = {
    "model": "gpt-5.6",
    "messages": [
        {"role": "system", "content": "You are a careful billing agent."},
        {"role": "user", "content": "Where is order B-2002?"},
    ],
}


def _libraries() -> list[Any]:
    out = []
    for name in ("httpx", "httpx2"):
        try:
            out.append(importlib.import_module(name))
        except ImportError:
            continue
    return out


def figures(settings: Settings) -> list[Figure]:
    libs = _libraries()
    if not libs or libs[0].__name__ != "httpx":
        print("  adapter_httpx: skipped, httpx is not installed", file=sys.stderr)
        return []
    with fake_llm_server() as srv:
        return [_figure(lib, srv, settings) for lib in libs]


def _figure(lib: Any, srv: Any, settings: Settings) -> Figure:
    import tachograph
    from tachograph.integrations.httpx import EXTERNAL, instrument

    name = lib.__name__
    started = time.perf_counter()
    runs = scaled(10, settings.scale, minimum=2)
    repeats = settings.repeats or 7
    db = os.path.join(settings.workdir, f"adapter_{name}.db")
    url = f"{srv.openai_base_url}/chat/completions"
    before = srv.request_count
    plain = lib.Client(timeout=30)
    recorded = instrument(lib.Client(timeout=30))
    external = instrument(lib.Client(timeout=30), rules={("POST", "*/chat/completions"): EXTERNAL})

    def conversation(client: Any, calls: int = CALLS_PER_RUN) -> str:
        text = ""
        for _ in range(calls):
            reply = client.post(url, json=BODY)
            reply.raise_for_status()
            text = reply.json()["choices"][0]["message"]["content"] or ""
        return text

    def without() -> float:
        t0 = time.perf_counter_ns()
        for _ in range(runs):
            conversation(plain)
        return (time.perf_counter_ns() - t0) / (runs * CALLS_PER_RUN)

    def recorded_with(client: Any) -> Callable[[], float]:
        def sample() -> float:
            t0 = time.perf_counter_ns()
            for _ in range(runs):
                with tachograph.record(db, actor="bench", input=None) as run:
                    run.output = conversation(client)
            return (time.perf_counter_ns() - t0) / (runs * CALLS_PER_RUN)

        return sample

    def long_runs() -> float:
        # LONG_RUN calls in one run (POST as external.read): with the empty run's cost taken
        # out, what the adapter itself adds to one call
        t0 = time.perf_counter_ns()
        for _ in range(runs):
            with tachograph.record(db, actor="bench", input=None) as run:
                run.output = conversation(external, LONG_RUN)
        return (time.perf_counter_ns() - t0) / runs

    def empty_runs() -> float:
        t0 = time.perf_counter_ns()
        for _ in range(runs):
            with tachograph.record(db, actor="bench", input=None) as run:
                run.output = ""
        return (time.perf_counter_ns() - t0) / runs

    with_adapter = recorded_with(recorded)
    try:
        subj, base = interleaved(with_adapter, without, repeats=repeats)
        read_subj, read_base = interleaved(recorded_with(external), without, repeats=repeats)
        # what a run's start and end cost with no call in it: the part of the per-call figure
        # that a longer run spreads thinner
        empty = statistics.median(empty_runs() for _ in range(repeats))
        long_run = statistics.median(long_runs() for _ in range(repeats))
        # the workload needs these clients and the server, so a miss is profiled here
        missed = (
            statistics.median(subj) / statistics.median(base) > LIMIT
            or statistics.median(read_subj) / statistics.median(read_base) > LIMIT
        )
        profile = profile_call(with_adapter) if missed and settings.profile else None
    finally:
        for client in (plain, recorded, external):
            client.close()
    subject = measure_of(f"instrumented {name}.Client, recorded", subj, "ns/model call")
    baseline = measure_of(f"a plain {name}.Client", base, "ns/model call")
    ratio = subject.median / baseline.median
    read_ratio = statistics.median(read_subj) / statistics.median(read_base)
    # the adapter's own cost per call: a long run's time less an empty run's, per call
    marginal = max(long_run - empty, 0.0) / LONG_RUN
    marginal_ratio = marginal / statistics.median(read_base)
    return Figure(
        key=f"adapter_{name}",
        title=f"httpx adapter ({name}): recording overhead per raw-HTTP model call (local fake "
        "server)",
        subject=subject,
        baseline=baseline,
        ratio=ratio,
        ratio_label="recorded / plain",
        targets=[
            Target("recorded / plain per model call (POST: write tool)", ratio, "<=", LIMIT),
            Target("the same, POST as external.read", read_ratio, "<=", LIMIT),
        ],
        extra={
            "library": name,
            "empty_run_ns": empty,
            "long_run_calls": LONG_RUN,
            "long_run_ns": long_run,
            "marginal_ns_per_call": marginal,
            "marginal_ratio": marginal_ratio,
            "external_read": {
                "subject_median_ns": statistics.median(read_subj),
                "baseline_median_ns": statistics.median(read_base),
                "ratio": read_ratio,
            },
            "runs_per_sample": runs,
            "model_calls_per_run": CALLS_PER_RUN,
            "requests": srv.request_count - before,
            "seconds": round(time.perf_counter() - started, 2),
        },
        profile=profile,
    )
