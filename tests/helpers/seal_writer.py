"""Recording processes for tests/sealing/test_seal_crash.py, killed with SIGKILL at random.

Imports tachograph once, then forks one recorder per ``spawn <db> <key file> <seed> <mode>``
line on stdin; each records runs one after another, sealing every 3 events and at each run's
end, until it is killed. ``mode`` ``observer``: a :class:`SealingObserver` seals;
``default``: the writer's default sealing, in the batch's transaction, with the key named by
``TACHOGRAPH_SIGNING_KEY`` (what every recording does).
Replies: ``pid <pid>``; ``reaped <pid> <signal>`` after ``reap <pid>``.
"""

from __future__ import annotations

import os
import random
import sys

from tachograph.capture.recorder import Recorder
from tachograph.record.checkpoint import SigningKey
from tachograph.sealing import SealingObserver, SealPolicy
from tachograph.store import SQLiteStore


def say(line: str) -> None:
    os.write(1, (line + "\n").encode())


def record_until_killed(db: str, key_file: str, seed: int, mode: str) -> None:
    rng = random.Random(seed)
    store = SQLiteStore(db)
    policy = SealPolicy(every_events=3, every_seconds=3600)
    observer = SealingObserver(policy=policy, key=SigningKey.load(key_file))
    os.environ["TACHOGRAPH_SIGNING_KEY"] = key_file
    number = 0
    while True:
        number += 1
        run_id = f"crash-{os.getpid()}-{number}"
        if mode == "observer":
            recorder = Recorder(store, run_id=run_id, actor="crasher", observers=[observer])
        else:
            recorder = Recorder(store, run_id=run_id, actor="crasher", observers=[], seal=policy)
        recorder.append("run.started", {"input": run_id, "env": {}})
        for step in range(rng.randint(1, 12)):
            recorder.append(
                "decision", {"name": "step", "chosen": step}, durable=rng.random() < 0.3
            )
        recorder.append("run.finished", {"status": "ok"})
        recorder.flush()
        observer.drain()
        errors = observer.errors or recorder.writer.seals.errors
        if errors:
            say(f"error {os.getpid()} {errors[0]!r}")
            os._exit(1)


def main() -> None:
    # Import what the recorders use before forking, so each child starts recording at once.
    from cryptography.hazmat.primitives.asymmetric import ed25519  # noqa: F401

    for line in sys.stdin:
        command, *args = line.split()
        if command == "spawn":
            pid = os.fork()
            if pid == 0:
                try:
                    record_until_killed(args[0], args[1], int(args[2]), args[3])
                finally:
                    os._exit(1)
            say(f"pid {pid}")
        elif command == "reap":
            pid = int(args[0])
            _, status = os.waitpid(pid, 0)
            say(f"reaped {pid} {os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0}")


if __name__ == "__main__":
    main()
