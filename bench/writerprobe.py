"""Where the writer thread's time goes while an agent records through it, and what one
statement a batch would change.

A probe, not a figure of the suite: ``python -m bench.writerprobe [--events N] [--rounds R]
[--json] [--dir D]``. The ``durable_appends`` figure records 1 KB events through the
``Writer`` into SQLite. Python's ``sqlite3`` lets go of the GIL for every statement it steps
and must win it back after, which waits up to the switch interval (5 ms) while another
thread runs Python. This probe compares two ways of committing the writer's batches, in
one process, the variants alternating and their order reversed every other round:

- ``six``: ``SQLiteStore`` as it is: a batch is six statements (the lock, the run's summary
  with the largest event id, the events, their payloads, the summary's update, the commit),
  and two more when seals are due;
- ``one``: the same store, where a batch of one run that continues its stored head goes in
  as ONE autocommit statement: an ``INSERT`` of its rows (and its seal rows) into a TEMP
  view whose ``INSTEAD OF`` triggers insert each event and its payload, check the head on
  the first row, update the summary on the last and append the seals, the commit inside the
  statement's one step. A new run's first batch, or a batch of several runs, goes the
  store's way. Not the library's: the refusals' wording, duplicate receipts and the
  store's checks in Python are left out.

For each, medians over the rounds of:

- ``recorded``: events a second recording N model responses of 1 KB through ``Recorder``
  into the store, up to the flush, with the writer's ``append`` per event (wall and CPU of
  its thread) and the agent's thread's CPU per event;
- ``alone`` and ``beside``: events a second recording N / 2.5 of them alone, then beside a
  thread computing in Python (``busy_share``: beside over alone, as ``busy_thread_share``);
- ``store``: ``append`` alone, prebuilt events in batches of 512 (the writer's).

Each variant's first run is read back and verified.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tachograph.record.event import Event
from tachograph.store import Receipt, SQLiteStore
from tachograph.store.base import SealRow
from tachograph.store.sqlite import _EVENT_COLUMNS

from .common import (
    beside_busy_thread,
    build_run,
    load_average,
    payload_of_size,
    remove_sqlite,
)
from .durable import _recorder_rate

__all__ = ["main"]

PAYLOAD_BYTES = 1_000
STORE_BATCH = 512
VARIANTS = ("six", "one")
_INGEST_COLUMNS = _EVENT_COLUMNS + ", salt, body, kind, count"

_INGEST = f"""
CREATE TEMP VIEW IF NOT EXISTS ingest AS SELECT {
    ", ".join(f"NULL AS {c.strip()}" for c in _INGEST_COLUMNS.split(","))
};
CREATE TEMP TRIGGER IF NOT EXISTS ingest_head INSTEAD OF INSERT ON ingest
WHEN NEW.kind & 2 BEGIN
    SELECT RAISE(ABORT, 'stale head') WHERE NOT EXISTS (
        SELECT 1 FROM runs WHERE tenant = NEW.tenant AND run_id = NEW.run_id
        AND events = NEW.seq AND head_hash IS NEW.prev_hash);
END;
CREATE TEMP TRIGGER IF NOT EXISTS ingest_event INSTEAD OF INSERT ON ingest
WHEN NEW.kind & 8 = 0 BEGIN
    INSERT INTO events ({_EVENT_COLUMNS}) VALUES ({
    ", ".join("NEW." + c.strip() for c in _EVENT_COLUMNS.split(","))
});
    INSERT INTO payloads (id, salt, body) VALUES (last_insert_rowid(), NEW.salt, NEW.body);
END;
CREATE TEMP TRIGGER IF NOT EXISTS ingest_summary INSTEAD OF INSERT ON ingest
WHEN NEW.kind & 1 BEGIN
    UPDATE runs SET events = NEW.count, head_hash = NEW.hash, last_at = NEW.ts
    WHERE tenant = NEW.tenant AND run_id = NEW.run_id;
