"""Verify every run of a store in a fresh interpreter; print peak memory as JSON.

Run by :mod:`bench.scale` as a separate process, so that nothing else the suite allocated is
counted: ``python bench/memprobe.py STORE.db``.
"""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path

from tachograph.store import SQLiteStore


def peak_rss_kb() -> int:
    """This process's peak resident set, in KiB.

    ``VmHWM`` belongs to the process image: ``ru_maxrss`` is not used where ``VmHWM`` exists,
    because Linux carries it over from the parent across fork and exec.
    """
    status = Path("/proc/self/status")
    if status.exists():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak // 1024 if sys.platform == "darwin" else peak


def main(path: str) -> None:
    """Verify all runs of the store at ``path`` and print the figures."""
    store = SQLiteStore(path, create=False)
    before = peak_rss_kb()
    events = runs = failed = 0
    t0 = time.perf_counter()
    for report in store.verify_all():
        events += report.events
        runs += 1
        failed += not report.ok
    seconds = time.perf_counter() - t0
    peak = peak_rss_kb()
    print(
        json.dumps(
            {
                "events": events,
                "runs": runs,
                "failed_runs": failed,
                "rss_before_kb": before,
                "peak_rss_kb": peak,
                "growth_kb": peak - before,
                "seconds": round(seconds, 2),
                "events_per_s": round(events / seconds) if seconds else None,
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1])
