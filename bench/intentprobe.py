"""Where a durable intent's time goes, against one raw WAL commit of one row.

A probe, not a figure of the suite: ``python -m bench.intentprobe [--rounds N] [--json]``.
Every measure alternates with its baseline in the same minutes, on files in a temporary
directory on the machine's disk (SQLite in WAL mode, ``synchronous=FULL``, as the store and
the ``intent_durable`` figure use), on a fresh WAL and on a warm one:

1. **Pages per commit.** One row into each of k tables in one transaction (k = 1, 2, 3, 5,
   the order reversed every other round): SQLite writes one WAL frame per page the
   transaction changed, and syncs them together. What each table beyond the first adds to a
   commit (its page, and its ``INSERT``).
2. **The store's commit of one event.** ``SQLiteStore.append`` of one prebuilt event against
   the raw commit of one row, and the WAL frames each writes on a fresh file (the WAL's
   growth over its frame size). Every other commit has its statements timed one by one (the
   store's connection wrapped); the append's own time is taken from the others.
3. **A write tool's intent.** From the call to the store's append, the append, and from its
   return to the tool's body, with the writer idle (a flush before each call).
4. **The same write tool on an in-memory store**, so with no commit: the recorder's Python
   before the store's append, right after a flush, after a flush and 300 us of spinning, and
   after a flush and a 300 us sleep (a thread that waited, as one waits for an fsync).
5. **A journal instead of a commit** (what if the intent were made durable outside SQLite):
   one event's JSONL line written and ``fdatasync``-ed, to the end of a growing file, over
   space reserved with ``posix_fallocate``, and over space written beforehand (as a
   journal's ring after its first lap), with the raw commit, the four in a new (seeded)
   order every round, every line read back after. Skipped on a system without
   ``posix_fallocate`` or ``fdatasync``. Added to the
   code's own cost before the append (part 4, after a sleep) and from the append to the
   body (part 3), an estimate of what an intent written that way would cost: a sum of
   medians, not a measured call (and without the line's own serialization).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
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
from tachograph.store import MemoryStore, Receipt, SQLiteStore

from .common import build_run, load_average, remove_sqlite, wal_connection

__all__ = ["main"]

FRAME_HEADER = 24
PHASES = ("fresh", "warm")
"""A fresh WAL grows with every commit; a warm one (grown past SQLite's automatic
checkpoint at 1,000 pages, then started over) is overwritten in place, as in a store written
to since it was opened. The ``intent_durable`` figure measures both."""
FRESH_ROUNDS = 60
"""Commits per measure on a fresh WAL: 60 write-tool calls (an intent and a completion, five
pages each, and a page split now and then) stay under the automatic checkpoint at 1,000
pages, after which the WAL would start over; the probe checks that it grew every time."""
WAIT_NS = 300_000
"""How long the in-memory control spins or sleeps before a call: about one fsync here."""
WARM_BYTES = 6_000_000
WARM_ROW = 2_000
JOURNAL_UNIT = 1 << 20
"""The journal files written over are reserved in whole MiB (see :func:`journal_space`)."""
JOURNAL_KINDS = ("growing", "fallocated", "prewritten")


def _raw(path: Path, tables: int, phase: str) -> sqlite3.Connection:
    remove_sqlite(path)
    db = wal_connection(path)
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
    with contextlib.ExitStack() as stack:
        dbs = {
            k: stack.enter_context(contextlib.closing(_raw(workdir / f"pages-{k}.db", k, phase)))
            for k in counts
        }
        return _pages(workdir, dbs, rounds, line)


def _pages(
    workdir: Path, dbs: dict[int, sqlite3.Connection], rounds: int, line: bytes
) -> dict[str, Any]:
    counts = tuple(dbs)
    page_size = dbs[1].execute("PRAGMA page_size").fetchone()[0]
    times: dict[int, list[float]] = {k: [] for k in counts}
    frames: dict[int, list[float]] = {k: [] for k in counts}
    for r in range(rounds):
        for k in counts if r % 2 == 0 else tuple(reversed(counts)):
            db = dbs[k]
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
    one = statistics.median(times[1])
    return {
        "page_size": page_size,
        "tables": {
            str(k): {
                "commit_us": _median_us(times[k]),
                "median_frames": statistics.median(frames[k]) if frames[k] else None,
                "in_one_table_commits": round(statistics.median(times[k]) / one, 3),
            }
            for k in counts
        },
        "us_per_extra_table": round((statistics.median(times[5]) - one) / 4 / 1000, 1),
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
    """One prebuilt event appended to a store, alternating with one raw commit of one row;
    every other append with its statements timed."""
    path, raw_path = workdir / "store.db", workdir / "store-raw.db"
    with contextlib.ExitStack() as stack:
        store = _store(path, phase)
        stack.callback(store.close)
        raw = stack.enter_context(contextlib.closing(_raw(raw_path, 1, phase)))
        return _store_commit(store, raw, path, raw_path, rounds)


def _store_commit(
    store: SQLiteStore,
    raw: sqlite3.Connection,
    path: Path,
    raw_path: Path,
    rounds: int,
) -> dict[str, Any]:
    real = store._db
    store_page = real.execute("PRAGMA page_size").fetchone()[0]
    raw_page = raw.execute("PRAGMA page_size").fetchone()[0]
    events = list(build_run("intentprobe-store", 2 * rounds + 2, payload_bytes=200))
    store.append(events[:2])  # the run exists: each probed commit extends it
    raw.execute("INSERT INTO t0 (line) VALUES (?)", (b"x",))
    lines = [e.to_json() for e in events]
    statements: dict[str, list[float]] = defaultdict(list)
    timed = _TimedConnection(real, statements)
    appends: list[float] = []
    raws: list[float] = []
    store_frames: list[float] = []
    raw_frames: list[float] = []
    for i, event in enumerate(events[2:]):
        before = _wal(path)
        if i % 2:  # statement by statement; the append's own time from the others
            store._db = timed  # type: ignore[assignment]
            try:
                store.append([event])
            finally:
                store._db = real
        else:
            t0 = time.perf_counter_ns()
            store.append([event])
            appends.append(float(time.perf_counter_ns() - t0))
        if _wal(path) > before:
            store_frames.append(_frames(_wal(path) - before, store_page))
        before = _wal(raw_path)
        t0 = time.perf_counter_ns()
        raw.execute("BEGIN")
        raw.execute("INSERT INTO t0 (line) VALUES (?)", (lines[i],))
        raw.execute("COMMIT")
        raws.append(float(time.perf_counter_ns() - t0))
        if _wal(raw_path) > before:
            raw_frames.append(_frames(_wal(raw_path) - before, raw_page))
    raw_us = statistics.median(raws)
    return {
        "append_us": _median_us(appends),
        "raw_commit_us": _median_us(raws),
        "append_in_raw_commits": round(statistics.median(appends) / raw_us, 3),
        "median_frames_per_append": statistics.median(store_frames) if store_frames else None,
        "median_frames_per_raw_commit": statistics.median(raw_frames) if raw_frames else None,
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


class _Marking:
    """Mixed into a store: notes when each of its appends starts and ends."""

    def append(
        self, events: Sequence[Event], *, durable: bool = True, **options: Any
    ) -> list[Receipt]:
        start = time.perf_counter_ns()
        receipts: list[Receipt] = super().append(  # type: ignore[misc]
            events, durable=durable, **options
        )
        _APPENDS.append((start, time.perf_counter_ns()))
        return receipts


class _MarkingStore(_Marking, SQLiteStore):
    """The real SQLite store, its appends marked."""


class _MarkingMemoryStore(_Marking, MemoryStore):
    """The in-memory store, its appends marked."""


def _intent_call(i: int, t0: int) -> tuple[int, int]:
    """Call the write tool (``t0`` taken just before) and return when the store's append of
    its intent started and ended."""
    _write(i)
    if not _APPENDS:
        raise RuntimeError("the write tool's intent reached no store append: is it recorded?")
    start, end = _APPENDS[0]
    if not t0 < start < end < _MARKS["body"]:
        raise RuntimeError("the intent's commit was not the first append of the call")
    return start, end


def write_tool(workdir: Path, rounds: int, phase: str) -> dict[str, Any]:
    """A recorded write tool called with the writer idle (a flush before each call),
    alternating with one raw commit of one row."""
    path = workdir / "tool.db"
    with contextlib.ExitStack() as stack:
        store = _store(path, phase, _MarkingStore)
        stack.callback(store.close)
        raw = stack.enter_context(contextlib.closing(_raw(workdir / "tool-raw.db", 1, phase)))
        line = b"x" * 600
        before: list[float] = []
        append: list[float] = []
        after: list[float] = []
        whole: list[float] = []
        raws: list[float] = []
        grew = 0
        with tachograph.record(store, actor="intentprobe", input=None, tools=[_write]) as run:
            for i in range(rounds):
                run.flush()
                wal = _wal(path)
                _APPENDS.clear()
                t0 = time.perf_counter_ns()
                start, end = _intent_call(i, t0)
                grew += _wal(path) > wal
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
            run.output = rounds
    return {
        "call_to_body_us": _median_us(whole),
        "call_to_append_us": _median_us(before),
        "append_us": _median_us(append),
        "append_to_body_us": _median_us(after),
        "raw_commit_us": _median_us(raws),
        "in_raw_commits": round(statistics.median(whole) / statistics.median(raws), 3),
        "intents_that_grew_the_wal": grew,
    }


def journal_available() -> bool:
    """Whether this system has what part 5 uses (``posix_fallocate``, ``fdatasync``)."""
    return hasattr(os, "posix_fallocate") and hasattr(os, "fdatasync")


def _journal_line() -> bytes:
    return next(iter(build_run("intentprobe-journal", 1, payload_bytes=200))).to_json() + b"\n"


def journal_space(rounds: int) -> int:
    """Bytes reserved ahead in the journal files written over: every line of ``rounds``
    lands inside, rounded up to whole MiB (at least one)."""
    need = rounds * len(_journal_line())
    return max(1, -(-need // JOURNAL_UNIT)) * JOURNAL_UNIT


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def journal(workdir: Path, rounds: int, phase: str) -> dict[str, Any] | None:
    """One event's JSONL line made durable with ``fdatasync`` in three kinds of file (the
    end of a growing one, space reserved by ``posix_fallocate``, space written with random
    bytes and synced beforehand), alternating with one raw commit of one row: the four in a
    new order every round (seeded), so that none always follows the same other. Every line
    is read back from each file after. None where the system lacks what it uses."""
    if not journal_available():
        return None
    line = _journal_line()
    space = journal_space(rounds)
    order = ["raw", *JOURNAL_KINDS]
    shuffle = random.Random(20).shuffle
    fds: dict[str, int] = {}
    with contextlib.ExitStack() as stack:
        raw = stack.enter_context(contextlib.closing(_raw(workdir / "journal-raw.db", 1, phase)))
        for kind in JOURNAL_KINDS:
            fd = os.open(workdir / f"journal-{kind}", os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
            stack.callback(os.close, fd)
            fds[kind] = fd
        os.posix_fallocate(fds["fallocated"], 0, space)
        # random bytes: zeros may be stored sparse, or compressed away, by some filesystems
        _write_all(fds["prewritten"], os.urandom(space))
        for fd in fds.values():
            os.fsync(fd)
        times: dict[str, list[float]] = {kind: [] for kind in order}
        for r in range(rounds):
            offset = r * len(line)
            shuffle(order)
            for kind in order:
                t0 = time.perf_counter_ns()
                if kind == "raw":
                    raw.execute("BEGIN")
                    raw.execute("INSERT INTO t0 (line) VALUES (?)", (line,))
                    raw.execute("COMMIT")
                elif kind == "growing":
                    _write_all(fds[kind], line)
                    os.fdatasync(fds[kind])
                else:
                    if os.pwrite(fds[kind], line, offset) != len(line):
                        raise OSError(f"a short write to the {kind} journal")
                    os.fdatasync(fds[kind])
                times[kind].append(float(time.perf_counter_ns() - t0))
        written = line * rounds
        read_back = {kind: os.pread(fd, len(written), 0) == written for kind, fd in fds.items()}
        sizes = {kind: os.fstat(fd).st_size for kind, fd in fds.items()}
    raw_median = statistics.median(times["raw"])
    return {
        "line_bytes": len(line),
        "reserved_bytes": space,
        "raw_commit_us": _median_us(times["raw"]),
        **{f"{kind}_us": _median_us(times[kind]) for kind in JOURNAL_KINDS},
        "in_raw_commits": {
            kind: round(statistics.median(times[kind]) / raw_median, 3) for kind in JOURNAL_KINDS
        },
        "file_bytes": sizes,
        "lines_read_back": read_back,
    }


def _spin(ns: int) -> None:
    until = time.perf_counter_ns() + ns
    while time.perf_counter_ns() < until:
        pass


def in_memory(rounds: int) -> dict[str, Any]:
    """The write tool on an in-memory store: the recorder's Python before the store's append
    with no commit in the way, after a flush, a flush and a spin, a flush and a sleep, in
    turn."""
    modes = ("after_flush", "after_flush_and_spin", "after_flush_and_sleep")
    before: dict[str, list[float]] = {mode: [] for mode in modes}
    store = _MarkingMemoryStore()
    with tachograph.record(store, actor="intentprobe", input=None, tools=[_write]) as run:
        for i in range(rounds):
            for mode in modes if i % 2 == 0 else tuple(reversed(modes)):
                run.flush()
                if mode == "after_flush_and_spin":
                    _spin(WAIT_NS)
                elif mode == "after_flush_and_sleep":
                    time.sleep(WAIT_NS / 1e9)
                _APPENDS.clear()
                t0 = time.perf_counter_ns()
                start, _ = _intent_call(i, t0)
                before[mode].append(float(start - t0))
        run.output = rounds
    return {f"call_to_append_{mode}_us": _median_us(before[mode]) for mode in modes}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run the probes and print them (as JSON with ``--json``)."""
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
        result: dict[str, Any] = {"rounds": args.rounds, "load_average": load_average()}
        for phase in PHASES:
            rounds = min(args.rounds, FRESH_ROUNDS) if phase == "fresh" else args.rounds
            result[phase] = {
                "rounds": rounds,
                "pages_per_commit": pages_per_commit(workdir, rounds, phase),
                "store_commit": store_commit(workdir, rounds, phase),
                "write_tool": write_tool(workdir, rounds, phase),
                "journal": journal(workdir, rounds, phase),
            }
        result["in_memory"] = in_memory(args.rounds)
        own = result["in_memory"]["call_to_append_after_flush_and_sleep_us"]
        for phase in PHASES:
            entry = result[phase]["journal"]
            if entry is None:
                continue
            # an estimate: the code's own cost before the append (4), the journal's write,
            # and the way from the append's return to the tool's body (3)
            then = result[phase]["write_tool"]["append_to_body_us"]
            entry["estimate_in_raw_commits"] = {
                kind: round((own + entry[f"{kind}_us"] + then) / entry["raw_commit_us"], 3)
                for kind in JOURNAL_KINDS
            }
        result["load_average_after"] = load_average()
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        _print(result)
    return result


