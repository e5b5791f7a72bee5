"""Shared pieces of the benchmark suite: timing, figures, targets, synthetic events.

Every figure is measured side by side with a baseline in the same process and the same run,
with the two interleaved sample by sample, so that a noisy neighbour slows both alike. Medians
are quoted, never means, and the verdict is taken on ratios wherever the target allows it.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import random
import sqlite3
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tachograph.record.event import Event, new_event

__all__ = [
    "Figure",
    "Measure",
    "Settings",
    "Target",
    "build_run",
    "interleaved",
    "median_ns",
    "payload_of_size",
    "profile_call",
    "scaled",
    "short_path",
]


@dataclass(frozen=True, slots=True)
class Settings:
    """Options of one suite run."""

    scale: float = 1.0
    workdir: str = "."
    profile: bool = True
    repeats: int = 0
    """Samples per measure; 0 means each figure's default."""


def scaled(n: int, scale: float, *, minimum: int = 1) -> int:
    """``n`` times ``scale``, never below ``minimum``."""
    return max(minimum, round(n * scale))


@dataclass(slots=True)
class Measure:
    """One measured quantity: the median of its samples, in ``unit``."""

    name: str
    median: float
    unit: str
    samples: int
    spread: float = 0.0
    """Half the interquartile range, in ``unit``: how noisy the samples were."""

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "name": self.name,
            "median": self.median,
            "unit": self.unit,
            "samples": self.samples,
            "spread": self.spread,
        }


def measure_of(name: str, values: list[float], unit: str) -> Measure:
    """A :class:`Measure` from raw sample values."""
    if len(values) >= 4:
        q = statistics.quantiles(values, n=4)
        spread = (q[2] - q[0]) / 2
    else:
        spread = (max(values) - min(values)) / 2 if values else 0.0
    return Measure(name, statistics.median(values), unit, len(values), spread)


@dataclass(slots=True)
class Target:
    """A target a figure must meet: ``value op limit``."""

    label: str
    value: float
    op: str
    limit: float

    @property
    def passed(self) -> bool:
        """True when the value meets the limit."""
        if self.op == "<":
            return self.value < self.limit
        if self.op == "<=":
            return self.value <= self.limit
        if self.op == ">=":
            return self.value >= self.limit
        if self.op == ">":
            return self.value > self.limit
        raise ValueError(f"unknown comparison {self.op!r}")

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "label": self.label,
            "value": self.value,
            "op": self.op,
            "limit": self.limit,
            "pass": self.passed,
        }


@dataclass(slots=True)
class Figure:
    """One row of the table: a subject, its baseline, their ratio, and the targets."""

    key: str
    title: str
    subject: Measure
    baseline: Measure
    ratio: float
    ratio_label: str
    targets: list[Target]
    extra: dict[str, Any] = field(default_factory=dict)
    profile: list[dict[str, Any]] | None = None
    profile_fn: Callable[[], object] | None = None
    """Runs the subject's workload once, for cProfile, when a target is missed."""

    @property
    def passed(self) -> bool:
        """True when every target is met."""
        return all(t.passed for t in self.targets)

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "key": self.key,
            "title": self.title,
            "subject": self.subject.to_dict(),
            "baseline": self.baseline.to_dict(),
            "ratio": self.ratio,
            "ratio_label": self.ratio_label,
            "targets": [t.to_dict() for t in self.targets],
            "pass": self.passed,
            "extra": self.extra,
            "profile": self.profile,
        }


def median_ns(fn: Callable[[], object], *, inner: int, repeats: int) -> list[float]:
    """Per-call nanoseconds of ``fn``: ``repeats`` samples of ``inner`` calls each."""
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        for _ in range(inner):
            fn()
        out.append((time.perf_counter_ns() - t0) / inner)
    return out


