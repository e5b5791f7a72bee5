"""The writer's part of a durable intent, for two versions of the library side by side:
``python -m bench.claimprobe --before DIR``.

A write tool's intent is made durable on the caller's thread: the recorder builds the event,
the writer claims the store for it (``Writer.claim``), then appends it with whatever was
queued and applies the seal bookkeeping around the store's append (``Writer.write_claimed``).
``bench.intentprobe`` times the intent against a raw commit, where a commit's noise hides a
few microseconds. This probe times the writer's part alone, on an in-memory store (no disk):

- ``claim``: from the claim to the store's append (the claim, the seal plan and its next due
  time, the hand-over to the store);
- ``after``: from the store's append to the tool's body (the store's own append, the seal
  bookkeeping after it, the way back to the body);

and, as the yardstick measured in the same process, a read tool's way from its call to the
writer's queue (``Writer.submit`` entered): building its event, the same work as a write
tool's way to its claim (``Writer.claim`` entered), and the read tool's way from there to its
body. Each call comes after a flush and a short sleep (the writer idle, the caches cooled as
after an fsync wait), a write and a read tool in turn. The figure is ``claim`` over that
yardstick, so a sample on a slower moment of the machine moves both. A sample fails if a
write tool's claim was refused (its intent then goes through the writer thread, which is not
what this probe times) or a read tool's event was claimed.

Each sample is a new process (with ``DIR``, or this checkout's ``src``, first on
``PYTHONPATH``) that takes the medians over ``--calls`` calls of each tool; each round takes
one sample of each version, in a new seeded order. It wraps ``Writer.claim`` and
``Writer.submit`` and subclasses ``MemoryStore`` to note the moments, the same in both.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Any

from .common import (
    alternating,
    load_average,
    sample_process,
    side_by_side_parser,
    versions,
    warn_uneven_helpers,
)

__all__ = ["main", "summary"]

SLEEP_S = 0.0002
"""The sleep before each call, after its flush: about one fsync of a fast disk."""

PARTS = ("write_to_claim", "claim", "after", "read_to_submit", "read_after")
"""What a sample gives, in us (medians): a write tool's call to its claim, the claim to the
store's append, the append to the body; a read tool's call to its submit, the submit to the
body."""


def _child(calls: int) -> dict[str, Any]:
    import tachograph
    from tachograph.capture import recorder
    from tachograph.record.compiled import NATIVE
    from tachograph.store import MemoryStore

    now = time.perf_counter_ns
    marks: dict[str, int] = {}
    claim, submit = recorder.Writer.claim, recorder.Writer.submit

    def marked_claim(self: Any, event: Any) -> Any:
        marks.setdefault("claim", now())
        ticket = claim(self, event)
        if ticket is not None:  # None: refused, the event goes to the writer thread instead
            marks.setdefault("claimed", 1)
        return ticket

    def marked_submit(self: Any, event: Any) -> Any:
        marks.setdefault("submit", now())
        return submit(self, event)

    recorder.Writer.claim = marked_claim  # type: ignore[method-assign]
    recorder.Writer.submit = marked_submit  # type: ignore[method-assign]

    class Store(MemoryStore):
        def append(self, events: Any, *, durable: bool = True, **options: Any) -> Any:
            marks.setdefault("store", now())
            return super().append(events, durable=durable, **options)

    @tachograph.tool(effect="write", name="claimprobe_write")
    def write(i: int) -> int:
        marks["body"] = now()
        return i

    @tachograph.tool(effect="read", name="claimprobe_read")
    def read(i: int) -> int:
        marks["body"] = now()
        return i

    parts: dict[str, list[float]] = {part: [] for part in PARTS}
    with tachograph.record(Store(), actor="claimprobe", input=None, tools=[write, read]) as run:
        for i in range(calls + 50):  # the first 50 of each warm the imports and the thread
            for tool in (write, read) if i % 2 == 0 else (read, write):
                run.flush()
                time.sleep(SLEEP_S)
                marks.clear()
                start = now()
                tool(i)
                if i < 50:
                    continue
                never = float("inf")
                if tool is write:
                    claimed = marks.get("claimed") == 1
                    if not claimed or not (
                        start < marks.get("claim", never) < marks.get("store", never)
                        and marks.get("store", never) < marks.get("body", never)
                    ):
                        raise RuntimeError("the write tool's intent was not claimed and stored")
                    parts["write_to_claim"].append(marks["claim"] - start)
                    parts["claim"].append(marks["store"] - marks["claim"])
                    parts["after"].append(marks["body"] - marks["store"])
                else:
                    if "claim" in marks or not (
                        start < marks.get("submit", never) < marks.get("body", never)
                    ):
                        raise RuntimeError("the read tool's request was not queued")
                    parts["read_to_submit"].append(marks["submit"] - start)
                    parts["read_after"].append(marks["body"] - marks["submit"])
        run.output = calls
    out: dict[str, Any] = {part: statistics.median(v) / 1000 for part, v in parts.items()}
    out["ratio"] = out["claim"] / out["read_to_submit"]
    out["tachograph"] = str(Path(tachograph.__file__).parent)
    out["compiled"] = NATIVE is not None
    return out


def _sample(src: Path, calls: int) -> dict[str, Any]:
    return sample_process("bench.claimprobe", src, ["--calls", str(calls)])


def summary(samples: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Each version's median of each part (us) and of the ratio, the ``tachograph`` its
    samples imported and whether their compiled helpers loaded; with two versions, in how
    many rounds (paired by round) the second's ratio was the lower."""
    out: dict[str, Any] = {}
    for side, rows in samples.items():
        out[side] = {
            "samples": len(rows),
            "ratio": statistics.median(r["ratio"] for r in rows),
            **{f"{part}_us": statistics.median(r[part] for r in rows) for part in PARTS},
            "tachograph": sorted({str(r.get("tachograph")) for r in rows}),
            "compiled": sorted({bool(r.get("compiled")) for r in rows}),
        }
    if set(samples) == {"before", "after"}:
        pairs = zip(samples["before"], samples["after"], strict=True)
        out["after_lower_in"] = sum(1 for b, a in pairs if a["ratio"] < b["ratio"])
    return out


