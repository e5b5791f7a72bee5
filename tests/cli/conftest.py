"""Fixtures for the CLI tests: real SQLite stores with real recorded runs, and a runner.

Commands run through click's own runner (in process, real store files) or, where the entry
point, the exit status of a process or terminal detection matters, as a real ``tacho``
subprocess.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

import tachograph as tg
from tachograph.cli.app import cli
from tachograph.demo.agent import billing_agent

TASK = "Order A-4471 arrived damaged. Please refund it."


@dataclass
class Tacho:
    """Run ``tacho`` against one store, the way a user would type it."""

    store: Path
    runner: CliRunner

    def __call__(self, *args: str, store: bool = True) -> Result:
        argv = (["--store", str(self.store)] if store else []) + list(args)
        return self.runner.invoke(cli, argv, catch_exceptions=False)

    def json(self, *args: str, code: int = 0) -> Any:
        """Run with ``--json`` appended; check the exit code and parse stdout."""
        result = self(*args, "--json")
        assert result.exit_code == code, (result.exit_code, result.output)
        return json.loads(result.stdout)


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    """A runner with no colour forcing and no store from the environment."""
    for name in ("FORCE_COLOR", "TACHOGRAPH_STORE", "NO_COLOR"):
        monkeypatch.delenv(name, raising=False)
    return CliRunner()


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    """A store holding one recorded run of the demo billing agent."""
    path = tmp_path / "runs.db"
    with tg.open_store(path, create=True) as store:
        tg.record_run(billing_agent, TASK, store=store)
    return path


@pytest.fixture
def run_id(store_path: Path) -> str:
    """The id of the demo run in ``store_path``."""
    with tg.open_store(store_path) as store:
        return store.runs()[0].run_id


@pytest.fixture
def tacho(store_path: Path, runner: CliRunner) -> Tacho:
    """``tacho --store <store_path> ...`` through click's runner."""
    return Tacho(store_path, runner)


@pytest.fixture(scope="session")
def tacho_exe() -> str:
    """The installed ``tacho`` console script, beside the interpreter running the tests."""
    candidate = Path(sys.executable).parent / "tacho"
    found = str(candidate) if candidate.exists() else shutil.which("tacho")
    if found is None:
        pytest.fail("the tacho console script is not installed (pip install -e '.[dev]')")
    return found


@pytest.fixture
def run_tacho(
    tacho_exe: str, child_env: dict[str, str], tmp_path: Path
) -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run the real ``tacho`` executable in ``tmp_path`` (stdout is a pipe, not a terminal)."""

    def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        full = dict(child_env)
        for name in ("FORCE_COLOR", "NO_COLOR", "TACHOGRAPH_STORE"):
            full.pop(name, None)
        full.update(env or {})
        return subprocess.run(
            [tacho_exe, *args],
            cwd=tmp_path,
            env=full,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    return run


CRASHY = """
import os
import tachograph as tg


@tg.tool(effect="read")
def double(n):
    return n * 2


@tg.tool(effect="irreversible")
def pay(n):
    if os.environ.get("CRASH_IN_PAY"):
        os._exit(9)
    return {"paid": n}


def agent(n):
    a = double(n)
    if os.environ.get("CRASH_AFTER_DOUBLE"):
        os._exit(9)
    return pay(a)
"""


@pytest.fixture
def crash_run(
    tmp_path: Path, store_path: Path, python: str, child_env: dict[str, str]
) -> Callable[[str, str], str]:
    """Record an agent in a real process that dies mid-run (``os._exit``); return the run id.

    The agent module is written to ``tmp_path``, which is also the current directory, so
    ``--agent <module>:agent`` imports it the way a user's own agent would.
    """

    def crash(module: str, flag: str) -> str:
        (tmp_path / f"{module}.py").write_text(CRASHY)
        code = (
            f"import sys; sys.path.insert(0, {str(tmp_path)!r}); import tachograph as tg; "
            f"import {module}; tg.record_run({module}.agent, 21, "
            f"store={str(store_path)!r}, durability='every')"
        )
        proc = subprocess.run(
            [python, "-c", code],
            env={**child_env, flag: "1"},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert proc.returncode == 9, proc.stderr
        with tg.open_store(store_path) as st:
            unfinished = st.runs(status="unfinished")
        assert len(unfinished) == 1
        return unfinished[0].run_id

    return crash


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run the test with ``tmp_path`` as the current directory."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def long_store(tmp_path: Path) -> Path:
    """A store whose run prints more than a pipe holds (64 KiB on Linux)."""
    db = tmp_path / "long.db"
    with tg.record(str(db), run_id="long", actor="a"):
        for i in range(1500):
            tg.decide("step", {"i": i, "pad": "x" * 100})
    return db


def read_and_close(tacho_exe: str, env: dict[str, str], *args: str) -> tuple[int, str]:
    """Run ``tacho ARGS``, read 5 bytes of its stdout and close it, as ``| head -c5`` does;
    return its exit status and stderr."""
    child = subprocess.Popen(
        [tacho_exe, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    assert child.stdout is not None
    assert child.stderr is not None
    child.stdout.read(5)
    child.stdout.close()
    err = child.stderr.read().decode()
    return child.wait(timeout=120), err
