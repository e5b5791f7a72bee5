"""Random SIGKILLs of recording processes, under each durability policy.

A kill lands anywhere: before the store is open, inside a transaction, between a commit and
its acknowledgement. After each one the store must open, pass ``integrity_check``, hold every
event that was acknowledged, and every run in it must verify (SPEC section 8).
"""

from __future__ import annotations

import os
import random
import select
import signal
import subprocess
import time
from pathlib import Path

import pytest

import tachograph as tg

from .sizes import SIZE, report

ZYGOTE = Path(__file__).with_name("recorder_zygote.py")


class Zygote:
    def __init__(self, python: str, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [python, str(ZYGOTE)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            bufsize=0,
        )
        assert self.proc.stdout is not None
        self.out = self.proc.stdout
        self.pending = b""

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((line + "\n").encode())

    def lines(self, timeout: float) -> list[str]:
        """Every complete line that arrives within ``timeout`` seconds."""
        found: list[str] = []
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return found
            ready, _, _ = select.select([self.out], [], [], left)
            if not ready:
                return found
            self.pending += os.read(self.out.fileno(), 1 << 16)
            *complete, self.pending = self.pending.split(b"\n")
            found.extend(c.decode() for c in complete)

    def expect(self, prefix: str) -> tuple[str, list[str]]:
        """Wait for the first line starting with ``prefix``; return it and the lines before."""
        seen: list[str] = []
        for _ in range(600):
            for line in self.lines(0.1):
                if line.startswith(prefix):
                    return line, seen
                seen.append(line)
        raise AssertionError(f"no {prefix!r} line; got {seen[-5:]}")

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.mark.parametrize("policy", ["every", "effects", "batch"])
def test_random_sigkills_lose_nothing_acknowledged(
    policy: str, tmp_path: Path, python: str, child_env: dict[str, str]
) -> None:
    db = tmp_path / f"{policy}.db"
    rng = random.Random(f"kills-{policy}")
    zygote = Zygote(python, child_env)
    acked: dict[str, int] = {}
    checked = 0
    try:
        for n in range(SIZE.kills_per_policy):
            run_id = f"{policy}-{n}"
            zygote.send(f"spawn {db} {run_id} {policy} {n}")
            line, early = zygote.expect("pid ")
            pid = int(line.split()[1])
            arrived = early + zygote.lines(rng.uniform(0.0, 0.12))
            os.kill(pid, signal.SIGKILL)
            zygote.send(f"reap {pid}")
            _, late = zygote.expect(f"reaped {pid}")
            for message in arrived + late:
                assert not message.startswith("error"), message
                if message.startswith("ack "):
                    _, rid, count = message.split()
                    acked[rid] = max(acked.get(rid, 0), int(count))
    finally:
        zygote.close()
    with tg.open_store(db, create=True) as store:
        assert store.integrity_check() == "ok"  # type: ignore[attr-defined]
        for report_ in store.verify_all():
            assert report_.ok, report_.render()
        for run_id, count in acked.items():
            info = store.run_info(run_id)
            assert info.events >= count, (run_id, info.events, count)
            checked += count
    assert acked, "no kill came late enough for an acknowledgement"
    report(
        "sigkill",
        policy=policy,
        kills=SIZE.kills_per_policy,
        runs_acknowledged=len(acked),
        acknowledged_events=checked,
        lost=0,
    )
