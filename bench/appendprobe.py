"""What the store's schema alone costs a batched append, against raw inserts of the same rows.

A probe, not a figure of the suite: ``python -m bench.appendprobe [--events N] [--rounds R]
[--json]``. The ``durable_appends`` figure compares recording through the writer with raw
``sqlite3`` inserts of each event's JSON line into a one-column table (100 rows a
transaction, WAL, ``synchronous=FULL``). This probe takes the store's side apart, each
variant inserting the same kind of events (1 KB payloads, run ids of one length) in the same
batches, into files made at the start, a new run each round, the variants' order reversed
every other round:

- ``raw``: the figure's floor, each event's line into one column;
- ``store``: ``SQLiteStore.append`` of the prebuilt events (its Python and its SQL);
- ``schema``: the same rows by plain ``executemany`` into a file the store created: the
  events and payloads tables with their unique indexes and triggers, no Python per event;
- ``schema_no_trigger``: the same without the trigger that refuses a run retention deleted;
- ``two_tables``: the same columns in two tables without any index or trigger;
- ``one_table``: every column and the payload in one table without any index;
- ``keyed``: the events table keyed by ``(tenant, run_id, seq)`` (``WITHOUT ROWID``) with
  ``event_id`` unique, the payloads in their own table: the two uniqueness rules the store's
  schema enforces, in one b-tree and one index instead of a table and two indexes.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import operator
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tachograph.record.event import Event
from tachograph.store import SQLiteStore
from tachograph.store.sqlite import _EVENT_COLUMNS

from .common import build_run, load_average, remove_sqlite, wal_connection

__all__ = ["main"]

BATCH = 100
PAYLOAD_BYTES = 1_000
COLUMNS = _EVENT_COLUMNS.removeprefix("id, ")
"""The store's own columns of an event row, less the id the inserts count themselves."""
VARIANTS = ("raw", "store", "schema", "schema_no_trigger", "two_tables", "one_table", "keyed")


def _store_file(path: Path, *, trigger: bool) -> sqlite3.Connection:
    remove_sqlite(path)
    SQLiteStore(path).close()  # the store's own schema, every migration applied
    db = wal_connection(path)
    if not trigger:
        db.execute("DROP TRIGGER events_no_append_to_deleted")
    return db


def _plain_file(path: Path, *, one_table: bool, keyed: bool = False) -> sqlite3.Connection:
    remove_sqlite(path)
    db = wal_connection(path)
    columns = (
        "tenant TEXT, run_id TEXT, seq INTEGER, event_id TEXT, ts TEXT, type TEXT, actor TEXT, "
        "trace_id TEXT, span_id TEXT, idempotency_key TEXT, model TEXT, seed INTEGER, "
        "payload_digest TEXT, prev_hash TEXT, hash TEXT"
    )
    if keyed:
        db.execute(
            f"CREATE TABLE events (id INTEGER NOT NULL, {columns}, "
            "PRIMARY KEY (tenant, run_id, seq), UNIQUE (event_id)) WITHOUT ROWID"
        )
        db.execute("CREATE TABLE payloads (id INTEGER PRIMARY KEY, salt TEXT, body BLOB)")
    elif one_table:
        db.execute(f"CREATE TABLE events (id INTEGER PRIMARY KEY, {columns}, salt TEXT, body BLOB)")
    else:
        db.execute(f"CREATE TABLE events (id INTEGER PRIMARY KEY, {columns})")
        db.execute("CREATE TABLE payloads (id INTEGER PRIMARY KEY, salt TEXT, body BLOB)")
    return db


_row: Callable[[Event], tuple[Any, ...]] = operator.attrgetter(*COLUMNS.split(", "))
"""An event's values in the order of COLUMNS."""


def _batches(events: Sequence[Event]) -> list[Sequence[Event]]:
    return [events[i : i + BATCH] for i in range(0, len(events), BATCH)]


def _sql_insert(db: sqlite3.Connection, events: Sequence[Event], *, one_table: bool) -> float:
    """Seconds to insert ``events`` by plain SQL, BATCH a transaction, ids counted on from
    the largest (as the store does); the rows are built before the clock starts."""
    (largest,) = db.execute("SELECT coalesce(max(id), 0) FROM events").fetchone()
    marks = ",".join("?" * 15)
    batches = []
    for n, batch in enumerate(_batches(events)):
        first = largest + 1 + n * BATCH
        rows = [(first + i, *_row(e)) for i, e in enumerate(batch)]
        bodies = [(first + i, e.salt, e.payload_bytes) for i, e in enumerate(batch)]
        batches.append((rows, bodies))
    t0 = time.perf_counter_ns()
    for rows, bodies in batches:
        db.execute("BEGIN IMMEDIATE")
        if one_table:
            db.executemany(
                f"INSERT INTO events (id, {COLUMNS}, salt, body) VALUES (?,{marks},?,?)",
                [(*row, body[1], body[2]) for row, body in zip(rows, bodies, strict=True)],
            )
        else:
            db.executemany(f"INSERT INTO events (id, {COLUMNS}) VALUES (?,{marks})", rows)
            db.executemany("INSERT INTO payloads (id, salt, body) VALUES (?,?,?)", bodies)
        db.execute("COMMIT")
    return (time.perf_counter_ns() - t0) / 1e9