END;
CREATE TEMP TRIGGER IF NOT EXISTS ingest_seal INSTEAD OF INSERT ON ingest
WHEN NEW.kind & 8 BEGIN
    INSERT INTO seals (tenant, idx, run_id, seq, leaf) VALUES (NEW.tenant,
        (SELECT coalesce(max(idx) + 1, 0) FROM seals WHERE tenant = NEW.tenant),
        NEW.run_id, NEW.seq, NEW.body);
END;
"""
"""The ``one`` variant's view: ``kind`` is 1 on a run's last event (update the summary), 2
on its first (check the head), 8 on a seal row; ``count`` the run's events after the row."""

_NO_EVENT = (None,) * 12


class OneStatementStore(SQLiteStore):
    """``SQLiteStore`` with the ``one`` variant's batches (see the module's doc)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self._db.executescript(_INGEST)
        self._sql: dict[int, str] = {}

    def _append(
        self, events: Sequence[Event], seals: Mapping[str, Sequence[SealRow]] | None = None
    ) -> list[Receipt]:
        first = events[0]
        if (
            len(events) < 2
            or first.seq == 0
            or any(e.run_id != first.run_id or e.tenant != first.tenant for e in events)
        ):
            return super()._append(events, seals)
        params: list[Any] = []
        extend = params.extend
        last = len(events) - 1
        for i, ev in enumerate(events):
            kind = (2 if i == 0 else 0) | (1 if i == last else 0)
            extend(
                (
                    None, ev.tenant, ev.run_id, ev.seq, ev.event_id, ev.ts, ev.type, ev.actor,
                    ev.trace_id, ev.span_id, ev.idempotency_key, ev.model, ev.seed,
                    ev.payload_digest, ev.prev_hash, ev.hash, ev.salt, ev.payload_bytes, kind,
                    ev.seq + 1,
                )
            )  # fmt: skip
        rows = len(events)
        for tenant, leaves in (seals or {}).items():
            for leaf in leaves:
                # the event's 16 columns (only tenant, run_id and seq set), then salt, body
                # (the leaf), kind and count
                extend((None, tenant, leaf.run_id, leaf.seq, *_NO_EVENT, None, leaf.leaf, 8, None))
                rows += 1
        sql = self._sql.get(rows)
        if sql is None:
            row = "(" + ",".join("?" * (_INGEST_COLUMNS.count(",") + 1)) + ")"
            sql = f"INSERT INTO temp.ingest ({_INGEST_COLUMNS}) VALUES " + ",".join([row] * rows)
            self._sql[rows] = sql
        with self._lock:
            self._db.execute(sql, params)  # autocommit: the commit is inside this one step
        return [Receipt(e.event_id, e.tenant, e.run_id, e.seq, e.hash) for e in events]


class _Timed:
    """The writer's ``append`` of one store, timed (wall and CPU of the calling thread)."""

    def __init__(self, store: SQLiteStore) -> None:
        self.wall = 0
        self.cpu = 0
        inner = store.append

        def append(events: Sequence[Event], **kwargs: Any) -> list[Receipt]:
            t0, c0 = time.perf_counter_ns(), time.thread_time_ns()
            try:
                return inner(events, **kwargs)
            finally:
                self.wall += time.perf_counter_ns() - t0
                self.cpu += time.thread_time_ns() - c0

        store.append = append  # type: ignore[method-assign]


def _round(
    name: str, store: SQLiteStore, timed: _Timed, payloads: Sequence[dict[str, Any]], r: int
) -> dict[str, float]:
    n = len(payloads)
    timed.wall = timed.cpu = 0
    agent0 = time.thread_time_ns()
    recorded = _recorder_rate(store, f"{name}-recorded-{r}", payloads)
    agent_cpu = time.thread_time_ns() - agent0
    writer_wall, writer_cpu = timed.wall, timed.cpu
    few = payloads[: max(2, int(n / 2.5))]
    alone = _recorder_rate(store, f"{name}-alone-{r}", few)
    beside = beside_busy_thread(lambda: _recorder_rate(store, f"{name}-beside-{r}", few))
    events = list(build_run(f"{name}-store-{r}", n, payload_bytes=PAYLOAD_BYTES))
    store.append(events[:1])  # a new run's first event: the batches after it continue it
    t0 = time.perf_counter_ns()
    for start in range(1, n, STORE_BATCH):
        store.append(events[start : start + STORE_BATCH])
    store_rate = (n - 1) / ((time.perf_counter_ns() - t0) / 1e9)
    return {
        "recorded": recorded,
        "writer_wall_us": writer_wall / n / 1000,
        "writer_cpu_us": writer_cpu / n / 1000,
        "agent_cpu_us": agent_cpu / n / 1000,
        "alone": alone,
        "beside": beside,
        "busy_share": beside / alone,
        "store": store_rate,
    }


