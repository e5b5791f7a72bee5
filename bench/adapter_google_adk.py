"""The recording overhead of the Google ADK adapter, per model call.

The same ADK agent (a read tool, two model calls per run, ``AnthropicLlm``) runs against the
fake Messages server of the tests on 127.0.0.1, with ``TachographPlugin`` inside a recorded
run (SQLite store in the work folder), and without the plugin outside any run, interleaved
sample by sample. The ratio is what recording adds to a model call as a user of the framework
sees it, HTTP round trip included. Skips (reports nothing) when google-adk is not installed.
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


def lookup_order(order_id: str) -> dict[str, Any]:
    """Look up an order."""
    return {"order_id": order_id, "status": "delivered", "total": 19.99}


LIMIT = 2.0
"""The target: recorded / plain per model call."""


def figures(settings: Settings) -> list[Figure]:
    try:
        from anthropic import AsyncAnthropic
        from google.adk.agents import LlmAgent
        from google.adk.apps import App
        from google.adk.models.anthropic_llm import AnthropicLlm
        from google.adk.runners import InMemoryRunner
        from google.genai import types

        from tachograph.integrations.google_adk import TachographPlugin
    except ImportError as exc:
        print(f"  adapter_google_adk: skipped, google-adk is not installed ({exc})",
              file=sys.stderr)  # fmt: skip
        return []
    import tachograph

    started = time.perf_counter()
    runs = scaled(6, settings.scale, minimum=2)
    repeats = settings.repeats or 7
    db = os.path.join(settings.workdir, "adapter_google_adk.db")
    with fake_llm_server() as srv:

        def build(plugins: list[Any]) -> Any:
            model = AnthropicLlm(
                model="claude-sonnet-4-5",
                client=AsyncAnthropic(base_url=srv.base_url, api_key="sk-bench"),
            )
            agent = LlmAgent(name="bench", model=model, instruction="Answer.", tools=[lookup_order])
            return InMemoryRunner(app=App(name="bench", root_agent=agent, plugins=plugins))

        plain = build([])
        recorded = build([TachographPlugin(default_effect="read")])
        loop = asyncio.new_event_loop()
        message = types.Content(role="user", parts=[types.Part(text="Where is order B-2002?")])

        async def ask(runner: Any) -> int:
            session = await runner.session_service.create_session(app_name="bench", user_id="u")
            seen = 0
            async for _ in runner.run_async(
                user_id="u", session_id=session.id, new_message=message
            ):
                seen += 1
            return seen

        def without() -> float:
            t0 = time.perf_counter_ns()
            for _ in range(runs):
                loop.run_until_complete(ask(plain))
            return (time.perf_counter_ns() - t0) / (runs * CALLS_PER_RUN)

        def with_adapter() -> float:
            t0 = time.perf_counter_ns()
            for _ in range(runs):
                # the task copies this context, so the plugin sees the run
                with tachograph.record(db, actor="bench", input=None) as run:
                    run.output = loop.run_until_complete(ask(recorded))
            return (time.perf_counter_ns() - t0) / (runs * CALLS_PER_RUN)

        try:
            subj, base = interleaved(with_adapter, without, repeats=repeats)
            profile = profile_if_missed(subj, base, LIMIT, with_adapter, settings)
        finally:
            loop.close()
        requests = srv.request_count
    subject = measure_of("with TachographPlugin, recorded", subj, "ns/model call")
    baseline = measure_of("the same agent, no plugin", base, "ns/model call")
    ratio = subject.median / baseline.median
    return [
        Figure(
            key="adapter_google_adk",
            title="Google ADK adapter: recording overhead per model call (local fake server)",
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
