"""Where a durable intent's time goes, against one raw WAL commit of one row.

A probe, not a figure of the suite: ``python -m bench.intentprobe [--rounds N] [--json]``.
Every measure alternates with its baseline in the same minutes, on files in a temporary
directory on the machine's disk (SQLite in WAL mode, ``synchronous=FULL``, as the store and
the ``intent_durable`` figure use):

1. **Pages per commit.** One row into each of k tables in one transaction (k = 1, 2, 3, 5):
   SQLite writes one WAL frame per page the transaction changed, and syncs them together.
   What each page beyond the first adds to a commit.
2. **The store's commit of one event.** ``SQLiteStore.append`` of one prebuilt event, its
   statements timed one by one, and the WAL frames each commit writes on a fresh file (the
   WAL's growth over its frame size), against the raw commit of one row.
3. **A write tool's intent.** From the call to the store's append, the append, and from its
   return to the tool's body: the recorder's Python on either side of the commit. Beside it,
   a read tool's whole call (the same Python, no commit) timed right after a commit and
   again once it runs hot: code that runs just after the process waited for the disk runs
   slower than the same code in a loop.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import tachograph
from tachograph.record.event import Event
from tachograph.store import Receipt, SQLiteStore

from .common import build_run, remove_sqlite

__all__ = ["main"]

FRAME_HEADER = 24
PHASES = ("fresh", "warm")
"""A fresh WAL grows with every commit; a warm one (grown past SQLite's automatic
checkpoint at 1,000 pages, then started over) is overwritten in place, as in a store written
to since it was opened. The ``intent_durable`` figure measures both."""
FRESH_ROUNDS = 80
"""Commits per measure on a fresh WAL: 80 write-tool calls (an intent and a completion, five
pages each) stay under the automatic checkpoint, after which the WAL would start over."""
WARM_BYTES = 6_000_000
WARM_ROW = 2_000


def _raw(path: Path, tables: int, phase: str) -> sqlite3.Connection:
    remove_sqlite(path)
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = FULL")
    for t in range(tables):
        db.execute(f"CREATE TABLE t{t} (id INTEGER PRIMARY KEY, line BLOB NOT NULL)")
    if phase == "warm":
        db.execute("CREATE TABLE warm (line BLOB NOT NULL)")
        db.execute("BEGIN")
        db.executemany(
            "INSERT INTO warm (line) VALUES (?)",
            [(b"w" * WARM_ROW,) for _ in range(WARM_BYTES // WARM_ROW)],
        )
        db.execute("COMMIT")
    return db


def _store(path: Path, phase: str, cls: type[SQLiteStore] = SQLiteStore) -> SQLiteStore:
    remove_sqlite(path)
    store = cls(path)
    if phase == "warm":
        store.append(
            list(build_run("intentprobe-warm", WARM_BYTES // WARM_ROW, payload_bytes=WARM_ROW))
        )
    return store


def _wal(path: Path) -> int:
    wal = Path(f"{path}-wal")
    return wal.stat().st_size if wal.exists() else 0


def _frames(grown: int, page_size: int) -> float:
    return grown / (page_size + FRAME_HEADER)


def _median_us(values: Sequence[float]) -> float:
    return round(statistics.median(values) / 1000, 1)


def pages_per_commit(workdir: Path, rounds: int, phase: str) -> dict[str, Any]:
    """Commits of one row into each of k tables, k alternating."""
    line = b"x" * 600
    counts = (1, 2, 3, 5)
    dbs = {k: _raw(workdir / f"pages-{k}.db", k, phase) for k in counts}
    page_size = dbs[1].execute("PRAGMA page_size").fetchone()[0]
    times: dict[int, list[float]] = {k: [] for k in counts}
    frames: dict[int, list[float]] = {k: [] for k in counts}
    for _ in range(rounds):
        for k, db in dbs.items():
            before = _wal(workdir / f"pages-{k}.db")
            t0 = time.perf_counter_ns()
            db.execute("BEGIN")
            for t in range(k):
                db.execute(f"INSERT INTO t{t} (line) VALUES (?)", (line,))
            db.execute("COMMIT")
            times[k].append(float(time.perf_counter_ns() - t0))
            grown = _wal(workdir / f"pages-{k}.db") - before
            if grown > 0 and before:  # a growing WAL (the first commit writes its header)
                frames[k].append(_frames(grown, page_size))
    for db in dbs.values():
        db.close()
    one = statistics.median(times[1])
    return {
        "page_size": page_size,
        "tables": {
            str(k): {
                "commit_us": _median_us(times[k]),
                "frames": statistics.median(frames[k]) if frames[k] else None,
                "in_one_table_commits": round(statistics.median(times[k]) / one, 3),
            }
            for k in counts
        },
        "us_per_extra_page": round((statistics.median(times[5]) - one) / 4 / 1000, 1),
    }


class _TimedConnection:
    """A sqlite3 connection whose ``execute`` calls are timed, by the statement's first
    words (the store's own connection, wrapped for the probe)."""

    def __init__(self, db: sqlite3.Connection, into: dict[str, list[float]]) -> None:
        self._db = db
        self._into = into

    def execute(self, sql: str, *args: Any) -> Any:
        t0 = time.perf_counter_ns()
        result = self._db.execute(sql, *args)
        self._into[" ".join(sql.split()[:3])].append(float(time.perf_counter_ns() - t0))
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)


