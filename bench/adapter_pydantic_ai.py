"""The recording overhead of the pydantic-ai adapter, per model call.

The same pydantic-ai agent (a read tool, two model calls per run) runs against the fake
Chat Completions server of the tests on 127.0.0.1, with the ``Tachograph`` capability inside a
recorded run (SQLite store in the work folder), and without the capability outside any run,
interleaved sample by sample. The ratio is what recording adds to a model call as a user of
the framework sees it, HTTP round trip included. Skips (reports nothing) when pydantic-ai is
not installed.
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
"""The target: recorded / plain per model call."""


def figures(settings: Settings) -> list[Figure]:
    try:
        from pydantic_ai import Agent
        from pydantic_ai.models.openai import OpenAIChatModel
        from pydantic_ai.providers.openai import OpenAIProvider

        from tachograph.integrations.pydantic_ai import Tachograph
    except ImportError as exc:
        print(f"  adapter_pydantic_ai: skipped, pydantic-ai is not installed ({exc})",
              file=sys.stderr)  # fmt: skip
        return []
    import tachograph

    started = time.perf_counter()
    runs = scaled(6, settings.scale, minimum=2)
    repeats = settings.repeats or 7
    db = os.path.join(settings.workdir, "adapter_pydantic_ai.db")
    with fake_llm_server() as srv:
        model = OpenAIChatModel(
            "gpt-5.6", provider=OpenAIProvider(base_url=srv.openai_base_url, api_key="sk-bench")
        )

        def build(capabilities: list[Any]) -> Agent[None, str]:
            agent = Agent(model, name="bench", instructions="Answer.", capabilities=capabilities)

            @agent.tool_plain
            def lookup_order(order_id: str) -> dict[str, Any]:
                return {"order_id": order_id, "status": "delivered", "total": 19.99}

            return agent

        plain = build([])
        recorded = build([Tachograph(default_effect="read")])
        loop = asyncio.new_event_loop()

        async def ask(agent: Agent[None, str]) -> str:
            return (await agent.run("Where is order B-2002?")).output

        def without() -> float:
            t0 = time.perf_counter_ns()
            for _ in range(runs):
                loop.run_until_complete(ask(plain))
            return (time.perf_counter_ns() - t0) / (runs * CALLS_PER_RUN)

        def with_adapter() -> float:
            t0 = time.perf_counter_ns()
            for _ in range(runs):
                # the task copies this context, so the capability sees the run
                with tachograph.record(db, actor="bench", input=None) as run:
                    run.output = loop.run_until_complete(ask(recorded))
            return (time.perf_counter_ns() - t0) / (runs * CALLS_PER_RUN)

        try:
            subj, base = interleaved(with_adapter, without, repeats=repeats)
            profile = profile_if_missed(subj, base, LIMIT, with_adapter, settings)
        finally:
            loop.close()
        requests = srv.request_count
    subject = measure_of("with the Tachograph capability, recorded", subj, "ns/model call")
    baseline = measure_of("the same agent, no adapter", base, "ns/model call")
    ratio = subject.median / baseline.median
    return [
        Figure(
            key="adapter_pydantic_ai",
            title="pydantic-ai adapter: recording overhead per model call (local fake server)",
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
