"""The MCP adapter's parts: effects from annotations and the override table, ``_meta`` kept out
of matching, a hand-built ``ClientSession`` over a recording dispatcher (the stdio server not
spawned in replay), server errors, divergences raised inside the client's task group, and a
tool call the agent cancels."""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError
from mcp.types import ToolAnnotations

import tachograph
from tachograph.capture import boundary
from tachograph.integrations.mcp import (
    dispatcher,
    effect_from_annotations,
    instrument,
    is_instrumented,
)

from .mcp_shop import SERVER_SCRIPT, count

import examples.mcp_shop_server as shop_server  # isort: skip (needs the path mcp_shop sets)


@pytest.mark.parametrize(
    ("annotations", "effect"),
    [
        (None, "irreversible"),
        ({}, "irreversible"),  # MCP's defaults: destructive, not idempotent
        ({"readOnlyHint": True}, "read"),
        ({"readOnlyHint": True, "openWorldHint": False}, "read"),
        ({"destructiveHint": False}, "write"),
        ({"destructiveHint": True, "idempotentHint": True}, "write"),
        ({"destructiveHint": True, "idempotentHint": False}, "irreversible"),
        ({"readOnlyHint": False, "idempotentHint": True}, "write"),
    ],
)
def test_effects_from_annotations(annotations: dict[str, Any] | None, effect: str) -> None:
    assert effect_from_annotations(annotations) == effect


def _record(db: str, fn: Any, prompt: str = "B-2002") -> tachograph.RunResult:
    result = tachograph.record_run(tachograph.Agent(fn=fn, name="mcp_parts"), prompt, store=db)
    assert result.status == "ok", result
    return result


def test_the_override_table_and_callable_win_over_the_hints(tmp_path: Path) -> None:
    db = str(tmp_path / "runs.db")
    server = shop_server.build(tmp_path / "refunds.json")

    async def agent(order: str) -> str:
        # hints are untrusted: this user knows the refund is safe to repeat
        async with instrument(Client(server), effects={"issue_refund": "write"}) as client:
            await client.call_tool("lookup_order", {"order_id": order})
            await client.call_tool("issue_refund", {"order_id": order, "amount": 1.0})
            await client.list_tools()
            await client.call_tool("lookup_order", {"order_id": order})
            await client.call_tool("issue_refund", {"order_id": order, "amount": 2.0})
        decided = {}

        def rule(name: str, annotations: dict[str, Any] | None) -> str | None:
            decided[name] = annotations
            return "pure" if name == "lookup_order" else None

        async with instrument(Client(server), effects=rule) as client:
            await client.list_tools()
            await client.call_tool("lookup_order", {"order_id": order})
            await client.call_tool("issue_refund", {"order_id": order, "amount": 3.0})
        assert decided["lookup_order"] == {"readOnlyHint": True}
        return "done"

    result = _record(db, agent)
    calls = [
        (e.payload["tool"], e.payload["effect"])
        for e in tachograph.open_store(db).events(result.run_id)
        if e.type == "tool.requested"
    ]
    assert calls == [
        ("lookup_order", "irreversible"),  # not listed yet: no annotations known
        ("issue_refund", "write"),
        ("lookup_order", "read"),
        ("issue_refund", "write"),
        ("lookup_order", "pure"),
        ("issue_refund", "irreversible"),
    ]
    with pytest.raises(tachograph.EventError):
        instrument(Client(server), effects={"lookup_order": "harmless"})
    with pytest.raises(TypeError, match=r"mcp\.Client"):
        instrument(object())


