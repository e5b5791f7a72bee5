"""Crash safety with real processes: writers SIGKILLed at random moments, hundreds of times.

Every event a writer acknowledged (printed only after ``append`` returned) must survive with
the same hash; the file must pass ``PRAGMA integrity_check``; every run must verify. Batches
are atomic: a killed writer leaves its run ending at a batch boundary, and the next writer
resumes the chain from the store's head.
"""

from __future__ import annotations

import os
import queue
import random
import signal
import sqlite3
import subprocess
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tachograph.errors import RunNotFound
from tachograph.store import SQLiteStore

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork() and SIGKILL (POSIX)"),
]

RUNS = ["crash-a", "crash-b", "crash-c", "crash-d"]
KILLS = int(os.environ.get("TACHOGRAPH_CRASH_KILLS", "200"))
TIMEOUT = 60.0  # seconds to wait for any one message; only reached if something hangs


@dataclass
class Writers:
    """Talks to tests/helpers/crash_writer.py and its forked writers."""

    proc: subprocess.Popen[str]
    lines: queue.Queue[str | None] = field(default_factory=queue.Queue)
    acks: dict[tuple[str, int], str] = field(default_factory=dict)
    ack_count: Counter[int] = field(default_factory=Counter)
    control: list[list[str]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    rewritten: list[str] = field(default_factory=list)

    def start_reader(self) -> None:
        def pump() -> None:
            assert self.proc.stdout is not None
            for line in self.proc.stdout:
                self.lines.put(line.rstrip("\n"))
            self.lines.put(None)

        threading.Thread(target=pump, daemon=True).start()

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def _take(self) -> None:
        line = self.lines.get(timeout=TIMEOUT)
        if line is None:
            raise AssertionError(f"the writer helper exited; errors: {self.errors}")
        self.handle(line)

    def drain(self) -> None:
        """After the helper exited: handle whatever it wrote last."""
        while (line := self.lines.get(timeout=TIMEOUT)) is not None:
            self.handle(line)

    def handle(self, line: str) -> None:
        kind, *rest = line.split(" ", 1)
        if kind == "ack":
            pid, run_id, seq, digest = rest[0].split()
            key = (run_id, int(seq))
            if key in self.acks and self.acks[key] != digest:
                # an acknowledged event was lost and its seq written again by a later writer
                self.rewritten.append(f"{key}: {self.acks[key]} then {digest}")
            self.acks[key] = digest
            self.ack_count[int(pid)] += 1
        elif kind == "error":
            self.errors.append(rest[0])
        else:
            self.control.append(line.split())

    def wait_for(self, kind: str, pid: int | None = None) -> list[str]:
        while True:
            for message in self.control:
                if message[0] == kind and (pid is None or int(message[1]) == pid):
                    self.control.remove(message)
                    return message
            if self.errors:
                raise AssertionError(f"a writer failed: {self.errors}")
            self._take()

    def wait_for_acks(self, pid: int, count: int) -> None:
        while self.ack_count[pid] < count:
            if self.errors:
                raise AssertionError(f"a writer failed: {self.errors}")
            self._take()


def test_acknowledged_events_survive_sigkill(
    tmp_path: Path, python: str, child_env: dict[str, str]
) -> None:
    seed = int(os.environ.get("TACHOGRAPH_CRASH_SEED") or random.SystemRandom().randrange(2**32))
    rng = random.Random(seed)
    db = str(tmp_path / "crash.db")
    SQLiteStore(db).close()  # most writers find the store; some are killed while opening it
    helper = Path(__file__).resolve().parent / "helpers" / "crash_writer.py"
    stderr = (tmp_path / "helper.err").open("w")
    proc = subprocess.Popen(
        [python, str(helper)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        env=child_env,
    )
    writers = Writers(proc)
    writers.start_reader()
    kills = killed_mid_append = 0
    try:
        while kills < KILLS:
            # one or two writers at once, on different runs, each killed at its own moment
            pids = []
            for run_id in rng.sample(RUNS, rng.choice([1, 1, 2])):
                writers.send(f"spawn {db} {run_id} {rng.randint(1, 4)} {rng.randrange(2**32)}")
                pids.append(int(writers.wait_for("pid")[1]))
            for pid in pids:
                if rng.random() < 0.1:
                    time.sleep(rng.uniform(0, 0.005))  # while importing, opening, recovering
                else:
                    writers.wait_for("ready", pid)
                    writers.wait_for_acks(pid, rng.randint(0, 6))
                    time.sleep(rng.uniform(0, 0.003))
                    killed_mid_append += 1
                os.kill(pid, signal.SIGKILL)
                kills += 1
            for pid in pids:
                writers.send(f"reap {pid}")
                reaped = writers.wait_for("reaped", pid)
                assert reaped[2:] == [str(int(signal.SIGKILL)), "-1"], (
                    f"writer {pid} was not killed by SIGKILL but ended {reaped}; "
                    f"errors: {writers.errors}"
                )
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=TIMEOUT)
        stderr.close()
    writers.drain()
    context = f"(seed {seed}; rerun with TACHOGRAPH_CRASH_SEED={seed})"
    assert writers.errors == [], context
    assert writers.rewritten == [], context
    assert kills >= KILLS
    assert len(writers.acks) > KILLS, f"too little was written to mean anything {context}"

    raw = sqlite3.connect(db)
    try:
        assert raw.execute("PRAGMA integrity_check").fetchall() == [("ok",)], context
    finally:
        raw.close()
    store = SQLiteStore(db)
    try:
        assert store.integrity_check() == "ok"
        stored: dict[tuple[str, int], str] = {}
        for run_id in RUNS:
            try:
                events = list(store.read(run_id))
            except RunNotFound:  # no writer of this run got as far as an append
                assert not any(r == run_id for r, _ in writers.acks), context
                continue
            assert [e.seq for e in events] == list(range(len(events))), context
            stored.update({(run_id, e.seq): e.hash for e in events})
        lost = {key: h for key, h in writers.acks.items() if stored.get(key) != h}
        assert lost == {}, f"acknowledged events missing or changed {context}"
        reports = list(store.verify_all())
        assert reports, context
        assert all(r.ok for r in reports), ([r.render() for r in reports if not r.ok], context)
        assert sum(r.events for r in reports) == store.count_events() >= len(writers.acks)
    finally:
        store.close()
    assert killed_mid_append > KILLS // 2, context
