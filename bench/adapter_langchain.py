"""The recording overhead of the LangChain adapter per model call: a ``create_agent`` agent on
``ChatOpenAI`` with ``TachographMiddleware`` inside a recorded run, against the same agent with
no middleware and no run, both against a local fake Chat Completions server on 127.0.0.1.

Skips (reports nothing) when langchain, langgraph or langchain-openai is not installed.
"""

from __future__ import annotations

import importlib.util
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from .common import Figure, Settings, Target, interleaved, measure_of, scaled
from .record import NullStore

__all__ = ["available", "figures"]

MODEL = "gpt-5.6"
_BODY = json.dumps(
    {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 1_790_000_000,
        "model": "gpt-5.6-2026-09-30",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Refund of 19.99 issued."},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 40, "completion_tokens": 8, "total_tokens": 48},
    }
).encode()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # headers and body are two writes: with Nagle on, each answer waited ~40 ms for the
    # client's delayed ACK, a floor that hid the adapter's cost
    disable_nagle_algorithm = True

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(_BODY)))
        self.end_headers()
        self.wfile.write(_BODY)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def available() -> bool:
    """Whether the frameworks are installed."""
    names = ("langchain", "langgraph", "langchain_openai")
    return all(importlib.util.find_spec(n) is not None for n in names)


def figures(settings: Settings) -> list[Figure]:
    """One figure: recorded / plain wall time per model call."""
    if not available():
        print("  adapter_langchain: langchain, langgraph or langchain-openai not installed")
        return []
    from langchain.agents import create_agent
    from langchain_openai import ChatOpenAI

    import tachograph
    from tachograph.integrations.langchain import TachographMiddleware

    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    started = time.perf_counter()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/v1"

        def agent(middleware: list[Any]) -> Any:
            llm = ChatOpenAI(model=MODEL, base_url=url, api_key="sk-bench", max_retries=0)  # type: ignore[arg-type]
            return create_agent(llm, [], system_prompt="Be brief.", middleware=middleware)

        recorded_graph = agent([TachographMiddleware()])
        plain_graph = agent([])
        calls = scaled(20, settings.scale, minimum=3)
        repeats = settings.repeats or 11
        store = NullStore()
        prompt = {"messages": [{"role": "user", "content": "Refund order B-2002."}]}

        def recorded() -> float:
            t0 = time.perf_counter_ns()
            with tachograph.record(store, actor="bench", durability="batch") as run:
                for _ in range(calls):
                    recorded_graph.invoke(prompt)
                run.output = None
            return (time.perf_counter_ns() - t0) / calls

        def plain() -> float:
            t0 = time.perf_counter_ns()
            for _ in range(calls):
                plain_graph.invoke(prompt)
            return (time.perf_counter_ns() - t0) / calls

        subject, baseline = interleaved(recorded, plain, repeats=repeats)
    finally:
        server.shutdown()
        server.server_close()
    on = measure_of("create_agent + TachographMiddleware, recorded", subject, "ns")
    off = measure_of("the same agent, no middleware, no run", baseline, "ns")
    ratio = on.median / off.median
    return [
        Figure(
            key="adapter_langchain",
            title=f"LangChain adapter: recording overhead per model call ({calls} calls a run)",
            subject=on,
            baseline=off,
            ratio=ratio,
            ratio_label="recorded / plain, per model call",
            # a model call costs milliseconds even against a local server: recording it
            # (two events, the messages serialized) must stay a small share of that
            targets=[Target("recorded / plain", ratio, "<=", 1.5)],
            extra={
                "added_per_call_ns": on.median - off.median,
                "calls_per_sample": calls,
                "seconds": round(time.perf_counter() - started, 2),
            },
            profile_fn=recorded,
        )
    ]
