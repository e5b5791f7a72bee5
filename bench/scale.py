"""A store grown to a million events against the same store measures at ten thousand, and the
memory of verifying every run of each."""

from __future__ import annotations

import functools
import os
import random
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tachograph.record.event import Event
from tachograph.store import SQLiteStore

from .common import (
    Figure,
    Measure,
    Settings,
    Target,
    build_run,
    interleaved,
    measure_of,
    remove_sqlite,
    run_probe,
    scaled,
)

__all__ = ["figures"]

PAYLOAD_BYTES = 1000
SMALL, LARGE = 10_000, 1_000_000
RUNS_PAGE = 20
"""The page of ``runs(limit=...)`` measured, or the small store's every run when it holds fewer."""
MEMPROBE = Path(__file__).with_name("memprobe.py")


def _grow(path: Path, total: int, run_len: int) -> dict[str, Any]:
    """Fill a new store with ``total`` events in runs of ``run_len``, ten runs per append."""
    remove_sqlite(path)
    store = SQLiteStore(path)
    event_bytes = 0
    pending: list[Event] = []
    t0 = time.perf_counter()
    runs = max(1, total // run_len)
    for r in range(runs):
        events = list(build_run(f"grown-{r:07d}", run_len, payload_bytes=PAYLOAD_BYTES))
        if r == 0:
            # Every run has the same shape and fixed-width ids and times, so every run's
            # JSONL export has the same length: measure the first one.
            run_bytes = sum(len(event.to_json()) + 1 for event in events)
        event_bytes += run_bytes
        pending.extend(events)
        if len(pending) >= 10 * run_len or r == runs - 1:
            store.append(pending)
            pending = []
    seconds = time.perf_counter() - t0
    store.close()
    with sqlite3.connect(path) as db:  # fold the WAL into the file before measuring its size
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    size = sum(os.path.getsize(f"{path}{s}") for s in ("", "-wal") if os.path.exists(f"{path}{s}"))
    return {
        "events": runs * run_len,
        "runs": runs,
        "event_bytes": event_bytes,
        "file_bytes": size,
        "file_to_event_bytes": size / event_bytes,
        "build_seconds": round(seconds, 2),
        "build_events_per_s": round(runs * run_len / seconds),
    }


def _repeat(measure: Callable[[_Probe], float], probe: _Probe, times: int) -> list[float]:
    """One measure taken ``times`` times on one probe (what the profile of a miss runs)."""
    return [measure(probe) for _ in range(times)]


class _Probe:
    """The store-level measures taken on one store."""

    def __init__(self, path: Path, runs: int, run_len: int, seed: int, page: int) -> None:
        self.store = SQLiteStore(path)
        self.runs = runs
        self.run_len = run_len
        self.page = page
        self.rng = random.Random(seed)
        self.appended = 0
        # the runs this probe appends carry a token of its own: several probes of one store
        # (the measures, then the profile of the worst, a store kept in --dir) never append
        # a run id twice
        self.tag = os.urandom(4).hex()

    def _run(self) -> str:
        return f"grown-{self.rng.randrange(self.runs):07d}"

    def append(self) -> float:
        """Seconds per event to append a new run in batches of 100 (prebuilt events)."""
        run_id = f"appended-{self.tag}-{self.appended:05d}"
        events = list(build_run(run_id, self.run_len, payload_bytes=1000))
        self.appended += 1
        t0 = time.perf_counter_ns()
        for start in range(0, len(events), 100):
            self.store.append(events[start : start + 100])
        return (time.perf_counter_ns() - t0) / len(events)

    def verify(self) -> float:
        run = self._run()
        t0 = time.perf_counter_ns()
        report = self.store.verify(run)
        elapsed = time.perf_counter_ns() - t0
        if not report.ok:
            raise RuntimeError(report.render())
        return elapsed / report.events

    def read(self) -> float:
        run = self._run()
        t0 = time.perf_counter_ns()
        n = sum(1 for _ in self.store.read(run))
        return (time.perf_counter_ns() - t0) / n

    def head(self) -> float:
        runs = [self._run() for _ in range(200)]
        t0 = time.perf_counter_ns()
        for run in runs:
            self.store.head(run)
        return (time.perf_counter_ns() - t0) / len(runs)

    def run_info(self) -> float:
        runs = [self._run() for _ in range(200)]
        t0 = time.perf_counter_ns()
        for run in runs:
            self.store.run_info(run)
        return (time.perf_counter_ns() - t0) / len(runs)

    def runs_page(self) -> float:
        t0 = time.perf_counter_ns()
        for _ in range(20):
            self.store.runs(limit=self.page)
        return (time.perf_counter_ns() - t0) / 20


_MEASURES: dict[str, tuple[str, Callable[[_Probe], float], int]] = {
    "append": ("append a new run, 100 per batch (ns/event)", _Probe.append, 5),
    "verify": ("verify one run (ns/event)", _Probe.verify, 9),
    "read": ("read + decode one run (ns/event)", _Probe.read, 9),
    "head": ("head() of a run (ns/call)", _Probe.head, 9),
    "run_info": ("run_info() (ns/call)", _Probe.run_info, 9),
    "runs_page": ("runs(limit=N), N = min(20, small store's runs) (ns/call)", _Probe.runs_page, 9),
}


def _memory(path: Path) -> dict[str, Any]:
    """Peak RSS of ``verify_all`` over a store, in a fresh interpreter."""
    return run_probe(MEMPROBE, path)


def figures(settings: Settings) -> list[Figure]:
    """The growth figure and the memory figure."""
    started = time.perf_counter()
    workdir = Path(settings.workdir) / "scale"
    workdir.mkdir(parents=True, exist_ok=True)
    small_n = scaled(SMALL, settings.scale, minimum=20)
    large_n = scaled(LARGE, settings.scale, minimum=200)
    run_len = max(10, min(1000, small_n // 10))
    small_path, large_path = workdir / "small.db", workdir / "large.db"
    small = _grow(small_path, small_n, run_len)
    large = _grow(large_path, large_n, run_len)
    # A page of runs as large in both stores: the small one holds 10 runs at scale 1, and a
    # page of 20 there held 10, against 20 in the large store (each run a row to build: that
    # alone made the large store's page 1.25x the small one's, at the same cost a run)
    page = min(RUNS_PAGE, small["runs"])
    probes = (
        _Probe(large_path, large["runs"], run_len, 1, page),
        _Probe(small_path, small["runs"], run_len, 2, page),
    )
    rows: dict[str, Any] = {}
    worst: tuple[float, str, Measure, Measure] | None = None
    for key, (label, fn, repeats) in _MEASURES.items():
        big, little = interleaved(
            functools.partial(fn, probes[0]),
            functools.partial(fn, probes[1]),
            repeats=settings.repeats or repeats,
        )
        big_m = measure_of(f"{label}, {large['events']} events", big, "ns")
        little_m = measure_of(f"{label}, {small['events']} events", little, "ns")
        slowdown = big_m.median / little_m.median
        rows[key] = {"large": big_m.to_dict(), "small": little_m.to_dict(), "slowdown": slowdown}
        if worst is None or slowdown > worst[0]:
            worst = (slowdown, key, big_m, little_m)
    assert worst is not None
    worst_key = worst[1]
    for probe in probes:
        probe.store.close()
    grown = time.perf_counter()
    mem_small = _memory(small_path)
    mem_large = _memory(large_path)
    mem_ratio = mem_large["peak_rss_kb"] / mem_small["peak_rss_kb"]
    growth = Figure(
        key="store_growth",
        title=f"a store grown to {large['events']} events vs {small['events']}",
        subject=worst[2],
        baseline=worst[3],
        ratio=worst[0],
        ratio_label=f"worst slowdown ({worst[1]}), large / small",
        targets=[
            Target("worst slowdown of any measure", worst[0], "<=", 1.2),
            Target("file size / event bytes", large["file_to_event_bytes"], "<=", 1.5),
        ],
        extra={
            "measures": rows,
            "small_store": small,
            "large_store": large,
            "run_length": run_len,
            "runs_page": page,
            "seconds": round(grown - started, 2),
        },
        profile_fn=lambda: _repeat(
            _MEASURES[worst_key][1], _Probe(large_path, large["runs"], run_len, 3, page), 5
        ),
    )
    memory = Figure(
        key="verify_memory",
        title=f"memory of verify --all over {mem_large['events']} events",
        subject=Measure(
            f"peak RSS, verify_all over {mem_large['events']} events",
            mem_large["peak_rss_kb"] / 1024,
            "MiB",
            1,
        ),
        baseline=Measure(
            f"peak RSS, verify_all over {mem_small['events']} events",
            mem_small["peak_rss_kb"] / 1024,
            "MiB",
            1,
        ),
        ratio=mem_ratio,
        ratio_label="peak RSS large / small",
        targets=[Target("peak RSS large / small", mem_ratio, "<=", 1.2)],
        extra={
            "small": mem_small,
            "large": mem_large,
            "seconds": round(time.perf_counter() - grown, 2),
        },
    )
    return [growth, memory]
