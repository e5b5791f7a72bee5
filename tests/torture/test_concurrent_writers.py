"""Concurrent writers: several processes append to their own runs and to one shared run.

Each writer (``concurrent_writer.py``) notes, for every append, when it was invoked and when
it was acknowledged, on one machine-wide monotonic clock. Afterwards, for every run:

- **nothing acknowledged is lost**: each acknowledged event is stored, at the seq it was
  acknowledged with;
- **nothing is duplicated**: every event id and every writer's step appears once;
- **nothing is reordered**: if A was acknowledged before B was invoked, A precedes B in the
  chain (the real-time order of a linearizable log);

and the store passes ``integrity_check``, every run verifies, the seal log has no gap and no
run disagrees with its seals (runs are sealed by default, by several processes at once).

SQLite always; PostgreSQL when ``TACHOGRAPH_TEST_PG`` names a server (an admin DSN).
Sizes: ``ci`` 4 writers x 150 appends to each of two runs; ``nightly`` 8 x 1,000.
"""

from __future__ import annotations

import bisect
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tachograph.record.event import new_event
from tachograph.sealing import run_verdict
from tachograph.sealing.log import TenantAudit
from tachograph.store import open_store
from tachograph.store.base import Store

from .sizes import SIZE, report

WRITER = Path(__file__).with_name("concurrent_writer.py")
SHARED = "shared"


def _postgres_url() -> Iterator[str]:
    admin = os.environ.get("TACHOGRAPH_TEST_PG")
    if not admin:
        pytest.skip("TACHOGRAPH_TEST_PG is not set (an admin DSN of a PostgreSQL server)")
    psycopg = pytest.importorskip("psycopg")
    from tachograph.store.postgres import PostgresStore

    name = f"tacho_cw_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    base, _ = admin.rsplit("/", 1)
    scheme, rest = base.split("://", 1)
    host = rest.rsplit("@", 1)[-1]
    try:
        PostgresStore.install_schema(f"{scheme}://postgres@{host}/{name}")
        PostgresStore.grant_login(
            f"{scheme}://postgres@{host}/{name}", "tacho_app", all_tenants=True
        )
        yield f"{scheme}://tacho_app@{host}/{name}"
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'concurrent.db'}"
    else:
        yield from _postgres_url()


def _acknowledged(side: Path) -> list[tuple[str, int, str, int, int]]:
    rows = []
    for line in side.read_text(encoding="utf-8").splitlines():
        run, seq, event_id, invoked, acked = line.split()
        rows.append((run, int(seq), event_id, int(invoked), int(acked)))
    return rows


def reordered(acks: list[tuple[int, int, int]]) -> list[tuple[int, int]]:
    """``(seq A, seq B)`` pairs where A was acknowledged before B was invoked, yet B precedes A.

    ``acks`` holds ``(seq, invoke, ack)``. For each B, the largest seq among the events
    acknowledged before B's invocation must be below B's seq.
    """
    by_ack = sorted(acks, key=lambda a: a[2])
    ack_times = [a[2] for a in by_ack]
    best: list[tuple[int, int]] = []  # prefix maxima of seq: (seq, index)
    top = (-1, -1)
    for seq, _, _ in by_ack:
        top = max(top, (seq, len(best)))
        best.append(top)
    found = []
    for seq, invoked, _ in acks:
        k = bisect.bisect_left(ack_times, invoked)  # acknowledged strictly before invoked
        if k and best[k - 1][0] >= seq:
            found.append((best[k - 1][0], seq))
    return found


def test_reordering_is_found_by_the_checker() -> None:
    # A acknowledged at 5, B invoked at 6 but stored before A: a reordering.
    assert reordered([(1, 0, 5), (0, 6, 9)]) == [(1, 0)]
    # Overlapping appends may land in either order.
    assert reordered([(1, 0, 5), (0, 4, 9)]) == []


def test_concurrent_writers_lose_duplicate_and_reorder_nothing(
    store_url: str, tmp_path: Path, python: str, child_env: dict[str, str]
) -> None:
    writers, n = SIZE.writers, SIZE.events_per_writer
    store: Store = open_store(store_url)
    started = new_event(
        run_id=SHARED,
        seq=0,
        type="run.started",
        actor="setup",
        payload={"input": None, "env": {}},
        prev_hash=None,
    )
    store.append([started])
    sides = [tmp_path / f"writer-{w}.txt" for w in range(writers)]
    procs = [
        subprocess.Popen(
            [python, str(WRITER), store_url, str(w), str(n), str(sides[w]), SHARED],
            stdin=subprocess.PIPE,
            env=child_env,
        )
        for w in range(writers)
    ]
    for proc in procs:  # every writer is up and waiting: start them together
        assert proc.stdin is not None
        proc.stdin.write(b"go\n")
        proc.stdin.close()
    codes = [proc.wait(timeout=1800) for proc in procs]
    assert codes == [0] * writers

    acks = [row for side in sides for row in _acknowledged(side)]
    assert len(acks) == writers * (2 * n + 2)
    lost = duplicated = 0
    reorderings: list[tuple[str, int, int]] = []
    by_run: dict[str, list[tuple[str, int, str, int, int]]] = {}
    for row in acks:
        by_run.setdefault(row[0], []).append(row)
    for run, rows in by_run.items():
        stored = {e.event_id: e for e in store.read(run)}
        events = list(stored.values())
        lost += sum(1 for _, seq, eid, _, _ in rows if eid not in stored or stored[eid].seq != seq)
        steps = [(e.payload or {}).get("chosen") for e in events if e.type == "decision"]
        duplicated += len(steps) - len({(s["writer"], s["i"]) for s in steps if s})
        # Nothing but what was acknowledged (no fault here makes an append ambiguous).
        expected = len(rows) + (1 if run == SHARED else 0)
        assert len(events) == expected, run
        reorderings += [(run, a, b) for a, b in reordered([(r[1], r[3], r[4]) for r in rows])]
    report(
        "concurrent_writers",
        engine=store_url.split(":", 1)[0],
        writers=writers,
        acknowledged=len(acks),
        shared_appends=writers * n,
        lost=lost,
        duplicated=duplicated,
        reordered=len(reorderings),
    )
    assert lost == 0
    assert duplicated == 0
    assert reorderings == []

    integrity = getattr(store, "integrity_check", None)
    if integrity is not None:
        assert integrity() == "ok"
    reports = list(store.verify_all())
    assert len(reports) == writers + 1
    assert [r.run_id for r in reports if not r.ok] == []
    count = store.seal_count("default")
    assert [s.index for s in store.read_seals("default")] == list(range(count))
    assert count >= writers  # each own run was sealed at its end
    audit = TenantAudit("default", count, "the stored seal log")
    for info in store.runs():
        verdict = run_verdict(store, info, audit)
        assert verdict.ok, (info.run_id, verdict.reason)
        if info.run_id != SHARED:
            assert verdict.final, info.run_id
    store.close()