def store_commit(workdir: Path, rounds: int, phase: str) -> dict[str, Any]:
    """One prebuilt event appended to a store, statement by statement, alternating with one
    raw commit of one row."""
    path, raw_path = workdir / "store.db", workdir / "store-raw.db"
    store = _store(path, phase)
    raw = _raw(raw_path, 1, phase)
    page_size = raw.execute("PRAGMA page_size").fetchone()[0]
    events = list(build_run("intentprobe-store", rounds + 2, payload_bytes=200))
    store.append(events[:2])  # the run exists: each probed commit extends it
    raw.execute("INSERT INTO t0 (line) VALUES (?)", (b"x",))
    lines = [e.to_json() for e in events]
    statements: dict[str, list[float]] = defaultdict(list)
    real = store._db
    store._db = _TimedConnection(real, statements)  # type: ignore[assignment]
    appends: list[float] = []
    raws: list[float] = []
    store_frames: list[float] = []
    raw_frames: list[float] = []
    try:
        for i, event in enumerate(events[2:]):
            before = _wal(path)
            t0 = time.perf_counter_ns()
            store.append([event])
            appends.append(float(time.perf_counter_ns() - t0))
            if _wal(path) > before:
                store_frames.append(_frames(_wal(path) - before, page_size))
            before = _wal(raw_path)
            t0 = time.perf_counter_ns()
            raw.execute("BEGIN")
            raw.execute("INSERT INTO t0 (line) VALUES (?)", (lines[i],))
            raw.execute("COMMIT")
            raws.append(float(time.perf_counter_ns() - t0))
            if _wal(raw_path) > before:
                raw_frames.append(_frames(_wal(raw_path) - before, page_size))
    finally:
        store._db = real
        store.close()
        raw.close()
    raw_us = statistics.median(raws)
    return {
        "append_us": _median_us(appends),
        "raw_commit_us": _median_us(raws),
        "append_in_raw_commits": round(statistics.median(appends) / raw_us, 3),
        "frames_per_append": statistics.median(store_frames) if store_frames else None,
        "frames_per_raw_commit": statistics.median(raw_frames) if raw_frames else None,
        "statements_us": {sql: _median_us(values) for sql, values in statements.items()},
    }


_MARKS: dict[str, int] = {}
_APPENDS: list[tuple[int, int]] = []
"""When each append of the store started and ended, since the probe last cleared it: the
first after a call is its intent's (the writer thread may commit the completion soon after)."""


@tachograph.tool(effect="write", name="intentprobe_write")
def _write(i: int) -> int:
    _MARKS["body"] = time.perf_counter_ns()
    return i


@tachograph.tool(effect="read", name="intentprobe_read")
def _read(i: int) -> int:
    return i


class _MarkingStore(SQLiteStore):
    """The real SQLite store, noting when each of its appends starts and ends."""

    def append(
        self, events: Sequence[Event], *, durable: bool = True, **options: Any
    ) -> list[Receipt]:
        start = time.perf_counter_ns()
        receipts = super().append(events, durable=durable, **options)
        _APPENDS.append((start, time.perf_counter_ns()))
        return receipts


