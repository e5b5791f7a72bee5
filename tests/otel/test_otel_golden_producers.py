"""Golden OTLP/JSON files made by real third-party instrumentations (see
tests/golden/otel/README.md): each is imported, verified, replayed with the model server
stopped, and re-exported."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import openai
import pytest
from golden_agent import PLAIN_TOOLS, PROMPT, chat_loop

import tachograph
import tachograph.otel as tgo
from conftest import GOLDEN
from tachograph.integrations.openai import instrument
from tachograph.otel.export import build_spans
from tachograph.store import SQLiteStore

PRODUCERS = GOLDEN / "producers"

# file -> import options: openai-v2 alone makes each call its own trace with nothing naming
# the conversation (joined by time gap); OpenInference names it with session.id.
CASES: dict[str, dict[str, Any]] = {
    "openai-v2.json": {"gap": 5.0},
    "openai-v2-no-content.json": {"gap": 5.0},
    "openinference.json": {},
    "traceloop.json": {},
}


def _closed_port() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"  # nothing listens there once the socket is closed


def _import(store: SQLiteStore, name: str) -> list[Any]:
    result = tgo.import_otlp(store, PRODUCERS / name, **CASES[name])
    return list(result.runs)


@pytest.mark.parametrize("name", sorted(CASES))
def test_one_conversation_imports_as_one_verified_run(store: SQLiteStore, name: str) -> None:
    runs = _import(store, name)
    assert len(runs) == 1, "the three model calls are one conversation"
    run = runs[0]
    events = store.events(run.run_id)
    assert [e.type for e in events].count("model.request") == 3
    assert store.verify(run.run_id).ok
    # every event keeps the trace it came from: each call its own trace for an
    # instrumentation alone, one trace under OpenLLMetry's agent span
    traces = {e.trace_id for e in events if e.type == "model.request"}
    assert len(traces) == (1 if name == "traceloop.json" else 3)
    if name == "traceloop.json":  # its @tool spans are the run's tool steps
        assert [e.payload["tool"] for e in events if e.type == "tool.completed"] == [
            "lookup_order",
            "issue_refund",
        ]
    again = tgo.import_otlp(store, PRODUCERS / name, **CASES[name])
    assert [r.skipped for r in again.runs] == [True]


@pytest.mark.parametrize("name", ["openai-v2.json", "openinference.json", "traceloop.json"])
def test_imported_run_replays_an_sdk_agent_with_zero_requests(tmp_path: Path, name: str) -> None:
    db = SQLiteStore(tmp_path / "runs.db")
    (run,) = _import(db, name)
    client = instrument(openai.OpenAI(base_url=_closed_port(), api_key="test", max_retries=0))
    if name == "traceloop.json":
        # OpenLLMetry traced the tools too (its @tool spans): the agent records them through
        # tachograph, and the agent span captured the input and the answer.
        tools = {n: tachograph.tool(name=n)(fn) for n, fn in PLAIN_TOOLS.items()}
        report = tachograph.replay(
            db, run.run_id, lambda task: chat_loop(client, task, tools=tools)
        )
    else:
        # the trace has no agent span, so the run's input was not captured: the agent is told
        report = tachograph.replay(db, run.run_id, lambda _input: chat_loop(client, PROMPT))
    assert report.divergences == (), report.render()
    if name == "traceloop.json":
        # every tool call a model answer asked for has its tool span: the record vouches
        assert report.verdict == "reproduced"
        assert report.unvouched == ()
    else:
        # the trace holds no tool spans: the tool calls its model answers asked for are not
        # in the record, so the replay matches every step and still cannot call it reproduced
        assert report.verdict == "unvouched"
        assert [c["tool"] for c in report.unvouched] == ["lookup_order", "issue_refund"]
    # what the trace did not capture is said, not guessed
    notes = " | ".join(report.notes)
    if name == "traceloop.json":
        assert "final output was not captured" not in notes, notes
        assert "did not capture seed" in notes, notes  # 0.62 records temperature, not seed
    else:
        assert "final output was not captured" in notes
    if name == "openai-v2.json":  # it records no tool definitions; the others do
        assert "did not capture tools" in notes, notes
    else:
        assert "did not capture tools" not in notes, notes


def test_no_content_run_cannot_be_served_and_says_why(tmp_path: Path) -> None:
    db = SQLiteStore(tmp_path / "runs.db")
    (run,) = _import(db, "openai-v2-no-content.json")
    events = db.events(run.run_id)
    request = next(e for e in events if e.type == "model.request")
    assert request.payload["not_captured"][:1] == ["messages"]
    client = instrument(openai.OpenAI(base_url=_closed_port(), api_key="test", max_retries=0))
    report = tachograph.replay(db, run.run_id, lambda _input: chat_loop(client, PROMPT))
    assert not report.reproduced
    assert any("messages" in note for note in report.notes), report.notes


@pytest.mark.parametrize("name", sorted(CASES))
def test_reexport_is_schema_shaped_and_idempotent(store: SQLiteStore, name: str) -> None:
    (run,) = _import(store, name)
    events = store.events(run.run_id)
    first = build_spans(events, capture_content=True)
    second = build_spans(events, capture_content=True)
    ids = [(s.context.trace_id, s.context.span_id) for s in first]
    assert ids == [(s.context.trace_id, s.context.span_id) for s in second]
    chats = [s for s in first if s.name.startswith("chat")]
    assert len(chats) == 3
    for chat in chats:
        attrs = dict(chat.attributes or {})
        assert attrs["gen_ai.provider.name"] == "openai"
        assert str(attrs["gen_ai.response.id"]).startswith("chatcmpl-")
        # the provider's own values as the trace recorded them (OpenLLMetry 0.62 already
        # writes the conventions' "tool_call")
        assert attrs["gen_ai.response.finish_reasons"] in (
            ("tool_calls",),
            ("tool_call",),
            ("stop",),
        )
        if name != "openai-v2-no-content.json":
            outputs = json.loads(str(attrs["gen_ai.output.messages"]))
            assert outputs[0]["finish_reason"] in ("tool_call", "stop")


def test_prompt_is_the_recorded_one() -> None:
    doc = json.loads((PRODUCERS / "openai-v2.json").read_text())
    assert PROMPT in json.dumps(doc)
