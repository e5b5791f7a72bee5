"""What ``tacho verify`` (and a command at all) loads and starts before it works: each is
time in front of the work, seen in a fresh process (the modules a command imports can only
be seen there)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

import tachograph as tg
from tachograph.cli import verify_workers
from tachograph.record.jsonl import write_events
from tachograph.testing import build_run

_RUN_MAIN = """
import contextlib, io, json, sys
from tachograph.cli import main
out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
code = 0
with contextlib.redirect_stdout(out):
    try:
        main(sys.argv[1:])
    except SystemExit as exc:
        code = exc.code
out.flush()
result = {"code": code, "out": out.buffer.getvalue().decode(), "modules": sorted(sys.modules)}
"""
"""``tacho`` with the probe's arguments, in the probe's process: its exit code, its stdout
and the modules loaded, in ``result``."""

_PROBE = _RUN_MAIN + "print(json.dumps(result))\n"


def _run_probe(probe: str, python: str, env: dict[str, str], *argv: str) -> dict[str, Any]:
    """Run ``probe`` in a fresh interpreter with ``argv``; the JSON of its last line."""
    done = subprocess.run(
        [python, "-c", probe, *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    )
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result


def _tacho_in_probe(python: str, env: dict[str, str], *argv: str) -> dict[str, Any]:
    return _run_probe(_PROBE, python, env, *argv)


def test_verify_loads_the_witness_client_only_when_a_witness_is_named(
    store_path: Path, tmp_path: Path, python: str, child_env: dict[str, str]
) -> None:
    # The witness module brings an HTTP client and server: a verification that consults no
    # witness reads its seal verdicts without them.
    plain = _tacho_in_probe(python, child_env, "--store", str(store_path), "verify", "--json")
    assert plain["code"] == 0, plain["out"]
    assert json.loads(str(plain["out"]))["ok"] is True
    modules = set(plain["modules"])
    assert "tachograph.sealing.log" in modules  # the seal verdicts were read
    assert {"tachograph.sealing.witness", "http.server", "urllib.request"} & modules == set()

    named = _tacho_in_probe(
        python,
        child_env,
        "--store",
        str(store_path),
        "verify",
        "--witness",
        str(tmp_path / "no-witness-here"),
        "--json",
    )
    assert named["code"] == 2  # a mistyped witness folder is a usage error ...
    assert "tachograph.sealing.witness" in set(named["modules"])


def test_a_command_that_shows_nothing_on_a_terminal_runs_without_rich(
    store_path: Path, python: str, child_env: dict[str, str]
) -> None:
    # rich is a quarter of a command's imports: output to a pipe or a file, and --json, are
    # written without it (no progress bar either: stderr is no terminal here) ...
    env = {k: v for k, v in child_env.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE")}
    for argv in (("verify", "--json"), ("runs",), ("runs", "--json")):
        got = _tacho_in_probe(python, env, "--store", str(store_path), *argv)
        assert got["code"] == 0
        assert not any(m == "rich" or m.startswith("rich.") for m in got["modules"])
    plain = _tacho_in_probe(python, env, "--store", str(store_path), "runs")
    assert "\x1b[" not in str(plain["out"])
    # ... and rich still decides where it is asked to (FORCE_COLOR: the terminal form)
    forced = _tacho_in_probe(
        python, {**env, "FORCE_COLOR": "1"}, "--store", str(store_path), "runs"
    )
    assert "rich.console" in set(forced["modules"])
    assert "\x1b[" in str(forced["out"])


_WATCHED_PROBE = (
    """
import os, sys
from tachograph.store import parallel
started = []

class Watched(parallel._Spawned):
    def __init__(self, count, setup):
        ahead = "tachograph.cli.app" not in sys.modules  # before the command line loaded
        super().__init__(count, setup)
        started.append({"count": count, "ahead": ahead, "pids": list(self.pool._processes)})

parallel._Spawned = Watched
"""
    + _RUN_MAIN
    + """
def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True

for s in started:
    s["alive"] = [p for p in s["pids"] if alive(p)]
