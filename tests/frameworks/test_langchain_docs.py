"""The LangChain and LangGraph examples of docs/integrations.md run as written, against the
fake model server on 127.0.0.1, and replay without a request; the committed corpus replays
with no server at all."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import tachograph
from fakes.llm_server import FakeLLMServer
from tachograph.integrations.langchain import TachographSaver, is_instrumented

from .lc_agents import approval_script, approval_tools, counter_value, tool_graph

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "integrations.md"


def _examples(heading: str) -> list[str]:
    section = DOC.read_text(encoding="utf-8").split(f"## {heading}\n", 1)[1]
    section = re.split(r"\n## ", section, maxsplit=1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.DOTALL)


def test_the_langchain_example_records_and_replays_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, node_code, resume_code = _examples("LangChain and LangGraph")
    glue = [line for line in code.splitlines() if "TachographMiddleware(" in line]
    assert glue == [
        '    middleware=[TachographMiddleware(effects={"lookup_order": "read"})],  # the one line'
    ]
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {"__name__": "docs_langchain"}
    with FakeLLMServer() as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.openai_base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-docs")
        code_record, code_replay = code.split("report = ", 1)
        exec(compile(code_record, str(DOC), "exec"), namespace)
        requests = srv.request_count
        # the graph of one's own: the same recorder on the ToolNode and the model
        exec(compile(node_code, str(DOC), "exec"), namespace)
        assert is_instrumented(namespace["llm"])
        assert namespace["tools"]._wrap_tool_call == namespace["recorder"].wrap_tool_call
    # the server is gone: the replay runs on the record alone
    exec(compile("report = " + code_replay, str(DOC), "exec"), namespace)
    assert "REPRODUCED" in capsys.readouterr().out
    assert namespace["report"].reproduced
    assert "Refund of 19.99 issued for order B-2002" in namespace["run"].output
    assert requests == 3
    assert (tmp_path / "refunds.json").read_text() == "1"

    # The checkpointer example: a run stopped at interrupt(), resumed from the log.
    counter = tmp_path / "approvals.json"
    config = {"configurable": {"thread_id": "order-B-2002"}}
    with FakeLLMServer(approval_script) as srv:
        builder = tool_graph(srv.openai_base_url, approval_tools(counter), compile=False)

        def first(prompt: str) -> str:
            graph = builder.compile(checkpointer=TachographSaver())
            state = graph.invoke({"messages": [("user", prompt)]}, config)
            return str(state["__interrupt__"][0].value["question"])

        stopped = tachograph.record_run(first, "Refund B-2002", store="runs.db")
        assert counter_value(counter) == 1
        namespace.update(builder=builder, first_run_id=stopped.run_id)
        exec(compile(resume_code, str(DOC), "exec"), namespace)
    assert namespace["resumed"].output == "Done. customer said: yes"
    assert counter_value(counter) == 1


def test_the_committed_corpus_replays_with_no_server(tmp_path: Path) -> None:
    corpus = ROOT / "corpus" / "langchain"
    fixtures = sorted(corpus.glob("*.jsonl"))
    assert [f.name for f in fixtures] == ["langchain-good-refund-b2002.jsonl"]
    events = [json.loads(line) for line in fixtures[0].read_text().splitlines()]
    assert [e["type"] for e in events].count("tool.requested") == 2
    env = {"PATH": "", "REFUNDS_FILE": str(tmp_path / "refunds.json"), "HOME": str(tmp_path)}
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "from tachograph.cli import main; main()",
            "test",
            str(corpus),
            "--agent",
            "examples.langchain_refund:agent",
            "--json",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] is True, report
    assert report["counts"]["reproduced"] == 1
    assert [r["outcome"] for r in report["results"]] == ["reproduced"]
    assert not (tmp_path / "refunds.json").exists()  # the refund was served, not made