def test_meta_and_traceparent_are_recorded_but_not_compared(tmp_path: Path) -> None:
    db = str(tmp_path / "runs.db")
    server = shop_server.build(tmp_path / "refunds.json")

    async def agent(order: str) -> str:
        parent = f"00-{uuid.uuid4().hex}-{uuid.uuid4().hex[:16]}-01"  # new in every run
        async with instrument(Client(server)) as client:
            await client.list_tools(meta={"traceparent": parent})
            result = await client.call_tool(
                "lookup_order", {"order_id": order}, meta={"traceparent": parent}
            )
        return str(result.structured_content)

    result = _record(db, agent)
    events = tachograph.open_store(db).events(result.run_id)
    call = next(e for e in events if e.type == "tool.requested")
    listing = next(
        e for e in events if e.type == "external.read" and e.payload["key"] == "tools/list"
    )
    assert call.payload["meta"]["traceparent"].startswith("00-")
    assert listing.payload["meta"]["traceparent"] == call.payload["meta"]["traceparent"]
    assert call.payload["args"] == {"order_id": "B-2002"}
    report = tachograph.replay(db, result.run_id, tachograph.Agent(fn=agent, name="mcp_parts"))
    assert report.reproduced, report.render()
    # the arguments still are compared
    report = tachograph.replay(
        db, result.run_id, tachograph.Agent(fn=lambda _: agent("C-3003"), name="mcp_parts")
    )
    assert not report.reproduced
    assert report.first is not None
    assert report.first.seq == call.seq
    assert [c.path for c in report.first.changes] == ["$.payload.args.order_id"]


def test_a_session_over_a_recording_dispatcher_never_spawns_the_server_in_replay(
    tmp_path: Path,
) -> None:
    db = str(tmp_path / "runs.db")
    counter, starts = tmp_path / "refunds.json", tmp_path / "starts.json"
    env = dict(os.environ, SHOP_COUNTER=str(counter), SHOP_STARTS=str(starts))
    params = StdioServerParameters(command=sys.executable, args=[str(SERVER_SCRIPT)], env=env)

    async def agent(order: str) -> Any:
        async with ClientSession(dispatcher=dispatcher(stdio_client(params))) as session:
            await session.initialize()
            listing = await session.list_tools()
            refund = await session.call_tool("issue_refund", {"order_id": order, "amount": 5.0})
        return [[t.name for t in listing.tools], refund.structured_content]

    result = _record(db, agent)
    events = tachograph.open_store(db).events(result.run_id)
    assert [e.type for e in events] == [
        "run.started",
        "external.read",  # initialize
        "external.read",  # tools/list
        "tool.requested",
        "tool.completed",
        "run.finished",
    ]
    assert events[1].payload["key"] == "initialize"
    assert events[3].payload["effect"] == "irreversible"
    assert count(counter) == count(starts) == 1

    report = tachograph.replay(db, result.run_id, tachograph.Agent(fn=agent, name="mcp_parts"))

    assert report.reproduced, report.render()
    assert report.output == result.output
    assert count(counter) == count(starts) == 1


def test_a_server_error_is_recorded_and_raised_again_in_replay(tmp_path: Path) -> None:
    db = str(tmp_path / "runs.db")
    server = shop_server.build(tmp_path / "refunds.json")

    async def agent(order: str) -> Any:
        async with instrument(Client(server)) as client:
            assert is_instrumented(client)
            missing = await client.call_tool("no_such_tool", {"order_id": order})
            try:
                await client.read_resource("shop://nothing")
            except MCPError as exc:
                return {"missing": missing.is_error, "code": exc.error.code}
        return None

    result = _record(db, agent)
    events = tachograph.open_store(db).events(result.run_id)
    read = next(
        e for e in events if e.type == "external.read" and e.payload["key"] == "resources/read"
    )
    assert read.payload["request"] == {"uri": "shop://nothing"}
    assert set(read.payload["value"]) == {"jsonrpc_error"}
    code = read.payload["value"]["jsonrpc_error"]["code"]
    call = next(e for e in events if e.type == "tool.completed")
    assert call.payload["result"]["isError"] is True  # MCP answers a failing tool with isError
    assert result.output == {"missing": True, "code": code}
    report = tachograph.replay(db, result.run_id, tachograph.Agent(fn=agent, name="mcp_parts"))
    assert report.reproduced, report.render()
    assert report.output == result.output


