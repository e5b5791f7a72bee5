"""Several real processes writing one SQLite store at once.

Writers wait behind BEGIN IMMEDIATE and the busy timeout: no "database is locked" or busy
error may reach a caller, and every run ends contiguous and verified.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tachograph.store import SQLiteStore
from tachograph.store.sqlite import SCHEMA_VERSION

HELPER = Path(__file__).resolve().parent / "helpers" / "append_worker.py"
TIMEOUT = 120.0  # only reached if something hangs


@dataclass
class Crew:
    """Worker processes started together: each says ``ready``, then all start on ``go``."""

    tmp_path: Path
    db: Path
    python: str
    env: dict[str, str]

    def __post_init__(self) -> None:
        self.go = self.tmp_path / "go"
        self.stop = self.tmp_path / "stop"
        self.procs: list[subprocess.Popen[str]] = []

    def start(self, role: str, run_id: str, count: int, worker: int) -> None:
        args = [str(self.db), role, run_id, str(count), str(worker), str(self.go), str(self.stop)]
        proc = subprocess.Popen(
            [self.python, str(HELPER), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=self.env,
        )
        self.procs.append(proc)

    def run(self, *, readers: int = 0) -> list[dict[str, Any]]:
        for proc in self.procs:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            if line.strip() != "ready":
                _, err = proc.communicate(timeout=TIMEOUT)
                raise AssertionError(f"worker did not start: {line!r} {err}")
        self.go.touch()
        split = len(self.procs) - readers  # readers were started last
        results = [self._finish(proc) for proc in self.procs[:split]]
        self.stop.touch()  # readers loop until the writers are done
        results += [self._finish(proc) for proc in self.procs[split:]]
        return results

    @staticmethod
    def _finish(proc: subprocess.Popen[str]) -> dict[str, Any]:
        out, err = proc.communicate(timeout=TIMEOUT)
        assert proc.returncode == 0, err
        assert "locked" not in err.lower(), err
        assert "busy" not in err.lower(), err
        result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
        return result

    def kill_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@pytest.fixture
def crew(tmp_path: Path, python: str, child_env: dict[str, str]) -> Iterator[Crew]:
    crew = Crew(tmp_path, tmp_path / "shared.db", python, child_env)
    try:
        yield crew
    finally:
        crew.kill_all()


def _check_run(store: SQLiteStore, run_id: str, length: int) -> list[dict[str, Any]]:
    events = list(store.read(run_id))
    assert [e.seq for e in events] == list(range(length))
    report = store.verify(run_id)
    assert report.ok, report.render()
    assert store.run_info(run_id).events == length
    return [e.payload for e in events]


def test_four_writers_on_their_own_runs_with_two_readers(crew: Crew) -> None:
    SQLiteStore(crew.db).close()
    count = 300
    for worker in range(4):
        crew.start("own", f"run-{worker}", count, worker)
    for reader in range(2):
        crew.start("read", "-", 0, 100 + reader)
    results = crew.run(readers=2)
    assert sorted(r["written"] for r in results if r["role"] == "own") == [count] * 4
    assert all(r["rounds"] >= 1 for r in results if r["role"] == "read")
    with SQLiteStore(crew.db) as store:
        assert isinstance(store, SQLiteStore)
        for worker in range(4):
            payloads = _check_run(store, f"run-{worker}", count)
            assert payloads[1:] == [{"worker": worker, "i": i} for i in range(1, count)]
        assert store.count_events() == 4 * count
        assert store.integrity_check() == "ok"


def test_four_writers_on_the_same_run_retry_and_end_contiguous(crew: Crew) -> None:
    SQLiteStore(crew.db).close()
    count = 100
    for worker in range(4):
        crew.start("shared", "contended", count, worker)
    results = crew.run()
    assert [r["written"] for r in results] == [count] * 4
    with SQLiteStore(crew.db) as store:
        assert isinstance(store, SQLiteStore)
        payloads = _check_run(store, "contended", 4 * count)
        # every worker's events are there exactly once, in the order it wrote them
        seen: dict[int, list[int]] = {}
        for payload in payloads:
            seen.setdefault(payload["worker"], []).append(payload["i"])
        assert seen == {worker: list(range(count)) for worker in range(4)}
        assert store.integrity_check() == "ok"


def test_processes_creating_new_stores_at_once(crew: Crew) -> None:
    # No one has created the stores yet: every process runs the schema setup at the same time.
    for worker in range(6):
        crew.start("open", f"first-{worker}", 3, worker)
    results = crew.run()
    assert sorted(r["written"] for r in results) == [3] * 6
    for n in range(8):
        with SQLiteStore(f"{crew.db}.{n}", create=False) as store:
            assert isinstance(store, SQLiteStore)
            assert store.schema_version == SCHEMA_VERSION
            for worker in range(6):
                _check_run(store, f"first-{worker}", 3)
            assert store.integrity_check() == "ok"
