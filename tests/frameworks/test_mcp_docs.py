"""The MCP example of docs/integrations.md runs as written against the fake model server and
the MCP shop server (stdio), and replays with both gone: no request, no server started."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from fakes.llm_server import FakeLLMServer

from .mcp_shop import ROOT, SERVER_SCRIPT, count

DOC = ROOT / "docs" / "integrations.md"


def _examples(heading: str) -> list[str]:
    section = DOC.read_text(encoding="utf-8").split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.DOTALL)


def _glue(code: str) -> list[str]:
    return [line for line in code.splitlines() if "instrument" in line and "import" not in line]


def test_the_mcp_example_records_and_replays_with_no_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    code, middleware = _examples("MCP client sessions and servers")
    assert _glue(code) == [
        "llm = instrument_openai(AsyncOpenAI())  # the model calls",
        "    client = instrument(Client(shop))  # the one line for MCP: tool calls and listings",
    ]
    (tmp_path / "examples").mkdir()
    shutil.copy(SERVER_SCRIPT, tmp_path / "examples" / SERVER_SCRIPT.name)
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {"__name__": "docs_mcp"}
    with FakeLLMServer() as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.openai_base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-docs")
        code_record, code_replay = code.split("report = ", 1)
        exec(compile(code_record, str(DOC), "exec"), namespace)
        requests = srv.request_count
    assert count(tmp_path / "refunds.json") == 1
    # the model server is gone and the MCP server is not started: the record serves all
    exec(compile("report = " + code_replay, str(DOC), "exec"), namespace)
    assert "REPRODUCED" in capfd.readouterr().out
    assert namespace["report"].reproduced
    assert "Refund of 19.99 issued for order B-2002" in namespace["run"].output
    assert requests == 3
    assert count(tmp_path / "refunds.json") == 1

    # the server-side snippet builds and installs the middleware as written
    server_ns: dict[str, Any] = {}
    exec(compile(middleware, str(DOC), "exec"), server_ns)
    assert type(server_ns["server"].middleware[-1]).__name__ == "RecordingMiddleware"
