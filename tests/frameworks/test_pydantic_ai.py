"""A pydantic-ai agent recorded with one capability and replayed with the fake server gone.

The real pydantic-ai runner drives a triage agent that delegates to a billing agent (a read
tool and a refund tool whose side effect is a counter in a file, an output validator),
against the fake Chat Completions API on 127.0.0.1. Replay must send no request and leave the
counter alone. The agent is ``examples/pydantic_ai_refund.py``, the one the corpus replays.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent, ModelRetry, Tool

import tachograph
from fakes.llm_server import FakeLLMServer, Reply, ScriptRequest, ToolCall
from tachograph.capture import boundary
from tachograph.integrations.pydantic_ai import AGENT_STARTED, Tachograph

from .pyai_agent import example, script

PROMPT = example.PROMPT

EXPECTED = [
    "run.started",
    AGENT_STARTED,  # triage
    "model.request",
    "model.response",  # triage calls ask_billing
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
    "output.accepted",  # billing's answer passes its validator
    "model.request",
    "model.response",
    "output.accepted",  # triage's answer
    # the second user turn, on the same conversation
    AGENT_STARTED,
    "model.request",
    "model.response",
    "output.accepted",
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
        fn=refund_agent, name="pyai_refund", tools=example.TOOLS, code_version="t-1"
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
    agent = _declared(srv.openai_base_url)

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
    assert by_type["handoff"][0].payload == {
        "from": "triage",
        "to": "billing",
        "reason": "delegation",
    }
    assert [e.payload["by"] for e in by_type["output.accepted"]] == ["billing", "triage", "triage"]
    assert by_type["output.accepted"][2].payload["output"] == "You are welcome."
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
    message = first.payload["request"]["messages"][0]
    assert message["parts"][0] == {"content": PROMPT, "part_kind": "user-prompt"}
    assert message["instructions"] == "Route refund requests to billing with ask_billing."
    assert "timestamp" not in json.dumps(first.payload)
    assert by_type["model.response"][0].model == "gpt-5.6-2026-09-30"
    assert by_type["model.response"][0].payload["usage"]["input_tokens"] > 0
    assert "sk-unused-in-replay" not in json.dumps([e.payload for e in recorded])
    env_tools = recorded[0].payload["env"]["tools"]
    assert sorted(env_tools) == ["issue_refund", "lookup_order"]
    requests = srv.request_count
    assert requests == 6
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
        name="pyai_refund",
        tools=agent.tools,
        code_version="t-1",
    )
    report = tachograph.replay(db, result.run_id, changed)
    assert not report.reproduced
    assert report.first is not None
    assert report.first.seq == first.seq == 2
    paths = {c.path: (c.old, c.new) for c in report.first.changes}
    assert paths["$.payload.request.messages[0].parts[0].content"] == (
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
    db, url = str(tmp_path / "runs.db"), srv.openai_base_url
    pure = {"lookup_order": "pure"}
    agent = _declared(url, effects=pure)
    result = tachograph.record_run(agent, PROMPT, store=db)
    assert result.status == "ok", result
    recorded = tachograph.open_store(db).events(result.run_id)
    completed = next(e for e in recorded if e.type == "tool.completed")
    srv.stop()

    def repriced(order_id: str) -> dict[str, Any]:
        """Look up an order."""
        return {"order_id": order_id, "status": "delivered", "total": 25.0}

    repriced.__name__ = "lookup_order"
    tools = (Tool(repriced, name="lookup_order"), example.TOOLS[1])
    changed = _declared(url, effects=pure, tools=tools)
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


def test_a_sync_run_and_an_output_rejected_then_retried(srv: FakeLLMServer, tmp_path: Path) -> None:
    rude = {"done": False}

    def rude_once(request: ScriptRequest) -> Any:
        # The first answer is rude; the validator sends it back and the model apologises.
        if not rude["done"]:
            rude["done"] = True
            return Reply(text="That is a stupid question.")
        return Reply(text="Sorry. How can I help?")

    srv.script = rude_once
    db = str(tmp_path / "runs.db")
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    model = OpenAIChatModel(
        "gpt-5.6", provider=OpenAIProvider(base_url=srv.openai_base_url, api_key="sk-test")
    )
    helper = Agent(model, name="helper", capabilities=[Tachograph()])

    @helper.output_validator
    def polite(output: str) -> str:
        if "stupid" in output:
            raise ModelRetry("be polite")
        return output

    def sync_agent(prompt: str) -> str:
        return helper.run_sync(prompt).output

    result = tachograph.record_run(sync_agent, "Hello", store=db)

    assert result.output == "Sorry. How can I help?"
    recorded = tachograph.open_store(db).events(result.run_id)
    assert [e.type for e in recorded] == [
        "run.started",
        AGENT_STARTED,
        "model.request",
        "model.response",
        "output.rejected",
        "model.request",
        "model.response",
        "output.accepted",
        "run.finished",
    ]
    rejected = recorded[4].payload
    assert rejected["by"] == "helper"
    assert rejected["output"] == "That is a stupid question."
    assert "be polite" in rejected["reason"]
    requests = srv.request_count
    srv.stop()
    report = tachograph.replay(db, result.run_id, sync_agent)
    assert report.reproduced, report.render()
    assert srv.request_count == requests == 2


def test_a_tool_that_asks_the_model_to_retry_is_replayed_as_the_same_retry(
    srv: FakeLLMServer, tmp_path: Path
) -> None:
    def retrying(request: ScriptRequest) -> Any:
        if not request.tool_results:
            return Reply(tool_calls=[ToolCall("lookup_order", {"order_id": "nope"})])
        if len(request.tool_results) == 1:
            return Reply(tool_calls=[ToolCall("lookup_order", {"order_id": "B-2002"})])
        return Reply(text="found it")

    srv.script = retrying
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    model = OpenAIChatModel(
        "gpt-5.6", provider=OpenAIProvider(base_url=srv.openai_base_url, api_key="sk-test")
    )
    calls: list[str] = []
    finder = Agent(model, name="finder", capabilities=[Tachograph(default_effect="read")])

    @finder.tool_plain
    def lookup_order(order_id: str) -> str:
        calls.append(order_id)
        if order_id == "nope":
            raise ModelRetry("no such order")
        return "delivered"

    async def agent(prompt: str) -> str:
        return (await finder.run(prompt)).output

    db = str(tmp_path / "runs.db")
    result = tachograph.record_run(agent, "find it", store=db)
    assert result.output == "found it"
    recorded = tachograph.open_store(db).events(result.run_id)
    failed = [e.payload for e in recorded if e.type == "tool.failed"]
    assert failed == [
        {
            "tool": "lookup_order",
            "error": {"type": "pydantic_ai.exceptions.ModelRetry", "message": "no such order"},
        }
    ]
    assert calls == ["nope", "B-2002"]
    srv.stop()
    report = tachograph.replay(db, result.run_id, agent)
    assert report.reproduced, report.render()
    assert calls == ["nope", "B-2002"]  # served, not run


CANCELLED_TYPE = "asyncio.exceptions.CancelledError"


def _impatient_finder(srv: FakeLLMServer, release: threading.Event) -> Any:
    """An agent that gives up on a model call that does not answer, then on a slow tool:
    ``impatient(deadline)`` is its run with that ``asyncio.wait_for`` deadline."""

    def stalls(request: ScriptRequest) -> Any:
        if "stall" in request.user_text:
            release.wait(10)  # answers once the test is over: too late
            return Reply(text="late")
        if not request.tool_results:
            return Reply(tool_calls=[ToolCall("slow_lookup", {"order_id": "B-2002"})])
        return Reply(text="found it")

    srv.script = stalls
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    model = OpenAIChatModel(
        "gpt-5.6", provider=OpenAIProvider(base_url=srv.openai_base_url, api_key="sk-test")
    )
    finder = Agent(model, name="finder", capabilities=[Tachograph(default_effect="read")])

    @finder.tool_plain
    async def slow_lookup(order_id: str) -> str:
        await asyncio.sleep(30)
        return "late"

    def impatient(deadline: float) -> Any:
        async def agent(prompt: str) -> list[str]:
            said = []
            for ask in ("stall, please", prompt):
                try:
                    said.append((await asyncio.wait_for(finder.run(ask), deadline)).output)
                except asyncio.TimeoutError:
                    said.append("timed out")
            return said

        return agent

    return impatient


def test_a_model_call_and_a_tool_the_agent_times_out_are_recorded_cancelled_and_replayed(
    srv: FakeLLMServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = threading.Event()
    impatient = _impatient_finder(srv, release)
    db = str(tmp_path / "runs.db")
    try:
        result = tachograph.record_run(impatient(1.0), "find B-2002", store=db)
    finally:
        release.set()
    assert result.status == "ok", result
    assert result.output == ["timed out", "timed out"]
    recorded = tachograph.open_store(db).events(result.run_id)
    assert [e.type for e in recorded] == [
        "run.started",
        AGENT_STARTED,
        "model.request",
        "model.failed",  # the model that never answered
        AGENT_STARTED,
        "model.request",
        "model.response",
        "tool.requested",
        "tool.failed",  # the slow tool
        "run.finished",
    ]
    assert recorded[3].payload["error"]["type"] == CANCELLED_TYPE
    assert recorded[8].payload["tool"] == "slow_lookup"
    assert recorded[8].payload["error"]["type"] == CANCELLED_TYPE
    srv.stop()

    # each served call waits until the agent's own deadline cancels it again
    report = tachograph.replay(db, result.run_id, impatient(1.0))
    assert report.reproduced, report.render()
    assert report.output == result.output

    # an agent that no longer gives up: reported at the first call, instead of hanging
    monkeypatch.setattr(boundary, "CANCELLED_WAIT", 0.2)
    report = tachograph.replay(db, result.run_id, impatient(600))
    assert not report.reproduced
    assert report.first is not None
    assert (report.first.kind, report.first.seq) == (tachograph.DivergenceKind.UNREPLAYABLE, 3)
    assert "nothing cancelled it" in report.first.explanation


def test_outside_a_run_the_capability_passes_everything_through(
    srv: FakeLLMServer, counter: Path
) -> None:
    output = asyncio.run(example.converse(example.build(srv.openai_base_url), PROMPT))
    assert "rf_1" in output
    assert _count(counter) == 1
    with pytest.raises(tachograph.EventError):
        Tachograph(effects={"lookup_order": "harmless"})


def test_the_committed_corpus_replays_with_no_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tachograph.regression import test_corpus as replay_corpus

    monkeypatch.setenv("REFUND_COUNTER", str(tmp_path / "refunds.json"))
    corpus = Path(__file__).resolve().parents[2] / "corpus" / "pydantic_ai"
    report = replay_corpus(corpus, example.agent, workers=1)
    assert report.ok, report
    assert [r.outcome for r in report.results] == ["reproduced"]
    assert not (tmp_path / "refunds.json").exists()  # the refund was served, not made