def interleaved(
    subject: Callable[[], float],
    baseline: Callable[[], float],
    *,
    repeats: int,
    warmup: int = 1,
) -> tuple[list[float], list[float]]:
    """Alternate baseline and subject samples (each callable returns one sample value)."""
    for _ in range(warmup):
        baseline()
        subject()
    subj: list[float] = []
    base: list[float] = []
    for i in range(repeats):
        # alternate which goes first, so that neither always runs on a warmer cache
        if i % 2:
            subj.append(subject())
            base.append(baseline())
        else:
            base.append(baseline())
            subj.append(subject())
    return subj, base


def loop_sample(fn: Callable[[], object], inner: int) -> Callable[[], float]:
    """A sampler: the mean nanoseconds per call over ``inner`` calls."""

    def sample() -> float:
        t0 = time.perf_counter_ns()
        for _ in range(inner):
            fn()
        return (time.perf_counter_ns() - t0) / inner

    return sample


def beside_busy_thread(fn: Callable[[], float]) -> float:
    """``fn()`` while another thread of the process computes in Python (an agent busy between
    its calls), the thread stopped after."""
    stop = threading.Event()

    def spin() -> None:
        x = 0
        while not stop.is_set():
            for i in range(1000):
                x += i

    spinner = threading.Thread(target=spin, name="bench-busy", daemon=True)
    spinner.start()
    try:
        return fn()
    finally:
        stop.set()
        spinner.join()


def remove_sqlite(path: str | os.PathLike[str]) -> None:
    """Delete a SQLite file and its WAL and shared-memory files, if they exist."""
    for suffix in ("", "-wal", "-shm"):
        Path(f"{os.fspath(path)}{suffix}").unlink(missing_ok=True)


def wal_connection(path: str | os.PathLike[str]) -> sqlite3.Connection:
    """A plain ``sqlite3`` connection in autocommit, WAL mode and ``synchronous=FULL``: the
    floors the store's appends are measured against."""
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = FULL")
    return db


def load_average() -> list[float] | None:
    """The load average (1, 5, 15 minutes), rounded, or None where the system has none."""
    if not hasattr(os, "getloadavg"):
        return None
    return [round(x, 2) for x in os.getloadavg()]


def check_lengths(lengths: Sequence[int]) -> None:
    """Refuse run lengths of the replay figure's agent that are odd, below 4 or repeated: its
    runs are started, finished and two events a call, so such lengths would record runs of
    other lengths, or merge two."""
    if any(n < 4 or n % 2 for n in lengths) or len(set(lengths)) != len(lengths):
        raise ValueError(
            f"run lengths must be distinct even numbers of at least 4: {list(lengths)}"
        )


