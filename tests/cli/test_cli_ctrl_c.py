"""Ctrl-C at a terminal, sent as a terminal sends it: SIGINT to the whole process group of a
real ``tacho`` process, its worker processes included. Whenever it lands, the command says
``Aborted!`` once and exits 130, and no worker is left behind: no traceback of a worker that
was still importing the library, nor of the command's own start, and no crash."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import tachograph as tg
from tachograph.demo.agent import billing_agent
from tachograph.regression.runner import save_run
from tachograph.testing import build_run

needs_proc = pytest.mark.skipif(
    not Path("/proc/self/stat").exists() or not hasattr(os, "killpg"),
    reason="reads the process table from /proc and signals process groups",
)

REPO = Path(__file__).resolve().parents[2]
TASK = "My order A-4471 arrived damaged, please refund it."
DEMO_AGENT = "tachograph.demo.agent:billing_agent"
WAITS = "tests.regression.agents:waits_in_workers"
STARTS_A_HELPER = "tests.regression.agents_helper:billing_agent_v2"


def _tacho() -> list[str]:
    beside = Path(sys.executable).with_name("tacho")
    if beside.exists():
        return [str(beside)]
    return [sys.executable, "-c", "from tachograph.cli import main; main()"]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "TACHOGRAPH_STORE"}
    env.update(extra)
    return env


def _spawned_by(pid: int) -> list[int]:
    """The processes multiprocessing spawned whose parent is ``pid`` (not its resource
    tracker)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            parent = int(stat.rsplit(")", 1)[1].split()[1])
            command = (entry / "cmdline").read_bytes()
        except (OSError, ValueError, IndexError):
            continue
        if parent == pid and b"spawn_main" in command:
            found.append(int(entry.name))
    return found


