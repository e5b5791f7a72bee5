"""An agent whose tools are on a real MCP server, recorded with one line, replayed offline.

The model is the fake OpenAI server on 127.0.0.1, called through the OpenAI SDK (instrumented
with tachograph.integrations.openai); the tools are the MCP shop server of ``examples/``,
started as a stdio subprocess by the MCP client, or as a streamable HTTP server on
127.0.0.1. Replay runs with both servers stopped: no model request, no server process
started, the refund counter unchanged, and the network guard silent.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import tachograph
from fakes.llm_server import FakeLLMServer

from .mcp_shop import ROOT, HttpShop, count

import examples.mcp_refund as example  # isort: skip (needs the path mcp_shop sets)

EXPECTED = [
    "run.started",
    "external.read",  # server/discover: the handshake
    "external.read",  # tools/list
    "model.request",
    "model.response",
    "tool.requested",  # lookup_order
    "tool.completed",
    "model.request",
    "model.response",
    "tool.requested",  # issue_refund
    "tool.completed",
    "model.request",
    "model.response",
    # the second user turn
    "model.request",
    "model.response",
    "run.finished",
]


@pytest.fixture
def srv() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as server:
        yield server


class Shop:
    """Where the test's MCP server is, and its counter files."""

    def __init__(self, tmp_path: Path, transport: str, monkeypatch: pytest.MonkeyPatch) -> None:
        self.counter = tmp_path / "refunds.json"
        self.starts = tmp_path / "starts.json"
        self.transport = transport
        self.http: HttpShop | None = None
        monkeypatch.setenv("SHOP_COUNTER", str(self.counter))
        monkeypatch.setenv("SHOP_STARTS", str(self.starts))
        if transport == "http":
            self.http = HttpShop(self.counter, self.starts)
            monkeypatch.setenv("MCP_SHOP_URL", self.http.url)
        else:
            monkeypatch.delenv("MCP_SHOP_URL", raising=False)

    def stop(self) -> None:
        if self.http is not None:
            self.http.stop()


@pytest.fixture(params=["stdio", "http"])
def shop(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Shop]:
    place = Shop(tmp_path, request.param, monkeypatch)
    yield place
    place.stop()


def _use_model(srv: FakeLLMServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", srv.openai_base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")


def _prompted(prompt: str) -> tachograph.Agent:
    async def changed(_: str) -> str:
        return await example.refund_agent(prompt)

    return tachograph.Agent(fn=changed, name="mcp_refund", code_version="examples-1")