def write_tool(workdir: Path, rounds: int, phase: str) -> dict[str, Any]:
    """A recorded write tool called with the writer idle (a flush before each call),
    alternating with one raw commit of one row."""
    store = _store(workdir / "tool.db", phase, _MarkingStore)
    raw = _raw(workdir / "tool-raw.db", 1, phase)
    line = b"x" * 600
    before: list[float] = []
    append: list[float] = []
    after: list[float] = []
    whole: list[float] = []
    raws: list[float] = []
    cold: list[float] = []
    hot: list[float] = []
    tools = [_write, _read]
    with tachograph.record(store, actor="intentprobe", input=None, tools=tools) as run:
        for i in range(rounds):
            run.flush()
            _APPENDS.clear()
            t0 = time.perf_counter_ns()
            _write(i)
            start, end = _APPENDS[0]
            if not start < end < _MARKS["body"]:  # pragma: no cover - a probe's own check
                raise RuntimeError("the intent's commit was not the first append of the call")
            before.append(float(start - t0))
            append.append(float(end - start))
            after.append(float(_MARKS["body"] - end))
            whole.append(float(_MARKS["body"] - t0))
            run.flush()
            t0 = time.perf_counter_ns()
            raw.execute("BEGIN")
            raw.execute("INSERT INTO t0 (line) VALUES (?)", (line,))
            raw.execute("COMMIT")
            raws.append(float(time.perf_counter_ns() - t0))
            # The same Python right after a wait for the disk, and again once it runs hot:
            # a read tool's whole call (two events, no commit waited for).
            t0 = time.perf_counter_ns()
            _read(i)
            cold.append(float(time.perf_counter_ns() - t0))
            for _ in range(5):
                _read(i)
            t0 = time.perf_counter_ns()
            _read(i)
            hot.append(float(time.perf_counter_ns() - t0))
        run.output = rounds
    store.close()
    raw.close()
    return {
        "call_to_body_us": _median_us(whole),
        "call_to_append_us": _median_us(before),
        "append_us": _median_us(append),
        "append_to_body_us": _median_us(after),
        "raw_commit_us": _median_us(raws),
        "in_raw_commits": round(statistics.median(whole) / statistics.median(raws), 3),
        "read_call_after_commit_us": _median_us(cold),
        "read_call_hot_us": _median_us(hot),
    }


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run the three probes and print them (as JSON with ``--json``)."""
    parser = argparse.ArgumentParser(prog="python -m bench.intentprobe", description=__doc__)
    parser.add_argument(
        "--rounds",
        type=int,
        default=300,
        help=f"commits per measure (at most {FRESH_ROUNDS} fresh)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--dir", default=None, help="where to put the files (default: the temporary directory)"
    )
    args = parser.parse_args(argv)
    if args.rounds < 3:
        parser.error("--rounds must be at least 3")
    with tempfile.TemporaryDirectory(prefix="tachograph-intentprobe-", dir=args.dir) as tmp:
        workdir = Path(tmp)
        result: dict[str, Any] = {"rounds": args.rounds, "load_average": list(os.getloadavg())}
        for phase in PHASES:
            rounds = min(args.rounds, FRESH_ROUNDS) if phase == "fresh" else args.rounds
            result[phase] = {
                "rounds": rounds,
                "pages_per_commit": pages_per_commit(workdir, rounds, phase),
                "store_commit": store_commit(workdir, rounds, phase),
                "write_tool": write_tool(workdir, rounds, phase),
            }
        result["load_average_after"] = list(os.getloadavg())
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        _print(result)
    return result


def _print(result: dict[str, Any]) -> None:
    for phase in PHASES:
        print(f"{phase} WAL, {result[phase]['rounds']} commits per measure")
        _print_phase(result[phase])
    print(f"load average {result['load_average']} -> {result['load_average_after']}")


def _print_phase(result: dict[str, Any]) -> None:
    pages = result["pages_per_commit"]
    print(f"1. one row into each of k tables, one commit (page size {pages['page_size']}):")
    for k, row in pages["tables"].items():
        print(
            f"   k={k}: {row['commit_us']:7.1f} us, {row['frames']} WAL frames, "
            f"{row['in_one_table_commits']:.3f} one-table commits"
        )
    print(f"   each page beyond the first: {pages['us_per_extra_page']} us")
    store = result["store_commit"]
    print("2. SQLiteStore.append of one event, against a raw commit of one row:")
    print(
        f"   append {store['append_us']} us ({store['frames_per_append']} WAL frames), "
        f"raw {store['raw_commit_us']} us ({store['frames_per_raw_commit']} WAL frames): "
        f"{store['append_in_raw_commits']} raw commits"
    )
    for sql, us in store["statements_us"].items():
        print(f"   {us:7.1f} us  {sql}")
    tool = result["write_tool"]
    print("3. a recorded write tool, writer idle, call -> body:")
    print(
        f"   {tool['call_to_body_us']} us = {tool['call_to_append_us']} before the store's "
        f"append + {tool['append_us']} the append + {tool['append_to_body_us']} after it; "
        f"raw commit {tool['raw_commit_us']} us: {tool['in_raw_commits']} raw commits"
    )
    print(
        f"   a read tool's whole call right after a commit: {tool['read_call_after_commit_us']} "
        f"us; hot: {tool['read_call_hot_us']} us"
    )


if __name__ == "__main__":
    main()