def test_a_divergence_inside_the_client_task_group_gives_a_normal_report(tmp_path: Path) -> None:
    db = str(tmp_path / "runs.db")
    server = shop_server.build(tmp_path / "refunds.json")

    async def agent(order: str) -> str:
        async with instrument(Client(server)) as client:
            await client.call_tool("lookup_order", {"order_id": order})
        return "ok"

    result = _record(db, agent)

    async def wanders(order: str) -> str:
        async with instrument(Client(server)) as client:
            # a tool call the record never made: nothing to serve, inside anyio's task group
            await client.call_tool("issue_refund", {"order_id": order, "amount": 9.0})
        return "refunded"

    report = tachograph.replay(db, result.run_id, tachograph.Agent(fn=wanders, name="mcp_parts"))

    assert not report.reproduced
    assert report.first is not None
    events = tachograph.open_store(db).events(result.run_id)
    call = next(e for e in events if e.type == "tool.requested")
    assert report.first.seq == call.seq
    assert report.first.kind is tachograph.DivergenceKind.TOOL_CHANGED
    text = report.render()
    assert "issue_refund" in text
    assert "lookup_order" in text
    assert "ExceptionGroup" not in text
    assert count(tmp_path / "refunds.json") == 0


CANCELLED = {"type": "asyncio.exceptions.CancelledError", "message": ""}


def _slow_shop() -> MCPServer:
    server = MCPServer("slow-shop")

    @server.tool(annotations=ToolAnnotations(readOnlyHint=True))
    async def slow_lookup(order_id: str) -> dict[str, Any]:
        """Look an order up, slowly."""
        await asyncio.sleep(30)
        return {"order_id": order_id, "late": True}

    @server.tool(annotations=ToolAnnotations(readOnlyHint=True))
    def lookup_order(order_id: str) -> dict[str, Any]:
        """Look an order up."""
        return {"order_id": order_id, "total": 19.99}

    return server


def _impatient(server: MCPServer, deadline: float) -> tachograph.Agent:
    async def agent(order: str) -> Any:
        async with instrument(Client(server)) as client:
            await client.list_tools()
            try:
                call = client.call_tool("slow_lookup", {"order_id": order})
                found: Any = (await asyncio.wait_for(call, deadline)).structured_content
            except asyncio.TimeoutError:
                found = "timed out"
            quick = await client.call_tool("lookup_order", {"order_id": order})
        return {"found": found, "quick": quick.structured_content}

    return tachograph.Agent(fn=agent, name="mcp_parts")


def test_a_tool_call_the_agent_times_out_is_recorded_cancelled_and_replayed(
    tmp_path: Path,
) -> None:
    db = str(tmp_path / "runs.db")
    server = _slow_shop()
    result = _record(db, _impatient(server, 0.5).fn)
    assert result.output["found"] == "timed out"
    events = tachograph.open_store(db).events(result.run_id)
    calls = [(e.type, e.payload) for e in events if e.type.startswith("tool.")]
    assert [t for t, _ in calls] == [
        "tool.requested",
        "tool.failed",
        "tool.requested",
        "tool.completed",
    ]
    assert calls[1][1] == {"tool": "slow_lookup", "error": CANCELLED}
    assert tachograph.verify_events(events).ok

    # the served call waits until the agent's own deadline cancels it again
    report = tachograph.replay(db, result.run_id, _impatient(server, 0.5))
    assert report.reproduced, report.render()
    assert report.output == result.output


def test_an_agent_that_no_longer_cancels_the_tool_call_diverges(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = str(tmp_path / "runs.db")
    server = _slow_shop()
    result = _record(db, _impatient(server, 0.5).fn)
    failed = next(
        e for e in tachograph.open_store(db).events(result.run_id) if e.type == "tool.failed"
    )
    monkeypatch.setattr(boundary, "CANCELLED_WAIT", 0.2)
    report = tachograph.replay(db, result.run_id, _impatient(server, 600))
    assert not report.reproduced
    assert report.first is not None
    assert (report.first.kind, report.first.seq) == (
        tachograph.DivergenceKind.UNREPLAYABLE,
        failed.seq,
    )
    assert "nothing cancelled it" in report.first.explanation
    assert "slow_lookup" in report.first.explanation
