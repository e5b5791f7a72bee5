"""The table of fault-injection scenarios: one entry per writing operation.

Each :class:`Scenario` names how to prepare a store, which ``worker.py`` operation to run, and
what must hold after any fault: the events acknowledged are there, and (``atomic``) a unit is
either wholly present or absent, and the scenario's own ``check``. Adding a kill point for
another operation is one entry here and one function in ``worker.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import tachograph as tg
from tachograph.record.jsonl import write_events
from tachograph.testing import build_run

IMPORT_RUNS = (("imp-0", 1000), ("imp-1", 1000), ("imp-2", 500))


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    """The ``worker.py`` operation."""
    prepare: Callable[[Path], list[str]]
    """Prepare files in a folder; returns extra arguments for the worker."""
    atomic_runs: tuple[tuple[str, int], ...] = ()
    """Runs that must be stored whole (with this many events) or not at all."""
    check: Callable[[Path, list[str]], None] | None = None
    """More that must hold in the reopened store, given the worker's output lines."""
    appends: tuple[str, int] | None = None
    """``(run, events per append)``: a failed append must say truly whether it was stored."""


def _nothing(_folder: Path) -> list[str]:
    return []


def _import_file(folder: Path) -> list[str]:
    path = folder / "import.jsonl"
    with path.open("wb") as out:
        for run_id, length in IMPORT_RUNS:
            write_events(build_run(run_id, length), out)
    return [str(path)]


def _erasure_whole_or_absent(db: Path, lines: list[str]) -> None:
    """Ten payloads erased with their audit record, or none and no record; acked means all."""
    if not db.exists():
        return
    with tg.open_store(db) as store:
        if not store.runs():
            return
        erased = [e.seq for e in store.read("erase-run") if e.payload is None]
        audits = [r for r in store.read_audit() if r.action == "erase"]
    assert erased in ([], list(range(1, 11))), erased
    assert len(audits) == (1 if erased else 0), (erased, audits)
    if "erased 10" in lines:
        assert erased == list(range(1, 11))


def _seals_match_their_runs(db: Path, lines: list[str]) -> None:
    """Every stored seal names an event that is stored, with its hash (a crash keeps the
    last seal; it never leaves a seal ahead of the events)."""
    from tachograph.doctor import run_checks

    if not db.exists():
        return
    with tg.open_store(db) as store:
        problems = [f for f in run_checks(store) if f.check == "seals" and f.level == "problem"]
        sealed = store.seals_for_run("default", "seal-run")
    assert problems == [], problems
    if "ack seal-run 30" in lines:
        assert sealed, "a finished run acknowledged without its final seal"


SCENARIOS = (
    Scenario("append", _nothing, appends=("append-run", 1)),
    Scenario("batch", _nothing, appends=("batch-run", 40)),
    Scenario("import", _import_file, atomic_runs=IMPORT_RUNS),
    Scenario("erase", _nothing, check=_erasure_whole_or_absent),
    Scenario("seal", _nothing, check=_seals_match_their_runs),
    Scenario("seal-default", _nothing, check=_seals_match_their_runs),
)


@dataclass(frozen=True, slots=True)
class Fault:
    name: str
    syscall: str
    action: str
    """strace's inject action: ``signal=KILL`` or ``error=EIO`` ..."""


FAULTS = (
    Fault("kill-at-fsync", "fdatasync,fsync", "signal=KILL"),
    Fault("kill-at-write", "pwrite64,write", "signal=KILL"),
    Fault("eio-at-fsync", "fdatasync,fsync", "error=EIO"),
    Fault("enospc-at-write", "pwrite64", "error=ENOSPC"),
)


def stored_counts(db: Path) -> dict[str, int]:
    """Events per run in a store (empty when the store was never created)."""
    if not db.exists():
        return {}
    with tg.open_store(db) as store:
        return {info.run_id: info.events for info in store.runs(limit=None)}
