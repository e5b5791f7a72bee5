"""The recording overhead of the OpenAI Agents SDK adapter, per model call.

The same Agents SDK agent (a read tool, two model calls per run) runs against the fake
Responses server of the tests on 127.0.0.1, instrumented and inside a recorded run (SQLite
store in the work folder), and plain with its own uninstrumented client, interleaved sample by
sample. The ratio is what recording adds to a model call as a user of the framework sees it,
HTTP round trip included. Skips (reports nothing) when the Agents SDK is not installed.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from typing import Any

from .common import (
    Figure,
    Settings,
    Target,
    fake_llm_server,
    interleaved,
    measure_of,
    profile_if_missed,
    scaled,
)

__all__ = ["figures"]

CALLS_PER_RUN = 2
"""Model calls per agent run: the ``lookup_order`` call, then the answer."""
LIMIT = 2.0
MODEL = "gpt-5.6"


def figures(settings: Settings) -> list[Figure]:
    try:
        from agents import Agent, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled
        from openai import AsyncOpenAI

        from tachograph.integrations.openai_agents import instrument
    except ImportError as exc:
        print(f"  adapter_openai_agents: skipped, the Agents SDK is not installed ({exc})",
              file=sys.stderr)  # fmt: skip
        return []
    import tachograph

    set_tracing_disabled(True)
    started = time.perf_counter()
    runs = scaled(6, settings.scale, minimum=2)
    repeats = settings.repeats or 7
    db = os.path.join(settings.workdir, "adapter_openai_agents.db")

    def lookup(order_id: str) -> dict[str, Any]:
        """Look up an order."""
        return {"order_id": order_id, "status": "delivered", "total": 19.99}

    with fake_llm_server() as srv:
        plain_client = AsyncOpenAI(base_url=srv.openai_base_url, api_key="sk-bench")
        plain = Agent(
            name="billing",
            instructions="Answer.",
            model=OpenAIResponsesModel(model=MODEL, openai_client=plain_client),
            tools=[function_tool(lookup, name_override="lookup_order")],
        )
        recorded = instrument(
            Agent(
                name="billing",
                instructions="Answer.",
                model=MODEL,
                tools=[function_tool(lookup, name_override="lookup_order")],
            ),
            client=AsyncOpenAI(base_url=srv.openai_base_url, api_key="sk-bench"),
            effects={"lookup_order": "read"},
        )
        loop = asyncio.new_event_loop()

        async def ask(agent: Any) -> str:
            return str((await Runner.run(agent, "Where is order B-2002?")).final_output)

        def without() -> float:
            t0 = time.perf_counter_ns()
            for _ in range(runs):
                loop.run_until_complete(ask(plain))
            return (time.perf_counter_ns() - t0) / (runs * CALLS_PER_RUN)

        def with_adapter() -> float:
            t0 = time.perf_counter_ns()
            for _ in range(runs):
                # the task copies this context, so the adapter sees the run
                with tachograph.record(db, actor="bench", input=None) as run:
                    run.output = loop.run_until_complete(ask(recorded))
            return (time.perf_counter_ns() - t0) / (runs * CALLS_PER_RUN)

        try:
            subj, base = interleaved(with_adapter, without, repeats=repeats)
            profile = profile_if_missed(subj, base, LIMIT, with_adapter, settings)
        finally:
            loop.close()
        requests = srv.request_count
    subject = measure_of("instrumented agent, recorded", subj, "ns/model call")
    baseline = measure_of("the same agent, no adapter", base, "ns/model call")
    ratio = subject.median / baseline.median
    return [
        Figure(
            key="adapter_openai_agents",
            title="Agents SDK adapter: recording overhead per model call (local fake server)",
            subject=subject,
            baseline=baseline,
            ratio=ratio,
            ratio_label="recorded / plain",
            targets=[Target("recorded / plain per model call", ratio, "<=", LIMIT)],
            extra={
                "runs_per_sample": runs,
                "model_calls_per_run": CALLS_PER_RUN,
                "requests": requests,
                "seconds": round(time.perf_counter() - started, 2),
            },
            profile=profile,
        )
    ]
