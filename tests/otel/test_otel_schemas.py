"""Every GenAI content attribute tachograph writes validates against the GenAI semantic
conventions' own JSON schemas (vendored in tests/golden/otel/schemas with their licence)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import openai
import pytest
from golden_agent import PLAIN_TOOLS, PROMPT, chat_loop
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import tachograph
import tachograph.otel as tgo
from conftest import GOLDEN
from fakes.llm_server import FakeLLMServer
from tachograph.integrations.openai import instrument
from tachograph.otel.export import build_spans
from tachograph.store import SQLiteStore

SCHEMAS = GOLDEN / "schemas"
CHECKED = {
    "gen_ai.input.messages": "gen-ai-input-messages.json",
    "gen_ai.output.messages": "gen-ai-output-messages.json",
    "gen_ai.system_instructions": "gen-ai-system-instructions.json",
    "gen_ai.tool.definitions": "gen-ai-tool-definitions.json",
}


def _validator(file: str) -> jsonschema.protocols.Validator:
    schema = json.loads((SCHEMAS / file).read_text())
    cls = jsonschema.validators.validator_for(schema)
    return cls(schema)  # type: ignore[no-any-return]


VALIDATORS = {attr: _validator(file) for attr, file in CHECKED.items()}


def _check(spans: list[Any]) -> int:
    """Validate every content attribute of ``spans``; returns how many were checked."""
    n = 0
    for span in spans:
        attrs = dict(span.attributes or {})
        for attr, validator in VALIDATORS.items():
            if attr in attrs:
                value = json.loads(str(attrs[attr]))
                errors = sorted(validator.iter_errors(value), key=str)
                assert not errors, f"{span.name} {attr}: {errors[0].message}"
                if attr == "gen_ai.output.messages":  # required, and what Phoenix drops on
                    assert all(isinstance(m.get("finish_reason"), str) for m in value)
                for message in value if isinstance(value, list) else ():
                    for part in message.get("parts", ()) if isinstance(message, dict) else ():
                        assert None not in (part.get("id", ""), part.get("arguments", ""))
                n += 1
    return n


def test_schemas_are_the_conventions_own() -> None:
    assert (SCHEMAS / "LICENSE").read_text().strip().startswith("Apache License")
    out = json.loads((SCHEMAS / "gen-ai-output-messages.json").read_text())
    assert "finish_reason" in out["$defs"]["OutputMessage"]["required"]


def test_schema_rejects_a_message_without_finish_reason() -> None:
    bad = [{"role": "assistant", "parts": [{"type": "text", "content": "hi"}]}]
    assert list(VALIDATORS["gen_ai.output.messages"].iter_errors(bad))


def _sdk_run(tmp_path: Path, *, stream: bool = False) -> tuple[SQLiteStore, str, list[Any]]:
    exporter = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    db = SQLiteStore(tmp_path / "runs.db")
    with FakeLLMServer() as srv:
        client = instrument(openai.OpenAI(base_url=srv.openai_base_url, api_key="t"))
        observer = tgo.TachographSpanObserver(tp, capture_content=True)
        tools = {n: tachograph.tool(effect="read")(f) for n, f in PLAIN_TOOLS.items()}
        result = tachograph.record_run(
            lambda prompt: chat_loop(client, prompt, tools=tools),
            PROMPT,
            store=db,
            observers=[observer],
        )
    tp.shutdown()
    return db, result.run_id, list(exporter.get_finished_spans())


def test_live_bridge_and_export_of_an_openai_sdk_run(tmp_path: Path) -> None:
    db, run_id, live = _sdk_run(tmp_path)
    exported = build_spans(db.events(run_id), capture_content=True)
    for spans in (live, exported):
        assert _check(spans) >= 9  # 3 chats x (input, output, tool definitions)
        chats = [s for s in spans if s.name.startswith("chat")]
        assert len(chats) == 3
        for chat in chats:
            attrs = dict(chat.attributes or {})
            assert attrs["gen_ai.provider.name"] == "openai"
            assert str(attrs["gen_ai.response.id"]).startswith("chatcmpl-")
            assert attrs["gen_ai.response.finish_reasons"] in (("tool_calls",), ("stop",))
            outputs = json.loads(str(attrs["gen_ai.output.messages"]))
            assert "status" not in outputs[0]  # the provider's answer, not the HTTP envelope
        tools = [s for s in spans if s.name.startswith("execute_tool")]
        call_ids = [str((t.attributes or {})["gen_ai.tool.call.id"]) for t in tools]
        assert len(call_ids) == 2
        assert all(c.startswith("call_") for c in call_ids)


def test_demo_and_golden_corpus(tmp_path: Path) -> None:
    from tachograph.demo.agent import billing_agent

    db = SQLiteStore(tmp_path / "demo.db")
    task = "Refund order A-1001, it arrived broken."
    result = tachograph.record_run(billing_agent, task, store=db)
    checked = _check(build_spans(db.events(result.run_id), capture_content=True))
    for path in sorted(GOLDEN.glob("*.json")) + sorted((GOLDEN / "producers").glob("*[!s].json")):
        if path.name == "expected.json" or path.name.endswith(".versions.json"):
            continue
        imported = tgo.import_otlp(db, path, gap=5.0)
        for run in imported.runs:
            checked += _check(build_spans(db.events(run.run_id), capture_content=True))
    assert checked > 20


@pytest.mark.parametrize("name", ["openai-v2.json", "traceloop.json"])
def test_producer_content_is_itself_valid(name: str) -> None:
    """The reference producer's own attributes pass the same check (the check is fair)."""
    from tachograph.otel.otlp_json import parse_otlp_json

    spans = parse_otlp_json((GOLDEN / "producers" / name).read_bytes())
    n = 0
    for span in spans:
        for attr, validator in VALIDATORS.items():
            if attr in span.attributes:
                assert not list(validator.iter_errors(json.loads(span.attributes[attr])))
                n += 1
    assert n >= 6
