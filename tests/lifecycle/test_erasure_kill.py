"""Erasure is safe to kill: a real process SIGKILLed at several points of an erasure leaves
every event either erased or untouched (never payload null and salt not), the audit agrees
with what was erased, and running the erasure again finishes it, idempotently."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from tachograph.lifecycle.audit import verify_audit
from tachograph.lifecycle.erasure import erase
from tachograph.store import SQLiteStore
from tachograph.testing import build_run

HELPERS = Path(__file__).resolve().parents[1] / "helpers"
EVENTS = 3000


def _store_with_run(path: Path) -> None:
    store = SQLiteStore(path)
    try:
        secret = "x" * 300
        store.append(build_run("big", EVENTS, payload=lambda seq: {"s": f"PLANTED-{seq}-{secret}"}))
    finally:
        store.close()


def _state(path: Path) -> tuple[int, int, int, list[dict[str, object]]]:
    """(erased rows, untouched rows, half-erased rows, audit details), read without tachograph."""
    raw = sqlite3.connect(path)
    try:
        counts = raw.execute(
            "SELECT sum(body IS NULL AND salt IS NULL), "
            "sum(body IS NOT NULL AND salt IS NOT NULL), "
            "sum((body IS NULL) != (salt IS NULL)) FROM payloads"
        ).fetchone()
    finally:
        raw.close()
    store = SQLiteStore(path)
    try:
        details = [r.detail for r in store.read_audit()]
    finally:
        store.close()
    return int(counts[0] or 0), int(counts[1] or 0), int(counts[2] or 0), details


def _run_worker(python: str, env: dict[str, str], path: Path, kill_at: str) -> int:
    proc = subprocess.run(
        [python, str(HELPERS / "erase_worker.py"), str(path), "big", kill_at],
        env=env,
        capture_output=True,
        timeout=120,
        check=False,
    )
    return proc.returncode


@pytest.mark.parametrize(
    "kill_at", ["UPDATE payloads", "INSERT INTO store_audit", "COMMIT", "wal_checkpoint"]
)
def test_killed_at_a_point_of_the_erasure_leaves_all_or_nothing(
    tmp_path: Path, python: str, child_env: dict[str, str], kill_at: str
) -> None:
    path = tmp_path / "runs.db"
    _store_with_run(path)
    assert _run_worker(python, child_env, path, kill_at) == -signal.SIGKILL
    erased, untouched, half, details = _state(path)
    assert half == 0
    if kill_at == "wal_checkpoint":  # killed after the commit: erased, and recorded
        assert (erased, untouched) == (EVENTS, 0)
        assert len(details) == 1
        assert details[0]["seqs"] == list(range(EVENTS))
    else:  # killed inside the transaction: rolled back, nothing recorded
        assert (erased, untouched) == (0, EVENTS)
        assert details == []
    # Running it again finishes the job, once: one audit record, every payload erased, the
    # plaintext gone from the files, the chain verifying.
    assert _run_worker(python, child_env, path, "none") == 0
    assert _run_worker(python, child_env, path, "none") == 0
    erased, untouched, half, details = _state(path)
    assert (erased, untouched, half) == (EVENTS, 0, 0)
    assert len(details) == 1
    store = SQLiteStore(path)
    try:
        report = store.verify("big")
        assert report.ok
        assert len(report.erased) == EVENTS
        assert verify_audit(store).ok
    finally:
        store.close()
    for name in ("runs.db", "runs.db-wal"):
        target = path.with_name(name)
        if target.exists():
            assert b"PLANTED-" not in target.read_bytes(), name


def test_killed_at_moments_of_its_own_leaves_all_or_nothing(
    tmp_path: Path, python: str, child_env: dict[str, str]
) -> None:
    # Kills timed by the parent, at growing delays after the store is open: wherever they land,
    # the database is consistent and a rerun completes it.
    for attempt, delay in enumerate((0.0, 0.002, 0.005, 0.01, 0.02, 0.05)):
        path = tmp_path / f"runs-{attempt}.db"
        _store_with_run(path)
        proc = subprocess.Popen(
            [python, str(HELPERS / "erase_worker.py"), str(path), "big", "none"],
            env=child_env,
            stdout=subprocess.PIPE,
        )
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"ready\n"
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        proc.stdout.close()
        erased, untouched, half, details = _state(path)
        assert half == 0
        assert (erased, untouched) in ((0, EVENTS), (EVENTS, 0))
        assert len(details) == (1 if erased else 0)
        store = SQLiteStore(path)
        try:
            again = erase(store, "big", reason="rerun")
            assert again.erased == (0 if erased else EVENTS)
            assert len(list(store.read_audit())) == 1
            assert store.verify("big").ok
        finally:
            store.close()
