"""The recording overhead of the MCP adapter, per model call of an agent loop.

The agent loop of ``examples/mcp_refund.py`` (three model calls through the OpenAI SDK, a
tool listing and two MCP tool calls per conversation: a lookup and a refund) runs against the
fake Chat Completions server of the tests on 127.0.0.1 and the MCP shop server in process
(``mcp.Client(server)``, so that a subprocess start does not drown the figure), with the MCP
client and the OpenAI client instrumented inside a recorded run (SQLite store in the work
folder), and with neither, outside any run, interleaved sample by sample. The ratio is what
recording adds per model call as a user of the framework sees it, HTTP round trips included.
Skips (reports nothing) when the MCP SDK is not installed.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Any

from .common import Figure, Settings, Target, interleaved, measure_of, profile_if_missed, scaled

__all__ = ["figures"]

LIMIT = 2.0
"""The target: recording at most doubles the cost of a model call through MCP."""
MODEL_CALLS_PER_RUN = 3
"""Model calls per conversation: ask for the lookup, ask for the refund, the answer."""

MCP_REQUESTS_PER_RUN = 4
"""MCP requests per conversation: the handshake, the listing and two tool calls."""


def _paths() -> None:
    root = Path(__file__).resolve().parents[1]
    for path in (str(root / "tests"), str(root)):
        if path not in sys.path:
            sys.path.insert(0, path)


def figures(settings: Settings) -> list[Figure]:
    try:
        from mcp import Client
        from openai import AsyncOpenAI

        from tachograph.integrations.mcp import instrument
        from tachograph.integrations.openai import instrument as instrument_openai
    except ImportError as exc:
        print(f"  adapter_mcp: skipped, the MCP SDK is not installed ({exc})", file=sys.stderr)
        return []
    _paths()
    import examples.mcp_refund as example
    import examples.mcp_shop_server as shop

    import tachograph
    from fakes.llm_server import FakeLLMServer

    started = time.perf_counter()
    runs = scaled(4, settings.scale, minimum=2)
    repeats = settings.repeats or 7
    db = os.path.join(settings.workdir, "adapter_mcp.db")
    server = shop.build(Path(settings.workdir) / "adapter_mcp_refunds.json")
    with FakeLLMServer() as srv:
        plain_llm = AsyncOpenAI(base_url=srv.openai_base_url, api_key="sk-bench")
        recorded_llm = instrument_openai(
            AsyncOpenAI(base_url=srv.openai_base_url, api_key="sk-bench")
        )
        loop = asyncio.new_event_loop()

        async def converse(client: Any, llm: Any) -> str:
            async with client:
                return await example.converse(client, llm, [example.PROMPT])

        def without() -> float:
            t0 = time.perf_counter_ns()
            for _ in range(runs):
                loop.run_until_complete(converse(Client(server), plain_llm))
            return (time.perf_counter_ns() - t0) / (runs * MODEL_CALLS_PER_RUN)

        def with_adapter() -> float:
            t0 = time.perf_counter_ns()
            for _ in range(runs):
                # the loop's tasks copy this context, so the adapters see the run
                with tachograph.record(db, actor="bench", input=None) as run:
                    client = instrument(Client(server))
                    run.output = loop.run_until_complete(converse(client, recorded_llm))
            return (time.perf_counter_ns() - t0) / (runs * MODEL_CALLS_PER_RUN)

        try:
            subj, base = interleaved(with_adapter, without, repeats=repeats)
            profile = profile_if_missed(subj, base, LIMIT, with_adapter, settings)
        finally:
            loop.close()
        requests = srv.request_count
    subject = measure_of("MCP and OpenAI clients instrumented, recorded", subj, "ns/model call")
    baseline = measure_of("the same loop, no adapter", base, "ns/model call")
    ratio = subject.median / baseline.median
    return [
        Figure(
            key="adapter_mcp",
            title="MCP adapter: recording overhead per model call (local fake server)",
            subject=subject,
            baseline=baseline,
            ratio=ratio,
            ratio_label="recorded / plain",
            targets=[Target("recorded / plain per model call", ratio, "<=", LIMIT)],
            extra={
                "runs_per_sample": runs,
                "model_calls_per_run": MODEL_CALLS_PER_RUN,
                "mcp_requests_per_run": MCP_REQUESTS_PER_RUN,
                "requests": requests,
                "seconds": round(time.perf_counter() - started, 2),
            },
            profile=profile,
        )
    ]
