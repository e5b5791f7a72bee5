"""One writing operation, run under ``strace`` fault injection by test_fault_injection.py.

``python worker.py SCENARIO DB [FILE]``: performs the scenario's writes and says
``ack <run_id> <count>`` (one ``write(2)`` on stdout) after each acknowledged step, then
``done``. A typed tachograph error is said as ``typed <class> <stored>`` and exits 3; anything
else propagates as a traceback (exit 1), which the test treats as a failure.
"""

from __future__ import annotations

import os
import sys

import tachograph as tg
from tachograph.errors import TachographError
from tachograph.record.jsonl import import_jsonl
from tachograph.testing import build_run


def say(line: str) -> None:
    os.write(1, (line + "\n").encode())


def append(db: str) -> None:
    store = tg.open_store(db)
    for n, event in enumerate(build_run("append-run", 30)):
        store.append([event])
        say(f"ack append-run {n + 1}")


def batch(db: str) -> None:
    store = tg.open_store(db)
    events = build_run("batch-run", 200)
    for start in range(0, len(events), 40):
        store.append(events[start : start + 40])
        say(f"ack batch-run {start + 40}")


def import_file(db: str, path: str) -> None:
    store = tg.open_store(db)
    report = import_jsonl(store, path)
    say(f"ack imported {report.events}")


def main() -> None:
    scenario, db, *rest = sys.argv[1:]
    try:
        if scenario == "append":
            append(db)
        elif scenario == "batch":
            batch(db)
        elif scenario == "import":
            import_file(db, rest[0])
        else:
            raise SystemExit(f"unknown scenario {scenario}")
    except TachographError as exc:
        cause = exc.__cause__ or getattr(exc, "cause", None)
        stored = getattr(exc, "stored", getattr(cause, "stored", None))
        say(f"typed {type(exc).__name__} {stored}")
        sys.exit(3)
    say("done")


if __name__ == "__main__":
    main()
