"""The closed world reaches the threads an agent starts: a review found a write tool called
from a ThreadPoolExecutor, a process started from a worker thread, ``os.system``,
``os.posix_spawn`` and a UDP datagram all firing during a replay that then said REPRODUCED.

Real effects: a counter file the write tool appends to, a marker file a child process
creates, a UDP socket that counts the datagrams it receives."""

from __future__ import annotations

import concurrent.futures
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import tachograph as tg
from tachograph.replay.report import DivergenceKind


def _agent(ledger: Path) -> Any:
    @tg.tool(effect="write", name="append_line")
    def append_line(text: str) -> dict[str, int]:
        with ledger.open("a") as out:
            out.write(text + "\n")
        return {"lines": len(ledger.read_text().splitlines())}

    @tg.agent(name="pooled", tools=[append_line], code_version="1")
    def pooled(task: list[str]) -> int:
        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
            results = list(pool.map(append_line, task))
        thread = threading.Thread(target=append_line, args=("from a thread",))
        thread.start()
        thread.join()
        return max(r["lines"] for r in results)

    return pooled


def test_tools_called_from_threads_are_recorded_and_served(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.txt"
    agent = _agent(ledger)
    db = tmp_path / "runs.db"
    result = tg.record_run(agent, ["a", "b"], store=db)
    with tg.open_store(db) as store:
        tools = [e for e in store.events(result.run_id) if e.type == "tool.requested"]
    assert len(tools) == 3  # the pool's two calls and the thread's: none ran unrecorded
    assert len(ledger.read_text().splitlines()) == 3
    report = tg.replay(db, result.run_id, agent)
    assert report.reproduced, report.render()
    assert len(ledger.read_text().splitlines()) == 3  # served from the record: nothing fired


def _effects(marker: Path, port: int) -> dict[str, Callable[[], Any]]:
    child = [sys.executable, "-c", f"open({str(marker)!r}, 'w').close()"]
    return {
        "subprocess": lambda: subprocess.run(child, check=True),
        "os.system": lambda: os.system(" ".join(child[:2]) + f' "{child[2]}"'),
        "os.posix_spawn": lambda: os.waitpid(os.posix_spawn(child[0], child, dict(os.environ)), 0),
        "udp": lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(
            b"x", ("127.0.0.1", port)
        ),
    }


@pytest.mark.parametrize("effect", ["subprocess", "os.system", "os.posix_spawn", "udp"])
@pytest.mark.parametrize("where", ["thread", "pool", "main"])
def test_an_unrecorded_effect_from_any_thread_of_the_agent_is_refused(
    tmp_path: Path, effect: str, where: str
) -> None:
    marker = tmp_path / "marker"
    receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    receiver.bind(("127.0.0.1", 0))
    receiver.settimeout(0.2)
    port = receiver.getsockname()[1]
    act = _effects(marker, port)[effect]

    def run_it() -> None:
        if where == "main":
            act()
        elif where == "pool":
            with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
                pool.submit(act).result()
        else:
            errors: list[BaseException] = []

            def target() -> None:
                try:
                    act()
                except BaseException as exc:  # the refusal, seen by the agent's own thread
                    errors.append(exc)

            thread = threading.Thread(target=target)
            thread.start()
            thread.join()
            if errors:
                raise errors[0]

    @tg.agent(name=f"effects-{effect}-{where}", code_version="1")
    def agent(task: str) -> str:
        run_it()
        return "done"

    db = tmp_path / "runs.db"
    result = tg.record_run(agent, "go", store=db)  # recording: the world is live
    if effect == "udp":
        assert receiver.recv(10) == b"x"
    else:
        assert marker.exists()
        marker.unlink()
    report = tg.replay(db, result.run_id, agent, collect=True)
    assert not report.reproduced
    kinds = [d.kind for d in report.divergences]
    assert DivergenceKind.UNRECORDED_CALL in kinds, report.render()
    if effect == "udp":
        with pytest.raises(TimeoutError):
            receiver.recv(10)
    else:
        assert not marker.exists(), "the effect fired during the replay"
    receiver.close()
