"""An erasing process for tests/lifecycle/test_erasure_kill.py, killed with SIGKILL midway.

``python erase_worker.py DB RUN_ID KILL_AT`` erases every payload of RUN_ID. KILL_AT is a
piece of SQL (``UPDATE payloads``, ``INSERT INTO store_audit``, ``COMMIT``,
``wal_checkpoint``): the process kills itself with SIGKILL as SQLite starts that statement,
so the kill lands at a known point of the erasure. ``none`` lets it finish. It prints
``ready`` once the store is open, so a parent may also kill it at a moment of its own.
"""

from __future__ import annotations

import os
import signal
import sys

from tachograph.lifecycle.erasure import erase
from tachograph.store import SQLiteStore


def main(path: str, run_id: str, kill_at: str) -> None:
    store = SQLiteStore(path)

    def trace(statement: str) -> None:
        if kill_at != "none" and kill_at in statement:
            os.kill(os.getpid(), signal.SIGKILL)

    store._db.set_trace_callback(trace)
    os.write(1, b"ready\n")
    erase(store, run_id, reason=f"kill test at {kill_at}", actor="worker")
    os.write(1, b"done\n")


if __name__ == "__main__":
    main(*sys.argv[1:4])
