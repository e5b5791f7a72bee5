"""How hard the torture suite pushes: ``TACHOGRAPH_TORTURE=ci`` (default) or ``nightly``.

CI runs the ``ci`` size on every push (a few minutes on two cores); the nightly job runs
``nightly``. Figures go to ``TACHOGRAPH_TORTURE_REPORT`` (a JSON Lines file) when it is set,
which is how docs/reliability.md gets its numbers.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Size:
    kills_per_policy: int
    """Random SIGKILLs of a recording process, for each durability policy."""
    kill_points: int
    """N-th write or fsync system call at which a fault is injected, per scenario and call."""
    writers: int
    """Concurrent writer processes."""
    events_per_writer: int
    fuzz_examples: int
    """Hypothesis examples per reader."""


SIZES = {
    "ci": Size(
        kills_per_policy=200, kill_points=6, writers=4, events_per_writer=150, fuzz_examples=300
    ),
    "nightly": Size(
        kills_per_policy=1000,
        kill_points=25,
        writers=8,
        events_per_writer=1000,
        fuzz_examples=5000,
    ),
}


def size_name() -> str:
    name = os.environ.get("TACHOGRAPH_TORTURE", "ci")
    if name not in SIZES:
        raise ValueError(f"TACHOGRAPH_TORTURE={name!r}: expected one of {', '.join(SIZES)}")
    return name


SIZE = SIZES[size_name()]


def report(figure: str, **values: Any) -> None:
    """Append one figure to ``TACHOGRAPH_TORTURE_REPORT`` (when set)."""
    target = os.environ.get("TACHOGRAPH_TORTURE_REPORT")
    if not target:
        return
    line = json.dumps({"figure": figure, "size": size_name(), **values}, sort_keys=True)
    with open(target, "a", encoding="utf-8") as out:
        out.write(line + "\n")
