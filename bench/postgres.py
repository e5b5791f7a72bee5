"""PostgreSQL appends: ``PostgresStore.append`` one event per transaction and in batches, as
ratios to raw psycopg INSERTs and COPY of the same rows into a plain table on the same server,
in the same run, interleaved sample by sample.

The server is ``TACHOGRAPH_TEST_PG`` (an admin DSN), else a throwaway cluster started here when
the server binaries are installed; with neither the module reports nothing and says why.
"""

from __future__ import annotations

import os
import sys
import time
import uuid
from typing import Any

from .common import (
    Figure,
    Settings,
    Target,
    build_run,
    interleaved,
    measure_of,
    profile_call,
    scaled,
)

__all__ = ["figures"]

PAYLOAD_BYTES = 1000
BATCH = 100

_RAW_TABLE = """CREATE TABLE IF NOT EXISTS raw_events (
    tenant text, run_id text, seq bigint, event_id text, ts text, type text, actor text,
    payload_digest text, prev_hash text, hash text, salt text, body bytea,
    PRIMARY KEY (tenant, run_id, seq))"""


def _server() -> tuple[str | None, Any]:
    dsn = os.environ.get("TACHOGRAPH_TEST_PG")
    if dsn:
        return dsn, None
    from tachograph.testing.pgserver import PgServer, find_bindir

    if find_bindir() is None:
        return None, None
    server = PgServer.start()
    return server.dsn, server


def _rows(events: list[Any]) -> list[tuple[Any, ...]]:
    return [
        (e.tenant, e.run_id, e.seq, e.event_id, e.ts, e.type, e.actor, e.payload_digest,
         e.prev_hash, e.hash, e.salt, e.payload_bytes)
        for e in events
    ]  # fmt: skip


def figures(settings: Settings) -> list[Figure]:
    try:
        import psycopg

        from tachograph.store.postgres import PostgresStore
    except ImportError as exc:
        print(f"  postgres: skipped, psycopg is not installed ({exc})", file=sys.stderr)
        return []
    dsn, server = _server()
    if dsn is None:
        print(
            "  postgres: skipped, no server (set TACHOGRAPH_TEST_PG or install initdb)",
            file=sys.stderr,
        )
        return []
    database = f"tacho_bench_{uuid.uuid4().hex[:8]}"
    admin = dsn.rsplit("/", 1)[0]
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {database}")
        url = f"{admin}/{database}"
        PostgresStore.install_schema(url)
        PostgresStore.grant_login(url, "tacho_bench", all_tenants=True)
        app_url = url.replace("://postgres@", "://tacho_bench@", 1)
        return _measure(settings, url, app_url)
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")
        if server is not None:
            server.stop()


def _measure(settings: Settings, admin_url: str, app_url: str) -> list[Figure]:
    import psycopg

    from tachograph.store.postgres import PostgresStore

    repeats = settings.repeats or 5
    single_n = scaled(300, settings.scale, minimum=20)
    batch_n = scaled(5000, settings.scale, minimum=BATCH * 2)
    store = PostgresStore(app_url)
    raw = psycopg.connect(admin_url.split("?")[0])
    raw.execute(_RAW_TABLE)
    raw.commit()
    counter = iter(range(1_000_000))

    def events(n: int) -> list[Any]:
        run = f"bench-{next(counter)}"
        made = list(build_run(run, n, payload_bytes=PAYLOAD_BYTES))
        return made

    def rate(n: int, t0: int) -> float:
        return n / ((time.perf_counter_ns() - t0) / 1e9)

    def store_single() -> float:
        evs = events(single_n)
        t0 = time.perf_counter_ns()
        for e in evs:
            store.append([e])
        return rate(single_n, t0)

    insert_sql = "INSERT INTO raw_events VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"

    def raw_single() -> float:
        rows = _rows(events(single_n))
        t0 = time.perf_counter_ns()
        with raw.cursor() as cur:
            for row in rows:
                cur.execute(insert_sql, row)
                raw.commit()
        return rate(single_n, t0)

    def store_batched() -> float:
        evs = events(batch_n)
        t0 = time.perf_counter_ns()
        for start in range(0, batch_n, BATCH):
            store.append(evs[start : start + BATCH])
        return rate(batch_n, t0)

    def raw_batched_insert() -> float:
        rows = _rows(events(batch_n))
        t0 = time.perf_counter_ns()
        with raw.cursor() as cur:
            for start in range(0, batch_n, BATCH):
                cur.executemany(insert_sql, rows[start : start + BATCH])
                raw.commit()
        return rate(batch_n, t0)

    def raw_copy() -> float:
        rows = _rows(events(batch_n))
        t0 = time.perf_counter_ns()
        with raw.cursor() as cur:
            for start in range(0, batch_n, BATCH):
                with cur.copy("COPY raw_events FROM STDIN") as copy:
                    for row in rows[start : start + BATCH]:
                        copy.write_row(row)
                raw.commit()
        return rate(batch_n, t0)

    out: list[Figure] = []
    subj, base = interleaved(store_single, raw_single, repeats=repeats)
    s, b = (
        measure_of("PostgresStore.append, 1 event/txn", subj, "events/s"),
        measure_of("raw psycopg INSERT + COMMIT per row", base, "events/s"),
    )
    out.append(
        Figure(
            key="pg_append_single",
            title=f"PostgreSQL: one event per transaction, {single_n} events of ~1 KB",
            subject=s,
            baseline=b,
            ratio=s.median / b.median,
            ratio_label="store rate / raw INSERT rate",
            targets=[Target("share of raw INSERT", s.median / b.median, ">=", 0.25)],
            extra={"events_per_sample": single_n},
        )
    )
    subj, base = interleaved(store_batched, raw_batched_insert, repeats=repeats)
    _, copies = interleaved(store_batched, raw_copy, repeats=max(1, repeats // 2), warmup=0)
    s = measure_of(f"PostgresStore.append, {BATCH}/txn", subj, "events/s")
    b = measure_of(f"raw psycopg executemany INSERT, {BATCH}/txn", base, "events/s")
    c = measure_of(f"raw psycopg COPY, {BATCH}/txn", copies, "events/s")
    out.append(
        Figure(
            key="pg_append_batched",
            title=f"PostgreSQL: batches of {BATCH}, {batch_n} events of ~1 KB",
            subject=s,
            baseline=b,
            ratio=s.median / b.median,
            ratio_label="store rate / raw INSERT rate",
            targets=[
                Target("share of raw INSERT", s.median / b.median, ">=", 0.5),
                Target("share of raw COPY", s.median / c.median, ">=", 0.2),
            ],
            extra={
                "events_per_sample": batch_n,
                "raw_copy": c.to_dict(),
                "share_of_copy": s.median / c.median,
            },
        )
    )
    # The server is gone once this returns, so a miss is profiled here, not by the runner.
    for fig, workload in zip(out, (store_single, store_batched), strict=True):
        if settings.profile and not fig.passed:
            fig.profile = profile_call(workload)
    store.close()
    raw.close()
    return out