result["started"] = started
print(json.dumps(result))
"""
)


def _watched(python: str, env: dict[str, str], *argv: str) -> dict[str, Any]:
    return _run_probe(_WATCHED_PROBE, python, env, *argv)


def test_verify_with_workers_starts_them_before_the_command_line_loads(
    tmp_path: Path, python: str, child_env: dict[str, str]
) -> None:
    path = tmp_path / "s.db"
    with tg.open_store(path, create=True) as store:
        for i in range(60):
            store.append(build_run(f"r{i:02d}", 40))
    one = _watched(python, child_env, "--store", str(path), "verify", "--all", "--json")
    assert one["code"] == 0
    assert one["started"] == []
    three = _watched(
        python, child_env, "--store", str(path), "verify", "--all", "--workers=3", "--json"
    )
    assert three["code"] == 0
    # the two workers started once, first thing, and no others: the verification took them
    assert [(s["count"], s["ahead"]) for s in three["started"]] == [(2, True)]
    assert len(three["started"][0]["pids"]) == 2
    assert three["started"][0]["alive"] == []  # and they are gone with the command
    assert json.loads(three["out"]) == json.loads(one["out"])


def test_verify_of_a_file_starts_no_workers_ahead(
    tmp_path: Path, store_path: Path, python: str, child_env: dict[str, str]
) -> None:
    # A JSONL file is verified in this process: no worker is started for it, and --workers,
    # which would have no effect, is refused (a usage error) before anything is verified.
    exported = tmp_path / "run.jsonl"
    with tg.open_store(store_path) as store, exported.open("wb") as out:
        (run,) = store.runs()
        write_events(store.read(run.run_id, tenant=run.tenant), out)
    got = _watched(python, child_env, "verify", str(exported), "--workers", "2", "--json")
    assert got["code"] == 2
    assert got["out"] == ""
    assert got["started"] == []
    plain = _watched(python, child_env, "verify", str(exported), "--json")
    assert plain["code"] == 0
    assert json.loads(plain["out"])["ok"] is True
    assert plain["started"] == []


def test_workers_started_ahead_for_a_command_that_then_fails_are_ended(
    store_path: Path, python: str, child_env: dict[str, str]
) -> None:
    # The estimate starts a worker; click then refuses an option: the worker, never taken,
    # does not outlive the command.
    got = _watched(
        python,
        child_env,
        "--store",
        str(store_path),
        "verify",
        "--all",
        "--workers",
        "2",
        "--min-witnesses",
        "many",
    )
    assert got["code"] == 2
    assert [(s["count"], s["ahead"]) for s in got["started"]] == [(1, True)]
    assert got["started"][0]["alive"] == []


_FAILING_AHEAD = """
from tachograph.store import parallel
real = parallel._Spawned
calls = []

def first_fails(count, setup):
    calls.append(count)
    if len(calls) == 1:
        raise OSError(24, "Too many open files")
    return real(count, setup)

parallel._Spawned = first_fails
"""


def test_workers_that_cannot_start_ahead_leave_the_command_to_start_its_own(
    store_path: Path, python: str, child_env: dict[str, str]
) -> None:
    # Starting ahead is only ahead of time: when it fails, the verification starts its own
    # workers (or says why it cannot) and the command's result is the same.
    got = _run_probe(
        _FAILING_AHEAD + _PROBE,
        python,
        child_env,
        "--store",
        str(store_path),
        "verify",
        "--all",
        "--workers",
        "2",
        "--json",
    )
    assert got["code"] == 0, got["out"]
    assert json.loads(got["out"])["ok"] is True


def test_only_a_verification_of_a_sqlite_stores_runs_starts_workers_ahead(
    tmp_path: Path, store_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TACHOGRAPH_STORE", raising=False)
    jsonl = tmp_path / "run.jsonl"
    jsonl.write_bytes(b"{}\n")
    assert verify_workers(["verify", str(store_path), "--workers", "3"]) == 3  # a store file
    assert verify_workers(["verify", "--workers", "3", "--", str(store_path)]) == 3
    assert verify_workers(["verify", str(jsonl), "--workers", "3"]) == 1
    assert verify_workers(["verify", str(tmp_path), "--workers", "3"]) == 1  # evidence folder
    assert verify_workers(["verify", "no-such.jsonl", "--workers", "3"]) == 1
    assert verify_workers(["--store", "postgresql://db/x", "verify", "--workers", "3"]) == 1
    assert verify_workers(["--store", "sqlite:///x.db", "verify", "--workers", "3"]) == 3
    monkeypatch.setenv("TACHOGRAPH_STORE", "postgresql://db/x")
    assert verify_workers(["verify", "--all", "--workers", "3"]) == 1
    assert verify_workers(["--store", str(store_path), "verify", "--workers", "3"]) == 3


@pytest.mark.parametrize(
    ("argv", "workers"),
    [
        (["verify", "--workers", "4"], 4),
        (["verify", "--all", "--workers=3", "--json"], 3),
        (["--store", "x.db", "verify", "--workers", "2"], 2),
        (["--store", "x.db", "verify", "RUN", "--workers", "2"], 1),  # one run: none ahead
        (["--store=verify", "verify", "--workers", "2"], 2),
        (["verify", "--key", "k", "--witness", "w", "--workers", "2", "--json"], 2),
        (["verify", "--key", "--workers", "3"], 1),  # click: key "--workers", RUN "3"
        (["verify", "--min-witnesses", "1", "--all", "--workers", "2"], 2),
        (["verify", "--workers", "2", "--workers", "5"], 5),  # click takes the last
        (["verify"], 1),
        (["verify", "--workers", "1"], 1),
        (["verify", "--workers", "two"], 1),  # click will refuse it
        (["verify", "--workers"], 1),
        (["verify", "--help", "--workers", "2"], 1),
        (["verify", "--workers", "2", "-h"], 1),
        (["verify", "--", "--workers", "2"], 1),  # a RUN named "--workers"
        (["--store", "verify", "show", "--workers", "2"], 1),  # verify is the store
        (["show", "verify", "--workers", "2"], 1),
        (["test", "corpus", "--workers", "2"], 1),
        (["--version", "verify", "--workers", "2"], 1),
        ([], 1),
    ],
)
def test_the_workers_of_a_verify_command_line_are_read_ahead_of_click(
    argv: list[str], workers: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TACHOGRAPH_STORE", raising=False)
    assert verify_workers(argv) == workers
