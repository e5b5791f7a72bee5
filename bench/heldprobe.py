"""What a run read whole costs and holds, for one or two versions of the library:
``python -m bench.heldprobe [--before DIR]``.

A replay holds its whole run, and the ``replay`` figure's floor is ``list(store.read(run))``.
Each sample is a new process (with ``DIR``, or this checkout's ``src``, first on
``PYTHONPATH``) that records ``--calls`` calls of the replay figure's agent into a SQLite
file of its own, then:

- reads the run whole ``--reads`` times with the collector paused, freeing the events after
  each read, and keeps the fastest read (``read_us``, microseconds an event);
- reads it once more under ``tracemalloc`` and keeps the bytes the events hold once read
  (``held_bytes``, an event), by file and line of the allocation for the largest parts
  (``parts``).

The resident set is not a measure here: a read reuses what the one before it freed.

Each round takes one sample of each version, in a new seeded order.
"""

from __future__ import annotations

import gc
import json
import statistics
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

from .common import alternating, sample_process, short_path, side_by_side_parser, versions

__all__ = ["main"]


def _child(calls: int, reads: int) -> dict[str, Any]:
    import tachograph
    from tachograph.record.bulk import collector_paused
    from tachograph.store import SQLiteStore

    from .replay import AGENT

    with tempfile.TemporaryDirectory(prefix="tachograph-heldprobe-") as tmp:
        store = SQLiteStore(Path(tmp) / "held.db")
        try:
            run_id = tachograph.record_run(AGENT, calls, store=store, actor="bench").run_id
            times: list[float] = []
            events = 0
            for _ in range(reads):
                gc.collect()
                t0 = time.perf_counter_ns()
                with collector_paused():
                    held = list(store.read(run_id))
                times.append((time.perf_counter_ns() - t0) / len(held))
                events = len(held)
                del held
            gc.collect()
            tracemalloc.start()
            before = tracemalloc.take_snapshot()
            with collector_paused():
                held = list(store.read(run_id))
            after = tracemalloc.take_snapshot()
            tracemalloc.stop()
            diff = after.compare_to(before, "lineno")
            total = sum(d.size_diff for d in diff)
            parts = [
                {
                    "where": short_path(str(d.traceback[0].filename)) + f":{d.traceback[0].lineno}",
                    "bytes_an_event": round(d.size_diff / len(held), 1),
                }
                for d in diff[:4]
            ]
            del held, before, after, diff
        finally:
            store.close()
    return {
        "events": events,
        "read_us": min(times) / 1000,
        "held_bytes": total / events,
        "parts": parts,
        "tachograph": str(Path(tachograph.__file__).parent),
    }


def main(argv: list[str] | None = None) -> int:
    parser = side_by_side_parser("python -m bench.heldprobe", __doc__, rounds=6)
    parser.add_argument(
        "--calls",
        type=int,
        default=49_999,
        help="tool calls of the run (default 49,999: 100,000 events)",
    )
    parser.add_argument("--reads", type=int, default=3, help="timed reads a sample (default 3)")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.reads < 1 or args.calls < 1:
        parser.error("--rounds, --reads and --calls must be at least 1")
    if args.child:
        print(json.dumps(_child(args.calls, args.reads)))
        return 0
    sides = versions(parser, args.before)

    def sample(src: Path) -> dict[str, Any]:
        return sample_process(
            "bench.heldprobe", src, ["--calls", str(args.calls), "--reads", str(args.reads)]
        )

    samples = alternating(sides, args.rounds, args.seed, sample, quiet=args.json)
    result: dict[str, Any] = {}
    for side, rows in samples.items():
        result[side] = {
            "samples": len(rows),
            "events": rows[0]["events"],
            "read_us": statistics.median(r["read_us"] for r in rows),
            "read_us_all": [round(r["read_us"], 3) for r in rows],
            "held_bytes": statistics.median(r["held_bytes"] for r in rows),
            "parts": rows[0]["parts"],
            "tachograph": sorted({str(r["tachograph"]) for r in rows}),
        }
    if set(samples) == {"before", "after"}:
        pairs = list(zip(samples["before"], samples["after"], strict=True))
        result["after_faster_in"] = sum(1 for b, a in pairs if a["read_us"] < b["read_us"])
    result["settings"] = {
        "rounds": args.rounds,
        "calls": args.calls,
        "reads": args.reads,
        "seed": args.seed,
    }
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"{'version':<8} {'read us/ev':>10} {'held B/ev':>10}  samples")
    for side in sides:
        r = result[side]
        print(f"{side:<8} {r['read_us']:10.3f} {r['held_bytes']:10.1f}  {r['samples']}")
        for part in r["parts"]:
            print(f"{'':<8}   {part['bytes_an_event']:8.1f} B/ev  {part['where']}")
    if "after_faster_in" in result:
        print(f"after's read faster in {result['after_faster_in']} of {args.rounds} rounds")
    events = result["after"]["events"]
    print(f"medians; a run of {events} events read whole, the fastest of {args.reads} a sample")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
