"""A divergence in a thread the agent started, as ``tacho replay`` and ``tacho fork`` show it: a
review found a ``ReplayStopped`` traceback on stderr and a bogus second divergence
(``then: seq 1: type_changed``) after the real one, without ``--collect``.

The real ``tacho`` executable, an agent module in the working directory, a real store."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

import tachograph as tg
from tachograph.cli.app import EXIT_FAILED

Run = Callable[..., subprocess.CompletedProcess[str]]

AGENT = """
import os
import threading
import tachograph as tg

@tg.tool(effect="read")
def lookup(x):
    return x * 10

@tg.agent(name="thr_min", tools=[lookup], code_version="1")
def agent(x):
    x += int(os.environ.get("THR_OFFSET", "0"))
    found = []
    thread = threading.Thread(target=lambda: found.append(lookup(x)))
    thread.start()
    thread.join()
    tg.select_plan("answer")
    return found[0]
"""


@pytest.fixture
def recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "thr_min.py").write_text(AGENT)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("THR_OFFSET", raising=False)
    import thr_min

    return tg.record_run(thr_min.agent, 3, store=tmp_path / "runs.db").run_id


@pytest.mark.parametrize("command", [["replay"], ["fork", "--at", "3"]])
def test_a_divergence_in_a_thread_is_shown_once_and_without_a_traceback(
    run_tacho: Run, recorded: str, command: list[str]
) -> None:
    env = {"THR_OFFSET": "1"}
    argv = ["--store", "runs.db", command[0], recorded, *command[1:], "--agent", "thr_min:agent"]
    text = run_tacho(*argv, env=env)
    assert text.returncode == EXIT_FAILED, text.stderr
    assert "seq 1: args_changed" in text.stdout
    assert "x: 3 -> 4" in text.stdout
    assert "then:" not in text.stdout
    assert "type_changed" not in text.stdout
    assert "Traceback" not in text.stderr, text.stderr
    assert "ReplayStopped" not in text.stderr, text.stderr
    data = run_tacho(*argv, "--json", env=env)
    assert "Traceback" not in data.stderr, data.stderr
    divergences = json.loads(data.stdout)["divergences"]
    assert [(d["kind"], d["seq"]) for d in divergences] == [("args_changed", 1)]
