"""The server middleware: each tool call an MCP server handles becomes tool events of a run,
one run per request or per client session; a call the client cancels is recorded failed."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.server.mcpserver import MCPServer

import tachograph
from tachograph.errors import RecordingError
from tachograph.integrations.mcp import RecordingMiddleware

from .mcp_shop import count

import examples.mcp_shop_server as shop_server  # isort: skip (needs the path mcp_shop sets)


async def _two_calls(server: object, mode: str = "auto") -> None:
    async with Client(server, mode=mode) as client:  # type: ignore[arg-type]
        await client.list_tools()
        await client.call_tool("lookup_order", {"order_id": "B-2002"})
        await client.call_tool("issue_refund", {"order_id": "B-2002", "amount": 19.99})


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_one_run_per_tool_call(tmp_path: Path, mode: str) -> None:
    db = str(tmp_path / "server.db")
    server = shop_server.build(tmp_path / "refunds.json")
    middleware = RecordingMiddleware(db, server=server)
    server.middleware.append(middleware)

    asyncio.run(_two_calls(server, mode))

    store = tachograph.open_store(db)
    assert len(middleware.run_ids) == 2
    first, second = (store.events(run_id) for run_id in middleware.run_ids)
    for events in (first, second):
        assert tachograph.verify_events(events).ok
        assert [e.type for e in events] == [
            "run.started",
            "tool.requested",
            "tool.completed",
            "run.finished",
        ]
    assert first[0].payload["input"] == {
        "tool": "lookup_order",
        "arguments": {"order_id": "B-2002"},
    }
    assert first[1].payload["effect"] == "read"  # the server's own annotations
    assert second[1].payload["effect"] == "irreversible"
    assert second[2].payload["result"]["structuredContent"]["refund_id"] == "rf_1"
    assert second[3].payload["output"]["structuredContent"]["refund_id"] == "rf_1"
    assert count(tmp_path / "refunds.json") == 1


def test_one_run_per_session_finished_by_close(tmp_path: Path) -> None:
    db = str(tmp_path / "server.db")
    server = shop_server.build(tmp_path / "refunds.json")
    middleware = RecordingMiddleware(
        db, per="session", actor="shop", effects={"issue_refund": "write"}
    )
    server.middleware.append(middleware)

    asyncio.run(_two_calls(server, "legacy"))
    middleware.close()

    store = tachograph.open_store(db)
    assert len(middleware.run_ids) == 1
    events = store.events(middleware.run_ids[0])
    assert tachograph.verify_events(events).ok
    assert [e.type for e in events] == [
        "run.started",
        "tool.requested",
        "tool.completed",
        "tool.requested",
        "tool.completed",
        "run.finished",
    ]
    assert {e.actor for e in events} == {"shop"}
    assert [e.payload["effect"] for e in events if e.type == "tool.requested"] == [
        "irreversible",  # no server= given and no table entry: unannotated
        "write",
    ]
    assert events[-1].payload["status"] == "ok"
    with pytest.raises(RecordingError, match="per="):
        RecordingMiddleware(db, per="forever")


@pytest.mark.parametrize("per", ["request", "session"])
@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_a_tool_call_the_client_cancels_is_recorded_failed(
    tmp_path: Path, mode: str, per: str
) -> None:
    """The client's ``asyncio.wait_for`` times out: the SDK sends ``notifications/cancelled``
    and the server cancels the handler. The call ends with ``tool.failed`` naming the
    cancellation, not with no completion, which reads as a server that died in the call."""
    db = str(tmp_path / "server.db")
    server = MCPServer("slow-shop")

    @server.tool()
    async def slow_lookup(order_id: str) -> dict[str, Any]:
        """Look an order up, slowly."""
        await asyncio.sleep(30)
        return {"order_id": order_id}

    middleware = RecordingMiddleware(db, per=per, effects={"slow_lookup": "read"})
    server.middleware.append(middleware)

    async def impatient() -> None:
        async with Client(server, mode=mode) as client:  # type: ignore[arg-type]
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(client.call_tool("slow_lookup", {"order_id": "A-1"}), 0.5)

    asyncio.run(impatient())
    middleware.close()

    store = tachograph.open_store(db)
    assert len(middleware.run_ids) == 1
    events = store.events(middleware.run_ids[0])
    assert tachograph.verify_events(events).ok
    assert [e.type for e in events] == [
        "run.started",
        "tool.requested",
        "tool.failed",
        "run.finished",
    ]
    failed = events[2].payload
    assert failed["tool"] == "slow_lookup"
    # the message is anyio's when a cancel scope cancelled the handler: not compared
    assert failed["error"]["type"] == "asyncio.exceptions.CancelledError"
