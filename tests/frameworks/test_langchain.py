"""LangChain's ``create_agent`` and a LangGraph ``ToolNode`` graph, recorded with one line and
replayed with the fake model server gone.

The real ``langchain`` / ``langgraph`` runtime drives ``ChatOpenAI`` against the fake Chat
Completions API on 127.0.0.1, with a read tool and a refund tool whose side effect is a
counter in a file. Replay must send no request and leave the counter alone. A tool and a model
call the agent times out are recorded cancelled and replayed waiting for it.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.tools import tool

import tachograph
from fakes.llm_server import FakeLLMServer, Reply, ScriptRequest, ToolCall
from tachograph.capture import boundary
from tachograph.integrations.langchain import (
    TachographMiddleware,
    instrument_model,
    is_instrumented,
)

from .lc_agents import (
    PROMPT,
    SYSTEM,
    atwo_turns,
    build_agent,
    chat_model,
    counter_value,
    make_tools,
    tool_graph,
    two_turns,
)

ONE_TURN = [
    "model.request",
    "model.response",
    "tool.requested",
    "tool.completed",
    "model.request",
    "model.response",
    "tool.requested",
    "tool.completed",
    "model.request",
    "model.response",
]
EXPECTED = ["run.started", *ONE_TURN, "model.request", "model.response", "run.finished"]


@pytest.fixture
def srv() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as server:
        yield server


def _agent(fn: object, name: str = "lc_refund") -> tachograph.Agent:
    return tachograph.Agent(fn=fn, name=name, code_version="t-1")  # type: ignore[arg-type]


def _by_type(events: list[tachograph.Event]) -> dict[str, list[tachograph.Event]]:
    out: dict[str, list[tachograph.Event]] = {}
    for event in events:
        out.setdefault(event.type, []).append(event)
    return out


def test_create_agent_records_and_replays_offline_without_repeating_the_refund(
    srv: FakeLLMServer, tmp_path: Path
) -> None:
    db, counter = str(tmp_path / "runs.db"), tmp_path / "refunds.json"
    graph = build_agent(srv.openai_base_url, counter)
    agent = _agent(lambda prompt: two_turns(graph, prompt))

    result = tachograph.record_run(agent, PROMPT, store=db)

    assert result.status == "ok", result
    assert "rf_1" in result.output
    recorded = tachograph.open_store(db).events(result.run_id)
    assert tachograph.verify_events(recorded).ok
    assert [e.type for e in recorded] == EXPECTED
    by_type = _by_type(recorded)
    tools = [(e.payload["tool"], e.payload["effect"]) for e in by_type["tool.requested"]]
    assert tools == [("lookup_order", "read"), ("issue_refund", "write")]
    assert by_type["tool.requested"][1].payload["args"] == {"order_id": "B-2002", "amount": 19.99}
    # the key carries the model's tool-call id, the same in record and replay
    call_id = by_type["model.response"][1].payload["response"]["generations"][0]["message"]["data"][
        "tool_calls"
    ][0]["id"]
    assert by_type["tool.requested"][1].idempotency_key == f"{result.run_id}:issue_refund:{call_id}"
    first = by_type["model.request"][0].payload["request"]
    assert first["model"] == "gpt-5.6"
    assert [m["type"] for m in first["messages"]] == ["system", "human"]
    assert first["messages"][0]["data"]["content"] == SYSTEM
    assert "id" not in first["messages"][1]["data"]  # LangGraph's random ids are no key
    assert [t["function"]["name"] for t in first["tools"]] == ["lookup_order", "issue_refund"]
    assert by_type["model.response"][0].model == "gpt-5.6-2026-09-30"
    assert by_type["model.response"][0].payload["usage"]["input_tokens"] > 0
    assert "sk-test" not in json.dumps([e.payload for e in recorded])
    requests = srv.request_count
    assert requests == 4
    assert counter_value(counter) == 1

    srv.stop()
    report = tachograph.replay(db, result.run_id, agent)

    assert report.reproduced, report.render()
    assert report.output == result.output
    assert srv.request_count == requests  # not one request left the process
    assert counter_value(counter) == 1  # the refund did not run again

    # One word of the prompt changed: the first model call diverges, at its exact seq.
    changed = _agent(lambda _: two_turns(graph, PROMPT.replace("broken", "damaged")))
    report = tachograph.replay(db, result.run_id, changed)
    assert not report.reproduced
    assert report.first is not None
    assert report.first.seq == by_type["model.request"][0].seq == 1
    paths = {c.path: (c.old, c.new) for c in report.first.changes}
    assert paths["$.payload.request.messages[1].data.content"] == (
        PROMPT,
        PROMPT.replace("broken", "damaged"),
    )
    text = report.render()
    assert "seq 1" in text
    assert "damaged" in text
    assert counter_value(counter) == 1
    assert srv.request_count == requests


def test_a_changed_tool_result_is_caught(srv: FakeLLMServer, tmp_path: Path) -> None:
    db, counter = str(tmp_path / "runs.db"), tmp_path / "refunds.json"
    pure = {"lookup_order": "pure"}
    url = srv.openai_base_url
    graph = build_agent(url, counter, effects=pure)
    result = tachograph.record_run(_agent(lambda p: two_turns(graph, p)), PROMPT, store=db)
    assert result.status == "ok", result
    srv.stop()
    # The same agent, but the lookup now reports another total: re-run, it no longer agrees.
    changed = build_agent(url, counter, effects=pure, total=24.99)
    report = tachograph.replay(
        db, result.run_id, _agent(lambda p: two_turns(changed, p)), rerun_pure=True
    )
    assert not report.reproduced
    assert report.first is not None
    assert report.first.kind == tachograph.DivergenceKind.TOOL_IMPLEMENTATION_CHANGED
    recorded = tachograph.open_store(db).events(result.run_id)
    assert report.first.seq == next(e.seq for e in recorded if e.type == "tool.completed") == 4
    assert "24.99" in report.render()
    assert counter_value(counter) == 1


def test_create_agent_async_records_and_replays_offline(srv: FakeLLMServer, tmp_path: Path) -> None:
    db, counter = str(tmp_path / "runs.db"), tmp_path / "refunds.json"
    graph = build_agent(srv.openai_base_url, counter)

    async def refund_agent(prompt: str) -> str:
        return await atwo_turns(graph, prompt)

    agent = _agent(refund_agent, "lc_refund_async")
    result = asyncio.run(tachograph.arecord_run(agent, PROMPT, store=db))
    assert result.status == "ok", result
    recorded = tachograph.open_store(db).events(result.run_id)
    assert [e.type for e in recorded] == EXPECTED
    requests = srv.request_count
    srv.stop()
    report = tachograph.replay(db, result.run_id, agent)
    assert report.reproduced, report.render()
    assert report.output == result.output
    assert srv.request_count == requests == 4
    assert counter_value(counter) == 1


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_toolnode_graph_records_and_replays_offline(
    srv: FakeLLMServer, tmp_path: Path, mode: str
) -> None:
    db, counter = str(tmp_path / "runs.db"), tmp_path / "refunds.json"
    graph = tool_graph(srv.openai_base_url, make_tools(counter))
    agent = _agent(
        (lambda p: two_turns(graph, p)) if mode == "sync" else (lambda p: atwo_turns(graph, p)),
        "lc_graph",
    )
    result = tachograph.record_run(agent, PROMPT, store=db)
    assert result.status == "ok", result
    recorded = tachograph.open_store(db).events(result.run_id)
    assert [e.type for e in recorded] == EXPECTED
    tools = [(e.payload["tool"], e.payload["effect"]) for e in _by_type(recorded)["tool.requested"]]
    assert tools == [("lookup_order", "read"), ("issue_refund", "write")]
    requests = srv.request_count
    assert requests == 4
    srv.stop()
    report = tachograph.replay(db, result.run_id, agent)
    assert report.reproduced, report.render()
    assert srv.request_count == requests
    assert counter_value(counter) == 1


def test_outside_a_run_nothing_is_recorded_and_nothing_changes(
    srv: FakeLLMServer, tmp_path: Path
) -> None:
    counter = tmp_path / "refunds.json"
    graph = build_agent(srv.openai_base_url, counter)
    assert "rf_1" in two_turns(graph, PROMPT)
    assert counter_value(counter) == 1
    llm = chat_model(srv.openai_base_url)
    assert instrument_model(llm) is llm
    assert instrument_model(llm) is llm
    assert is_instrumented(llm)
    assert llm.invoke("hi").content == "Hello! You said: hi"
    with pytest.raises(TypeError, match="BaseChatModel"):
        instrument_model(object())
    with pytest.raises(tachograph.EventError):
        TachographMiddleware(effects={"lookup_order": "harmless"})


def test_a_decorated_tool_records_itself_with_its_own_effect(
    srv: FakeLLMServer, tmp_path: Path
) -> None:
    from langchain_core.tools import StructuredTool

    db = str(tmp_path / "runs.db")

    @tachograph.tool(effect="read")
    def lookup_order(order_id: str) -> str:
        """Look up an order."""
        return json.dumps({"order_id": order_id, "total": 5.0})

    from langchain.agents import create_agent

    graph = create_agent(
        chat_model(srv.openai_base_url),
        [StructuredTool.from_function(lookup_order)],
        middleware=[TachographMiddleware()],
    )
    agent = _agent(lambda p: graph.invoke({"messages": [("user", p)]})["messages"][-1].content)
    result = tachograph.record_run(agent, PROMPT, store=db)
    assert result.status == "ok", result
    recorded = tachograph.open_store(db).events(result.run_id)
    requested = [e.payload for e in recorded if e.type == "tool.requested"]
    assert requested == [{"tool": "lookup_order", "args": {"order_id": "B-2002"}, "effect": "read"}]


def test_a_setting_held_on_the_model_is_recorded_and_a_change_diverges(tmp_path: Path) -> None:
    # temperature, max_tokens, streaming on the ChatOpenAI object (not passed per call) were
    # not recorded, so a replay with another one said REPRODUCED
    from langchain.agents import create_agent
    from langchain_openai import ChatOpenAI

    from tachograph.replay.report import DivergenceKind

    db = tmp_path / "runs.db"
    with FakeLLMServer() as srv:

        def build(**settings: object) -> object:
            llm = ChatOpenAI(
                model="gpt-4o",
                base_url=srv.openai_base_url,
                api_key="sk-test",  # type: ignore[arg-type]
                max_retries=0,
                **settings,  # type: ignore[arg-type]
            )
            middleware = [TachographMiddleware()]
            return create_agent(llm, [], system_prompt="Be brief.", middleware=middleware)

        graph = [build(temperature=0)]

        def agent(prompt: str) -> str:
            messages = {"messages": [{"role": "user", "content": prompt}]}
            state = graph[0].invoke(messages)  # type: ignore[attr-defined]
            return str(state["messages"][-1].content)

        run = tachograph.record_run(agent, "hello", store=db)
        sent = srv.request_count
        with tachograph.open_store(db) as store:
            request = store.events(run.run_id)[1].payload["request"]
        assert request["settings"]["temperature"] == 0.0
        assert "sk-test" not in json.dumps(request)
        assert tachograph.replay(db, run.run_id, agent).reproduced
        for settings, path in (
            ({"temperature": 0.9}, "$.payload.request.settings.temperature"),
            (
                {"temperature": 0, "max_tokens": 5},
                "$.payload.request.settings.max_completion_tokens",
            ),
            ({"temperature": 0, "streaming": True}, "$.payload.request.settings.stream"),
        ):
            graph[0] = build(**settings)
            report = tachograph.replay(db, run.run_id, agent)
            assert not report.reproduced, settings
            first = report.first
            assert first is not None
            assert first.kind is DivergenceKind.REQUEST_CHANGED
            paths = [c.path for c in first.changes]
            assert path in paths, paths
        assert srv.request_count == sent  # nothing reached the server in any replay


CANCELLED_TYPE = "asyncio.exceptions.CancelledError"


def _impatient_graph(srv: FakeLLMServer, release: threading.Event) -> Any:
    """``create_agent`` with a slow tool and a model that does not answer "stall":
    ``impatient(deadline)`` is an agent that gives up on each with ``asyncio.wait_for``."""

    def stalls(request: ScriptRequest) -> Any:
        if "stall" in request.user_text:
            release.wait(10)  # answers once the test is over: too late
            return Reply(text="late")
        if not request.tool_results:
            return Reply(tool_calls=[ToolCall("slow_lookup", {"order_id": "B-2002"})])
        return Reply(text="found it")

    srv.script = stalls

    @tool
    async def slow_lookup(order_id: str) -> str:
        """Look an order up, slowly."""
        await asyncio.sleep(30)
        return "late"

    graph = create_agent(
        chat_model(srv.openai_base_url),
        [slow_lookup],
        middleware=[TachographMiddleware(effects={"slow_lookup": "read"})],
    )

    def impatient(deadline: float) -> Any:
        async def agent(prompt: str) -> list[str]:
            said = []
            for ask in (prompt, "stall, please"):
                messages = {"messages": [{"role": "user", "content": ask}]}
                try:
                    state = await asyncio.wait_for(graph.ainvoke(messages), deadline)
                    said.append(str(state["messages"][-1].content))
                except asyncio.TimeoutError:
                    said.append("timed out")
            return said

        return agent

    def sync_agent(prompt: str) -> str:  # the same graph, run synchronously
        state = graph.invoke({"messages": [{"role": "user", "content": prompt}]})
        return str(state["messages"][-1].content)

    return impatient, sync_agent


def test_a_tool_and_a_model_call_the_agent_times_out_are_recorded_cancelled_and_replayed(
    srv: FakeLLMServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = threading.Event()
    impatient, sync_agent = _impatient_graph(srv, release)
    db = str(tmp_path / "runs.db")
    try:
        result = tachograph.record_run(impatient(1.5), "find B-2002", store=db)
    finally:
        release.set()
    assert result.status == "ok", result
    assert result.output == ["timed out", "timed out"]
    recorded = tachograph.open_store(db).events(result.run_id)
    assert [e.type for e in recorded] == [
        "run.started",
        "model.request",
        "model.response",
        "tool.requested",
        "tool.failed",  # the slow tool
        "model.request",
        "model.failed",  # the model that never answered
        "run.finished",
    ]
    assert recorded[4].payload["tool"] == "slow_lookup"
    assert recorded[4].payload["error"]["type"] == CANCELLED_TYPE
    assert recorded[6].payload["error"]["type"] == CANCELLED_TYPE
    srv.stop()

    # each served call waits until the agent's own deadline cancels it again
    report = tachograph.replay(db, result.run_id, impatient(1.5))
    assert report.reproduced, report.render()
    assert report.output == result.output

    # an agent that no longer gives up: reported at the tool, instead of hanging
    monkeypatch.setattr(boundary, "CANCELLED_WAIT", 0.2)
    report = tachograph.replay(db, result.run_id, impatient(600))
    assert report.first is not None
    assert (report.first.kind, report.first.seq) == (tachograph.DivergenceKind.UNREPLAYABLE, 4)
    assert "nothing cancelled it" in report.first.explanation

    # nor can a synchronous run of the graph cancel it: reported at once
    report = tachograph.replay(db, result.run_id, sync_agent)
    assert report.first is not None
    assert (report.first.kind, report.first.seq) == (tachograph.DivergenceKind.UNREPLAYABLE, 4)
    assert "a synchronous call cannot be cancelled" in report.first.explanation
