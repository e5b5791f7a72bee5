"""What if the store kept each payload's canonical (JCS) bytes: verification of a float run.

Issue 20's ``verify_floats`` target (>= 0.7 of the floor: read the rows, rebuild the envelope
bytes, two SHA-256) misses because the store keeps a payload as given (its key order and
``25.0``, for replay), so verification parses and re-canonicalizes every payload. This probe
measures, in one process and alternating rounds, three rates on the same kind of run:

* ``given``: ``store.verify`` of the run as the store keeps it today (payloads as given);
* ``canonical``: the same run stored with canonical payload bytes, verified as today (the
  canonical form is recomputed, and its parse is cheaper: no ``.0`` to drop);
* ``hashed``: that canonical run verified with the payload check replaced by one SHA-256 of
  the stored bytes, which is sound only for bytes known to be canonical (a match proves them
  to be the recorded canonical bytes) and is what a store of canonical bytes would allow;

each against the floor measured on its own store. Not a benchmark target; run it as
``python -m bench.whatif_stored_jcs [EVENTS]``.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from tachograph.record import verify as verify_module
from tachograph.record.canonical import canonical
from tachograph.record.event import Event, new_event
from tachograph.store import SQLiteStore

from .record import float_payload
from .verify import float_run, floor_rate, load_events


def _canonical_run(run_id: str, n: int) -> Iterator[Event]:
    prev: str | None = None
    for seq in range(n):
        payload = float_payload(seq)
        event = new_event(
            run_id=run_id,
            seq=seq,
            type="run.started" if seq == 0 else "model.response",
            actor="bench",
            payload=payload,
            prev_hash=prev,
            checked=True,
            payload_bytes=canonical(payload),
        )
        prev = event.hash
        yield event


def _rate(store: SQLiteStore, run_id: str, n: int) -> float:
    t0 = time.perf_counter_ns()
    report = store.verify(run_id)
    if not report.ok:
        raise RuntimeError(report.render())
    return n / ((time.perf_counter_ns() - t0) / 1e9)


def main(n: int = 20_000, rounds: int = 5) -> None:
    """Print the three shares of the floor (medians of ``rounds`` alternating rounds)."""
    with tempfile.TemporaryDirectory() as tmp:
        given = SQLiteStore(Path(tmp) / "given.db")
        load_events(given, float_run("given", n))
        canon = SQLiteStore(Path(tmp) / "canonical.db")
        load_events(canon, _canonical_run("canonical", n))
        exact = verify_module._stored_digest
        shares: dict[str, list[float]] = {"given": [], "canonical": [], "hashed": []}
        for _ in range(rounds):
            shares["given"].append(_rate(given, "given", n) / floor_rate(given, "given", n))
            floor = floor_rate(canon, "canonical", n)
            shares["canonical"].append(_rate(canon, "canonical", n) / floor)
            verify_module._stored_digest = lambda salt, body, parsed=None: verify_module._salted(
                salt, body
            )
            try:
                shares["hashed"].append(_rate(canon, "canonical", n) / floor)
            finally:
                verify_module._stored_digest = exact
        given.close()
        canon.close()
    for name, values in shares.items():
        print(f"{name:10s} {statistics.median(values):.3f} of the floor  ({values})")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20_000)