def _raw_insert(db: sqlite3.Connection, events: Sequence[Event]) -> float:
    lines = [[(e.to_json(),) for e in batch] for batch in _batches(events)]
    t0 = time.perf_counter_ns()
    for batch in lines:
        db.execute("BEGIN")
        db.executemany("INSERT INTO lines (line) VALUES (?)", batch)
        db.execute("COMMIT")
    return (time.perf_counter_ns() - t0) / 1e9


def _store_append(store: SQLiteStore, events: Sequence[Event]) -> float:
    batches = _batches(events)
    t0 = time.perf_counter_ns()
    for batch in batches:
        store.append(batch)
    return (time.perf_counter_ns() - t0) / 1e9


def probe(workdir: Path, events: int, rounds: int) -> dict[str, Any]:
    """Every variant once a round, in turn, each round on new events."""
    with contextlib.ExitStack() as stack:
        raw_path = workdir / "raw.db"
        remove_sqlite(raw_path)
        raw = stack.enter_context(contextlib.closing(wal_connection(raw_path)))
        raw.execute("CREATE TABLE lines (id INTEGER PRIMARY KEY, line BLOB NOT NULL)")
        remove_sqlite(workdir / "store.db")
        store = SQLiteStore(workdir / "store.db")
        stack.callback(store.close)

        def opened(db: sqlite3.Connection) -> sqlite3.Connection:
            return stack.enter_context(contextlib.closing(db))

        dbs = {
            "schema": opened(_store_file(workdir / "schema.db", trigger=True)),
            "schema_no_trigger": opened(_store_file(workdir / "schema-nt.db", trigger=False)),
            "two_tables": opened(_plain_file(workdir / "two.db", one_table=False)),
            "one_table": opened(_plain_file(workdir / "one.db", one_table=True)),
            "keyed": opened(_plain_file(workdir / "keyed.db", one_table=False, keyed=True)),
        }
        runners: dict[str, Callable[[Sequence[Event]], float]] = {
            "raw": lambda evs: _raw_insert(raw, evs),
            "store": lambda evs: _store_append(store, evs),
            "schema": lambda evs: _sql_insert(dbs["schema"], evs, one_table=False),
            "schema_no_trigger": lambda evs: _sql_insert(
                dbs["schema_no_trigger"], evs, one_table=False
            ),
            "two_tables": lambda evs: _sql_insert(dbs["two_tables"], evs, one_table=False),
            "one_table": lambda evs: _sql_insert(dbs["one_table"], evs, one_table=True),
            "keyed": lambda evs: _sql_insert(dbs["keyed"], evs, one_table=False),
        }
        per_event: dict[str, list[float]] = {name: [] for name in VARIANTS}
        for r in range(rounds):
            order = VARIANTS if r % 2 == 0 else tuple(reversed(VARIANTS))
            for name in order:
                # run ids of one length: the run id is in every row and in the store's index
                run_id = f"appendprobe-{VARIANTS.index(name):02d}-{r:04d}"
                evs = list(build_run(run_id, events, payload_bytes=PAYLOAD_BYTES))
                per_event[name].append(runners[name](evs) / events * 1e6)
        rows = {
            "raw": raw.execute("SELECT count(*) FROM lines").fetchone()[0],
            "store": store.count_events(),
            **{
                name: db.execute("SELECT count(*) FROM events").fetchone()[0]
                for name, db in dbs.items()
            },
        }
    raw_us = statistics.median(per_event["raw"])
    return {
        name: {
            "us_per_event": round(statistics.median(values), 2),
            "share_of_raw_rate": round(raw_us / statistics.median(values), 3),
            "rows": rows[name],
        }
        for name, values in per_event.items()
    }


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run the probe and print it (as JSON with ``--json``)."""
    parser = argparse.ArgumentParser(prog="python -m bench.appendprobe", description=__doc__)
    parser.add_argument("--events", type=int, default=10_000, help="events per variant a round")
    parser.add_argument("--rounds", type=int, default=12, help="rounds (each variant once)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--dir", default=None, help="where to put the files (default: the temporary directory)"
    )
    args = parser.parse_args(argv)
    if args.events < 2 or args.rounds < 1:
        parser.error("--events must be at least 2 and --rounds at least 1")
    with tempfile.TemporaryDirectory(prefix="tachograph-appendprobe-", dir=args.dir) as tmp:
        before = load_average()
        variants = probe(Path(tmp), args.events, args.rounds)
        result = {
            "events": args.events,
            "rounds": args.rounds,
            "batch": BATCH,
            "load_average": before,
            "load_average_after": load_average(),
            "variants": variants,
        }
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print(
            f"{args.events} events of {PAYLOAD_BYTES}-byte payloads per variant, {BATCH} a "
            f"transaction, {args.rounds} alternating rounds (medians):"
        )
        for name, row in variants.items():
            print(
                f"  {name:18s} {row['us_per_event']:7.2f} us an event, "
                f"{row['share_of_raw_rate']:.3f} of the raw rate"
            )
        print(f"load average {before} -> {result['load_average_after']}")
    return result


if __name__ == "__main__":
    main()
