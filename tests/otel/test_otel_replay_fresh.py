"""The OpenLLMetry golden (made by the real traceloop-sdk 0.62) replayed in a fresh interpreter.

A fresh process matters: the OpenAI SDK describes its host in a header on its first request
(``platform.platform()``, which runs ``uname -p`` once per process), and replay's closed world
must not take that for the agent spawning a process. In the shared test process some earlier
test has usually made that first request already, which would hide it.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import tachograph.otel as tgo
from conftest import GOLDEN, TESTS
from tachograph.providers.replay import served_answer
from tachograph.store import SQLiteStore

FILE = GOLDEN / "producers" / "traceloop.json"

AGENT = textwrap.dedent(
    """
    import json, sys
    sys.path[:0] = [sys.argv[3], sys.argv[3] + "/otel"]
    import openai
    import tachograph
    from golden_agent import PLAIN_TOOLS, chat_loop
    from tachograph.integrations.openai import instrument
    from tachograph.store import SQLiteStore

    db = SQLiteStore(sys.argv[1])
    client = instrument(openai.OpenAI(base_url=sys.argv[2], api_key="t", max_retries=0))
    tools = {n: tachograph.tool(name=n)(fn) for n, fn in PLAIN_TOOLS.items()}
    (run,) = db.runs()
    report = tachograph.replay(db, run.run_id, lambda task: chat_loop(client, task, tools=tools))
    print(json.dumps({"reproduced": report.reproduced, "render": report.render(),
                      "divergences": len(report.divergences)}))
    """
)


def _closed_port() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def test_traceloop_golden_replays_in_a_fresh_process(tmp_path: Path) -> None:
    db_path = tmp_path / "runs.db"
    with SQLiteStore(db_path) as db:
        (run,) = tgo.import_otlp(db, FILE).runs
        assert db.verify(run.run_id).ok
    env = {k: v for k, v in os.environ.items() if k != "TACHOGRAPH_STORE"}
    proc = subprocess.run(
        [sys.executable, "-c", AGENT, str(db_path), _closed_port(), str(TESTS)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["divergences"] == 0, result["render"]
    assert result["reproduced"]


def test_conventions_finish_reason_is_served_in_the_sdk_vocabulary(tmp_path: Path) -> None:
    """OpenLLMetry 0.62 records ``tool_call``; the SDK is served ``tool_calls``."""
    with SQLiteStore(tmp_path / "runs.db") as db:
        (run,) = tgo.import_otlp(db, FILE).runs
        answers = [e for e in db.events(run.run_id) if e.type == "model.response"]
    recorded = [a.payload["response"]["choices"][0]["finish_reason"] for a in answers]
    assert recorded == ["tool_call", "tool_call", "stop"]  # kept as the trace said
    served = [
        served_answer(a.payload["response"], "/v1/chat/completions", {"model": "gpt-5.6"})
        for a in answers
    ]
    reasons = [s["body"]["choices"][0]["finish_reason"] for s in served if s]
    assert reasons == ["tool_calls", "tool_calls", "stop"]
    anthropic = served_answer(answers[0].payload["response"], "/v1/messages", {})
    assert anthropic is not None
    assert anthropic["body"]["stop_reason"] == "tool_use"
