"""One writing operation, run under ``strace`` fault injection by test_fault_injection.py.

``python worker.py SCENARIO DB [FILE]``: performs the scenario's writes and says
``ack <run_id> <count>`` (one ``write(2)`` on stdout) after each acknowledged step, then
``done``. A typed tachograph error is said as ``typed <class> <stored>`` and exits 3; anything
else propagates as a traceback (exit 1), which the test treats as a failure.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

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


def erase(db: str) -> None:
    from tachograph.lifecycle.erasure import erase as erase_payloads

    store = tg.open_store(db)
    store.append(build_run("erase-run", 20))
    say("ack erase-run 20")
    erase_payloads(store, "erase-run", seqs=range(1, 11), reason="torture")
    say("erased 10")  # not an "ack" of events: the check reads it


class _OneLine(logging.Formatter):
    """Logged failures as one line: a traceback on stderr means an unhandled crash here."""

    def formatException(self, ei: Any) -> str:
        return f"  ({ei[0].__name__}: {ei[1]})"


def seal(db: str) -> None:
    from tachograph.capture.recorder import Recorder
    from tachograph.sealing import SealingObserver, SealPolicy

    # The observer logs a sealing failure (it never raises into the host); say it briefly.
    handler = logging.StreamHandler()
    handler.setFormatter(_OneLine("%(name)s: %(message)s"))
    logging.getLogger("tachograph").addHandler(handler)

    store = tg.open_store(db)
    observer = SealingObserver(policy=SealPolicy(every_events=5, every_seconds=3600))
    recorder = Recorder(store, run_id="seal-run", actor="agent", observers=[observer])
    recorder.append("run.started", {"input": "torture", "env": {}})
    for n in range(1, 29):
        recorder.append("decision", {"name": "step", "chosen": n})
    recorder.append("run.finished", {"status": "ok"})
    recorder.flush()
    observer.drain()
    if observer.errors:  # a sealing failure is logged, never raised: say it typed
        raise observer.errors[0]
    say("ack seal-run 30")


def seal_default(db: str) -> None:
    """The same run sealed as every recording is by default: by the writer, in the batch's
    transaction (here every 5 events, durability ``every``: one commit per event)."""
    from tachograph.capture.recorder import Recorder
    from tachograph.capture.seals import SealPolicy

    store = tg.open_store(db)
    recorder = Recorder(
        store,
        run_id="seal-run",
        actor="agent",
        observers=[],
        durability="every",
        seal=SealPolicy(every_events=5, every_seconds=3600),
    )
    recorder.append("run.started", {"input": "torture", "env": {}})
    for n in range(1, 29):
        recorder.append("decision", {"name": "step", "chosen": n})
    recorder.append("run.finished", {"status": "ok"})
    recorder.flush()
    if recorder.writer.seals.errors:
        raise recorder.writer.seals.errors[0]
    say("ack seal-run 30")


def main() -> None:
    scenario, db, *rest = sys.argv[1:]
    try:
        if scenario == "append":
            append(db)
        elif scenario == "batch":
            batch(db)
        elif scenario == "import":
            import_file(db, rest[0])
        elif scenario == "erase":
            erase(db)
        elif scenario == "seal":
            seal(db)
        elif scenario == "seal-default":
            seal_default(db)
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
