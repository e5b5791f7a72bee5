"""A Google ADK agent recorded with one plugin and replayed with the fake server gone.

The real ADK runner drives a triage agent that transfers to a billing agent (a read tool and
a refund tool whose side effect is a counter in a file), on ADK's ``AnthropicLlm`` against the
fake Messages API on 127.0.0.1. Replay must send no request and leave the counter alone. The
agent is ``examples/google_adk_refund.py``, the one the corpus replays.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("google.adk", reason="google-adk is installed apart from the dev extra")

from anthropic import AsyncAnthropic
from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.models.anthropic_llm import AnthropicLlm
from google.adk.runners import InMemoryRunner
from google.adk.tools import FunctionTool
from google.genai import types

import tachograph
from fakes.llm_server import FakeLLMServer, Reply, ScriptRequest, ToolCall
from tachograph.capture import boundary
from tachograph.integrations.google_adk import AGENT_STARTED, TachographPlugin

from .adk_agent import example, script

PROMPT = example.PROMPT

EXPECTED = [
    "run.started",
    AGENT_STARTED,  # triage
    "model.request",
    "model.response",  # triage calls transfer_to_agent
    "handoff",
    AGENT_STARTED,  # billing
    "model.request",
    "model.response",
    "tool.requested",
    "tool.completed",  # lookup_order
    "model.request",
    "model.response",
    "tool.requested",
    "tool.completed",  # issue_refund
    "model.request",
    "model.response",
    # the second user turn, on the same session
    AGENT_STARTED,
    "model.request",
    "model.response",
    "run.finished",
]


@pytest.fixture
def srv() -> Iterator[FakeLLMServer]:
    with FakeLLMServer(script) as server:
        yield server


@pytest.fixture
def counter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "refunds.json"
    monkeypatch.setenv("REFUND_COUNTER", str(path))
    return path


def _count(path: Path) -> int:
    return int(json.loads(path.read_text())) if path.exists() else 0


def _declared(base_url: str, **build: Any) -> tachograph.Agent:
    async def refund_agent(prompt: str) -> str:
        return await example.converse(example.build(base_url, **build), prompt)

    return tachograph.Agent(
        fn=refund_agent, name="adk_refund", tools=example.TOOLS, code_version="t-1"
    )


def _by_type(events: list[tachograph.Event]) -> dict[str, list[tachograph.Event]]:
    out: dict[str, list[tachograph.Event]] = {}
    for event in events:
        out.setdefault(event.type, []).append(event)
    return out


def test_record_then_replay_offline_without_repeating_the_refund(
    srv: FakeLLMServer, counter: Path, tmp_path: Path
) -> None:
    db = str(tmp_path / "runs.db")
    agent = _declared(srv.base_url)

    result = tachograph.record_run(agent, PROMPT, store=db)

    assert result.status == "ok", result
    assert "rf_1" in result.output
    assert result.output.endswith("| You are welcome.")
    recorded = tachograph.open_store(db).events(result.run_id)
    assert tachograph.verify_events(recorded).ok
    assert [e.type for e in recorded] == EXPECTED
    by_type = _by_type(recorded)
    assert [e.payload for e in by_type[AGENT_STARTED]] == [
        {"agent": "triage"},
        {"agent": "billing"},
        {"agent": "triage"},
    ]
    assert by_type["handoff"][0].payload == {"from": "triage", "to": "billing"}
    tools = [(e.payload["tool"], e.payload["effect"]) for e in by_type["tool.requested"]]
    assert tools == [("lookup_order", "read"), ("issue_refund", "irreversible")]
    assert by_type["tool.requested"][1].payload["args"] == {"order_id": "B-2002", "amount": 19.99}
    assert by_type["tool.completed"][0].payload["result"] == {
        "order_id": "B-2002",
        "status": "delivered",
        "total": 19.99,
    }
    first = by_type["model.request"][0]
    assert first.seq == 2
    request = first.payload["request"]
    assert request["model"] == "claude-sonnet-4-5"
    assert request["contents"][0] == {"parts": [{"text": PROMPT}], "role": "user"}
    assert request["config"]["system_instruction"].startswith("Route refunds to billing.")
    assert by_type["model.response"][0].model == "claude-sonnet-4-5-20260930"
    assert "sk-unused-in-replay" not in json.dumps([e.payload for e in recorded])
    env_tools = recorded[0].payload["env"]["tools"]
    assert sorted(env_tools) == ["issue_refund", "lookup_order"]
    requests = srv.request_count
    assert requests == 5
    assert _count(counter) == 1

    srv.stop()
    report = tachograph.replay(db, result.run_id, agent)

    assert report.reproduced, report.render()
    assert report.output == result.output
    assert srv.request_count == requests  # not one request left the process
    assert _count(counter) == 1  # the refund did not run again

    # One word of the prompt changed: the first model call diverges, at its exact seq.
    changed = tachograph.Agent(
        fn=lambda _: agent.fn(PROMPT.replace("broken", "damaged")),
        name="adk_refund",
        tools=agent.tools,
        code_version="t-1",
    )
    report = tachograph.replay(db, result.run_id, changed)
    assert not report.reproduced
    assert report.first is not None
    assert report.first.seq == first.seq == 2
    paths = {c.path: (c.old, c.new) for c in report.first.changes}
    assert paths["$.payload.request.contents[0].parts[0].text"] == (
        PROMPT,
        PROMPT.replace("broken", "damaged"),
    )
    rendered = report.render()
    assert "seq 2" in rendered
    assert "damaged" in rendered
    assert srv.request_count == requests
    assert _count(counter) == 1


def test_a_changed_tool_result_is_caught_at_the_tool_seq(
    srv: FakeLLMServer, counter: Path, tmp_path: Path
) -> None:
    db, url = str(tmp_path / "runs.db"), srv.base_url
    pure = {"lookup_order": "pure"}
    agent = _declared(url, effects=pure)
    result = tachograph.record_run(agent, PROMPT, store=db)
    assert result.status == "ok", result
    recorded = tachograph.open_store(db).events(result.run_id)
    completed = next(e for e in recorded if e.type == "tool.completed")
    srv.stop()

    def lookup_order(order_id: str) -> dict[str, Any]:
        """Look up an order."""
        return {"order_id": order_id, "status": "delivered", "total": 25.0}

    changed = _declared(url, effects=pure, tools=(FunctionTool(lookup_order), example.TOOLS[1]))
    same = tachograph.replay(db, result.run_id, agent, rerun_pure=True)
    assert same.reproduced, same.render()
    report = tachograph.replay(db, result.run_id, changed, rerun_pure=True)

    assert not report.reproduced
    assert report.first is not None
    assert report.first.seq == completed.seq == 9
    assert report.first.kind is tachograph.DivergenceKind.TOOL_IMPLEMENTATION_CHANGED
    paths = {c.path: (c.old, c.new) for c in report.first.changes}
    assert paths["$.payload.result.total"] == (19.99, 25.0)
    assert _count(counter) == 1


def _helper(base_url: str, tool: Any) -> InMemoryRunner:
    model = AnthropicLlm(
        model="claude-sonnet-4-5", client=AsyncAnthropic(base_url=base_url, api_key="sk-test")
    )
    helper = LlmAgent(name="helper", model=model, instruction="Help.", tools=[tool])
    return InMemoryRunner(app=App(name="shop", root_agent=helper, plugins=[TachographPlugin()]))


def _sync(runner: InMemoryRunner) -> Any:
    def sync_agent(prompt: str) -> str:
        session = asyncio.run(runner.session_service.create_session(app_name="shop", user_id="u1"))
        message = types.Content(role="user", parts=[types.Part(text=prompt)])
        said: list[str] = []
        try:
            for event in runner.run(user_id="u1", session_id=session.id, new_message=message):
                if event.content and event.content.parts:
                    said.extend(p.text for p in event.content.parts if p.text)
        except Exception as exc:
            cause = exc.__cause__ or exc
            return f"failed: {type(cause).__name__}: {cause}"
        return " ".join(said)

    return sync_agent


def _one_lookup(request: ScriptRequest) -> Any:
    if not request.tool_results:
        return Reply(tool_calls=[ToolCall("lookup_order", {"order_id": "B-2002"})])
    return Reply(text=f"found: {request.tool_results[0].output}")


def test_a_sync_runner_records_and_replays_offline(srv: FakeLLMServer, tmp_path: Path) -> None:
    srv.script = _one_lookup
    calls: list[str] = []

    def lookup_order(order_id: str) -> dict[str, Any]:
        """Look up an order."""
        calls.append(order_id)
        return {"order_id": order_id, "status": "delivered"}

    sync_agent = _sync(_helper(srv.base_url, lookup_order))
    db = str(tmp_path / "runs.db")
    result = tachograph.record_run(sync_agent, "find B-2002", store=db)

    assert result.output.startswith("found: ")
    assert "delivered" in result.output
    recorded = tachograph.open_store(db).events(result.run_id)
    assert [e.type for e in recorded] == [
        "run.started",
        AGENT_STARTED,
        "model.request",
        "model.response",
        "tool.requested",
        "tool.completed",
        "model.request",
        "model.response",
        "run.finished",
    ]
    requests = srv.request_count
    srv.stop()
    report = tachograph.replay(db, result.run_id, sync_agent)
    assert report.reproduced, report.render()
    assert srv.request_count == requests == 2
    assert calls == ["B-2002"]  # served, not run again


def test_a_failing_tool_is_recorded_and_not_run_again_in_replay(
    srv: FakeLLMServer, tmp_path: Path
) -> None:
    # ADK wraps any exception a plugin raises in a RuntimeError ("Error in plugin ..."): the
    # recorded error is served as that RuntimeError's cause, as the live error was the cause
    # of ADK's node failure. This agent reads the cause, so both runs end the same.
    srv.script = _one_lookup
    calls: list[str] = []

    def lookup_order(order_id: str) -> dict[str, Any]:
        """Look up an order."""
        calls.append(order_id)
        raise LookupError(f"no order {order_id}")

    sync_agent = _sync(_helper(srv.base_url, lookup_order))
    db = str(tmp_path / "runs.db")
    result = tachograph.record_run(sync_agent, "find B-2002", store=db)

    assert result.output == "failed: LookupError: no order B-2002"
    recorded = tachograph.open_store(db).events(result.run_id)
    assert recorded[5].type == "tool.failed"
    assert recorded[5].payload == {
        "tool": "lookup_order",
        "error": {"type": "LookupError", "message": "no order B-2002"},
    }
    srv.stop()
    report = tachograph.replay(db, result.run_id, sync_agent)
    assert report.reproduced, report.render()
    assert report.output == result.output  # the recorded LookupError, as the cause
    assert calls == ["B-2002"]  # served, not run again


CANCELLED = {"type": "asyncio.exceptions.CancelledError", "message": ""}


def _impatient(srv: FakeLLMServer, release: threading.Event, ask: str) -> Any:
    """A helper agent whose one tool is slow and whose model does not answer "stall":
    ``impatient(deadline)`` asks it ``ask`` and gives up after ``deadline`` seconds."""

    def stalls(request: ScriptRequest) -> Any:
        if "stall" in request.user_text:
            release.wait(10)  # answers once the test is over: too late
            return Reply(text="late")
        if not request.tool_results:
            return Reply(tool_calls=[ToolCall("slow_lookup", {"order_id": "B-2002"})])
        return Reply(text="found it")

    srv.script = stalls

    async def slow_lookup(order_id: str) -> dict[str, Any]:
        """Look an order up, slowly."""
        await asyncio.sleep(30)
        return {"order_id": order_id}

    runner = _helper(srv.base_url, slow_lookup)

    def impatient(deadline: float) -> Any:
        async def agent(_: str) -> str:
            session = await runner.session_service.create_session(app_name="shop", user_id="u1")
            message = types.Content(role="user", parts=[types.Part(text=ask)])

            async def turn() -> str:
                said: list[str] = []
                events = runner.run_async(user_id="u1", session_id=session.id, new_message=message)
                async for event in events:
                    if event.content and event.content.parts:
                        said.extend(p.text for p in event.content.parts if p.text)
                return " ".join(said)

            try:
                return await asyncio.wait_for(turn(), deadline)
            except asyncio.TimeoutError:
                return "timed out"

        return agent

    return impatient


def test_a_tool_the_agent_times_out_is_recorded_cancelled_and_replayed(
    srv: FakeLLMServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ADK hands a cancelled tool call to ``on_tool_error_callback`` (for clean-up): it is
    recorded failed, and ``before_tool_callback`` waits in replay until the agent cancels
    the call again."""
    release = threading.Event()
    impatient = _impatient(srv, release, "find B-2002")
    db = str(tmp_path / "runs.db")
    try:
        result = tachograph.record_run(impatient(2.0), "", store=db)
    finally:
        release.set()
    assert result.output == "timed out"
    recorded = tachograph.open_store(db).events(result.run_id)
    assert [e.type for e in recorded] == [
        "run.started",
        AGENT_STARTED,
        "model.request",
        "model.response",
        "tool.requested",
        "tool.failed",
        "run.finished",
    ]
    assert recorded[5].payload == {"tool": "slow_lookup", "error": CANCELLED}
    srv.stop()

    report = tachograph.replay(db, result.run_id, impatient(2.0))
    assert report.reproduced, report.render()
    assert report.output == result.output

    monkeypatch.setattr(boundary, "CANCELLED_WAIT", 0.2)
    report = tachograph.replay(db, result.run_id, impatient(600))
    assert report.first is not None
    assert (report.first.kind, report.first.seq) == (tachograph.DivergenceKind.UNREPLAYABLE, 5)
    assert "nothing cancelled it" in report.first.explanation


