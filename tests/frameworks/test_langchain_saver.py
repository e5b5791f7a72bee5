"""TachographSaver: the official LangGraph checkpointer conformance suite, checkpoints as
events of the log, and a graph resumed from a checkpoint answered from the log.

LangGraph resumes an interrupted node by running it again from its start; a refund made
before the ``interrupt()`` is then made twice. With the saver (and the middleware on the
graph's ``ToolNode``) the call that runs again is answered from the recorded run.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.report import ProgressCallbacks
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

import tachograph
from fakes.llm_server import FakeLLMServer
from tachograph.integrations.langchain import ANSWER_REUSED, TachographSaver
from tachograph.integrations.langgraph import OPERATIONS

from .lc_agents import approval_script, approval_tools, counter_value, tool_graph


def test_the_official_conformance_suite_passes_on_a_sqlite_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tachograph.open_store(str(tmp_path / "checkpoints.db"))
    savers: list[TachographSaver] = []

    async def factory() -> AsyncIterator[TachographSaver]:
        saver = TachographSaver(store)
        savers.append(saver)
        yield saver
        saver.close()

    registered = checkpointer_test(name="TachographSaver")(factory)
    report = asyncio.run(validate(registered, progress=ProgressCallbacks.verbose()))
    report.print_report()
    out = capsys.readouterr().out
    with capsys.disabled():
        print("\n" + out)
    assert report.passed_all_base(), out
    failed = {name: r for name, r in report.results.items() if r.passed is False}
    assert not failed, out
    # Every checkpoint write went through the capture boundary into verified journal runs.
    runs = [s.journal_run_id for s in savers if s.journal_run_id is not None]
    assert runs
    for run_id in runs:
        events = store.events(run_id)
        assert tachograph.verify_events(events).ok
        assert events[-1].type == "run.finished"
        names = {e.payload["tool"] for e in events if e.type == "tool.requested"}
        assert names <= {f"langgraph.checkpoint.{op}" for op in OPERATIONS}
    # A saver rebuilt from a journal run holds what was written into it.
    biggest = max(runs, key=lambda r: len(store.events(r)))
    rebuilt = TachographSaver.from_run(store, biggest)
    original = next(s for s in savers if s.journal_run_id == biggest)
    assert set(rebuilt.storage) == {t for t, ns in original.storage.items() if ns}
    assert rebuilt.writes.keys() == original.writes.keys()


def _interrupted(result: dict[str, Any]) -> str:
    pending = result.get("__interrupt__")
    if pending:
        return "interrupted: " + pending[0].value["question"]
    return str(result["messages"][-1].content)


CONFIG = {"configurable": {"thread_id": "order-B-2002"}}


def test_langgraph_alone_repeats_the_refund_when_it_resumes(tmp_path: Path) -> None:
    counter = tmp_path / "refunds.json"
    with FakeLLMServer(approval_script) as srv:
        graph = tool_graph(
            srv.openai_base_url, approval_tools(counter), checkpointer=InMemorySaver(), record=False
        )
        assert _interrupted(graph.invoke({"messages": [("user", "Refund B-2002")]}, CONFIG))
        assert counter_value(counter) == 1
        graph.invoke(Command(resume="thanks"), CONFIG)
        assert counter_value(counter) == 2  # the whole tools node ran again


def test_resuming_from_a_recorded_checkpoint_serves_the_recorded_calls(tmp_path: Path) -> None:
    db, counter = str(tmp_path / "runs.db"), tmp_path / "refunds.json"
    with FakeLLMServer(approval_script) as srv:
        url = srv.openai_base_url

        def first(prompt: str) -> str:
            graph = tool_graph(url, approval_tools(counter), checkpointer=TachographSaver())
            return _interrupted(graph.invoke({"messages": [("user", prompt)]}, CONFIG))

        agent = tachograph.Agent(fn=first, name="approval", code_version="t-1")
        result = tachograph.record_run(agent, "Refund B-2002", store=db)
        assert result.output == "interrupted: Refund B-2002 sent. Anything else?"
        assert counter_value(counter) == 1
        recorded = tachograph.open_store(db).events(result.run_id)
        assert tachograph.verify_events(recorded).ok
        puts = [
            e
            for e in recorded
            if e.type == "tool.requested" and e.payload["tool"] == "langgraph.checkpoint.put"
        ]
        assert puts
        assert all(e.payload["effect"] == "write" for e in puts)
        assert puts[0].payload["args"] == {
            "thread_id": "order-B-2002",
            "checkpoint_ns": "",
            "step": -1,
            "source": "input",
        }
        refund = next(
            e
            for e in recorded
            if e.type == "tool.completed" and e.payload["tool"] == "issue_refund"
        )
        requests = srv.request_count
        assert requests == 1

        # Another process, later: the customer answered. Resume the thread from the log.
        def resumed(answer: str) -> str:
            saver = TachographSaver.from_run(db, result.run_id)
            graph = tool_graph(url, approval_tools(counter), checkpointer=saver)
            return _interrupted(graph.invoke(Command(resume=answer), CONFIG))

        agent2 = tachograph.Agent(fn=resumed, name="approval", code_version="t-1")
        second = tachograph.record_run(agent2, "thanks", store=db)
        assert second.status == "ok", second
        assert second.output == "Done. customer said: thanks"
        assert counter_value(counter) == 1  # the refund was answered from the log
        assert srv.request_count == requests + 1  # only the new, final answer was asked for
        events = tachograph.open_store(db).events(second.run_id)
        reused = [e.payload for e in events if e.type == ANSWER_REUSED]
        assert [r["from"] for r in reused] == [{"run_id": result.run_id, "seq": refund.seq}]
        tool_calls = [
            e.payload["tool"]
            for e in events
            if e.type == "tool.completed" and not e.payload["tool"].startswith("langgraph.")
        ]
        # the two calls of one step run in parallel (ToolNode): either may complete first
        assert sorted(tool_calls) == ["confirm_with_customer", "issue_refund"]

        # Both runs replay with the server gone.
        srv.stop()
    for run, spec in ((result, agent), (second, agent2)):
        report = tachograph.replay(db, run.run_id, spec)
        assert report.reproduced, report.render()
        assert report.output == run.output
    assert counter_value(counter) == 1


def test_a_saver_given_no_store_journals_in_memory_and_writes_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no store, the journal of writes outside a run is an in-memory store: it was a
    SQLite file named ``memory:`` in the working directory."""
    monkeypatch.chdir(tmp_path)
    saver = TachographSaver()
    config: Any = {"configurable": {"thread_id": "t-1", "checkpoint_ns": ""}}
    checkpoint: Any = {
        "v": 1,
        "id": "1ef0",
        "ts": "2026-12-07T00:00:00+00:00",
        "channel_values": {},
        "channel_versions": {},
        "versions_seen": {},
        "pending_sends": [],
    }
    saver.put(config, checkpoint, {"source": "input", "step": -1}, {})
    assert saver.journal_run_id is not None
    saver.close()
    assert list(tmp_path.iterdir()) == []
