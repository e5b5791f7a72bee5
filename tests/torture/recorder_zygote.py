"""Recording processes for the kill tests, forked from one parent that imported tachograph.

Each ``spawn`` forks a child that records one run through the public API (``tg.record``)
under a durability policy and says ``ack <run_id> <count>`` once the first ``count`` events
of the run are acknowledged durable: after each event under ``every``, after each explicit
``flush()`` under ``effects`` and ``batch``. The test kills the child with SIGKILL at a random
moment. Messages, one ``write(2)`` each (atomic on a pipe, nothing buffered at SIGKILL):

    test -> here   ``spawn <db> <run_id> <policy> <seed>``
    here -> test   ``pid <pid>``
    child -> test  ``ack <run_id> <count>``
    test -> here   ``reap <pid>``; here -> test ``reaped <pid> <signal>``
"""

from __future__ import annotations

import os
import random
import sys
import traceback

import tachograph as tg


def say(line: str) -> None:
    os.write(1, (line + "\n").encode())


def record_until_killed(db: str, run_id: str, policy: str, seed: int) -> None:
    rng = random.Random(seed)
    store = tg.open_store(db)
    with tg.record(store, actor="torture", run_id=run_id, durability=policy) as run:
        count = 1  # run.started
        while True:
            for _ in range(rng.randint(1, 20)):
                tg.emit(
                    "decision", {"name": "n", "chosen": count, "pad": "x" * rng.randint(0, 2000)}
                )
                count += 1
                if policy == "every":
                    say(f"ack {run_id} {count}")
            run.flush()
            say(f"ack {run_id} {count}")


def main() -> None:
    for line in sys.stdin:
        command, *args = line.split()
        if command == "spawn":
            db, run_id, policy, seed = args
            pid = os.fork()
            if pid == 0:
                try:
                    record_until_killed(db, run_id, policy, int(seed))
                except BaseException:
                    say(f"error {traceback.format_exc()!r}")
                finally:
                    os._exit(1)
            say(f"pid {pid}")
        elif command == "reap":
            pid = int(args[0])
            _, status = os.waitpid(pid, 0)
            say(f"reaped {pid} {os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0}")


if __name__ == "__main__":
    main()
