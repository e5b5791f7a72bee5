"""One of several processes writing one store at once, for tests/test_store_concurrency.py.

Usage: ``append_worker.py <db> <role> <run_id> <count> <worker> <go_file> <stop_file>``

Roles:

* ``own``: the only writer of ``run_id``: appends ``count`` events in batches of 1-5.
* ``shared``: one of several writers of ``run_id``: reads the head, appends one event, and on a
  refused append (another writer got there first) reads the head again and retries.
* ``open``: once the go file exists, creates-or-opens the stores ``<db>.0`` to ``<db>.7`` in
  turn (none exists yet: several processes set each one up at the same moment) and appends
  ``count`` events to its own run in each.
* ``read``: verifies and lists runs in a loop until the stop file exists.

Prints ``ready`` once the store is open (except ``open``), waits for the go file, works, and
prints one JSON summary line. Any error other than a refused append in ``shared`` propagates:
the process exits non-zero with the traceback on stderr, which the test shows.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time

from tachograph.errors import DuplicateConflict, SequenceConflict
from tachograph.record.event import new_event
from tachograph.store import SQLiteStore, Store

OPEN_STORES = 8


def wait_for(path: str) -> None:
    while not os.path.exists(path):
        time.sleep(0.001)


def append_own(store: Store, run_id: str, count: int, worker: int) -> dict[str, int]:
    rng = random.Random(worker)
    seq, prev = 0, None
    while seq < count:
        batch = []
        for _ in range(min(rng.randint(1, 5), count - seq)):
            event = new_event(
                run_id=run_id,
                seq=seq,
                type="run.started" if seq == 0 else "decision",
                actor=f"worker-{worker}",
                payload={"worker": worker, "i": seq},
                prev_hash=prev,
            )
            batch.append(event)
            seq, prev = seq + 1, event.hash
        store.append(batch)
    return {"written": seq}


def append_shared(store: Store, run_id: str, count: int, worker: int) -> dict[str, int]:
    refused = {"SequenceConflict": 0, "DuplicateConflict": 0}
    written = 0
    while written < count:
        head = store.head(run_id)
        seq, prev = (0, None) if head is None else (head[0] + 1, head[1])
        event = new_event(
            run_id=run_id,
            seq=seq,
            type="run.started" if seq == 0 else "decision",
            actor=f"worker-{worker}",
            payload={"worker": worker, "i": written},
            prev_hash=prev,
        )
        try:
            store.append([event])
        except (SequenceConflict, DuplicateConflict) as exc:
            # Another writer took this seq first. A stale head leads to (run, seq) being
            # taken with other content: DuplicateConflict; a moved head: SequenceConflict.
            refused[type(exc).__name__] += 1
            continue
        written += 1
    return {"written": written, **refused}


def read_loop(store: Store, stop_file: str) -> dict[str, int]:
    rounds = events = 0
    while not os.path.exists(stop_file):
        for report in store.verify_all():
            if not report.ok:
                raise AssertionError(report.render())
            events += report.events
        store.runs()
        rounds += 1
    return {"rounds": rounds, "events_verified": events}


def main() -> None:
    db, role, run_id, count_text, worker_text, go_file, stop_file = sys.argv[1:8]
    count, worker = int(count_text), int(worker_text)
    if role == "open":
        print("ready", flush=True)
        wait_for(go_file)
        for n in range(OPEN_STORES):
            store = SQLiteStore(f"{db}.{n}")
            result = append_own(store, run_id, count, worker)
            store.close()
    else:
        store = SQLiteStore(db)
        print("ready", flush=True)
        wait_for(go_file)
        if role == "own":
            result = append_own(store, run_id, count, worker)
        elif role == "shared":
            result = append_shared(store, run_id, count, worker)
        elif role == "read":
            result = read_loop(store, stop_file)
        else:
            raise SystemExit(f"unknown role {role!r}")
        store.close()
    print(json.dumps({"worker": worker, "role": role, **result}), flush=True)


if __name__ == "__main__":
    main()