def probe(workdir: Path, events: int, rounds: int) -> dict[str, dict[str, Any]]:
    """The variants' medians (and whether each one's first recorded run verifies)."""
    payloads = [payload_of_size(PAYLOAD_BYTES, index=i) for i in range(events)]
    stores: dict[str, SQLiteStore] = {}
    for name in VARIANTS:
        remove_sqlite(workdir / f"{name}.db")
        stores[name] = (OneStatementStore if name == "one" else SQLiteStore)(workdir / f"{name}.db")
    timers = {name: _Timed(store) for name, store in stores.items()}
    samples: dict[str, list[dict[str, float]]] = {name: [] for name in VARIANTS}
    try:
        for name, store in stores.items():  # warm: imports, statement caches, the files
            _recorder_rate(store, f"{name}-warm", payloads[: min(events, 1000)])
        for r in range(rounds):
            order = VARIANTS if r % 2 == 0 else VARIANTS[::-1]
            for name in order:
                samples[name].append(_round(name, stores[name], timers[name], payloads, r))
        result: dict[str, dict[str, Any]] = {}
        for name, store in stores.items():
            row: dict[str, Any] = {
                key: statistics.median(s[key] for s in samples[name]) for key in samples[name][0]
            }
            first = f"{name}-recorded-0"
            row["verified"] = store.verify(first).ok
            row["events_read"] = sum(1 for _ in store.read(first))
            result[name] = row
    finally:
        for store in stores.values():
            store.close()
    return result


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run the probe and print it (as JSON with ``--json``)."""
    parser = argparse.ArgumentParser(prog="python -m bench.writerprobe", description=__doc__)
    parser.add_argument("--events", type=int, default=10_000, help="events recorded a round")
    parser.add_argument("--rounds", type=int, default=7, help="rounds (each variant once)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--dir", default=None, help="where to put the files (default: the temporary directory)"
    )
    args = parser.parse_args(argv)
    if args.events < 5 or args.rounds < 1:
        parser.error("--events must be at least 5 and --rounds at least 1")
    # The recordings are left open: closing a store under them logs that their last events
    # stay unsealed, which says nothing here.
    logging.getLogger("tachograph").setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory(prefix="tachograph-writerprobe-", dir=args.dir) as tmp:
        before = load_average()
        variants = probe(Path(tmp), args.events, args.rounds)
        result = {
            "events": args.events,
            "rounds": args.rounds,
            "load_average": before,
            "load_average_after": load_average(),
            "variants": variants,
        }
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print(
            f"{args.events} events of {PAYLOAD_BYTES}-byte payloads recorded a round, "
            f"{args.rounds} alternating rounds (medians):"
        )
        for name, row in variants.items():
            print(
                f"  {name}: recorded {row['recorded']:,.0f} events/s (the writer's append "
                f"{row['writer_wall_us']:.1f} us wall, {row['writer_cpu_us']:.1f} us CPU an "
                f"event; the agent's thread {row['agent_cpu_us']:.1f} us CPU); beside a busy "
                f"thread {row['busy_share']:.3f} of alone ({row['beside']:,.0f} events/s); "
                f"the store alone {row['store']:,.0f} events/s; verified {row['verified']}"
            )
        print(f"load average {before} -> {result['load_average_after']}")
    return result


if __name__ == "__main__":
    main()
