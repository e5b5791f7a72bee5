"""Arize Phoenix as the consumer: a recorded run sent with ``tacho otel export``, read back
through Phoenix's own REST API.

Optional (marker ``phoenix``, skipped unless ``TACHOGRAPH_TEST_PHOENIX`` names the Python
interpreter of an environment with ``arize-phoenix`` installed; CI does not set it, Phoenix
being heavy)::

    python -m venv /somewhere/phoenix && /somewhere/phoenix/bin/pip install 'arize-phoenix==20.26.*'
    TACHOGRAPH_TEST_PHOENIX=/somewhere/phoenix/bin/python python -m pytest -m phoenix tests/otel

Phoenix is started on 127.0.0.1 and a free port, with its data in the test's temporary
directory. Its OTLP/gRPC receiver would listen on every interface (the address is fixed in
Phoenix), so the launcher turns it off: tachograph sends OTLP/HTTP, which Phoenix serves on
its HTTP port.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from golden_agent import PLAIN_TOOLS, PROMPT, chat_loop

import tachograph
import tachograph.otel as tgo
from conftest import GOLDEN
from fakes.llm_server import FakeLLMServer
from tachograph.integrations.openai import instrument
from tachograph.store import SQLiteStore

PHOENIX_PYTHON = os.environ.get("TACHOGRAPH_TEST_PHOENIX")

pytestmark = [
    pytest.mark.phoenix,
    pytest.mark.skipif(
        not PHOENIX_PYTHON,
        reason="set TACHOGRAPH_TEST_PHOENIX to the python of an environment with arize-phoenix",
    ),
]

LAUNCHER = textwrap.dedent(
    """
    import sys
    import phoenix.server.grpc_server as grpc_server

    async def no_grpc(self):  # the gRPC receiver binds [::]; OTLP/HTTP is on PHOENIX_PORT
        return None

    grpc_server.GrpcServer.__aenter__ = no_grpc
    from phoenix.server.main import main

    sys.argv = ["phoenix", "serve"]
    sys.exit(main())
    """
)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as answer:
        return json.loads(answer.read())


class Phoenix:
    def __init__(self, base: str, process: subprocess.Popen[bytes], log: Path) -> None:
        self.base, self.process, self.log = base, process, log

    def spans(self, trace_id: str, count: int, *, wait: float = 60.0) -> list[dict[str, Any]]:
        """The spans of one trace in the default project, once ``count`` have arrived
        (Phoenix ingests asynchronously)."""
        deadline = time.monotonic() + wait
        found: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            data = _get(f"{self.base}/v1/projects/default/spans?limit=1000")["data"]
            found = [s for s in data if s["context"]["trace_id"] == trace_id]
            if len(found) >= count:
                return found
            time.sleep(0.5)
        raise AssertionError(f"Phoenix has {len(found)} of {count} spans of trace {trace_id}")


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Phoenix]:
    assert PHOENIX_PYTHON
    work = tmp_path_factory.mktemp("phoenix")
    port = _free_port()
    env = {
        **os.environ,
        "PHOENIX_WORKING_DIR": str(work),
        "PHOENIX_HOST": "127.0.0.1",
        "PHOENIX_PORT": str(port),
        "PHOENIX_GRPC_PORT": str(_free_port()),
        "PHOENIX_TELEMETRY_ENABLED": "false",
    }
    log = work / "phoenix.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [PHOENIX_PYTHON, "-c", LAUNCHER], stdout=out, stderr=subprocess.STDOUT, env=env
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300  # its first start runs the database migrations
        while True:
            if process.poll() is not None:
                raise AssertionError(f"Phoenix exited: {log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{base}/healthz", timeout=2) as answer:
                    if answer.status == 200:
                        break
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"Phoenix did not start: {log.read_text()[-2000:]}")
            time.sleep(1)
        yield Phoenix(base, process, log)
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=30)


def _tacho(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    code = "import sys\nfrom tachograph.cli import main\nsys.argv[0] = 'tacho'\nmain()"
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )


def _export(phoenix: Phoenix, db: Path, run_id: str) -> str:
    proc = _tacho(
        "--store", str(db), "otel", "export", run_id, "--content", "--json",
        "--endpoint", f"{phoenix.base}/v1/traces",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr + proc.stdout
    result = json.loads(proc.stdout)
    assert result["ok"] is True
    return str(result["trace_id"])


def _answers(store: SQLiteStore, run_id: str) -> list[dict[str, Any]]:
    """What each model call answered, from the record: (tool names, text, finish reason)."""
    out = []
    for event in store.events(run_id):
        if event.type != "model.response":
            continue
        response = event.payload["response"]
        body = response.get("body", response)  # recorded at the HTTP transport, or imported
        choice = body["choices"][0]
        calls = choice["message"].get("tool_calls") or []
        out.append(
            {
                "id": body["id"],
                "finish_reason": choice["finish_reason"],
                "text": choice["message"].get("content"),
                "tools": [c.get("function", c).get("name") for c in calls],
            }
        )
    return out


def _check_chat_spans(spans: list[dict[str, Any]], answers: list[dict[str, Any]]) -> None:
    chats = sorted(
        (s for s in spans if s["name"].startswith("chat ")), key=lambda s: s["start_time"]
    )
    assert len(chats) == len(answers) == 3
    for chat, answer in zip(chats, answers, strict=True):
        a = chat["attributes"]
        assert chat["span_kind"] == "LLM"
        # provider: as sent, and as Phoenix maps it
        assert a["gen_ai.provider.name"] == "openai"
        assert a["llm.provider"] == "openai"
        assert a["gen_ai.response.id"] == answer["id"]
        # finish reasons: the provider's own, and the output message's (required by the
        # schema Phoenix validates gen_ai.output.messages against)
        assert list(a["gen_ai.response.finish_reasons"]) == [answer["finish_reason"]]
        assert a["llm.output_messages.0.message.role"] == "assistant"
        reason = a["llm.output_messages.0.message.finish_reason"]
        assert reason == ("tool_call" if answer["tools"] else "stop")
        # the output message itself, never the HTTP envelope
        if answer["tools"]:
            names = [
                a[f"llm.output_messages.0.message.tool_calls.{i}.tool_call.function.name"]
                for i in range(len(answer["tools"]))
            ]
            assert names == answer["tools"]
            assert a["llm.output_messages.0.message.tool_calls.0.tool_call.id"].startswith("call_")
        else:
            assert a["llm.output_messages.0.message.content"] == answer["text"]
        assert '"status"' not in a["gen_ai.output.messages"]
        assert a["llm.token_count.prompt"] > 0


def test_openai_sdk_run_shows_its_output_messages_in_phoenix(
    phoenix: Phoenix, tmp_path: Path
) -> None:
    db_path = tmp_path / "runs.db"
    tools = {n: tachograph.tool(name=n)(fn) for n, fn in PLAIN_TOOLS.items()}
    with FakeLLMServer() as srv:
        client = instrument(
            openai.OpenAI(base_url=srv.openai_base_url, api_key="test", max_retries=0)
        )
        run = tachograph.record_run(
            lambda task: chat_loop(client, task, tools=tools),
            PROMPT,
            store=db_path,
            actor="billing_agent",
        )
    trace_id = _export(phoenix, db_path, run.run_id)
    spans = phoenix.spans(trace_id, 6)
    with SQLiteStore(db_path) as store:
        answers = _answers(store, run.run_id)
    _check_chat_spans(spans, answers)
    names = sorted(s["name"] for s in spans)
    assert names == [
        "chat gpt-5.6",
        "chat gpt-5.6",
        "chat gpt-5.6",
        "execute_tool issue_refund",
        "execute_tool lookup_order",
        "invoke_agent billing_agent",
    ]
    agent = next(s for s in spans if s["name"].startswith("invoke_agent"))
    assert all(s["parent_id"] == agent["context"]["span_id"] for s in spans if s is not agent)
    tool = next(s for s in spans if s["name"] == "execute_tool lookup_order")
    assert tool["span_kind"] == "TOOL"
    assert tool["attributes"]["gen_ai.tool.call.id"].startswith("call_")


def test_imported_openllmetry_run_shows_its_output_messages_in_phoenix(
    phoenix: Phoenix, tmp_path: Path
) -> None:
    db_path = tmp_path / "runs.db"
    with SQLiteStore(db_path) as store:
        (run,) = tgo.import_otlp(store, GOLDEN / "producers" / "traceloop.json").runs
        answers = _answers(store, run.run_id)
    trace_id = _export(phoenix, db_path, run.run_id)
    assert trace_id == run.trace_id  # an imported run keeps the trace it came from
    _check_chat_spans(phoenix.spans(trace_id, 6), answers)
