"""An honest store still verifies, sealed, after 200 SIGKILLs of processes that seal.

Each killed recorder leaves at most an unsealed window after its run's last seal, maybe seals
that wait for a checkpoint (the next process's checkpoint covers them), never a seal of an
event that is not in the store, and never a checkpoint the store's seals do not hash to.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tachograph.sealing import audit_tenant, run_verdict
from tachograph.store import SQLiteStore

from .helpers import make_key

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork() and SIGKILL (POSIX)"),
]

KILLS = int(os.environ.get("TACHOGRAPH_CRASH_KILLS", "200"))
VERDICTS = 300
HELPER = Path(__file__).resolve().parents[1] / "helpers" / "seal_writer.py"


@pytest.mark.parametrize("mode", ["default", "observer"])
def test_the_store_verifies_sealed_after_200_sigkills(tmp_path: Path, mode: str) -> None:
    # default: the writer seals in the batch's transaction, as every recording is sealed;
    # observer: the opt-in SealingObserver, which seals once the events are durable.
    key, key_file = make_key(tmp_path / "keys")
    db = tmp_path / "store" / "crash.db"
    SQLiteStore(db).close()
    proc = subprocess.Popen(
        [sys.executable, str(HELPER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdin is not None
    assert proc.stdout is not None
    rng = random.Random(20261015)
    killed = 0
    try:
        for cycle in range(KILLS):
            proc.stdin.write(f"spawn {db} {key_file} {cycle} {mode}\n")
            proc.stdin.flush()
            reply = proc.stdout.readline().split()
            assert reply[0] == "pid", reply
            pid = int(reply[1])
            time.sleep(rng.uniform(0.01, 0.12))
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.stdin.write(f"reap {pid}\n")
            proc.stdin.flush()
            reaped = proc.stdout.readline().split()
            assert reaped[:2] == ["reaped", str(pid)], reaped
            killed += reaped[2] == str(int(signal.SIGKILL))
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)
    assert killed >= KILLS * 0.9
    with SQLiteStore(db) as store:
        assert store.integrity_check() == "ok"
        audit = audit_tenant(store, "default", keys=[key.verifier])
        assert audit.problem is None
        assert audit.size is not None
        reports = list(store.verify_all())
        assert reports
        assert [r.run_id for r in reports if not r.ok] == []
        statuses = {"sealed": 0, "unsealed": 0, "final": 0}
        seals = store.seal_count("default")
        # Every run's chain is verified above; the seal verdicts are checked on at most
        # VERDICTS runs (a quiet machine makes thousands of short runs between the kills,
        # and a verdict per run costs far more than its chain check)
        sample = reports if len(reports) <= VERDICTS else random.Random(7).sample(reports, VERDICTS)
        for report in sample:
            assert report.run_id is not None
            verdict = run_verdict(store, store.run_info(report.run_id), audit)
            assert verdict.ok, (report.run_id, verdict.reason)
            statuses[verdict.status] += 1
            statuses["final"] += verdict.final
    assert statuses["sealed"] > 0
    assert statuses["final"] > 0
    assert seals > statuses["final"]  # seals while running too, not only at the end
