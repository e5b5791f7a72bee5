"""Fork and resume of a run the record cannot vouch for (a model answer asked for a tool
call that left no tool event), through the real ``tacho`` and a real SIGKILL: they exit 1
as ``replay`` does, and say why in their first line."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

UNVOUCHED = """
import json
import os
import signal

import tachograph as tg


@tg.model("acme-chat-1")
def chat(req):
    if len(req["messages"]) == 1:
        call = {"id": "c1", "type": "function",
                "function": {"name": "get_stock", "arguments": '{"sku": "X"}'}}
        return {"choices": [{"finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": None, "tool_calls": [call]}}]}
    return {"choices": [{"finish_reason": "stop",
                         "message": {"role": "assistant", "content": "in stock"}}]}


def get_stock(sku):  # not recorded: the record cannot vouch for it
    return {"sku": sku, "n": 3}


@tg.tool(effect="write")
def reserve(sku):
    if os.environ.get("KILL_IN_RESERVE"):
        os.kill(os.getpid(), signal.SIGKILL)
    return {"reserved": sku}


def agent(task):
    msgs = [{"role": "user", "content": task}]
    m = chat({"messages": msgs})["choices"][0]["message"]
    res = get_stock(**json.loads(m["tool_calls"][0]["function"]["arguments"]))
    msgs += [m, {"role": "tool", "tool_call_id": "c1", "content": json.dumps(res)}]
    answer = chat({"messages": msgs})
    reserve("X")
    return answer["choices"][0]["message"]["content"]
"""


def _record(tmp_path: Path, python: str, env: dict[str, str], run_id: str, **extra: str) -> int:
    (tmp_path / "unv_agent.py").write_text(UNVOUCHED)
    code = (
        "import tachograph as tg, unv_agent as m; "
        f"tg.record_run(m.agent, 'stock?', store='runs.db', run_id={run_id!r})"
    )
    done = subprocess.run(
        [python, "-c", code], cwd=tmp_path, env={**env, **extra}, capture_output=True, text=True
    )
    return done.returncode


def test_fork_and_resume_of_an_unvouched_run_exit_1_and_say_so(
    tmp_path: Path,
    python: str,
    child_env: dict[str, str],
    run_tacho: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    assert _record(tmp_path, python, child_env, "u") == 0
    fork = run_tacho("--store", "runs.db", "fork", "u", "--at", "3", "--agent", "unv_agent:agent")
    assert fork.returncode == 1, fork.stdout + fork.stderr
    head = fork.stdout.splitlines()[0]
    assert head.startswith("fork of u: UNVOUCHED (reproduction)"), head
    assert "unvouched: the record cannot vouch for 1 tool call(s)" in fork.stdout
    assert "(finished ok)" in fork.stdout

    assert _record(tmp_path, python, child_env, "k", KILL_IN_RESERVE="1") == -9
    resume = run_tacho("--store", "runs.db", "resume", "k", "--agent", "unv_agent:agent", "--json")
    assert resume.returncode == 1, resume.stdout + resume.stderr
    report = json.loads(resume.stdout)
    assert (report["verdict"], report["final_status"]) == ("unvouched", "ok")
    text = run_tacho("--store", "runs.db", "show", "k")
    assert "run.finished" in text.stdout
