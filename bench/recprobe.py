"""Record one run of N events in a fresh interpreter; print its peak memory as JSON.

Run by :mod:`bench.record` as a separate process, so that nothing else the suite allocated is
counted: ``python bench/recprobe.py STORE.db EVENTS``. The agent calls a read tool
(EVENTS - 2) / 2 times, each call two events through the decorators, into a SQLite store
with the library's defaults.
"""

from __future__ import annotations

import json
import sys
import time

import tachograph
from tachograph.store import SQLiteStore

try:
    from bench.memprobe import peak_rss_kb
except ImportError:  # run as a script from the bench directory
    from memprobe import peak_rss_kb  # type: ignore[import-not-found,no-redef]


@tachograph.tool(effect="read", name="bench_read")
def _read(i: int) -> dict[str, int]:
    return {"item": i, "stock": i % 97}


def _agent(calls: int) -> int:
    total = 0
    for i in range(calls):
        total += _read(i)["stock"]
    return total


def main(path: str, events: int) -> None:
    """Record the run and print the figures."""
    store = SQLiteStore(path)
    before = peak_rss_kb()
    calls = max(1, (events - 2) // 2)
    t0 = time.perf_counter()
    result = tachograph.record_run(_agent, calls, store=store, actor="bench")
    seconds = time.perf_counter() - t0
    peak = peak_rss_kb()
    recorded = store.run_info(result.run_id).events
    store.close()
    print(
        json.dumps(
            {
                "events": recorded,
                "rss_before_kb": before,
                "peak_rss_kb": peak,
                "growth_kb": peak - before,
                "seconds": round(seconds, 2),
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