def _print(result: dict[str, Any]) -> None:
    for phase in PHASES:
        print(f"{phase} WAL, {result[phase]['rounds']} commits per measure")
        _print_phase(result[phase])
    memory = result["in_memory"]
    print("4. the write tool on an in-memory store (no commit): call -> the store's append")
    print(
        f"   right after a flush {memory['call_to_append_after_flush_us']} us; after a flush and "
        f"{WAIT_NS // 1000} us of spinning {memory['call_to_append_after_flush_and_spin_us']} us; "
        f"after a flush and a {WAIT_NS // 1000} us sleep "
        f"{memory['call_to_append_after_flush_and_sleep_us']} us"
    )
    print("5. what if: the intent's line made durable in a journal file instead of a commit")
    for phase in PHASES:
        entry = result[phase]["journal"]
        if entry is None:
            print(f"   {phase} WAL: not measured (no posix_fallocate or fdatasync here)")
            continue
        print(
            f"   {phase} WAL: raw commit {entry['raw_commit_us']} us; a {entry['line_bytes']}-byte "
            "line + fdatasync:"
        )
        for kind in JOURNAL_KINDS:
            print(
                f"     {kind:<10} {entry[f'{kind}_us']:7.1f} us, "
                f"{entry['in_raw_commits'][kind]:.3f} raw commits; with the code's own cost "
                "before the append (4, after a sleep) and after it (3), about "
                f"{entry['estimate_in_raw_commits'][kind]:.3f}"
            )
    print(f"load average {result['load_average']} -> {result['load_average_after']}")


