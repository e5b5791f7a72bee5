"""Durability: appends through the writer against raw sqlite3 inserts, and the time an intent
takes to become durable before a write tool runs, in fsyncs."""

from __future__ import annotations

import os
import sqlite3
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import tachograph
from tachograph.capture.recorder import Recorder
from tachograph.record.event import Event
from tachograph.store import Receipt, SQLiteStore

from .common import (
    Figure,
    Measure,
    Settings,
    Target,
    beside_busy_thread,
    build_run,
    interleaved,
    measure_of,
    payload_of_size,
    remove_sqlite,
    scaled,
    wal_connection,
)
from .record import NullStore

__all__ = ["figures"]

PAYLOAD_BYTES = 1000
RAW_BATCH = 100


def _raw_db(path: Path) -> sqlite3.Connection:
    db = wal_connection(path)
    db.execute("CREATE TABLE IF NOT EXISTS lines (id INTEGER PRIMARY KEY, line BLOB NOT NULL)")
    return db


def _appends_figure(settings: Settings, workdir: Path) -> Figure:
    n = scaled(20_000, settings.scale, minimum=200)
    repeats = settings.repeats or 5
    # a --dir kept from an earlier run holds runs of the same ids: start from new files
    remove_sqlite(workdir / "writer.db")
    remove_sqlite(workdir / "raw.db")
    store = SQLiteStore(workdir / "writer.db")
    raw = _raw_db(workdir / "raw.db")
    payloads = [payload_of_size(PAYLOAD_BYTES, index=i) for i in range(n)]
    lines = [e.to_json() for e in build_run("bench-raw", n, payload_bytes=PAYLOAD_BYTES)]
    event_bytes = sum(len(line) for line in lines) / n
    counter = iter(range(1_000_000))

    def writer_sample() -> float:
        return _recorder_rate(store, f"bench-writer-{next(counter)}", payloads)

    def raw_sample() -> float:
        t0 = time.perf_counter_ns()
        for start in range(0, n, RAW_BATCH):
            raw.execute("BEGIN")
            raw.executemany(
                "INSERT INTO lines (line) VALUES (?)",
                [(b,) for b in lines[start : start + RAW_BATCH]],
            )
            raw.execute("COMMIT")
        return n / ((time.perf_counter_ns() - t0) / 1e9)

    subj, base = interleaved(writer_sample, raw_sample, repeats=repeats)
    subject = measure_of("Recorder.append -> Writer -> SQLiteStore, then flush", subj, "events/s")
    baseline = measure_of(
        f"raw sqlite3 INSERT of the line bytes, {RAW_BATCH}/txn", base, "events/s"
    )

    # The store alone, given prebuilt events in batches of RAW_BATCH: separates the cost of
    # building events from the cost of storing them.
    store_only: list[float] = []
    for i in range(max(1, repeats // 2)):
        events = list(build_run(f"bench-store-{i}", n, payload_bytes=PAYLOAD_BYTES))
        t0 = time.perf_counter_ns()
        for start in range(0, n, RAW_BATCH):
            store.append(events[start : start + RAW_BATCH])
        store_only.append(n / ((time.perf_counter_ns() - t0) / 1e9))
    store_m = measure_of("SQLiteStore.append, prebuilt events", store_only, "events/s")

    busy = _busy_thread_share(store, payloads[: scaled(4_000, settings.scale, minimum=200)])
    ratio = subject.median / baseline.median

    def profile_once() -> None:
        # cProfile sees one thread, so the writer's share is done here in the caller's: the
        # caller's path on a recorder whose store discards, then the writer's store.append of
        # the same events in batches.
        run_id = f"bench-writer-{next(counter)}"
        recorder = Recorder(NullStore(), run_id=run_id, actor="bench", durability="batch")
        events = [recorder.append("model.response", payload) for payload in payloads]
        recorder.flush()
        for start in range(0, n, RAW_BATCH):
            store.append(events[start : start + RAW_BATCH])

    figure = Figure(
        key="durable_appends",
        title=f"durable appends through the writer (WAL, FULL), {n} events",
        subject=subject,
        baseline=baseline,
        ratio=ratio,
        ratio_label="writer rate / raw rate",
        targets=[
            Target("events/s end to end", subject.median, ">=", 25_000),
            Target("share of the raw rate", ratio, ">=", 0.5),
            Target("share of the raw rate (issue target)", ratio, ">=", 0.8),
            Target("with a Python thread busy beside: share of the rate alone", busy, ">=", 0.1),
        ],
        extra={
            "busy_thread_share": busy,
            "events_per_sample": n,
            "mean_line_bytes": round(event_bytes, 1),
            "store_append_prebuilt": store_m.to_dict(),
            "store_share_of_raw": store_m.median / baseline.median,
        },
        profile_fn=profile_once,
    )
    raw.close()
    return figure


def _recorder_rate(store: SQLiteStore, run_id: str, payloads: list[dict[str, Any]]) -> float:
    """Events per second of recording ``payloads`` as model responses into a new run of
    ``store`` through the writer, up to the flush."""
    recorder = Recorder(store, run_id=run_id, actor="bench")
    t0 = time.perf_counter_ns()
    for payload in payloads:
        recorder.append("model.response", payload)
    recorder.flush()
    return len(payloads) / ((time.perf_counter_ns() - t0) / 1e9)


def _busy_thread_share(store: SQLiteStore, payloads: list[dict[str, Any]]) -> float:
    """The writer's rate while another thread of the process computes in Python, as a share
    of its rate without it (alternate samples). Each statement SQLite steps lets go of the GIL
    and must win it back from the busy thread, which can take the switch interval (5 ms): a
    statement per row made this share 0.03 (a recorded agent with a busy thread beside it)."""
    counter = iter(range(1_000_000))

    def sample() -> float:
        return _recorder_rate(store, f"bench-busy-{next(counter)}", payloads)

    alone: list[float] = []
    beside: list[float] = []
    for _ in range(3):
        alone.append(sample())
        beside.append(beside_busy_thread(sample))
    return statistics.median(beside) / statistics.median(alone)


_BODY_STARTED = [0]


@tachograph.tool(effect="write", name="bench_write")
def _write_tool(i: int) -> int:
    _BODY_STARTED[0] = time.perf_counter_ns()
    return i


def _fsync_sampler(path: Path) -> tuple[Any, Any]:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    chunk = b"x" * 100

    def sample() -> float:
        t0 = time.perf_counter_ns()
        os.write(fd, chunk)
        os.fsync(fd)
        return float(time.perf_counter_ns() - t0)

    return sample, fd


class _CountingStore(SQLiteStore):
    """The real SQLite store, counting its transactions (one WAL fsync each)."""

    commits = 0

    def append(
        self, events: Sequence[Event], *, durable: bool = True, **options: Any
    ) -> list[Receipt]:
        receipts = super().append(events, durable=durable, **options)
        self.commits += 1
        return receipts


INTENT_ROUND = 10
"""Calls of each kind per round: back to back, then writer idle (each followed by one raw
commit), so that both phases and the floor meet the disk of nearly the same moment."""

COLD_ROUNDS = 5
"""Rounds on fresh files: about 850 WAL pages of the store's, under SQLite's automatic
checkpoint at 1,000, so that every commit of the cold phase extends its WAL file."""

WARM_BYTES = 6_000_000
"""What each file is grown by before the warm phase: past the automatic checkpoint, after
which SQLite writes its WAL from the start again, over blocks the file already has."""


def _wal_bytes(path: Path) -> int:
    wal = Path(f"{path}-wal")
    return wal.stat().st_size if wal.exists() else 0


def _warm(store: SQLiteStore, raw: sqlite3.Connection) -> None:
    """Grow the store's WAL and the raw file's past SQLite's automatic checkpoint, so that
    the commits measured after overwrite blocks their WAL already has (as in a store that has
    been written to since it was opened), instead of extending it."""
    payload = 2_000
    n = WARM_BYTES // payload
    store.append(list(build_run("bench-intent-warm", n, payload_bytes=payload)))
    raw.execute("CREATE TABLE IF NOT EXISTS warm (line BLOB NOT NULL)")
    raw.execute("BEGIN")
    raw.executemany("INSERT INTO warm (line) VALUES (?)", [(b"w" * payload,) for _ in range(n)])
    raw.execute("COMMIT")


def _intent_rounds(
    store: _CountingStore,
    raw: sqlite3.Connection,
    raw_lines: list[bytes],
    rounds: int,
    fsync: Any,
) -> dict[str, Any]:
    """Rounds of INTENT_ROUND write-tool calls back to back, then INTENT_ROUND with the
    writer idle, each of these followed (once its completion is committed) by one raw commit
    of one row: the issue's floor, at the same moment on the same disk."""
    out: dict[str, Any] = {
        "back_to_back": [],
        "isolated": [],
        "raw": [],
        "fsyncs": [],
        "fsyncs_isolated": [],
    }
    commits = calls = 0

    def raw_commit(line: bytes) -> float:
        t0 = time.perf_counter_ns()
        raw.execute("BEGIN")
        raw.execute("INSERT INTO lines (line) VALUES (?)", (line,))
        raw.execute("COMMIT")
        return float(time.perf_counter_ns() - t0)

    with tachograph.record(store, actor="bench", input=None, tools=[_write_tool]) as run:
        for r in range(rounds):
            # back to back: the previous call's completion waits (Writer.linger) to share
            # the next intent's commit. The first call of a round follows a flush: not
            # back to back, so not counted.
            run.flush()
            _write_tool(0)
            before = store.commits
            for i in range(INTENT_ROUND):
                out["fsyncs"].append(fsync())
                t0 = time.perf_counter_ns()
                _write_tool(i)
                out["back_to_back"].append(float(_BODY_STARTED[0] - t0))
            commits += store.commits - before
            calls += INTENT_ROUND
            for i in range(INTENT_ROUND):
                run.flush()
                out["fsyncs_isolated"].append(fsync())
                t0 = time.perf_counter_ns()
                _write_tool(i)
                out["isolated"].append(float(_BODY_STARTED[0] - t0))
                run.flush()
                out["raw"].append(raw_commit(raw_lines[(r * INTENT_ROUND + i) % len(raw_lines)]))
        run.output = rounds
    out["commits_per_call_back_to_back"] = commits / calls
    return out


def _intent_figure(settings: Settings, workdir: Path) -> Figure:
    rounds = max(2, scaled(400, settings.scale, minimum=20) // INTENT_ROUND)
    fsync, fd = _fsync_sampler(workdir / "fsync.bin")
    raw_lines = [e.to_json() for e in build_run("bench-intent-raw", 100, payload_bytes=200)]
    phases: dict[str, dict[str, Any]] = {}
    # Cold: fresh files, as a process that opens a store finds it (SQLite deletes the WAL
    # when its last connection closes): every commit extends the WAL file. Warm: the same
    # after both WALs have wrapped (see _warm).
    for phase in ("cold", "warm"):
        path, raw_path = workdir / f"intent-{phase}.db", workdir / f"intent-raw-{phase}.db"
        remove_sqlite(path)
        remove_sqlite(raw_path)
        store = _CountingStore(path)
        raw = _raw_db(raw_path)
        if phase == "warm":
            _warm(store, raw)
        wal_before = (_wal_bytes(path), _wal_bytes(raw_path))
        result = _intent_rounds(
            store, raw, raw_lines, COLD_ROUNDS if phase == "cold" else rounds, fsync
        )
        result["wal_bytes"] = {
            "store": [wal_before[0], _wal_bytes(path)],
            "raw": [wal_before[1], _wal_bytes(raw_path)],
        }
        result["store"], result["raw_db"] = store, raw
        phases[phase] = result
    warm, cold = phases["warm"], phases["cold"]
    # One commit of one event straight into the (warm) store, no writer thread.
    direct: list[float] = []
    fsyncs_direct: list[float] = []
    store = warm["store"]
    for event in build_run("bench-intent-direct", len(warm["isolated"]), payload_bytes=200):
        fsyncs_direct.append(fsync())
        t0 = time.perf_counter_ns()
        store.append([event])
        direct.append(float(time.perf_counter_ns() - t0))
    for result in phases.values():
        result["raw_db"].close()
        result["store"].close()
    os.close(fd)
    direct_m = measure_of("SQLiteStore.append of one event (one commit)", direct, "ns")
    m: dict[str, dict[str, Measure]] = {}
    for phase, result in phases.items():
        m[phase] = {
            "b2b": measure_of(
                f"call of a write tool -> its body starts (back to back, {phase} WAL)",
                result["back_to_back"],
                "ns",
            ),
            "iso": measure_of(
                f"same, writer idle at the call ({phase} WAL)", result["isolated"], "ns"
            ),
            "raw": measure_of(
                f"raw sqlite3 INSERT + COMMIT of one row (WAL, FULL; {phase} WAL)",
                result["raw"],
                "ns",
            ),
        }
    subject = m["warm"]["b2b"]
    baseline = measure_of("one fsync of a 100-byte write, same disk", warm["fsyncs"], "ns")
    ratio = subject.median / baseline.median

    def in_raw(phase: str, kind: str) -> float:
        return m[phase][kind].median / m[phase]["raw"].median

    def profile_once() -> None:
        profiled = _CountingStore(workdir / "intent-warm.db")
        with tachograph.record(profiled, actor="bench", input=None, tools=[_write_tool]) as run:
            for i in range(rounds * INTENT_ROUND):
                _write_tool(i)
            run.output = None
        profiled.close()

    return Figure(
        key="intent_durable",
        title="intent made durable before a side effect",
        subject=subject,
        baseline=baseline,
        ratio=ratio,
        ratio_label="intent latency / fsync",
        targets=[
            Target("median in fsyncs", ratio, "<", 2.0),
            # issue target: a durable intent <= 1.1 raw WAL commits of one row
            Target("writer idle: in raw commits", in_raw("warm", "iso"), "<=", 1.1),
            Target("back to back: in raw commits", in_raw("warm", "b2b"), "<=", 1.1),
            Target("writer idle, fresh WAL: in raw commits", in_raw("cold", "iso"), "<=", 1.1),
            Target("back to back, fresh WAL: in raw commits", in_raw("cold", "b2b"), "<=", 1.1),
        ],
        extra={
            "calls": len(warm["back_to_back"]),
            "calls_cold": len(cold["back_to_back"]),
            **{
                f"{kind}_{phase}_ns": m[phase][kind].to_dict()
                for phase in m
                for kind in ("b2b", "iso", "raw")
            },
            "isolated_in_raw": in_raw("warm", "iso"),
            "back_to_back_in_raw": in_raw("warm", "b2b"),
            "isolated_in_raw_cold": in_raw("cold", "iso"),
            "back_to_back_in_raw_cold": in_raw("cold", "b2b"),
            "isolated_in_fsyncs": m["warm"]["iso"].median
            / statistics.median(warm["fsyncs_isolated"]),
            "commits_per_call_back_to_back": warm["commits_per_call_back_to_back"],
            "commits_per_call_back_to_back_cold": cold["commits_per_call_back_to_back"],
            # the WAL files' sizes before and after each phase: cold ones grow, warm ones not
            "wal_bytes": {phase: result["wal_bytes"] for phase, result in phases.items()},
            "one_commit_ns": direct_m.to_dict(),
            "one_commit_in_fsyncs": direct_m.median / statistics.median(fsyncs_direct),
            # against the floor the intent can reach: one commit of one event, same store
            "isolated_in_commits": m["warm"]["iso"].median / direct_m.median,
            "back_to_back_in_commits": subject.median / direct_m.median,
        },
        profile_fn=profile_once,
    )


def figures(settings: Settings) -> list[Figure]:
    """The durability figures."""
    workdir = Path(settings.workdir) / "durable"
    workdir.mkdir(parents=True, exist_ok=True)
    out = []
    for build in (_appends_figure, _intent_figure):
        started = time.perf_counter()
        fig = build(settings, workdir)
        fig.extra["seconds"] = round(time.perf_counter() - started, 2)
        out.append(fig)
    return out
