"""Run the benchmark suite: ``python -m bench.run [--scale 0.1] [--json out.json]``.

Prints one table (medians, baselines, ratios, pass or miss against each target) and writes
the full results as JSON (default ``bench/results/latest.json``). Where a target is missed,
the subject's workload is run once more under cProfile and the functions with the most own
time are printed and kept in the JSON.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import importlib.util
import json
import logging
import os
import platform
import shutil
import sqlite3
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

if __package__ in (None, ""):  # run as a script: make the ``bench`` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import Figure, Measure, Settings, load_average, profile_call

__all__ = ["FIGURE_KEYS", "MODULES", "main", "run_suite"]

MODULES = (
    "record",
    "durable",
    "verify",
    "replay",
    "scale",
    "sealing",
    "bridge",
    "privacy",
    "postgres",
    "adapter_mcp",
    "adapter_langchain",
    "adapter_pydantic_ai",
    "adapter_google_adk",
    "adapter_openai_agents",
    "adapter_httpx",
)
"""Figure modules in the order they run; ``bridge`` only when tachograph.otel exists;
``postgres`` only when a server is available (``TACHOGRAPH_TEST_PG`` or initdb), else it says
why and reports nothing; ``adapter_*`` only when their framework is installed."""

FIGURE_KEYS = (
    "record_event",
    "event_build",
    "canonical_floats",
    "tool_call",
    "tool_overhead",
    "record_memory",
    "durable_appends",
    "intent_durable",
    "verify",
    "verify_floats",
    "verify_workers",
    "verify_command",
    "replay",
    "store_growth",
    "verify_memory",
    "seal_overhead",
    "seal_proof",
)
"""The figures every run of the suite produces."""

DEFAULT_JSON = Path(__file__).resolve().parent / "results" / "latest.json"


def bridge_available() -> bool:
    """True when the OpenTelemetry bridge is part of this checkout."""
    try:
        return importlib.util.find_spec("tachograph.otel") is not None
    except ModuleNotFoundError:
        return False


def postgres_available() -> bool:
    """True when the PostgreSQL figures can run: psycopg, and a server or its binaries."""
    if importlib.util.find_spec("psycopg") is None:
        return False
    if os.environ.get("TACHOGRAPH_TEST_PG"):
        return True
    from tachograph.testing.pgserver import find_bindir

    return find_bindir() is not None


def _compiled_scan() -> bool:
    from tachograph.record import canonical

    return bool(getattr(canonical, "COMPILED", False))  # an older src (bench.ab) has none


def _bytecode_cached() -> bool:
    import tachograph

    source = tachograph.__file__
    return source is not None and Path(importlib.util.cache_from_source(source)).is_file()


def _command(scale: float, only: Sequence[str] | None, repeats: int) -> str:
    """The command line that measures what a document holds (``--json``, ``--dir`` and
    ``--no-profile`` change no figure)."""
    words = ["python -m bench.run"]
    if only:
        words.append(f"--only {','.join(only)}")
    if scale != 1.0:
        words.append(f"--scale {scale:g}")
    if repeats:
        words.append(f"--repeats {repeats}")
    return " ".join(words)


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    info: dict[str, Any] = {
        "date_utc": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cpus": os.cpu_count(),
        "python": f"{sys.implementation.name} {platform.python_version()}",
        "platform": platform.platform(terse=True),
        "sqlite": sqlite3.sqlite_version,
        # the C profile scan of the canonical encoder (hatch_build.py), or the Python walk
        "compiled_scan": _compiled_scan(),
        # whether the library loads from bytecode; a spawned verification worker compiles
        # it from source otherwise (PYTHONDONTWRITEBYTECODE with an editable install)
        "bytecode_cached": _bytecode_cached(),
    }
    load = load_average()
    if load is not None:
        # a shared machine: how busy it was is part of the figures' context
        info["load_average"] = load
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        from importlib.metadata import version

        info["tachograph"] = version("tachograph")
        info["opentelemetry_sdk"] = version("opentelemetry-sdk")
        info["orjson"] = version("orjson")
    except Exception:
        pass
    return info


def _fmt_measure(m: Measure) -> str:
    if m.unit == "ns":
        return f"{m.median / 1000:,.2f} us" if m.median >= 1000 else f"{m.median:,.0f} ns"
    if m.unit == "events/s":
        return f"{m.median:,.0f} ev/s"
    return f"{m.median:,.1f} {m.unit}"


def _fmt_value(v: float) -> str:
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.3g}" if abs(v) < 1 else f"{v:.2f}"


def render_table(figures: Sequence[Figure]) -> str:
    """The table a person reads: one row per target."""
    header = ("figure", "subject (median)", "baseline (median)", "ratio", "target", "result")
    rows: list[tuple[str, ...]] = []
    for fig in figures:
        if not fig.targets:
            rows.append(
                (
                    fig.key,
                    _fmt_measure(fig.subject),
                    _fmt_measure(fig.baseline),
                    f"{fig.ratio:.3g} ({fig.ratio_label})",
                    "reported, no target",
                    "-",
                )
            )
        for i, t in enumerate(fig.targets):
            first = i == 0
            rows.append(
                (
                    fig.key if first else "",
                    _fmt_measure(fig.subject) if first else "",
                    _fmt_measure(fig.baseline) if first else "",
                    f"{fig.ratio:.3g} ({fig.ratio_label})" if first else "",
                    f"{t.label}: {_fmt_value(t.value)} {t.op} {_fmt_value(t.limit)}",
                    "pass" if t.passed else "MISS",
                )
            )
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header))]
    line = "  ".join("-" * w for w in widths)
    out = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)), line]
    out += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(out)


def render_profiles(figures: Sequence[Figure], *, top: int = 8) -> str:
    """Where the time goes, for each figure that missed a target."""
    parts = []
    for fig in figures:
        if fig.profile:
            parts.append(f"profile of {fig.key} (own time, top {top}):")
            for row in fig.profile[:top]:
                parts.append(
                    f"  {row['own_share'] * 100:5.1f}%  {row['own_s']:8.3f}s  "
                    f"{row['calls']:>9}  {row['function']}"
                )
    return "\n".join(parts)


def run_suite(
    *,
    scale: float = 1.0,
    json_path: str | os.PathLike[str] | None = DEFAULT_JSON,
    only: Sequence[str] | None = None,
    profile: bool = True,
    repeats: int = 0,
    workdir: str | os.PathLike[str] | None = None,
    out: TextIO | None = sys.stdout,
) -> dict[str, Any]:
    """Run the suite; returns the JSON document (also written to ``json_path`` if given)."""
    owned = workdir is None
    root = Path(tempfile.mkdtemp(prefix="tachograph-bench-") if workdir is None else workdir)
    root.mkdir(parents=True, exist_ok=True)
    settings = Settings(scale=scale, workdir=str(root), profile=profile, repeats=repeats)
    started = time.perf_counter()
    machine_at_start = machine()
    figures: list[Figure] = []
    timings: dict[str, float] = {}
    try:
        for name in MODULES:
            if only and name not in only:
                continue
            if name == "bridge" and not bridge_available():
                continue
            t0 = time.perf_counter()
            module = importlib.import_module(f"bench.{name}")
            # A library may configure the root logger (the MCP server installs a rich handler
            # at INFO): restore it after each module, or every later figure pays for
            # printing its HTTP client's log lines.
            logger = logging.getLogger()
            handlers, level = list(logger.handlers), logger.level
            try:
                produced: list[Figure] = module.figures(settings)
            finally:
                logger.handlers[:] = handlers
                logger.setLevel(level)
            for fig in produced:
                # a miss, or a figure with no target yet: say where the time goes
                wanted = not fig.passed or not fig.targets
                if profile and wanted and fig.profile_fn is not None:
                    fig.profile = profile_call(fig.profile_fn)
            figures.extend(produced)
            timings[name] = round(time.perf_counter() - t0, 2)
            if out is not None:
                print(f"  {name}: {timings[name]:.1f}s", file=out, flush=True)
    finally:
        if owned:
            shutil.rmtree(root, ignore_errors=True)
    load_at_end = load_average()
    document = {
        "command": _command(scale, only, repeats),
        "scale": scale,
        "machine": {**machine_at_start, "load_average_at_end": load_at_end},
        "seconds": round(time.perf_counter() - started, 1),
        "module_seconds": timings,
        "passed": all(f.passed for f in figures),
        "figures": {f.key: f.to_dict() for f in figures},
    }
    if json_path is not None:
        path = Path(json_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    if out is not None:
        print(file=out)
        print(render_table(figures), file=out)
        profiles = render_profiles(figures)
        if profiles:
            print(file=out)
            print(profiles, file=out)
        m: dict[str, Any] = document["machine"]  # type: ignore[assignment]
        print(
            f"\n{sum(f.passed for f in figures)}/{len(figures)} figures meet every target; "
            f"{document['seconds']}s on {m.get('cpus')} CPUs, {m.get('python')}, "
            f"compiled scan {'on' if m.get('compiled_scan') else 'off'}, "
            f"{m.get('date_utc')}, load average {m.get('load_average')} -> {load_at_end}",
            file=out,
        )
        if json_path is not None:
            print(f"JSON: {json_path}", file=out)
    return document


def main(argv: Sequence[str] | None = None) -> int:
    """The command line; exit status 0 whether or not targets are met (1 on a crash)."""
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__)
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every size (0.1: quick)")
    parser.add_argument("--json", default=str(DEFAULT_JSON), help="where to write the results")
    parser.add_argument("--only", default="", help=f"comma-separated modules: {', '.join(MODULES)}")
    parser.add_argument("--no-profile", action="store_true", help="skip profiles of misses")
    parser.add_argument("--repeats", type=int, default=0, help="samples per measure (0: default)")
    parser.add_argument("--dir", default=None, help="work directory (default: a temporary one)")
    parser.add_argument("--strict", action="store_true", help="exit 2 when any target is missed")
    args = parser.parse_args(argv)
    only = [m.strip() for m in args.only.split(",") if m.strip()]
    unknown = sorted(set(only) - set(MODULES))
    if unknown:
        parser.error(f"unknown module(s) {', '.join(unknown)}; choose from {', '.join(MODULES)}")
    document = run_suite(
        scale=args.scale,
        json_path=args.json or None,  # "" skips the file, as documented
        only=only or None,
        profile=not args.no_profile,
        repeats=args.repeats,
        workdir=args.dir,
    )
    return 2 if args.strict and not document["passed"] else 0


if __name__ == "__main__":
    sys.exit(main())