def _print_phase(result: dict[str, Any]) -> None:
    pages = result["pages_per_commit"]
    print(f"1. one row into each of k tables, one commit (page size {pages['page_size']}):")
    for k, row in pages["tables"].items():
        print(
            f"   k={k}: {row['commit_us']:7.1f} us, median {row['median_frames']} WAL frames, "
            f"{row['in_one_table_commits']:.3f} one-table commits"
        )
    extra = pages["us_per_extra_table"]
    print(f"   each table beyond the first (its page and its INSERT): {extra} us")
    store = result["store_commit"]
    print("2. SQLiteStore.append of one event, against a raw commit of one row:")
    print(
        f"   append {store['append_us']} us (median {store['median_frames_per_append']} WAL "
        f"frames), raw {store['raw_commit_us']} us (median "
        f"{store['median_frames_per_raw_commit']}): {store['append_in_raw_commits']} raw commits"
    )
    for sql, us in store["statements_us"].items():
        print(f"   {us:7.1f} us  {sql}")
    tool = result["write_tool"]
    print("3. a recorded write tool, writer idle, call -> body:")
    print(
        f"   {tool['call_to_body_us']} us = {tool['call_to_append_us']} before the store's "
        f"append + {tool['append_us']} the append + {tool['append_to_body_us']} after it; "
        f"raw commit {tool['raw_commit_us']} us: {tool['in_raw_commits']} raw commits; "
        f"{tool['intents_that_grew_the_wal']} of {result['rounds']} intents grew the WAL"
    )


if __name__ == "__main__":
    main()