def test_a_model_call_the_agent_times_out_is_recorded_cancelled_and_replayed(
    srv: FakeLLMServer, tmp_path: Path
) -> None:
    release = threading.Event()
    impatient = _impatient(srv, release, "stall, please")
    db = str(tmp_path / "runs.db")
    try:
        result = tachograph.record_run(impatient(1.0), "", store=db)
    finally:
        release.set()
    assert result.output == "timed out"
    recorded = tachograph.open_store(db).events(result.run_id)
    kinds = [e.type for e in recorded]
    if "model.failed" not in kinds:  # the plugin hears of it only through ADK
        pytest.skip("this ADK does not tell plugins of a cancelled model call")
    assert kinds == ["run.started", AGENT_STARTED, "model.request", "model.failed", "run.finished"]
    assert recorded[3].payload["error"] == CANCELLED
    srv.stop()

    # before its fix the served cancellation was raised at once, and ADK ended the turn
    # quietly with no answer ("" instead of "timed out")
    report = tachograph.replay(db, result.run_id, impatient(1.0))
    assert report.reproduced, report.render()
    assert report.output == "timed out"


def test_outside_a_run_the_plugin_does_nothing(srv: FakeLLMServer, counter: Path) -> None:
    output = asyncio.run(example.converse(example.build(srv.base_url), PROMPT))
    assert "rf_1" in output
    assert _count(counter) == 1
    with pytest.raises(tachograph.EventError):
        TachographPlugin(effects={"lookup_order": "harmless"})


def test_the_committed_corpus_replays_with_no_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tachograph.regression import test_corpus as replay_corpus

    monkeypatch.setenv("REFUND_COUNTER", str(tmp_path / "refunds.json"))
    corpus = Path(__file__).resolve().parents[2] / "corpus" / "google_adk"
    report = replay_corpus(corpus, example.agent, workers=1)
    assert report.ok, report
    assert [r.outcome for r in report.results] == ["reproduced"]
    assert not (tmp_path / "refunds.json").exists()  # the refund was served, not made
