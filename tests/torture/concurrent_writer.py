"""One of several writer processes of tests/torture/test_concurrent_writers.py.

``python concurrent_writer.py STORE_URL WRITER N SIDE_FILE SHARED_RUN``: waits for a line on
stdin (so that every writer starts at once), then makes ``N`` appends to its own run (a
``Recorder``, durability ``every``: an append returns once the event is committed) and ``N``
to the shared run (read the head, append the next event, and on a conflict with another
writer read the head again), in a random interleaving. For every append it writes one line
to ``SIDE_FILE``: ``run seq event_id invoke_ns ack_ns``, both times from CLOCK_MONOTONIC
(``time.monotonic_ns``, one clock for every process of the machine), the first taken before
the append is invoked and the second once it has returned (acknowledged).
"""

from __future__ import annotations

import random
import sys
import time

from tachograph.capture.recorder import Recorder, close_writer
from tachograph.errors import DuplicateConflict, SequenceConflict
from tachograph.record.event import new_event
from tachograph.store import open_store


def main() -> None:
    url, writer, count, side_path, shared = sys.argv[1:6]
    n = int(count)
    store = open_store(url)
    rng = random.Random(int(writer))
    own = f"own-{writer}"
    side = open(side_path, "a", encoding="utf-8")  # noqa: SIM115 - open for the whole run

    def acknowledged(run: str, seq: int, event_id: str, invoked: int) -> None:
        side.write(f"{run} {seq} {event_id} {invoked} {time.monotonic_ns()}\n")
        side.flush()

    sys.stdin.readline()  # the start signal
    recorder = Recorder(store, run_id=own, actor=f"writer-{writer}", durability="every")
    invoked = time.monotonic_ns()
    event = recorder.append("run.started", {"input": writer, "env": {}})
    acknowledged(own, event.seq, event.event_id, invoked)
    plan = ["own"] * n + ["shared"] * n
    rng.shuffle(plan)
    done = {"own": 0, "shared": 0}
    for target in plan:
        i = done[target]
        done[target] += 1
        payload = {"name": "step", "chosen": {"writer": int(writer), "i": i}}
        invoked = time.monotonic_ns()
        if target == "own":
            event = recorder.append("decision", payload)
            acknowledged(own, event.seq, event.event_id, invoked)
            continue
        while True:
            head = store.head(shared)
            assert head is not None
            event = new_event(
                run_id=shared,
                seq=head[0] + 1,
                type="decision",
                actor=f"writer-{writer}",
                payload=payload,
                prev_hash=head[1],
            )
            try:
                store.append([event])
            except (SequenceConflict, DuplicateConflict):
                continue  # another writer took that seq: read the head again
            break
        acknowledged(shared, event.seq, event.event_id, invoked)
    invoked = time.monotonic_ns()
    event = recorder.append("run.finished", {"status": "ok"})
    recorder.flush()
    acknowledged(own, event.seq, event.event_id, invoked)
    close_writer(store)
    store.close()
    side.close()


if __name__ == "__main__":
    main()
