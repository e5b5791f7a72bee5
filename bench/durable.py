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
    Settings,
    Target,
    build_run,
    interleaved,
    measure_of,
    payload_of_size,
    scaled,
)
from .record import NullStore

__all__ = ["figures"]

PAYLOAD_BYTES = 1000
RAW_BATCH = 100


def _raw_db(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = FULL")
    db.execute("CREATE TABLE IF NOT EXISTS lines (id INTEGER PRIMARY KEY, line BLOB NOT NULL)")
    return db


def _appends_figure(settings: Settings, workdir: Path) -> Figure:
    n = scaled(20_000, settings.scale, minimum=200)
    repeats = settings.repeats or 5
    store = SQLiteStore(workdir / "writer.db")
    raw = _raw_db(workdir / "raw.db")
    payloads = [payload_of_size(PAYLOAD_BYTES, index=i) for i in range(n)]
    lines = [e.to_json() for e in build_run("bench-raw", n, payload_bytes=PAYLOAD_BYTES)]
    event_bytes = sum(len(line) for line in lines) / n
    counter = iter(range(1_000_000))

    def writer_sample() -> float:
        recorder = Recorder(store, run_id=f"bench-writer-{next(counter)}", actor="bench")
        t0 = time.perf_counter_ns()
        for payload in payloads:
            recorder.append("model.response", payload)
        recorder.flush()
        return n / ((time.perf_counter_ns() - t0) / 1e9)

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
        ],
        extra={
            "events_per_sample": n,
            "mean_line_bytes": round(event_bytes, 1),
            "store_append_prebuilt": store_m.to_dict(),
            "store_share_of_raw": store_m.median / baseline.median,
        },
        profile_fn=profile_once,
    )
    raw.close()
    return figure


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


def _intent_figure(settings: Settings, workdir: Path) -> Figure:
    calls = scaled(400, settings.scale, minimum=20)
    store = _CountingStore(workdir / "intent.db")
    fsync, fd = _fsync_sampler(workdir / "fsync.bin")
    back_to_back: list[float] = []
    isolated: list[float] = []
    fsyncs: list[float] = []
    fsyncs_isolated: list[float] = []  # each phase against the fsyncs of its own moment
    fsyncs_direct: list[float] = []
    # The floor: one raw sqlite3 commit of one row (WAL, synchronous=FULL), the line
    # of an event of the same size, in a file of its own on the same disk.
    raw = _raw_db(workdir / "intent-raw.db")
    raw_lines = [e.to_json() for e in build_run("bench-intent-raw", calls, payload_bytes=200)]
    raw_commits: list[float] = []

    def raw_commit(line: bytes) -> float:
        t0 = time.perf_counter_ns()
        raw.execute("BEGIN")
        raw.execute("INSERT INTO lines (line) VALUES (?)", (line,))
        raw.execute("COMMIT")
        return float(time.perf_counter_ns() - t0)

    with tachograph.record(store, actor="bench", input=None, tools=[_write_tool]) as run:
        # back to back: the previous call's completion is usually still being committed
        run.flush()
        commits_before = store.commits
        for i in range(calls):
            fsyncs.append(fsync())
            t0 = time.perf_counter_ns()
            _write_tool(i)
            back_to_back.append(float(_BODY_STARTED[0] - t0))
        run.flush()
        commits_per_call = (store.commits - commits_before) / calls
        # isolated: the writer is idle when the call begins. Each call is followed, once its
        # completion is committed too, by one raw commit (the floor), so that both
        # see the disk of the same moment and neither shares it with another commit.
        for i in range(calls):
            run.flush()
            fsyncs_isolated.append(fsync())
            t0 = time.perf_counter_ns()
            _write_tool(calls + i)
            isolated.append(float(_BODY_STARTED[0] - t0))
            run.flush()
            raw_commits.append(raw_commit(raw_lines[i % len(raw_lines)]))
        run.output = calls
    # One commit of one event straight into the store, no writer thread: the floor.
    direct: list[float] = []
    events = list(build_run("bench-intent-direct", calls, payload_bytes=200))
    for event in events:
        fsyncs_direct.append(fsync())
        t0 = time.perf_counter_ns()
        store.append([event])
        direct.append(float(time.perf_counter_ns() - t0))
    raw.close()
    os.close(fd)
    direct_m = measure_of("SQLiteStore.append of one event (one commit)", direct, "ns")
    raw_m = measure_of("raw sqlite3 INSERT + COMMIT of one row (WAL, FULL)", raw_commits, "ns")
    subject = measure_of(
        "call of a write tool -> its body starts (back to back)", back_to_back, "ns"
    )
    baseline = measure_of("one fsync of a 100-byte write, same disk", fsyncs, "ns")
    isolated_m = measure_of("same, writer idle at the call", isolated, "ns")
    ratio = subject.median / baseline.median

    def profile_once() -> None:
        with tachograph.record(store, actor="bench", input=None, tools=[_write_tool]) as run:
            for i in range(calls):
                _write_tool(i)
            run.output = None

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
            Target("writer idle: in raw commits", isolated_m.median / raw_m.median, "<=", 1.1),
            Target("back to back: in raw commits", subject.median / raw_m.median, "<=", 1.1),
        ],
        extra={
            "calls": calls,
            "raw_commit_ns": raw_m.to_dict(),
            "isolated_ns": isolated_m.to_dict(),
            "isolated_in_fsyncs": isolated_m.median / statistics.median(fsyncs_isolated),
            "commits_per_call_back_to_back": commits_per_call,
            "one_commit_ns": direct_m.to_dict(),
            "one_commit_in_fsyncs": direct_m.median / statistics.median(fsyncs_direct),
            # against the floor the intent can reach: one commit of one event, same store
            "isolated_in_commits": isolated_m.median / direct_m.median,
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
