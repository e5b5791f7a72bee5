"""Real processes against one PostgreSQL store: 8 writers on shared and own runs, and writers
killed with SIGKILL mid-batch. One writer per run chain, by the database's compare-and-set of
the run's head: no lost or duplicated events, no chain breaks, no acknowledged event lost."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

import test_store_concurrency as sqlite_concurrency
import test_store_crash as sqlite_crash
from tachograph.store.postgres import PostgresStore

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork() and SIGKILL")

KILLS = int(os.environ.get("TACHOGRAPH_PG_CRASH_KILLS", "40"))
TIMEOUT = sqlite_crash.TIMEOUT


def _check_run(store: PostgresStore, run_id: str, length: int) -> list[dict[str, Any]]:
    events = list(store.read(run_id))
    assert [e.seq for e in events] == list(range(length))
    report = store.verify(run_id)
    assert report.ok, report.render()
    assert store.run_info(run_id).events == length
    return [e.payload for e in events]


def test_eight_processes_on_shared_and_own_runs(
    tmp_path: Path, python: str, child_env: dict[str, str], pg_url: str
) -> None:
    crew = sqlite_concurrency.Crew(tmp_path, Path(pg_url), python, child_env)
    crew.db = pg_url  # type: ignore[assignment]  # the helper takes a URL as its "db"
    shared, own = 60, 150
    try:
        for worker in range(4):
            crew.start("shared", "contended", shared, worker)
        for worker in range(4, 8):
            crew.start("own", f"run-{worker}", own, worker)
        started = time.monotonic()
        results = crew.run()
        elapsed = time.monotonic() - started
    finally:
        crew.kill_all()
    assert sorted(r["written"] for r in results) == [shared] * 4 + [own] * 4
    refused = sum(r.get("SequenceConflict", 0) + r.get("DuplicateConflict", 0) for r in results)
    with PostgresStore(pg_url) as store:
        assert isinstance(store, PostgresStore)
        payloads = _check_run(store, "contended", 4 * shared)
        seen: dict[int, list[int]] = {}
        for payload in payloads:
            seen.setdefault(payload["worker"], []).append(payload["i"])
        # every shared writer's events exactly once, in its order: none lost, none doubled
        assert seen == {worker: list(range(shared)) for worker in range(4)}
        for worker in range(4, 8):
            mine = _check_run(store, f"run-{worker}", own)
            assert mine[1:] == [{"worker": worker, "i": i} for i in range(1, own)]
        total = store.count_events()
        assert total == 4 * shared + 4 * own
    print(
        f"\n8 processes: {total} events in {elapsed:.1f}s ({total / elapsed:.0f}/s), "
        f"{refused} appends refused and retried on a moved head"
    )


def test_acknowledged_events_survive_sigkill_mid_batch(
    tmp_path: Path, python: str, child_env: dict[str, str], pg_url: str
) -> None:
    seed = int(os.environ.get("TACHOGRAPH_CRASH_SEED") or random.SystemRandom().randrange(2**32))
    rng = random.Random(seed)
    runs = sqlite_crash.RUNS
    helper = Path(__file__).resolve().parents[1] / "helpers" / "crash_writer.py"
    stderr = (tmp_path / "helper.err").open("w")
    proc = subprocess.Popen(
        [python, str(helper)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        env=child_env,
    )
    writers = sqlite_crash.Writers(proc)
    writers.start_reader()
    kills = mid_batch = 0
    try:
        while kills < KILLS:
            pids = []
            for run_id in rng.sample(runs, rng.choice([1, 2])):
                writers.send(f"spawn {pg_url} {run_id} {rng.randint(1, 8)} {rng.randrange(2**32)}")
                pids.append(int(writers.wait_for("pid")[1]))
            for pid in pids:
                writers.wait_for("ready", pid)
                writers.wait_for_acks(pid, rng.randint(0, 6))
                time.sleep(rng.uniform(0, 0.01))
                mid_batch += 1
                os.kill(pid, signal.SIGKILL)
                kills += 1
            for pid in pids:
                writers.send(f"reap {pid}")
                reaped = writers.wait_for("reaped", pid)
                assert reaped[2:] == [str(int(signal.SIGKILL)), "-1"], (reaped, writers.errors)
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=TIMEOUT)
        stderr.close()
    writers.drain()
    context = f"(seed {seed}; rerun with TACHOGRAPH_CRASH_SEED={seed})"
    assert writers.errors == [], context
    assert writers.rewritten == [], context
    assert len(writers.acks) > KILLS, context
    with PostgresStore(pg_url) as store:
        assert isinstance(store, PostgresStore)
        stored: dict[tuple[str, int], str] = {}
        for run_id in runs:
            if not any(r == run_id for r, _ in writers.acks):
                continue
            events = list(store.read(run_id))
            assert [e.seq for e in events] == list(range(len(events))), context
            stored.update({(run_id, e.seq): e.hash for e in events})
        lost = {key: h for key, h in writers.acks.items() if stored.get(key) != h}
        assert lost == {}, f"acknowledged events missing or changed {context}"
        reports = list(store.verify_all())
        assert all(r.ok for r in reports), [r.render() for r in reports if not r.ok]
        total = store.count_events()
        assert sum(r.events for r in reports) == total >= len(writers.acks)
    print(
        f"\n{kills} writers SIGKILLed ({mid_batch} after acknowledged appends): "
        f"{len(writers.acks)} acknowledged events, all stored; {total} in the store"
    )
