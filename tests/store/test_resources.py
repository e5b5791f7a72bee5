"""Opening and closing stores, directly or through CLI commands, leaks no thread and no file."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from tachograph.cli.app import cli
from tachograph.record.jsonl import export_run
from tachograph.store import MemoryStore, SQLiteStore, open_store
from tachograph.testing import build_run


def _fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def _threads() -> set[int]:
    return {t.ident for t in threading.enumerate() if t.ident is not None}


def _no_leak(work: Callable[[int], None], times: int = 50) -> None:
    work(0)  # first use may load modules and caches: not a leak
    fds, threads = _fds(), _threads()
    for index in range(1, times + 1):
        work(index)
    leaked = _fds() - fds
    described = {fd: os.path.realpath(f"/proc/self/fd/{fd}") for fd in leaked}
    assert not leaked, described
    assert _threads() == threads


pytestmark = pytest.mark.skipif(
    not Path("/proc/self/fd").is_dir(), reason="needs /proc to count open files"
)


def test_opening_and_closing_50_stores_of_each_engine_leaks_nothing(tmp_path: Path) -> None:
    def sqlite_store(index: int) -> None:
        store = open_store(tmp_path / f"s{index % 5}.db")
        store.append(build_run(f"run-{index}", 3))
        assert store.verify(f"run-{index}").ok
        store.close()

    def memory_store(index: int) -> None:
        with open_store(f"memory://leak-{index % 5}") as store:
            store.append(build_run(f"run-{index}", 3))
            assert all(r.ok for r in store.verify_all())

    def refused(index: int) -> None:
        with pytest.raises(Exception, match="no tachograph store"):
            SQLiteStore(tmp_path / "nowhere" / f"{index}.db", create=False)

    try:
        for work in (sqlite_store, memory_store, refused):
            _no_leak(work)
    finally:
        for index in range(5):
            MemoryStore.discard(f"leak-{index}")


def test_fifty_cli_commands_close_every_store_they_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("TACHOGRAPH_STORE", "FORCE_COLOR", "NO_COLOR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "runs.db"
    events = build_run("run-a", 6, status="ok")
    with SQLiteStore(path) as store:
        store.append(events)
    export = tmp_path / "run-a.jsonl"
    with export.open("wb") as out, SQLiteStore(path) as store:
        export_run(store, "run-a", out)
    runner = CliRunner()
    commands = [
        ["runs"],
        ["show", "run-a"],
        ["state", "run-a"],
        ["verify"],
        ["verify", "run-a"],
        ["verify", str(export)],
        ["export", "run-a", "-o", str(tmp_path / "again.jsonl")],
        ["import", str(export)],
        ["show", "no-such-run"],  # a failing command closes its store too
    ]

    def run_one(index: int) -> None:
        argv = ["--store", str(path), *commands[index % len(commands)], "--json"]
        if argv[2] == "export":
            argv.remove("--json")
        result = runner.invoke(cli, argv)
        assert result.exit_code in (0, 3), (argv, result.output)

    _no_leak(run_one)
