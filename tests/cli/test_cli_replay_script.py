"""Runs recorded by running the agent's file as a script (``python agent.py``, README.md).

The agent's own classes are then ``__main__``'s, and the failures recorded name them
``__main__.X``; replay, fork, resume and ``tacho test`` import the agent as a module
(``--agent module:fn``), in a process whose ``__main__`` is the CLI. Every step here is a
real process: the recording script, and the ``tacho`` executable.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

import tachograph as tg

Run = Callable[..., subprocess.CompletedProcess[str]]

SCRIPT = """
import os
import sys

import tachograph as tg


class Declined(Exception):
    pass


@tg.tool(effect="irreversible")
def charge(amount):
    raise Declined(f"declined {amount}")


@tg.tool(effect="pure")
def limit(amount):
    raise Declined(f"over the limit {amount}")


@tg.agent(name="decl", tools=[charge, limit])
def agent(order):
    try:
        (limit if order.get("check") else charge)(order["amount"])
    except Declined:
        if os.environ.get("CRASH_AFTER_DECLINE"):
            os._exit(9)
        if order.get("reraise"):
            raise
        return "declined, escalating"
    return "charged"


if __name__ == "__main__":
    order = {"amount": 50, **{flag: True for flag in sys.argv[2:]}}
    tg.record_run(agent, order, store=sys.argv[1], durability="every")
"""


@pytest.fixture
def record_script(
    tmp_path: Path, store_path: Path, python: str, child_env: dict[str, str]
) -> Callable[..., str]:
    """Write ``SCRIPT`` as ``<module>.py`` in ``tmp_path`` and record it as a script."""

    def run(module: str, *extra: str, env: dict[str, str] | None = None, rc: int = 0) -> str:
        path = tmp_path / f"{module}.py"
        path.write_text(SCRIPT)
        with tg.open_store(store_path) as store:
            before = {r.run_id for r in store.runs()}
        proc = subprocess.run(
            [python, str(path), str(store_path), *extra],
            cwd=tmp_path,
            env={**child_env, **(env or {})},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert proc.returncode == rc, proc.stderr
        with tg.open_store(store_path) as store:
            (new,) = [r.run_id for r in store.runs() if r.run_id not in before]
            failed = [e for e in store.events(new) if e.type == "tool.failed"]
        assert failed[0].payload["error"]["type"] == "__main__.Declined"
        return new

    return run


def _json(done: subprocess.CompletedProcess[str], code: int = 0) -> dict[str, object]:
    assert done.returncode == code, (done.stdout, done.stderr)
    data: dict[str, object] = json.loads(done.stdout)
    return data


def test_replay_rebuilds_the_scripts_own_exception_class(
    record_script: Callable[..., str], store_path: Path, run_tacho: Run
) -> None:
    run_id = record_script("decl_replay")
    done = run_tacho("--store", str(store_path), "replay", run_id, "--agent", "decl_replay:agent")
    assert done.returncode == 0, done.stdout
    assert "REPRODUCED" in done.stdout
    assert "RecordedError" not in done.stdout


def test_an_uncaught_own_exception_ends_the_replay_as_it_ended_the_recording(
    record_script: Callable[..., str], store_path: Path, run_tacho: Run
) -> None:
    # the recording ended with __main__.Declined; the replay raises decl_raise.Declined,
    # the same class imported under its module's name
    run_id = record_script("decl_raise", "reraise", rc=1)
    report = _json(
        run_tacho(
            "--store", str(store_path), "replay", run_id, "--agent", "decl_raise:agent", "--json"
        )
    )
    assert report["verdict"] == "reproduced"
    assert report["error"]["type"] == "decl_raise.Declined"  # type: ignore[index]


def test_a_pure_tool_rerun_raises_the_class_it_raised_when_recorded(
    record_script: Callable[..., str], store_path: Path, run_tacho: Run
) -> None:
    run_id = record_script("decl_pure", "check")
    report = _json(
        run_tacho(
            "--store", str(store_path), "replay", run_id, "--agent", "decl_pure:agent",
            "--rerun-pure", "--json",
        )
    )  # fmt: skip
    assert report["verdict"] == "reproduced", report["divergences"]


def test_a_class_that_cannot_be_rebuilt_is_named_in_the_notes(
    record_script: Callable[..., str], store_path: Path, run_tacho: Run, tmp_path: Path
) -> None:
    run_id = record_script("decl_gone")
    path = tmp_path / "decl_gone.py"
    # the class was renamed since: the agent still handles the failure, by another clause
    path.write_text(
        path.read_text()
        .replace("Declined", "Refused")
        .replace("except Refused", "except Exception")
    )
    report = _json(
        run_tacho(
            "--store", str(store_path), "replay", run_id, "--agent", "decl_gone:agent", "--json"
        )
    )
    assert report["verdict"] == "reproduced"
    (note,) = [n for n in report["notes"] if "could not be rebuilt" in n]  # type: ignore[attr-defined]
    assert "'__main__.Declined'" in note
    assert "seq 2" in note
    assert "module 'decl_gone' has no 'Declined'" in note
    assert "RecordedError" in note


def test_fork_serves_the_scripts_own_exception_class(
    record_script: Callable[..., str], store_path: Path, run_tacho: Run
) -> None:
    run_id = record_script("decl_fork")
    report = _json(
        run_tacho(
            "--store", str(store_path), "fork", run_id, "--at", "2",
            "--agent", "decl_fork:agent", "--json",
        )
    )  # fmt: skip
    assert report["final_status"] == "ok"
    with tg.open_store(store_path) as store:
        events = store.events(str(report["new_run_id"]))
    assert events[-1].payload["output"] == "declined, escalating"


def test_resume_serves_the_scripts_own_exception_class(
    record_script: Callable[..., str], store_path: Path, run_tacho: Run
) -> None:
    run_id = record_script("decl_resume", env={"CRASH_AFTER_DECLINE": "1"}, rc=9)
    report = _json(
        run_tacho(
            "--store", str(store_path), "resume", run_id, "--agent", "decl_resume:agent", "--json"
        )
    )
    assert report["final_status"] == "ok"
    with tg.open_store(store_path) as store:
        events = store.events(run_id)
    assert events[-1].payload == {"status": "ok", "output": "declined, escalating"}


def test_corpus_test_serves_the_scripts_own_exception_class(
    record_script: Callable[..., str], store_path: Path, run_tacho: Run
) -> None:
    run_id = record_script("decl_corpus")
    saved = run_tacho(
        "--store", str(store_path), "save", run_id, "--to", "corpus", "--verdict", "good"
    )
    assert saved.returncode == 0, saved.stderr
    report = _json(run_tacho("test", "corpus", "--agent", "decl_corpus:agent", "--json"))
    assert report["ok"] is True