def probe_parser(
    prog: str, description: str | None, *, rounds: int, rounds_help: str, lengths: Sequence[int]
) -> argparse.ArgumentParser:
    """The options of a probe over runs of several lengths: ``--rounds``, ``--json``,
    ``--dir`` and ``--lengths`` (read with :func:`probe_lengths`)."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--rounds", type=int, default=rounds, help=rounds_help)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--dir", default=None, help="where to put the store (default: the temporary directory)"
    )
    parser.add_argument(
        "--lengths",
        default=",".join(map(str, lengths)),
        help="run lengths in events, even and distinct, comma-separated (default: %(default)s)",
    )
    return parser


def probe_lengths(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[int]:
    """``--lengths`` as integers, in the order given; exits with a usage error on a bad one
    (see :func:`check_lengths`) or on ``--rounds`` below 1."""
    try:
        lengths = [int(n) for n in args.lengths.split(",")]
    except ValueError:
        parser.error("--lengths must be integers, comma-separated")
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    try:
        check_lengths(lengths)
    except ValueError:
        parser.error("--lengths must be distinct even numbers of at least 4")
    return lengths


def sample_process(
    module: str, src: Path, args: Sequence[str], *, timeout: float = 600.0
) -> dict[str, Any]:
    """One sample of a probe that compares versions of the library: ``python -m module
    --child *args`` in a new process, with ``src`` (a version's ``src`` directory) first on
    ``PYTHONPATH`` and this checkout after it (for ``bench``); the JSON object it prints."""
    root = Path(__file__).resolve().parent.parent
    paths = [str(src), str(root), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths))
    try:
        out = subprocess.run(
            [sys.executable, "-m", module, "--child", *args],
            cwd=root,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as exc:
        raise RuntimeError(f"a sample process failed: no answer in {exc.timeout} s") from None
    if out.returncode != 0:
        raise RuntimeError(f"a sample process failed ({out.returncode}): {out.stderr[-2000:]}")
    try:
        result: dict[str, Any] = json.loads(out.stdout)
    except ValueError:
        raise RuntimeError(f"a sample process failed: not JSON: {out.stdout[-500:]!r}") from None
    return result


def versions(parser: argparse.ArgumentParser, before: str | None) -> dict[str, Path]:
    """The ``src`` directories a side-by-side probe compares, by name: ``before``, the older
    one named (``--before``; a usage error when it holds no ``tachograph`` package), then
    ``after``, this checkout's."""
    sides = {"after": Path(__file__).resolve().parent.parent / "src"}
    if before is None:
        return sides
    older = Path(before).resolve()
    if not (older / "tachograph" / "__init__.py").is_file():
        parser.error(f"--before {before}: no tachograph package in that directory")
    return {"before": older, **sides}


def side_by_side_parser(
    prog: str, description: str | None, *, rounds: int
) -> argparse.ArgumentParser:
    """The options of a probe that compares two versions of the library (see
    :func:`versions` and :func:`alternating`): ``--before``, ``--rounds``, ``--seed``,
    ``--json``, and the hidden ``--child`` its sample processes run with
    (:func:`sample_process`). The probe adds its own."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--before", default=None, help="src directory of the older version")
    parser.add_argument(
        "--rounds", type=int, default=rounds, help=f"samples a version (default {rounds})"
    )
    parser.add_argument("--seed", type=int, default=1, help="of the order in each round")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    return parser


def warn_uneven_helpers(result: dict[str, Any], sides: Iterable[str]) -> None:
    """Warn on stderr when the compiled helpers loaded in some samples and not in others
    (each side's ``compiled``: the values its samples saw); build an older ``native.c``
    alike."""
    helpers = {side: result[side]["compiled"] for side in sides}
    if len({tuple(v) for v in helpers.values()}) > 1 or any(len(v) > 1 for v in helpers.values()):
        print(f"warning: the compiled helpers loaded unevenly: {helpers}", file=sys.stderr)


def alternating(
    sides: dict[str, Path],
    rounds: int,
    seed: int,
    sample: Callable[[Path], dict[str, Any]],
    *,
    quiet: bool = False,
) -> dict[str, list[dict[str, Any]]]:
    """``rounds`` samples of each version (``sample(src)``), one of each a round, in a new
    order each round (seeded ``seed``); the round reached is shown on stderr unless
    ``quiet``."""
    rng = random.Random(seed)
    samples: dict[str, list[dict[str, Any]]] = {side: [] for side in sides}
    for done in range(rounds):
        order = list(sides)
        rng.shuffle(order)
        for side in order:
            samples[side].append(sample(sides[side]))
        if not quiet:
            print(f"round {done + 1}/{rounds}", file=sys.stderr, end="\r", flush=True)
    if not quiet:
        print(file=sys.stderr)
    return samples


def run_probe(script: Path, *args: object) -> dict[str, Any]:
    """Run a probe script in a fresh interpreter (nothing this process allocated counts) with
    this process's import path; return the JSON object it prints."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    out = subprocess.run(
        [sys.executable, str(script), *map(str, args)],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    result: dict[str, Any] = json.loads(out.stdout)
    return result


# -- synthetic events -------------------------------------------------------------------------

_WORDS = (
    "the refund for order was approved after the customer reported a damaged parcel and the "
    "agent checked the carrier tracking history before deciding on the amount to return "
)


def payload_of_size(target: int, *, index: int = 0) -> dict[str, Any]:
    """A model-response-like payload whose canonical JSON is about ``target`` bytes."""
    text_len = max(16, target - 260)
    text = (_WORDS * (text_len // len(_WORDS) + 1))[:text_len]
    return {
        "response": {
            "id": f"msg_{index:012d}",
            "model": "claude-sonnet-4-5-20250929",
            "role": "assistant",
            "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": 1200 + index % 97, "output_tokens": 300},
        },
        "usage": {"input_tokens": 1200 + index % 97, "output_tokens": 300},
    }


def build_run(
    run_id: str, n: int, *, payload_bytes: int = 1000, tenant: str = "default"
) -> Iterator[Event]:
    """The events of a synthetic run of ``n`` events, chained, built in order."""
    prev: str | None = None
    payload: dict[str, Any]
    for seq in range(n):
        if seq == 0:
            etype, payload = "run.started", {"input": {"task": "bench"}, "env": {}}
        elif seq == n - 1:
            etype, payload = "run.finished", {"status": "ok", "output": None}
        else:
            etype, payload = "model.response", payload_of_size(payload_bytes, index=seq)
        event = new_event(
            run_id=run_id,
            seq=seq,
            type=etype,
            actor="bench",
            payload=payload,
            prev_hash=prev,
            tenant=tenant,
            checked=True,
        )
        prev = event.hash
        yield event


# -- profiles ---------------------------------------------------------------------------------


def short_path(path: str) -> str:
    """A file path without this machine's directories: from the package or library name."""
    parts = path.replace(os.sep, "/").split("/")
    for anchor in ("tachograph", "bench", "opentelemetry", "sqlite3", "json"):
        if anchor in parts:
            return "/".join(parts[parts.index(anchor) :])
    return parts[-1]


def profile_if_missed(
    subject: list[float],
    baseline: list[float],
    limit: float,
    fn: Callable[[], object],
    settings: Settings,
) -> list[dict[str, Any]] | None:
    """The profile of ``fn`` if the median ratio of ``subject`` to ``baseline`` samples
    exceeds ``limit`` (and profiles are wanted): for a figure whose workload needs a loop or a
    server that is gone once the figure returns, so that the runner cannot profile it later."""
    missed = statistics.median(subject) / statistics.median(baseline) > limit
    return profile_call(fn) if missed and settings.profile else None


def profile_call(fn: Callable[[], object], *, top: int = 14) -> list[dict[str, Any]]:
    """Run ``fn`` under cProfile; the functions with the most own time, as rows."""
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        fn()
    finally:
        profiler.disable()
    stats = pstats.Stats(profiler, stream=io.StringIO())
    total = sum(row[2] for row in stats.stats.values())  # type: ignore[attr-defined]
    rows = []
    for (filename, line, name), (_cc, ncalls, tottime, cumtime, _callers) in sorted(
        stats.stats.items(),  # type: ignore[attr-defined]
        key=lambda item: item[1][2],
        reverse=True,
    )[:top]:
        where = name if filename == "~" else f"{short_path(filename)}:{line}({name})"
        rows.append(
            {
                "function": where,
                "calls": ncalls,
                "own_s": round(tottime, 4),
                "cum_s": round(cumtime, 4),
                "own_share": round(tottime / total, 3) if total else 0.0,
            }
        )
    return rows


def fake_llm_server() -> Any:
    """The tests' fake model server (OpenAI and Anthropic APIs on 127.0.0.1), unstarted: the
    adapter figures measure a framework against it, HTTP round trip included."""
    root = str(Path(__file__).resolve().parents[1] / "tests")
    if root not in sys.path:
        sys.path.insert(0, root)
    from fakes.llm_server import FakeLLMServer

    return FakeLLMServer()
