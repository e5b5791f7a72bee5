"""Two versions of the library, measured alternately: ``python -m bench.ab --before DIR``.

``DIR`` is the ``src`` directory of the older version (for instance from ``git worktree add``
or ``git archive``). Each round runs ``python -m bench.run`` once with the older ``src`` first
on ``PYTHONPATH`` and once with this checkout's, the order swapping every round, so that a
noisy neighbour slows both alike; the table gives the median of each figure's ratio (and of
a few extras) per version.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["main"]

HERE = Path(__file__).resolve().parent
EXTRAS = {
    "record_event": ["recorder_append_span_ratio"],
    "canonical_floats": ["exact_over_fast"],
    "tool_call": ["growth"],
    "durable_appends": ["busy_thread_share"],
    "verify_workers": ["verify_all_speedup"],
    "replay": [
        "growth",
        "read_growth",
        "user_cpu_growth",
        "replay_us_per_event_longest",
        "read_us_per_event_longest",
    ],
    "intent_durable": [
        "isolated_in_raw",
        "back_to_back_in_raw",
        "isolated_in_raw_cold",
        "back_to_back_in_raw_cold",
        "isolated_in_commits",
        "back_to_back_in_commits",
        "isolated_in_fsyncs",
    ],
}


def _once(src: Path, only: str, scale: float, out: Path) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(src))
    cmd = [sys.executable, "-m", "bench.run", "--only", only, "--scale", str(scale)]
    cmd += ["--no-profile", "--json", str(out)]
    subprocess.run(cmd, cwd=HERE.parent, env=env, check=True, stdout=subprocess.DEVNULL)
    figures: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))["figures"]
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ab", description=__doc__)
    parser.add_argument("--before", required=True, help="src directory of the older version")
    parser.add_argument("--only", default="record,durable")
    parser.add_argument("--scale", type=float, default=0.2)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    sides = {"before": Path(args.before).resolve(), "after": HERE.parent / "src"}
    rows: dict[str, dict[str, list[float]]] = {"before": {}, "after": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            order = ["before", "after"] if r % 2 == 0 else ["after", "before"]
            for side in order:
                figs = _once(sides[side], args.only, args.scale, Path(tmp) / f"{side}.json")
                for key, fig in figs.items():
                    rows[side].setdefault(f"{key} ({fig['ratio_label']})", []).append(fig["ratio"])
                    for extra in EXTRAS.get(key, []):
                        if fig["extra"].get(extra) is not None:
                            rows[side].setdefault(f"{key}.{extra}", []).append(
                                float(fig["extra"][extra])
                            )
    print(f"{'measure':<72} {'before':>9} {'after':>9}")
    for name in rows["after"]:
        before = rows["before"].get(name)
        b = f"{statistics.median(before):9.3f}" if before else f"{'-':>9}"
        print(f"{name:<72} {b} {statistics.median(rows['after'][name]):9.3f}")
    load = os.getloadavg()
    print(f"medians of {args.rounds} alternating rounds, scale {args.scale}, load {load}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
