"""Kill points and I/O errors at the N-th write or fsync, injected by ``strace``.

For every scenario of :mod:`.scenarios` and every fault of ``FAULTS`` the worker runs under
``strace -f -e inject=SYSCALL:ACTION:when=N`` for N = 1 .. the size's ``kill_points``, spread
over the calls the operation makes. After each run: the store passes ``integrity_check``,
every run verifies, nothing acknowledged is missing, atomic units are whole or absent, and an
operation that failed said so with a typed error (exit 3), whose ``stored`` claim (when it
makes one) matches what the reopened store holds.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

import tachograph as tg

from .scenarios import FAULTS, SCENARIOS, Fault, Scenario, stored_counts
from .sizes import SIZE, report

WORKER = Path(__file__).with_name("worker.py")
STRACE = shutil.which("strace")

pytestmark = pytest.mark.skipif(
    STRACE is None, reason="strace is not installed (.ci/run installs it)"
)


def _calls(scenario: Scenario, fault: Fault, python: str, env: dict[str, str], folder: Path) -> int:
    """How many of the fault's system calls the operation makes (strace -c, no fault)."""
    db = folder / "count.db"
    args = scenario.prepare(folder)
    assert STRACE is not None
    out = subprocess.run(
        [STRACE, "-f", "-qq", "-c", "-e", f"trace={fault.syscall}", "-o", str(folder / "c.txt"),
         python, str(WORKER), scenario.name, str(db), *args],
        env=env, capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    assert "done" in out.stdout
    total = 0
    for line in (folder / "c.txt").read_text().splitlines():
        parts = line.split()
        if parts and parts[-1] in fault.syscall.split(",") and parts[0][0].isdigit():
            total += int(parts[3])
    db.unlink(missing_ok=True)
    return total


def _failed_append_told_the_truth(
    scenario: Scenario, lines: list[str], acked: dict[str, int], counts: dict[str, int], when: int
) -> None:
    """A failed append that is in the store after all (a failed fsync after SQLite wrote the
    WAL frames: recovery brings the commit back) must have said so (``stored=True``); one
    that said so must be there. Saying nothing (``None``) reads as "not stored"."""
    if scenario.appends is None:
        return
    failed = [line.split() for line in lines if line.startswith("typed ")]
    if not failed:
        return
    run, step = scenario.appends
    before = acked.get(run, 0)
    there = counts.get(run, 0) >= before + step
    claim = failed[0][2]
    assert there is (claim == "True"), (when, failed[0], before, counts.get(run, 0))


@pytest.mark.parametrize("fault", FAULTS, ids=lambda f: f.name)
@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_faults_at_the_nth_call_lose_nothing_and_leave_nothing_partial(
    scenario: Scenario, fault: Fault, tmp_path: Path, python: str, child_env: dict[str, str]
) -> None:
    assert STRACE is not None
    calls = _calls(scenario, fault, python, child_env, tmp_path)
    assert calls > 0
    points = sorted({max(1, calls * k // SIZE.kill_points) for k in range(1, SIZE.kill_points + 1)})
    typed = 0
    for when in points:
        folder = tmp_path / f"at-{when}"
        folder.mkdir()
        db = folder / "store.db"
        args = scenario.prepare(folder)
        inject = f"inject={fault.syscall}:{fault.action}:when={when}"
        proc = subprocess.run(
            [STRACE, "-f", "-qq", "-o", "/dev/null", "-e", f"trace={fault.syscall}", "-e", inject,
             python, str(WORKER), scenario.name, str(db), *args],
            env=child_env, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        lines = proc.stdout.splitlines()
        assert "Traceback" not in proc.stderr, (when, proc.stderr[-2000:])
        if proc.returncode == 3:
            typed += 1
        acked: dict[str, int] = {}
        for line in lines:
            if line.startswith("ack "):
                _, run_id, count = line.split()
                acked[run_id] = int(count)
        counts = stored_counts(db)
        if db.exists():
            with tg.open_store(db) as store:
                assert store.integrity_check() == "ok"  # type: ignore[attr-defined]
                for result in store.verify_all():
                    assert result.ok, (when, result.render())
        for run_id, count in acked.items():
            if run_id == "imported":
                assert sum(counts.get(r, 0) for r, _ in scenario.atomic_runs) == count
            else:
                assert counts.get(run_id, 0) >= count, (when, run_id, counts, count)
        if scenario.atomic_runs:
            present = [counts.get(r, 0) for r, _ in scenario.atomic_runs]
            whole = [n for _, n in scenario.atomic_runs]
            assert present in (whole, [0] * len(whole)), (when, present)
        if scenario.check is not None:
            scenario.check(db, lines)
        for line in lines:
            if line.startswith("typed ") and line.split()[2] in ("True", "False"):
                claimed = line.split()[2] == "True"
                if scenario.atomic_runs:
                    assert (present == whole) is claimed, (when, line, present)
        _failed_append_told_the_truth(scenario, lines, acked, counts, when)
    report(
        "fault_injection",
        scenario=scenario.name,
        fault=fault.name,
        calls=calls,
        points=len(points),
        typed_failures=typed,
        lost=0,
        partial=0,
    )