def test_record_then_replay_with_both_servers_stopped(
    srv: FakeLLMServer, shop: Shop, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = str(tmp_path / "runs.db")
    _use_model(srv, monkeypatch)

    result = tachograph.record_run(example.agent, example.PROMPT, store=db)

    assert result.status == "ok", result
    assert "rf_1" in result.output
    recorded = tachograph.open_store(db).events(result.run_id)
    assert tachograph.verify_events(recorded).ok
    assert [e.type for e in recorded] == EXPECTED
    reads = [e.payload for e in recorded if e.type == "external.read"]
    assert [(r["source"], r["key"]) for r in reads] == [
        ("mcp", "server/discover"),
        ("mcp", "tools/list"),
    ]
    listed = [t["name"] for t in reads[1]["value"]["tools"]]
    assert listed == ["lookup_order", "issue_refund"]
    calls = [e for e in recorded if e.type == "tool.requested"]
    # effects from the server's annotations: readOnlyHint, destructive and not idempotent
    assert [(e.payload["tool"], e.payload["effect"]) for e in calls] == [
        ("lookup_order", "read"),
        ("issue_refund", "irreversible"),
    ]
    assert calls[1].payload["args"] == {"order_id": "B-2002", "amount": 19.99}
    assert "io.modelcontextprotocol/protocolVersion" in calls[1].payload["meta"]
    done = [e.payload["result"] for e in recorded if e.type == "tool.completed"]
    assert done[1]["structuredContent"]["refund_id"] == "rf_1"
    assert done[1]["isError"] is False
    assert "sk-test" not in json.dumps([e.payload for e in recorded])
    requests = srv.request_count
    assert requests == 4
    assert count(shop.counter) == 1
    assert count(shop.starts) == 1

    srv.stop()
    shop.stop()
    report = tachograph.replay(db, result.run_id, example.agent)

    assert report.reproduced, report.render()
    assert report.output == result.output
    assert not [d for d in report.divergences if d.kind == "unrecorded_call"]
    assert srv.request_count == requests  # not one model request
    assert count(shop.counter) == 1  # the refund did not run again
    assert count(shop.starts) == 1  # the MCP server was not started

    # One word of the prompt changed: the first model call diverges at its exact seq, and
    # the report is a normal one although the call sat inside the MCP client's task group.
    first_model = next(e.seq for e in recorded if e.type == "model.request")
    report = tachograph.replay(
        db, result.run_id, _prompted(example.PROMPT.replace("broken", "damaged"))
    )
    assert not report.reproduced
    assert report.first is not None
    assert report.first.seq == first_model == 3
    paths = {c.path: (c.old, c.new) for c in report.first.changes}
    assert paths["$.payload.request.messages[1].content"] == (
        example.PROMPT,
        example.PROMPT.replace("broken", "damaged"),
    )
    assert "seq 3" in report.render()
    assert count(shop.counter) == 1
    assert count(shop.starts) == 1


def test_a_changed_tool_result_is_caught_at_the_tool_seq(
    srv: FakeLLMServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = str(tmp_path / "runs.db")
    counter, starts = tmp_path / "refunds.json", tmp_path / "starts.json"
    _use_model(srv, monkeypatch)
    monkeypatch.setenv("SHOP_COUNTER", str(counter))
    monkeypatch.setenv("SHOP_STARTS", str(starts))
    monkeypatch.delenv("MCP_SHOP_URL", raising=False)

    async def pure_lookup(prompt: str) -> str:
        return await example.refund_agent(prompt, effects={"lookup_order": "pure"})

    agent = tachograph.Agent(fn=pure_lookup, name="mcp_refund", code_version="examples-1")
    result = tachograph.record_run(agent, example.PROMPT, store=db)
    assert result.status == "ok", result
    recorded = tachograph.open_store(db).events(result.run_id)
    lookup_done = next(
        e.seq
        for e in recorded
        if e.type == "tool.completed" and e.payload["tool"] == "lookup_order"
    )
    srv.stop()
    # The server now answers another total. A replay that re-runs the pure lookup against
    # it (the server must be let in) catches the change at the lookup's seq.
    monkeypatch.setenv("SHOP_TOTAL", "25.0")
    server = f"exec:{Path(sys.executable).name}"
    report = tachograph.replay(db, result.run_id, agent, rerun_pure=True, allow_network=[server])

    assert not report.reproduced
    assert report.first is not None
    assert report.first.kind is tachograph.DivergenceKind.TOOL_IMPLEMENTATION_CHANGED
    assert report.first.seq == lookup_done == 6
    paths = {c.path: (c.old, c.new) for c in report.first.changes}
    assert paths["$.payload.result.structuredContent.total"] == (19.99, 25)
    assert "25" in report.render()
    assert count(counter) == 1  # the refund was served, not run
    assert count(starts) == 2  # this replay asked for the server; the default one does not


def test_the_committed_corpus_replays_in_a_fresh_process_with_no_server(tmp_path: Path) -> None:
    # what .ci/run does: a new process (nothing cached from a recording), no model server,
    # no MCP server, no OpenAI settings
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "SHOP_", "MCP_"))}
    env["SHOP_STARTS"] = str(tmp_path / "starts.json")
    tacho = Path(sys.executable).with_name("tacho")
    done = subprocess.run(
        [str(tacho), "test", "corpus/mcp", "--agent", "examples.mcp_refund:agent", "--json"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    outcome = json.loads(done.stdout)
    assert [r["outcome"] for r in outcome["results"]] == ["reproduced"]
    assert outcome["results"][0]["replay"]["allowed_calls"] == []
    assert count(tmp_path / "starts.json") == 0  # the MCP server was never started
