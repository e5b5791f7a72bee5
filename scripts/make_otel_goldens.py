"""Regenerate tests/golden/otel/producers/*.json with real third-party instrumentations.

Each producer runs the agent of ``tests/otel/golden_agent.py`` on the OpenAI SDK against the
local fake model server (``tests/fakes/llm_server.py``, 127.0.0.1), exports its spans to an
in-memory exporter and writes them as OTLP/JSON (the protobuf request of an OTLP export in
protobuf's JSON mapping, ids in hex, as OTLP/JSON requires). The producers cannot share one
environment (their pins conflict), so run this once per producer, in an environment that
has that producer, the ``openai`` SDK and ``opentelemetry-sdk``::

    python scripts/make_otel_goldens.py openai-v2      # opentelemetry-instrumentation-openai-v2
    python scripts/make_otel_goldens.py openinference  # openinference-instrumentation-openai
    python scripts/make_otel_goldens.py traceloop      # traceloop-sdk (OpenLLMetry)

The versions used are written next to the files (``<name>.versions.json``).

``traceloop-sdk`` 0.62 depends on every OpenLLMetry instrumentation and on contrib
instrumentations whose pins conflict on the published releases, so pip cannot resolve it as a
whole. Install it without its dependencies, then what it imports for an OpenAI agent::

    pip install --no-deps traceloop-sdk==0.62.4 opentelemetry-instrumentation-logging==0.59b0 \
        opentelemetry-instrumentation-threading==0.66b1
    pip install opentelemetry-instrumentation-openai==0.62.4 \
        'opentelemetry-semantic-conventions-ai>=0.5.1,<0.6' opentelemetry-sdk \
        opentelemetry-exporter-otlp-proto-http opentelemetry-exporter-otlp-proto-grpc \
        aiohttp colorama cuid deprecated jinja2 pydantic tenacity httpx openai
"""

from __future__ import annotations

import base64
import importlib.metadata
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "golden" / "otel" / "producers"
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "otel")]

from fakes.llm_server import FakeLLMServer  # noqa: E402
from golden_agent import PLAIN_TOOLS, chat_loop  # noqa: E402

PACKAGES = {
    "openai-v2": ["opentelemetry-instrumentation-openai-v2", "opentelemetry-util-genai"],
    "openinference": ["openinference-instrumentation-openai", "openinference-instrumentation"],
    "traceloop": [
        "traceloop-sdk",
        "opentelemetry-instrumentation-openai",
        "opentelemetry-semantic-conventions-ai",
        "opentelemetry-instrumentation-logging",
        "opentelemetry-instrumentation-threading",
    ],
}


def _hex_ids(node: Any) -> Any:
    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            if key in ("traceId", "spanId", "parentSpanId") and isinstance(value, str):
                out[key] = base64.b64decode(value).hex()
            else:
                out[key] = _hex_ids(value)
        return out
    if isinstance(node, list):
        return [_hex_ids(v) for v in node]
    return node


def otlp_json(spans: Any) -> dict[str, Any]:
    from google.protobuf.json_format import MessageToDict
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    document = MessageToDict(encode_spans(spans), use_integers_for_enums=True)
    return dict(_hex_ids(document))


def _openai_client(srv: FakeLLMServer) -> Any:
    import openai

    return openai.OpenAI(base_url=srv.openai_base_url, api_key="test-key", max_retries=0)


def run_openai_v2(capture: bool) -> Any:
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    os.environ["OTEL_SEMCONV_STABILITY_OPT_IN"] = "gen_ai_latest_experimental"
    os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = (
        "SPAN_ONLY" if capture else "NO_CONTENT"
    )
    exporter = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=tp)
    try:
        with FakeLLMServer() as srv:
            chat_loop(_openai_client(srv))
    finally:
        instrumentor.uninstrument()
    return exporter.get_finished_spans()


def run_openinference() -> Any:
    from openinference.instrumentation import using_session
    from openinference.instrumentation.openai import OpenAIInstrumentor
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=tp)
    try:
        with FakeLLMServer() as srv, using_session("conversation-b2002"):
            chat_loop(_openai_client(srv))
    finally:
        instrumentor.uninstrument()
    return exporter.get_finished_spans()


def run_traceloop() -> Any:
    os.environ["TRACELOOP_TELEMETRY"] = "false"
    os.environ["TRACELOOP_TRACE_CONTENT"] = "true"
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from traceloop.sdk import Traceloop
    from traceloop.sdk.decorators import agent, tool
    from traceloop.sdk.instruments import Instruments

    exporter = InMemorySpanExporter()
    Traceloop.init(
        app_name="billing",
        exporter=exporter,
        disable_batch=True,
        telemetry_enabled=False,
        instruments={Instruments.OPENAI},
    )
    tools: dict[str, Callable[..., Any]] = {
        name: tool(name=name)(fn) for name, fn in PLAIN_TOOLS.items()
    }

    @agent(name="billing_agent")
    def billing_agent(prompt: str) -> str:
        with FakeLLMServer() as srv:
            return chat_loop(_openai_client(srv), prompt, tools=tools)

    from golden_agent import PROMPT

    billing_agent(PROMPT)
    return exporter.get_finished_spans()


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in PACKAGES:
        print(__doc__)
        return 2
    name = argv[0]
    OUT.mkdir(parents=True, exist_ok=True)
    runs: dict[str, Any]
    if name == "openai-v2":
        runs = {"openai-v2": run_openai_v2(True), "openai-v2-no-content": run_openai_v2(False)}
    elif name == "openinference":
        runs = {"openinference": run_openinference()}
    else:
        runs = {"traceloop": run_traceloop()}
    versions = {
        p: importlib.metadata.version(p)
        for p in [*PACKAGES[name], "openai", "opentelemetry-sdk"]
    }
    for file_name, spans in runs.items():
        path = OUT / f"{file_name}.json"
        path.write_text(json.dumps(otlp_json(spans), indent=1, ensure_ascii=False) + "\n")
        (OUT / f"{file_name}.versions.json").write_text(json.dumps(versions, indent=1) + "\n")
        print(f"{path.relative_to(ROOT)}: {len(spans)} spans")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