def main(argv: list[str] | None = None) -> int:
    parser = side_by_side_parser("python -m bench.claimprobe", __doc__, rounds=8)
    parser.add_argument("--calls", type=int, default=2000, help="calls of each tool a sample")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.calls < 10:
        parser.error("--rounds must be at least 1 and --calls at least 10")
    if args.child:
        print(json.dumps(_child(args.calls)))
        return 0
    sides = versions(parser, args.before)

    def sample(src: Path) -> dict[str, Any]:
        return _sample(src, args.calls)

    samples = alternating(sides, args.rounds, args.seed, sample, quiet=args.json)
    result = summary(samples)
    result["settings"] = {"rounds": args.rounds, "calls": args.calls, "seed": args.seed}
    result["load_average_at_end"] = load_average()
    if args.json:
        print(json.dumps(result))
        return 0
    head = "  ".join(f"{part:>14}" for part in PARTS)
    print(f"{'version':<8} {'ratio':>6}  {head}  (us, medians of the samples' medians)")
    for side in sides:
        r = result[side]
        cells = "  ".join(f"{r[f'{part}_us']:14.2f}" for part in PARTS)
        print(f"{side:<8} {r['ratio']:6.3f}  {cells}")
    if "after_lower_in" in result:
        print(f"after's ratio lower in {result['after_lower_in']} of {args.rounds} rounds")
    warn_uneven_helpers(result, sides)
    print(
        f"seed {args.seed}, {args.calls} calls of each tool a sample, "
        f"load average at the end {result['load_average_at_end']}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
