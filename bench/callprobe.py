"""The ``tool_call`` figure's ratio alone, for two versions of the library side by side:
``python -m bench.callprobe --before DIR``.

``bench.ab`` runs the whole record module for one sample of each version a round; three of
its comparisons of one change, six rounds each, gave -0.26, -0.23 and +0.04 in this ratio
(the last on the change as reviewed, which this probe measures the same). This probe
measures only what the figure does: recorded read-tool calls (``bench.record.timed_calls``,
runs of ``--calls`` calls) against the floor of building their two events
(``bench.record.tool_call_floor``). Each sample is a new process (with ``DIR``, or this
checkout's ``src``, first on ``PYTHONPATH``) that takes the medians of seven runs and seven
floors; each round takes one sample of each version, in a new seeded order. Each sample
names the ``tachograph`` it imported and whether its compiled helpers loaded (build the
older version's ``native.c`` alike). Without ``--before`` it measures this checkout alone.

With ``--long N``, each sample process also times three runs of ``N`` calls among its seven
(the figure's long runs, spread among the short ones as the figure spreads them) and gives
the figure's second value, the growth: the median long run's cost a call over the median
short run's.
"""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path
from typing import Any

from .common import alternating, sample_process, side_by_side_parser, versions, warn_uneven_helpers

__all__ = ["main", "summary"]

PER_PROCESS = 7
"""Runs and floors a sample process times, of which it reports the medians."""


LONG_RUNS = 3
"""Long runs a sample process times with ``--long`` (after its second, fourth and sixth
short runs)."""


def _child(calls: int, long: int = 0) -> dict[str, Any]:
    import tachograph
    from tachograph.record.compiled import NATIVE

    from .common import loop_sample
    from .record import timed_calls, tool_call_floor

    floor = loop_sample(tool_call_floor(), calls)
    timed_calls(max(100, calls // 2))  # warm up: imports, the writer thread, the caches
    runs: list[float] = []
    floors: list[float] = []
    longs: list[float] = []
    for i in range(PER_PROCESS):
        runs.append(timed_calls(calls))
        floors.append(floor())
        if long and i % 2 == 1 and len(longs) < LONG_RUNS:
            longs.append(timed_calls(long))
    call, base = statistics.median(runs), statistics.median(floors)
    out = {
        "call_ns": call,
        "floor_ns": base,
        "ratio": call / base,
        "tachograph": str(Path(tachograph.__file__).parent),
        "compiled": NATIVE is not None,
    }
    if longs:
        out["long_ns"] = statistics.median(longs)
        out["growth"] = out["long_ns"] / call
    return out


def _sample(src: Path, calls: int, long: int = 0) -> dict[str, Any]:
    return sample_process("bench.callprobe", src, ["--calls", str(calls), "--long", str(long)])


def _quartiles(values: list[float]) -> tuple[float, float]:
    if len(values) < 2:
        return values[0], values[0]
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[0], q[2]


def summary(samples: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Each version's median ratio, its quartiles, the medians of the call and floor (us),
    the ``tachograph`` its samples imported and whether their compiled helpers loaded; with
    two versions, in how many rounds (paired by round) the second's ratio was the lower.
    Samples with long runs add the same for the growth."""
    out: dict[str, Any] = {}
    for side, rows in samples.items():
        ratios = [r["ratio"] for r in rows]
        low, high = _quartiles(ratios)
        out[side] = {
            "samples": len(rows),
            "ratio": statistics.median(ratios),
            "ratio_quartiles": [low, high],
            "call_us": statistics.median(r["call_ns"] for r in rows) / 1000,
            "floor_us": statistics.median(r["floor_ns"] for r in rows) / 1000,
            "tachograph": sorted({str(r.get("tachograph")) for r in rows}),
            "compiled": sorted({bool(r.get("compiled")) for r in rows}),
        }
        if rows and all("growth" in r for r in rows):
            growths = [r["growth"] for r in rows]
            out[side]["growth"] = statistics.median(growths)
            out[side]["growth_quartiles"] = list(_quartiles(growths))
            out[side]["long_us"] = statistics.median(r["long_ns"] for r in rows) / 1000
    if set(samples) == {"before", "after"}:
        pairs = list(zip(samples["before"], samples["after"], strict=True))
        out["after_lower_in"] = sum(1 for b, a in pairs if a["ratio"] < b["ratio"])
        if "growth" in out["before"] and "growth" in out["after"]:
            out["after_growth_lower_in"] = sum(1 for b, a in pairs if a["growth"] < b["growth"])
    return out


def main(argv: list[str] | None = None) -> int:
    parser = side_by_side_parser("python -m bench.callprobe", __doc__, rounds=20)
    parser.add_argument("--calls", type=int, default=2000, help="calls a run (default 2000)")
    parser.add_argument(
        "--long", type=int, default=0, help="calls a long run, for the growth (default: none)"
    )
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.calls < 100:
        parser.error("--rounds must be at least 1 and --calls at least 100")
    if args.long and args.long < args.calls:
        parser.error("--long must be at least --calls")
    if args.child:
        print(json.dumps(_child(args.calls, args.long)))
        return 0
    sides = versions(parser, args.before)

    def sample(src: Path) -> dict[str, Any]:
        return _sample(src, args.calls, args.long)

    samples = alternating(sides, args.rounds, args.seed, sample, quiet=args.json)
    result = summary(samples)
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    result["settings"] = {
        "rounds": args.rounds,
        "calls": args.calls,
        "long": args.long,
        "seed": args.seed,
    }
    result["load_average_at_end"] = load
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"{'version':<8} {'ratio':>7} {'quartiles':>15} {'call us':>9} {'floor us':>9}  samples")
    for side in sides:
        r = result[side]
        low, high = r["ratio_quartiles"]
        spread = f"{low:.3f}-{high:.3f}"
        print(
            f"{side:<8} {r['ratio']:7.3f} {spread:>15} {r['call_us']:9.2f} "
            f"{r['floor_us']:9.2f}  {r['samples']}"
        )
    if "after_lower_in" in result:
        print(f"after's ratio lower in {result['after_lower_in']} of {args.rounds} rounds")
    if args.long:
        head = f"{'version':<8} {'growth':>7} {'quartiles':>15} {'long us':>9}"
        print(f"{head}  (runs of {args.long} calls)")
        for side in sides:
            r = result[side]
            low, high = r["growth_quartiles"]
            print(f"{side:<8} {r['growth']:7.3f} {f'{low:.3f}-{high:.3f}':>15} {r['long_us']:9.2f}")
        if "after_growth_lower_in" in result:
            lower = result["after_growth_lower_in"]
            print(f"after's growth lower in {lower} of {args.rounds} rounds")
    warn_uneven_helpers(result, sides)
    print(f"seed {args.seed}, runs of {args.calls} calls, load average at the end {load}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