def _catches_sigint(pid: int) -> bool:
    """Whether process ``pid`` has a handler of its own for SIGINT (``SigCgt`` in
    /proc/PID/status): a spawned worker has Python's once its interpreter is up, while it
    imports, until its initializer sets SIGINT aside."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("SigCgt:"):
                return bool(int(line.split()[1], 16) & (1 << (signal.SIGINT - 1)))
    except (OSError, ValueError, IndexError):
        pass
    return False


def _importing(proc: subprocess.Popen[str]) -> list[int]:
    """The workers ``proc`` spawned, once one of them is importing (see _catches_sigint):
    the moment a Ctrl-C used to end a worker with a traceback of its imports."""
    workers = _spawned_by(proc.pid)
    return workers if any(_catches_sigint(pid) for pid in workers) else []


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state == "Z"  # ended, waiting to be reaped


def _until(done: Callable[[], object], seconds: float = 60) -> object:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = done()
        if value:
            return value
        time.sleep(0.001)
    return done()


def _ctrl_c_when(
    argv: list[str],
    ready: Callable[[subprocess.Popen[str]], object],
    env: dict[str, str],
    *,
    group: bool = True,
) -> tuple[subprocess.CompletedProcess[str], object]:
    """Run ``tacho argv`` in a process group of its own, send the group SIGINT as soon as
    ``ready(process)`` is true (with ``group=False``, to the processes ``ready`` gave
    alone), and wait for the command to end."""
    proc = subprocess.Popen(
        [*_tacho(), *argv],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    finished = False
    try:
        seen = _until(lambda: ready(proc))
        assert seen, "the command never reached the moment to interrupt"
        if group:
            os.killpg(proc.pid, signal.SIGINT)
        else:
            assert isinstance(seen, list)
            for pid in seen:
                os.kill(pid, signal.SIGINT)
        out, err = proc.communicate(timeout=120)
        finished = True
    finally:
        # whatever of the group is left (the command, or a process it left behind)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        if not finished:
            proc.communicate()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), seen


def _python(script: str, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``script`` with ``args`` in a Python process of its own."""
    return subprocess.run(
        [sys.executable, "-c", script, *args],
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


def _corpus(tmp_path: Path, runs: int) -> Path:
    folder = tmp_path / "corpus"
    with tg.SQLiteStore(str(tmp_path / "runs.db")) as store:
        for i in range(runs):
            tg.record_run(billing_agent, TASK, store=store, run_id=f"run-{i}")
            save_run(store, f"run-{i}", to=folder, name=f"r{i:02d}", verdict="good")
    return folder


def _assert_aborted_and_workers_gone(
    done: subprocess.CompletedProcess[str], workers: object
) -> None:
    assert done.returncode == 130, done.stderr
    assert done.stderr.strip() == "Aborted!"
    assert isinstance(workers, list)
    assert _until(lambda: all(_gone(pid) for pid in workers))


@needs_proc
def test_ctrl_c_as_verify_starts_its_workers(tmp_path: Path) -> None:
    # `tacho verify --workers N` starts its workers first thing, then imports the command
    # line: the Ctrl-C reaches the workers before they ignore it, and the command before
    # its own handling is in place.
    path = tmp_path / "store.db"
    with tg.SQLiteStore(path) as store:
        for i in range(40):
            store.append(build_run(f"run-{i}", 500))
    done, workers = _ctrl_c_when(
        ["--store", str(path), "verify", "--all", "--workers", "3"],
        _importing,
        _env(),
    )
    _assert_aborted_and_workers_gone(done, workers)


@needs_proc
def test_ctrl_c_as_tacho_test_starts_its_workers(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path, 12)
    done, workers = _ctrl_c_when(
        ["test", str(corpus), "--agent", DEMO_AGENT, "--workers", "2"],
        _importing,
        _env(),
    )
    _assert_aborted_and_workers_gone(done, workers)


@needs_proc
def test_a_sigint_that_reaches_only_starting_workers_changes_nothing(tmp_path: Path) -> None:
    # The same signal as above, to the workers alone while they import: the command's
    # report is what it would have been, every run replayed.
    corpus = _corpus(tmp_path, 12)
    done, _ = _ctrl_c_when(
        ["test", str(corpus), "--agent", DEMO_AGENT, "--workers", "2", "--json"],
        _importing,
        _env(),
        group=False,
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    report = json.loads(done.stdout)
    assert [r["outcome"] for r in report["results"]] == ["reproduced"] * 12


@needs_proc
def test_ctrl_c_while_tacho_test_replays_ends_its_workers_and_starts_no_more(
    tmp_path: Path,
) -> None:
    # Each replay in a worker waits ten minutes: the command ends only if it ends its
    # workers (a pool's shutdown would wait for them, and then replay the rest of the
    # corpus), and no replay starts after the Ctrl-C.
    corpus = _corpus(tmp_path, 8)
    log = tmp_path / "replays.log"
    log.touch()

    def both_replaying(_: subprocess.Popen[str]) -> list[int]:
        pids = [int(line) for line in log.read_text().split()]
        return pids if len(pids) == 2 else []

    done, replaying = _ctrl_c_when(
        ["test", str(corpus), "--agent", WAITS, "--workers", "2"],
        both_replaying,
        _env(TACHOGRAPH_TEST_REPLAY_LOG=str(log)),
    )
    assert done.returncode == 130, done.stderr
    assert done.stderr.strip() == "Aborted!"
    assert isinstance(replaying, list)
    assert _until(lambda: all(_gone(pid) for pid in replaying))
    assert [int(line) for line in log.read_text().split()] == replaying


_CTRL_C_IN_ORJSON = """
import os, signal, sys

class CtrlCAsOrjsonImportsJson:
    sent = False

    def find_spec(self, name, path=None, target=None):
        if name == "json" and not self.sent:
            self.sent = True
            os.kill(os.getpid(), signal.SIGINT)
        return None

assert "orjson" not in sys.modules and "json" not in sys.modules
sys.meta_path.insert(0, CtrlCAsOrjsonImportsJson())
from tachograph.cli import main
main(["--version"])
"""


def test_ctrl_c_while_orjson_initialises_is_aborted_not_a_crash() -> None:
    # orjson's initialisation goes on as if the modules it imports had imported
    # (ijl/orjson#310): a KeyboardInterrupt raised as it imports json crashed the
    # interpreter (SIGSEGV) at the start of any command.
    done = _python(_CTRL_C_IN_ORJSON)
    assert done.returncode == 130, (done.returncode, done.stderr)
    assert done.stderr.strip() == "Aborted!"
    assert done.stdout == ""


_CTRL_C_IN_SET_NAME = """
import dataclasses, sys

set_name = dataclasses.Field.__set_name__
owner_name = sys.argv[1]

def interrupted(self, owner, name):
    if owner.__name__ == owner_name:  # as a Ctrl-C landing while the class is defined
        dataclasses.Field.__set_name__ = set_name
        raise KeyboardInterrupt
    return set_name(self, owner, name)

dataclasses.Field.__set_name__ = interrupted
from tachograph.cli import main
main(sys.argv[2:])
"""


@pytest.mark.parametrize(
    ("owner", "argv"),
    [
        ("KeyRing", ["test", "--help"]),  # a command's module, loaded by the command
        ("VerifyReport", ["--version"]),  # the command line's own, loaded before it
    ],
)
def test_an_interrupt_python_wraps_in_a_runtime_error_is_still_an_interrupt(
    tmp_path: Path, owner: str, argv: list[str]
) -> None:
    # Python 3.10 and 3.11 wrap an exception raised in a class's __set_name__ in a
    # RuntimeError: a Ctrl-C (or SIGTERM) that landed while a module defined a dataclass
    # ended the command in that RuntimeError's traceback, exit 1.
    done = _python(_CTRL_C_IN_SET_NAME, owner, *argv, cwd=tmp_path)
    assert done.returncode == 130, (done.returncode, done.stderr)
    assert done.stderr.strip() == "Aborted!"


_CTRL_C_IN_PARSING = """
import click, sys

def interrupted(self, ctx, args):
    raise KeyboardInterrupt  # as a Ctrl-C landing while click parses the root options

click.Group.parse_args = interrupted
from tachograph.cli import main
main(["runs"])
"""


def test_ctrl_c_while_click_parses_the_command_line_is_130() -> None:
    # click's main turns a KeyboardInterrupt outside the command into an abort, exit 1
    done = _python(_CTRL_C_IN_PARSING)
    assert done.returncode == 130, (done.returncode, done.stderr)
    assert done.stderr.strip() == "Aborted!"


_HANDLED_THEN_FAILED = """
import click, sys
from tachograph.cli import app, main

@click.command("fails-after-ctrl-c")
def fails() -> None:
    try:
        raise KeyboardInterrupt
    except KeyboardInterrupt:
        raise ValueError("a real failure, whatever came before") from None

app.cli.add_command(fails)
main(["fails-after-ctrl-c"])
"""


def test_an_error_raised_after_an_interrupt_was_handled_is_not_an_interrupt() -> None:
    # only an interrupt that caused the error counts: not one its code handled and dropped
    done = _python(_HANDLED_THEN_FAILED)
    assert done.returncode == 1, (done.returncode, done.stderr)
    assert "ValueError: a real failure" in done.stderr
    assert "Aborted!" not in done.stderr


@needs_proc
def test_a_program_a_worker_starts_takes_ctrl_c_as_usual(tmp_path: Path) -> None:
    # A worker leaves Ctrl-C to its caller with a handler, not by ignoring SIGINT: an
    # ignored signal stays ignored across exec, and a program an agent's module starts in a
    # tacho test worker would outlive the Ctrl-C that ends the command.
    corpus = _corpus(tmp_path, 4)
    log = tmp_path / "helpers.log"
    log.touch()

    def helper_started(_: subprocess.Popen[str]) -> list[int]:
        pids = [int(line) for line in log.read_text().split()]
        return pids if len(pids) == 2 else []  # one in each worker

    done, helpers = _ctrl_c_when(
        ["test", str(corpus), "--agent", STARTS_A_HELPER, "--workers", "2"],
        helper_started,
        _env(TACHOGRAPH_TEST_HELPER_LOG=str(log)),
    )
    assert done.returncode == 130, done.stderr
    assert isinstance(helpers, list)
    assert _until(lambda: all(_gone(pid) for pid in helpers))
