"""The httpx, Agents SDK, pydantic-ai and Google ADK examples of docs/integrations.md run as
written, against local servers, and replay without a request."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import agents
import pytest

from fakes.llm_server import FakeLLMServer

from .agents_sdk import script
from .http_server import Shop
from .pyai_agent import script as pyai_script

DOC = Path(__file__).resolve().parents[2] / "docs" / "integrations.md"


def _example(heading: str) -> str:
    section = DOC.read_text(encoding="utf-8").split(f"## {heading}\n", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match is not None
    return match.group(1)


def _glue(code: str) -> list[str]:
    return [line for line in code.splitlines() if "instrument(" in line and "import" not in line]


@pytest.fixture(autouse=True)
def _no_trace_export() -> Iterator[None]:
    agents.set_tracing_disabled(True)
    yield
    agents.set_tracing_disabled(False)


def test_the_httpx_example_records_and_replays_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code = _example("Plain HTTP clients: httpx and httpx2")
    assert _glue(code) == [
        "http = instrument(httpx.Client())"
        "  # the one line: every request this client sends is recorded"
    ]
    shop = Shop()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SHOP_URL", shop.url)
    namespace: dict[str, Any] = {"__name__": "docs_httpx"}
    code_record, code_replay = code.split("report = ", 1)
    try:
        exec(compile(code_record, str(DOC), "exec"), namespace)
    finally:
        shop.stop()
    # the shop is gone: the replay runs on the record alone
    exec(compile("report = " + code_replay, str(DOC), "exec"), namespace)
    assert "REPRODUCED" in capsys.readouterr().out
    assert namespace["report"].reproduced
    assert namespace["run"].output == {"refund_id": "rf_1", "order_id": "B-2002", "amount": 19.99}
    assert len(shop.requests) == 2
    assert len(shop.refunds) == 1


def test_the_agents_sdk_example_records_and_replays_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code = _example("The OpenAI Agents SDK")
    assert _glue(code) == [
        'instrument(triage, client=AsyncOpenAI(), effects={"lookup_order": "read"})  # the one line'
    ]
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {"__name__": "docs_agents"}
    with FakeLLMServer(script) as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.openai_base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-docs")
        code_record, code_replay = code.split("report = ", 1)
        exec(compile(code_record, str(DOC), "exec"), namespace)
        requests = srv.request_count
    # the server is gone: the replay runs on the record alone
    exec(compile("report = " + code_replay, str(DOC), "exec"), namespace)
    assert "REPRODUCED" in capsys.readouterr().out
    assert namespace["report"].reproduced
    assert "Refund of 19.99 issued for order B-2002" in namespace["run"].output
    assert requests == 4
    assert (tmp_path / "refunds.json").read_text() == "1"


def test_the_pydantic_ai_example_records_and_replays_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code = _example("pydantic-ai")
    glue = [line for line in code.splitlines() if "Tachograph(" in line]
    assert glue == [
        'recorder = Tachograph(effects={"lookup_order": "read"}, delegates={"ask_billing"})'
        "  # the one line"
    ]
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {"__name__": "docs_pydantic_ai"}
    with FakeLLMServer(pyai_script) as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.openai_base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-docs")
        code_record, code_replay = code.split("report = ", 1)
        exec(compile(code_record, str(DOC), "exec"), namespace)
        requests = srv.request_count
    # the server is gone: the replay runs on the record alone
    exec(compile("report = " + code_replay, str(DOC), "exec"), namespace)
    assert "REPRODUCED" in capsys.readouterr().out
    assert namespace["report"].reproduced
    assert "Refund of 19.99 issued for order B-2002" in namespace["run"].output
    assert requests == 5
    assert (tmp_path / "refunds.json").read_text() == "1"


def test_the_google_adk_example_records_and_replays_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("google.adk", reason="google-adk is installed apart from the dev extra")
    from .adk_agent import script as adk_script

    code = _example("Google ADK")
    glue = [line for line in code.splitlines() if "TachographPlugin(" in line]
    assert glue == [
        'plugins = [TachographPlugin(effects={"lookup_order": "read"})]  # the one line'
    ]
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {"__name__": "docs_google_adk"}
    with FakeLLMServer(adk_script) as srv:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", srv.base_url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-docs")
        code_record, code_replay = code.split("report = ", 1)
        exec(compile(code_record, str(DOC), "exec"), namespace)
        requests = srv.request_count
    # the server is gone: the replay runs on the record alone
    exec(compile("report = " + code_replay, str(DOC), "exec"), namespace)
    assert "REPRODUCED" in capsys.readouterr().out
    assert namespace["report"].reproduced
    assert "Refund of 19.99 issued for order B-2002" in namespace["run"].output
    assert requests == 4
    assert (tmp_path / "refunds.json").read_text() == "1"
