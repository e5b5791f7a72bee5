"""Why reading a run costs more per event as the run grows (from 5,000 events on, mostly the
cyclic collector).

A probe, not a figure of the suite: ``python -m bench.readprobe [--rounds N] [--json]``.
The ``replay`` figure's baseline is ``list(store.read(run))`` and freeing the events, and its
cost per event grows from 5,000 to 50,000 events by more than the replay's does (a replay
reads with the collector paused). This probe reads runs of the replay figure's agent (500,
5,000 and 50,000 events, in one SQLite file) three ways, in alternating order each round:

- ``as_is``: ``list(store.read(run))``, the collector on;
- ``collector_off``: the same with the collector off for the read (the bound);
- ``paused_per_page``: a store whose ``read`` builds each page's events with the collector
  paused, then yields them (a change tried and not taken: see docs/performance.md).

Every read is followed by freeing its events, inside the timing. A round reads each run
``10,000 // length`` times (at least once) each way.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import json
import statistics
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from tachograph.record.bulk import collector_paused
from tachograph.record.event import Event
from tachograph.store import SQLiteStore
from tachograph.store.sqlite import _PAGE

from .common import load_average, probe_lengths, probe_parser
from .replay import record_lengths

__all__ = ["main"]

LENGTHS = (500, 5_000, 50_000)
VARIANTS = ("as_is", "collector_off", "paused_per_page")


class _PausedPerPage(SQLiteStore):
    """``SQLiteStore`` whose ``read`` builds a page's events with the collector paused."""

    def read(
        self,
        run_id: str,
        *,
        tenant: str | None = None,
        from_seq: int = 0,
        decode: bool = True,
    ) -> Iterator[Event]:
        events = super().read(run_id, tenant=tenant, from_seq=from_seq, decode=decode)
        # The store's own read, a page at a time: taking a page's first event fetches the
        # page (outside the pause, as before); the rest of its events are built under it.
        for first in events:
            with collector_paused():
                page = [first, *itertools.islice(events, _PAGE - 1)]
            yield from page


def _read_us(store: SQLiteStore, run_id: str, events: int, *, collector: bool) -> float:
    """Microseconds an event of reading ``run_id`` whole and freeing it."""
    with contextlib.nullcontext() if collector else collector_paused():
        t0 = time.perf_counter_ns()
        decoded = list(store.read(run_id))
        count = len(decoded)
        del decoded
        elapsed = time.perf_counter_ns() - t0
    if count != events:
        raise RuntimeError(f"read {count} events of a run of {events}")
    return elapsed / events / 1000


def probe(workdir: Path, rounds: int, lengths: Sequence[int] = LENGTHS) -> dict[str, Any]:
    """Record one run of each length, then read each ``rounds`` times three ways."""
    if not gc.isenabled():
        raise RuntimeError("the cyclic collector is off in this process: nothing to compare")
    path = workdir / "read.db"
    with contextlib.ExitStack() as stack:
        store = SQLiteStore(path)
        stack.callback(store.close)
        paused = _PausedPerPage(path)
        stack.callback(paused.close)
        runs = record_lengths(store, lengths)
        for run_id in runs.values():
            if list(paused.read(run_id)) != list(store.read(run_id)):
                raise RuntimeError("the paused-per-page read differs from the store's")
        times: dict[str, dict[int, list[float]]] = {v: {n: [] for n in runs} for v in VARIANTS}
        for r in range(rounds):
            for n, run_id in runs.items():
                # short runs more often, so that each length gets about as many events read
                for _ in range(max(1, 10_000 // n)):
                    for variant in VARIANTS if r % 2 == 0 else tuple(reversed(VARIANTS)):
                        chosen = paused if variant == "paused_per_page" else store
                        us = _read_us(chosen, run_id, n, collector=variant != "collector_off")
                        times[variant][n].append(us)
    if not gc.isenabled():  # pragma: no cover - collector_paused restores it
        raise RuntimeError("the collector was left off")
    out: dict[str, Any] = {"lengths": list(runs), "variants": {}}
    for variant in VARIANTS:
        medians = {n: statistics.median(times[variant][n]) for n in runs}
        ordered = [medians[n] for n in runs]
        out["variants"][variant] = {
            "us_per_event": {str(n): round(us, 3) for n, us in medians.items()},
            "growth_to_next": [
                round(later / earlier, 3) for earlier, later in itertools.pairwise(ordered)
            ],
        }
    return out


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run the probe and print it (as JSON with ``--json``)."""
    parser = probe_parser(
        "python -m bench.readprobe",
        __doc__,
        rounds=16,
        rounds_help="rounds (see above)",
        lengths=LENGTHS,
    )
    args = parser.parse_args(argv)
    lengths = probe_lengths(parser, args)
    with tempfile.TemporaryDirectory(prefix="tachograph-readprobe-", dir=args.dir) as tmp:
        before = load_average()
        found = probe(Path(tmp), args.rounds, lengths)
        result = {"rounds": args.rounds, "load_average": before, **found}
        result["load_average_after"] = load_average()
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print(f"list(store.read(run)) and freeing it, {args.rounds} alternating rounds (medians):")
        for variant, row in result["variants"].items():
            per = " / ".join(f"{us:.2f}" for us in row["us_per_event"].values())
            growth = ", ".join(f"{g:.2f}x" for g in row["growth_to_next"])
            print(f"  {variant:16s} {per} us an event; growth to the next length {growth}")
        print(f"  (runs of {' / '.join(map(str, result['lengths']))} events)")
        print(f"load average {before} -> {result['load_average_after']}")
    return result


if __name__ == "__main__":
    main()
