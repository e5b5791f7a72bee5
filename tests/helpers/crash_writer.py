"""Writer processes for tests/test_store_crash.py, killed with SIGKILL at random moments.

Run with ``sys.executable``. This process imports tachograph once, then forks one writer per
``spawn`` command, so that hundreds of kill cycles take seconds, not minutes. It never opens
the store itself: each forked writer opens its own connection, reads the run's head, and
appends until it is killed. One message per line on stdout:

    parent -> here   ``spawn <db> <run_id> <max_batch> <seed>``   (on stdin)
    here -> parent   ``pid <pid>``
    writer -> parent ``ready <pid> <next_seq>``                   store open, head read
    writer -> parent ``ack <pid> <run_id> <seq> <hash>``          only after append() returned
    writer -> parent ``error <pid> <repr of the traceback>``      then exit status 1
    parent -> here   ``reap <pid>``
    here -> parent   ``reaped <pid> <signal or 0> <exit status or -1>``
"""

from __future__ import annotations

import os
import random
import sys
import traceback

from tachograph.record.event import new_event
from tachograph.store import SQLiteStore


def say(line: str) -> None:
    # one write(2) per message: atomic on a pipe, and nothing left in a buffer at SIGKILL
    os.write(1, (line + "\n").encode())


def write_until_killed(db: str, run_id: str, max_batch: int, seed: int) -> None:
    rng = random.Random(seed)
    pid = os.getpid()
    store = SQLiteStore(db)
    head = store.head(run_id)
    seq, prev = (0, None) if head is None else (head[0] + 1, head[1])
    say(f"ready {pid} {seq}")
    while True:
        batch = []
        for _ in range(rng.randint(1, max_batch)):
            event = new_event(
                run_id=run_id,
                seq=seq,
                type="run.started" if seq == 0 else "decision",
                actor="crash-writer",
                payload={"pid": pid, "seq": seq, "pad": "x" * rng.randint(0, 3000)},
                prev_hash=prev,
            )
            batch.append(event)
            seq, prev = seq + 1, event.hash
        store.append(batch)
        for event in batch:
            say(f"ack {pid} {run_id} {event.seq} {event.hash}")


def main() -> None:
    for line in sys.stdin:
        command, *args = line.split()
        if command == "spawn":
            db, run_id, max_batch, seed = args
            sys.stdout.flush()
            pid = os.fork()
            if pid == 0:  # the writer: never returns to this loop
                status = 1
                try:
                    write_until_killed(db, run_id, int(max_batch), int(seed))
                except BaseException:
                    say(f"error {os.getpid()} {traceback.format_exc()!r}")
                finally:
                    os._exit(status)
            say(f"pid {pid}")
        elif command == "reap":
            pid = int(args[0])
            _, status = os.waitpid(pid, 0)
            signal = os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0
            code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else -1
            say(f"reaped {pid} {signal} {code}")
        else:
            say(f"error {os.getpid()} {'unknown command ' + line!r}")


if __name__ == "__main__":
    main()
