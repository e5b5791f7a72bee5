"""Fixtures shared by the runtime, replay and dry-run tests (imported by their conftest)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import tachograph as tg

from . import fanout, shop
from .ledger import Ledger

TESTS_DIR = Path(__file__).resolve().parent.parent


@pytest.fixture
def store(tmp_path: Path) -> Iterator[tg.SQLiteStore]:
    """A real SQLite store in a fresh file."""
    st = tg.SQLiteStore(tmp_path / "runs.db")
    yield st
    st.close()


@pytest.fixture
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Ledger]:
    """The shop's payments/notes fake, in a file of this test's own; call counters reset."""
    books = Ledger(str(tmp_path / "ledger.db"))
    monkeypatch.setattr(shop, "LEDGER", books)
    monkeypatch.setattr(shop, "HANG_IN", None)
    shop.CALLS.clear()
    fanout.CALLS.clear()
    yield books
    books.close()


def run_child(
    db: Path,
    run_id: str,
    *,
    hang_in: str,
    books: Path,
    tmp_path: Path,
    extra_env: dict[str, str] | None = None,
) -> None:
    """Record ``agent`` in a child process that signals from inside tool ``hang_in`` and is
    then killed with SIGKILL while that tool is still running."""
    marker = tmp_path / f"marker-{run_id}"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(TESTS_DIR), os.environ.get("PYTHONPATH", "")]),
        "SHOP_HANG_IN": hang_in,
        "SHOP_MARKER": str(marker),
        "SHOP_LEDGER": str(books),
    }
    env.pop("TACHOGRAPH_DRY_RUN", None)
    env.update(extra_env or {})
    child = subprocess.Popen(
        [sys.executable, "-m", "shop_agents.crash_child", str(db), run_id],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            if child.poll() is not None:
                _, err = child.communicate()
                raise AssertionError(f"the child exited early ({child.returncode}): {err!r}")
            if time.monotonic() > deadline:
                raise AssertionError("the child never reached the tool")
            time.sleep(0.01)
        assert marker.read_text() == hang_in
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
        assert child.returncode == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        if child.stdout:
            child.stdout.close()
        if child.stderr:
            child.stderr.close()
