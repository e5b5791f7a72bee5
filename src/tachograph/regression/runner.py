"""Regression replay for CI: a corpus of saved runs, their verdicts, and replaying them all.

A *corpus* is a folder of runs kept as fixtures: each run is one JSONL file (SPEC section 4,
``NAME.jsonl``) with a sidecar beside it (``NAME.tacho.json``) that says whether the run was
**good** or **bad**, why, and for a bad run the ``seq`` of the step that was wrong. Replaying
the corpus against a build gives each run an :class:`Outcome`: ``reproduced`` and ``fixed``
pass; ``changed``, ``still_wrong``, ``raised`` (the agent raised or exited) and
``unreplayable`` fail. A reviewed change is accepted without editing the log: a digest of
the divergences the new code produces is appended to the sidecar, and a replay that
produces exactly those counts as ``reproduced``. The CLI is
``tacho save`` / ``tacho test``; the pytest plugin is :mod:`tachograph.pytest_plugin`.
"""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import pickle
import queue
import signal
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field, fields, replace
from typing import Any

import orjson

from ..capture.agent import Agent
from ..capture.loader import load_agent
from ..errors import FormatError, TachographError, Unreplayable, VerificationFailed
from ..record.canonical import canonical
from ..record.event import Event, EventType, now_ts
from ..record.jsonl import read_jsonl
from ..replay.guard import EXIT_REFUSED
from ..replay.report import DivergenceKind, Drift, ReplayReport, one_line
from ..store.parallel import ctrl_c_held, end_pool, leave_ctrl_c_to_caller
from ..views.text import escape
from .corpus import (
    FIXTURE_VERSION,
    SIDECAR_SUFFIX,
    CorpusError,
    CorpusRun,
    Outcome,
    Verdict,
    load_corpus,
    read_sidecar,
    save_run,
    write_json,
)

__all__ = [
    "FIXTURE_VERSION",
    "SIDECAR_SUFFIX",
    "CaseResult",
    "CorpusError",
    "CorpusReport",
    "CorpusRun",
    "Outcome",
    "Verdict",
    "check_run",
    "junit_xml",
    "load_corpus",
    "save_run",
    "test_corpus",
]

# -- loading agents ---------------------------------------------------------------------------


def _spec_of(agent: Callable[..., Any] | Agent) -> str | None:
    """``module:attr`` for an agent object defined at module level, so workers can load it."""
    fn = agent.fn if isinstance(agent, Agent) else agent
    module = sys.modules.get(getattr(fn, "__module__", "") or "")
    if module is None or module.__name__ == "__main__":
        return None
    for attr, value in vars(module).items():
        if value is agent:
            return f"{module.__name__}:{attr}"
    return None


# -- replaying one run ------------------------------------------------------------------------


@dataclass(frozen=True)
class CaseResult:
    """The outcome of one saved run against the agent under test.

    ``seq`` is the step that matters: the first divergence (``changed``, ``fixed``), or the
    wrong step that is still taken (``still_wrong``). ``detail`` is the divergence report, or
    the reason a run could not be replayed. ``drift`` lists what differs between the recorded
    environment and the agent's: a drifted replay is a simulation, not a reproduction.
    """

    name: str
    run_id: str | None
    verdict: Verdict | None
    """``None`` when the run's sidecar cannot say it (unreadable, broken, newer)."""
    outcome: Outcome
    reason: str
    seq: int | None = None
    kind: str | None = None
    wrong_at: int | None = None
    note: str | None = None
    events: int = 0
    divergences: int = 0
    digest: str | None = None
    drift: tuple[Drift, ...] = ()
    simulation: bool = False
    accepted: bool = False
    code_version: str | None = None
    detail: str = ""
    notes: tuple[str, ...] = ()
    seconds: float = 0.0
    replay: dict[str, Any] | None = field(default=None, compare=False)

    @property
    def passed(self) -> bool:
        """True when this run lets the build pass."""
        return self.outcome.passed

    def to_dict(self) -> dict[str, Any]:
        """JSON form (documented in docs/regression.md)."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data.update(
            verdict=self.verdict.value if self.verdict is not None else None,
            outcome=self.outcome.value,
            passed=self.passed,
            replay_kind="simulation" if self.simulation else "reproduction",
            drift=[d.to_dict() for d in self.drift],
            notes=list(self.notes),
            seconds=round(self.seconds, 3),
        )
        for internal in ("simulation", "detail", "code_version"):
            del data[internal]
        return data

    def render(self) -> str:
        """A paragraph: the verdict line, then the divergence report or the reason."""
        verdict = f"{self.verdict.value} run" if self.verdict is not None else "verdict unknown"
        head = f"{self.name}: {self.outcome.label.upper()} ({verdict}): {self.reason}"
        lines = [head]
        if self.note:
            lines.append(f"  note: {self.note}")
        lines.extend(f"  {n}" for n in self.notes)
        lines = [one_line(line) for line in lines]
        if self.detail:  # a replay report: its lines are one line each already
            lines.extend(f"  {line}" for line in self.detail.split("\n"))
        return "\n".join(lines)


def _unreplayable(entry: CorpusRun, reason: str, **extra: Any) -> CaseResult:
    run_id = extra.pop("run_id", entry.run_id)
    return CaseResult(
        entry.name,
        run_id,
        entry.verdict,
        Outcome.UNREPLAYABLE,
        reason,
        wrong_at=entry.wrong_at,
        note=entry.note,
        **extra,
    )


def _load_events(entry: CorpusRun) -> list[Event] | str:
    """The run's events, or why they cannot be used."""
    if entry.problem:
        return entry.problem
    try:
        runs = read_jsonl(entry.path)
    except VerificationFailed as exc:
        reports = getattr(exc, "reports", None) or [getattr(exc, "report", None)]
        text = "; ".join(r.render() for r in reports if r is not None) or str(exc)
        return f"the run does not verify: {text}"
    except (FormatError, OSError) as exc:
        return f"the file cannot be read as JSONL: {exc}"
    if len(runs) != 1:
        return f"the file holds {len(runs)} runs; a corpus file holds exactly one"
    events = runs[0]
    if entry.run_id is not None and events[0].run_id != entry.run_id:
        return f"the sidecar names run {entry.run_id!r} but the file holds {events[0].run_id!r}"
    if entry.wrong_at is not None and entry.wrong_at >= len(events):
        return f"wrong_at {entry.wrong_at} is beyond the run's last seq {len(events) - 1}"
    erased = [e.seq for e in events if e.erased]
    if erased:
        return (
            f"payloads erased at seq {', '.join(map(str, erased))}: the recording cannot serve "
            "or compare those steps"
        )
    return events


def _expected_digest(entry: CorpusRun) -> tuple[str | None, Mapping[str, Any] | None]:
    if not entry.accepted:
        return None, None
    last = entry.accepted[-1]
    digest = last.get("digest")
    return (digest if isinstance(digest, str) else None), last


def check_run(
    entry: CorpusRun, agent: Callable[..., Any] | Agent, *, match: str = "strict"
) -> CaseResult:
    """Replay one saved run against ``agent`` and classify it (see the module docstring).

    The run is replayed from its events (a :class:`~tachograph.replay.history.RunHistory`,
    verified as a stored run is); nothing is written anywhere.
    """
    from ..replay.api import replay  # the replay engine imports the runtime: load it on use
    from ..replay.history import RunHistory

    started = time.perf_counter()
    loaded = _load_events(entry)
    if isinstance(loaded, str):
        return _unreplayable(entry, loaded, seconds=time.perf_counter() - started)
    events = loaded
    run_id = events[0].run_id
    try:
        history = RunHistory.from_events(events, source=str(entry.path))
        report = replay(history, run_id, agent, match=match, collect=True)
    except Exception as exc:  # the harness failed on this run: report it, go on with the rest
        why = f"replay failed: {type(exc).__name__}: {exc}"
        if isinstance(exc, Unreplayable):
            why = str(exc)
        return _unreplayable(entry, why, run_id=run_id, seconds=time.perf_counter() - started)
    result = _classify(entry, report, _raised(events, report))
    current = agent.fingerprint().get("code_version") if isinstance(agent, Agent) else None
    return replace(
        result,
        run_id=run_id,
        events=len(events),
        code_version=current,
        seconds=time.perf_counter() - started,
    )


def _same_error_type(recorded: Any, now: Any) -> bool:
    if not isinstance(recorded, str) or not isinstance(now, str):
        return False
    if recorded == now:
        return True
    # a class recorded as __main__.X with the agent run as a script, imported now as mod.X
    return recorded.startswith("__main__.") and now.endswith(recorded[len("__main__") :])


def _raised(events: Sequence[Event], report: ReplayReport) -> str | None:
    """What the agent raised (or how it exited) when the recording did not end that way, in
    words; ``None`` when it returned, or ended as the recording ended (the same status and
    exception type: its steps then decide)."""
    error = report.error
    if not isinstance(error, dict):
        return None
    last = events[-1] if events else None
    payload = (
        last.payload if last is not None and last.type == EventType.RUN_FINISHED.value else None
    )
    recorded = payload if isinstance(payload, dict) else {}
    status = recorded.get("status")
    recorded_error = recorded.get("error")
    if (
        status in ("error", "aborted")
        and isinstance(recorded_error, dict)
        and _same_error_type(recorded_error.get("type"), error.get("type"))
    ):
        return None
    kind, message = str(error.get("type") or "an exception"), str(error.get("message") or "")
    if kind == EXIT_REFUSED:
        what = f"the agent called {message.partition(' ')[0] or 'os._exit'}"
    elif kind == "SystemExit":
        what = f"the agent exited (SystemExit: {message or None})"
    else:
        what = f"the agent raised {kind}" + (f": {message}" if message else "")
    frame = error.get("frame")  # file:line; the file's name is enough here (the report has all)
    where = f" ({os.path.basename(frame)})" if isinstance(frame, str) and frame else ""
    ended = f"ended {status}" if isinstance(status, str) else "never finished"
    return f"{what}{where}, where the recording {ended}"


def _verdict_of(
    entry: CorpusRun, report: ReplayReport, digest: str, raised: str | None = None
) -> tuple[Outcome, str]:
    first = report.first
    wrong_at = entry.wrong_at or 0
    if report.unreplayable:
        step = report.unreplayable[0]
        where = f"seq {step.get('seq')} ({step.get('type')})"
        return Outcome.UNREPLAYABLE, f"{where}: {step.get('reason')}"
    if first is None and report.unvouched and entry.verdict is not Verdict.BAD:
        tools = ", ".join(sorted({repr(c.get("tool")) for c in report.unvouched}))
        return Outcome.UNREPLAYABLE, (
            f"every recorded step matched, but the record cannot vouch for tool calls the "
            f"model asked for ({tools}): record them with @tachograph.tool"
        )
    if first is not None and first.kind is DivergenceKind.UNREPLAYABLE:
        why = f"seq {first.seq} cannot be served: {first.explanation}"
        if entry.verdict is Verdict.BAD and first.seq > wrong_at:
            # Everything through the wrong step was reproduced before the record ran out.
            return Outcome.STILL_WRONG, f"the wrong step at seq {wrong_at} is reproduced; {why}"
        return Outcome.UNREPLAYABLE, why
    where = f"seq {first.seq} ({first.kind.value})" if first else "the end"
    if entry.verdict is Verdict.BAD:
        if first is not None and first.seq <= wrong_at:
            if raised is not None:
                # the agent stopped, it did not decide otherwise: a broken agent fixes nothing
                return Outcome.RAISED, f"{raised}; the replay diverges at {where}"
            return Outcome.FIXED, f"diverges at {where}, at or before the wrong step {wrong_at}"
        later = f"; the replay first diverges later, at {where}" if first else ""
        then = f"; then {raised}" if raised is not None else ""
        return Outcome.STILL_WRONG, f"the wrong step at seq {wrong_at} is reproduced{later}{then}"
    expected, record = _expected_digest(entry)
    if raised is not None and (expected is None or digest != expected):
        return Outcome.RAISED, f"{raised}; the replay diverges at {where}"
    if expected is None:
        if report.reproduced:
            return Outcome.REPRODUCED, f"same decisions ({report.served} events matched)"
        return Outcome.CHANGED, f"decisions differ from the recording at {where}"
    when = (record or {}).get("accepted_at", "?")
    if digest == expected:
        return Outcome.REPRODUCED, f"the change accepted on {when} is reproduced"
    if report.reproduced:
        return Outcome.CHANGED, (
            f"reproduces the original recording, but the change accepted on {when} is no "
            "longer produced"
        )
    return Outcome.CHANGED, f"differs from the change accepted on {when}, first at {where}"


def _classify(entry: CorpusRun, report: ReplayReport, raised: str | None = None) -> CaseResult:
    first = report.first
    digest = _digest(report)
    expected, _ = _expected_digest(entry)
    if expected is not None and expected != digest and expected == _digest(report, legacy=True):
        digest = expected  # accepted before locations were left out of the digest
    outcome, reason = _verdict_of(entry, report, digest, raised)
    seq = first.seq if first else None
    if outcome is Outcome.STILL_WRONG:
        seq = entry.wrong_at
    return CaseResult(
        entry.name,
        report.run_id,
        entry.verdict,
        outcome,
        reason,
        seq=seq,
        kind=first.kind.value if first else None,
        wrong_at=entry.wrong_at,
        note=entry.note,
        divergences=len(report.divergences),
        digest=digest,
        drift=report.drift,
        simulation=report.simulation,
        accepted=bool(entry.accepted) and outcome is Outcome.REPRODUCED,
        detail=report.render(),
        replay=report.to_dict(),
    )


# -- the corpus report ------------------------------------------------------------------------


@dataclass(frozen=True)
class CorpusReport:
    """Every run's result, in corpus order, and the verdict of the whole corpus."""

    corpus: str
    agent: str
    workers: int
    results: tuple[CaseResult, ...]

    @property
    def ok(self) -> bool:
        """True when every run passed (``reproduced`` or ``fixed``)."""
        return all(r.passed for r in self.results)

    @property
    def failures(self) -> tuple[CaseResult, ...]:
        """The runs that fail the build."""
        return tuple(r for r in self.results if not r.passed)

    def counts(self) -> dict[str, int]:
        """How many runs per outcome (every outcome present, zero or not)."""
        out = {o.value: 0 for o in Outcome}
        for r in self.results:
            out[r.outcome.value] += 1
        return out

    def to_dict(self) -> dict[str, Any]:
        """A stable JSON form (documented in docs/regression.md)."""
        return {
            "corpus": self.corpus,
            "agent": self.agent,
            "workers": self.workers,
            "ok": self.ok,
            "runs": len(self.results),
            "counts": self.counts(),
            "results": [r.to_dict() for r in self.results],
        }

    def render(self) -> str:
        """The summary table, then the report of every failing run."""
        rows = [("RUN", "VERDICT", "OUTCOME", "STEP", "REPLAY", "WHY")]
        for r in self.results:
            rows.append(
                (
                    r.name,
                    r.verdict.value if r.verdict is not None else "-",
                    r.outcome.label + (" (accepted)" if r.accepted else ""),
                    "-" if r.seq is None else str(r.seq),
                    "simulation" if r.simulation else "-",
                    r.reason if len(r.reason) <= 70 else r.reason[:67] + "...",
                )
            )
        widths = [max(len(row[i]) for row in rows) for i in range(5)]
        lines = [
            one_line(
                "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:5])) + "  " + row[5]
            )
            for row in rows
        ]
        counts = self.counts()
        summary = ", ".join(f"{n} {Outcome(k).label}" for k, n in counts.items() if n)
        verdict = "PASSED" if self.ok else f"FAILED ({len(self.failures)} failing)"
        lines.append("")
        lines.append(
            f"{len(self.results)} runs against {self.agent}: {summary or 'none'}. {verdict}"
        )
        for r in self.failures:
            lines.append("")
            lines.append(r.render())
        return "\n".join(lines)


def _xml_text(text: str) -> str:
    """Text a CI page shows: control, bidi and invisible characters escaped as everywhere
    (XML 1.0 admits no control character but tab, line feed and carriage return, nor a lone
    surrogate), and the two non-characters XML refuses dropped."""
    return escape(text, newlines=True).replace("\ufffe", "").replace("\uffff", "")


def junit_xml(report: CorpusReport) -> str:
    """The report as JUnit XML: one ``testcase`` per run, failures carrying the report.

    ``changed`` and ``still_wrong`` are ``failure`` elements, ``raised`` and ``unreplayable``
    an ``error`` (the agent raised, or the test could not run); each message names the run,
    the outcome and the step.
    """
    from xml.etree import ElementTree as ET

    failures = sum(1 for r in report.results if r.outcome in (Outcome.CHANGED, Outcome.STILL_WRONG))
    errors = sum(1 for r in report.results if r.outcome in (Outcome.RAISED, Outcome.UNREPLAYABLE))
    total = f"{sum(r.seconds for r in report.results):.3f}"
    attrs = {
        "name": _xml_text(f"tacho test {report.corpus}"),
        "tests": str(len(report.results)),
        "failures": str(failures),
        "errors": str(errors),
        "skipped": "0",
        "time": total,
    }
    suites = ET.Element("testsuites", attrs)
    suite = ET.SubElement(suites, "testsuite", attrs)
    props = ET.SubElement(suite, "properties")
    ET.SubElement(props, "property", {"name": "agent", "value": _xml_text(report.agent)})
    ET.SubElement(props, "property", {"name": "corpus", "value": _xml_text(report.corpus)})
    classname = _xml_text("tacho." + report.corpus.strip("/").replace("/", "."))
    for r in report.results:
        case = ET.SubElement(
            suite,
            "testcase",
            {"classname": classname, "name": _xml_text(r.name), "time": f"{r.seconds:.3f}"},
        )
        step = f" at seq {r.seq}" if r.seq is not None else ""
        message = _xml_text(f"{r.run_id or r.name}: {r.outcome.label}{step}: {r.reason}")
        if not r.passed:
            tag = "error" if r.outcome in (Outcome.RAISED, Outcome.UNREPLAYABLE) else "failure"
            node = ET.SubElement(case, tag, {"message": message, "type": r.outcome.value})
            node.text = _xml_text(r.render())
        extra = [f"{r.outcome.label}: {r.reason}"]
        extra += [f"drift (simulation, not reproduction): {d.render()}" for d in r.drift]
        extra += list(r.notes)
        ET.SubElement(case, "system-out").text = _xml_text("\n".join(extra))
    ET.indent(suites)
    return (
        '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"
    )


# -- the corpus against a build -------------------------------------------------------------


def test_corpus(
    directory: str | os.PathLike[str],
    agent: str | Callable[..., Any] | Agent,
    *,
    workers: int | None = None,  # noqa: PT028
    accept: Iterable[str] = (),  # noqa: PT028
    match: str = "strict",  # noqa: PT028
) -> CorpusReport:
    """Replay every run of the corpus against ``agent`` and classify each.

    ``agent`` is an agent object or ``module:attr``. Runs are replayed in a process pool
    (spawned, so each worker imports the agent afresh) of ``workers`` processes, by default one
    per CPU; ``workers=1`` replays in this process. Results keep the corpus order. ``accept``
    names runs (by name or run id) whose current behaviour, if ``changed``, is recorded in
    their sidecar as the new expectation; the log itself is never touched.
    """
    if match not in ("strict", "key"):
        raise CorpusError(f"unknown match mode {match!r}; expected 'strict' or 'key'")
    entries = load_corpus(directory)
    wanted = set(accept)
    known = {e.name for e in entries} | {e.run_id for e in entries if e.run_id}
    missing = sorted(wanted - known)
    if missing:
        raise CorpusError(
            f"--accept names run(s) not in the corpus: {', '.join(missing)}", path=str(directory)
        )
    if isinstance(agent, str):
        spec: str | None = agent
        loaded = load_agent(agent)
    else:
        spec, loaded = _spec_of(agent), agent
    count = workers if workers is not None else (os.cpu_count() or 1)
    count = max(1, min(count, len(entries)))
    options = {"match": match}
    if count == 1 or spec is None or not _spawn_safe():
        count = 1
        results = [check_run(e, loaded, **options) for e in entries]
    else:
        results = _in_workers(entries, spec, options, count)
    if wanted:
        results = [
            _accept(entry, result, spec or _agent_name(loaded))
            if entry.name in wanted or (entry.run_id in wanted)
            else result
            for entry, result in zip(entries, results, strict=True)
        ]
    return CorpusReport(
        corpus=str(directory),
        agent=spec or _agent_name(loaded),
        workers=count,
        results=tuple(results),
    )


test_corpus.__test__ = False  # type: ignore[attr-defined]  # not a pytest test


_LOADED: dict[str, Callable[..., Any] | Agent] = {}


def _spawn_safe() -> bool:
    """False when spawned workers could not re-import ``__main__`` (code read from stdin)."""
    main = sys.modules.get("__main__")
    if getattr(getattr(main, "__spec__", None), "name", None):
        return True
    path = getattr(main, "__file__", None)
    return path is None or os.path.exists(path)


def _worker(entry: CorpusRun, spec: str, options: dict[str, Any]) -> CaseResult:
    agent = _LOADED.get(spec)
    if agent is None:
        agent = _LOADED[spec] = load_agent(spec)
    return check_run(entry, agent, **options)


def _in_workers(
    entries: Sequence[CorpusRun], spec: str, options: dict[str, Any], count: int
) -> list[CaseResult]:
    """Replay ``entries`` in a pool of ``count`` spawned workers; results in corpus order.

    An agent can end the process that replays it (a crash in a native library, the kernel's
    out-of-memory killer, ``os._exit``). A worker's death breaks the pool. The runs that were
    in flight then (the pool hands runs out in order, so they are the first unfinished
    ones: at most ``2 * count + 1``, those running and those queued for the workers) are
    replayed each in a process of its own, so that the run whose replay ends its process is
    reported as unreplayable, saying how the process ended; the rest go to a new pool.
    """
    ctx = multiprocessing.get_context("spawn")
    results: list[CaseResult | None] = [None] * len(entries)
    pending = list(range(len(entries)))
    while pending:
        broke = False
        # The workers leave Ctrl-C to this process (from their first instant: ctrl_c_held),
        # which ends them: else each printed its own traceback, and the pool broke.
        pool = ProcessPoolExecutor(count, mp_context=ctx, initializer=leave_ctrl_c_to_caller)
        try:
            with ctrl_c_held():  # the executor starts its workers as the first tasks come
                futures = {i: pool.submit(_worker, entries[i], spec, options) for i in pending}
            # Waited for on a queue, not in Future.result: a Ctrl-C that lands while this
            # thread waits inside a future's lock can leave the lock held, and the executor's
            # thread, which takes it to cancel the future, then keeps the exit waiting for ever.
            done: queue.SimpleQueue[int] = queue.SimpleQueue()
            for i, future in futures.items():
                future.add_done_callback(_telling(done, i))
            for _ in futures:
                i = done.get()
                try:
                    results[i] = futures[i].result()
                except BrokenProcessPool:
                    broke = True
        except BaseException:
            # Ctrl-C, or anything else: end the workers now (a shutdown would wait for every
            # replay already handed to the pool)
            end_pool(pool)
            raise
        pool.shutdown()
        left = [i for i in pending if results[i] is None]
        if not broke:
            break
        suspects, pending = left[: 2 * count + 1], left[2 * count + 1 :]
        alone = _each_alone([entries[i] for i in suspects], spec, options, count, ctx)
        for i, result in zip(suspects, alone, strict=True):
            results[i] = result
    return [result for result in results if result is not None]


def _telling(done: queue.SimpleQueue[int], i: int) -> Callable[[Future[Any]], None]:
    """A future's done-callback that puts ``i`` on ``done``."""
    return lambda _: done.put(i)


def _alone(entry: CorpusRun, spec: str, options: dict[str, Any], conn: Any) -> None:
    leave_ctrl_c_to_caller()  # its caller ends it (see _in_workers)
    conn.send(_worker(entry, spec, options))
    conn.close()


def _each_alone(
    entries: Sequence[CorpusRun], spec: str, options: dict[str, Any], count: int, ctx: Any
) -> list[CaseResult]:
    """Replay each of ``entries`` in a spawned process of its own, ``count`` at a time."""
    from multiprocessing.connection import wait

    results: list[CaseResult | None] = [None] * len(entries)
    waiting = list(range(len(entries)))
    running: dict[Any, tuple[int, Any, float]] = {}
    try:
        while waiting or running:
            while waiting and len(running) < count:
                i = waiting.pop(0)
                ours, theirs = ctx.Pipe(duplex=False)
                process = ctx.Process(
                    target=_alone, args=(entries[i], spec, options, theirs), daemon=True
                )
                with ctrl_c_held():  # (a Ctrl-C held meanwhile is raised as it ends:
                    process.start()  # the process is in ``running`` by then, and ended)
                    theirs.close()  # the child's end: EOF here once the child is gone
                    running[ours] = (i, process, time.perf_counter())
            for ready in wait(list(running)):
                reader: Any = ready
                i, process, started = running.pop(reader)
                try:
                    result: CaseResult | None = reader.recv()
                except (EOFError, OSError, pickle.UnpicklingError):
                    result = None  # the process ended without sending its result, or in it
                reader.close()
                process.join()
                if result is None:
                    result = _unreplayable(
                        entries[i],
                        f"the process replaying this run ended {_how_ended(process.exitcode)} "
                        "before the replay finished",
                        seconds=time.perf_counter() - started,
                    )
                results[i] = result
    finally:
        for _, process, _ in running.values():
            process.terminate()
    return [result for result in results if result is not None]


def _how_ended(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"on signal {signal.Signals(-code).name}"
        except ValueError:
            return f"on signal {-code}"
    return f"with exit code {code}"


def _agent_name(agent: Callable[..., Any] | Agent) -> str:
    if isinstance(agent, Agent):
        return agent.name
    return str(getattr(agent, "__qualname__", None) or agent)


def _accept(entry: CorpusRun, result: CaseResult, agent: str) -> CaseResult:
    acceptable = (Outcome.CHANGED, Outcome.RAISED)
    if result.verdict is not Verdict.GOOD or result.outcome not in acceptable:
        why = (
            "a bad run is not accepted: a fix is recognised without it"
            if result.verdict is Verdict.BAD
            else f"nothing to accept: the run is {result.outcome.label}"
        )
        return replace(result, notes=(*result.notes, f"--accept ignored: {why}"))
    record = {
        "accepted_at": now_ts(),
        "agent": agent,
        "digest": result.digest,
        "divergences": result.divergences,
        "first": {"seq": result.seq, "kind": result.kind} if result.seq is not None else None,
        "code_version": result.code_version,
    }
    data = read_sidecar(entry.sidecar) if entry.sidecar.exists() else None
    if data is None:
        data = {
            "tachograph_fixture": FIXTURE_VERSION,
            "run_id": result.run_id,
            "verdict": Verdict.GOOD.value,
            "note": None,
            "wrong_at": None,
            "accepted": [],
        }
    data["accepted"] = [*(data.get("accepted") or []), record]
    write_json(entry.sidecar, data)
    return replace(
        result,
        outcome=Outcome.REPRODUCED,
        accepted=True,
        reason=f"change accepted now ({result.reason})",
        notes=(*result.notes, f"accepted: recorded in {entry.sidecar.name}"),
    )


def _placeless(kind: DivergenceKind, actual: Any) -> Any:
    """``actual`` without where in the agent's code it happened: an unrecorded call's
    ``frame`` (``/abs/path/agent.py:42``) changes with the checkout's folder and with any
    line added above it, and the digest of an accepted change must not."""
    if kind is not DivergenceKind.UNRECORDED_CALL or not isinstance(actual, dict):
        return actual
    payload = actual.get("payload")
    if not isinstance(payload, dict) or "frame" not in payload:
        return actual
    return {**actual, "payload": {k: v for k, v in payload.items() if k != "frame"}}


def _digest(report: ReplayReport, *, legacy: bool = False) -> str:
    """The digest of every divergence the replay found, as an acceptance records it.
    ``legacy``: as tachograph computed it before locations were left out (an acceptance
    saved then still matches where it was made)."""
    items = [
        {
            "kind": d.kind.value,
            "seq": d.seq,
            "expected": d.expected,
            "actual": d.actual if legacy else _placeless(d.kind, d.actual),
            "changes": [c.to_dict() for c in d.changes],
        }
        for d in report.divergences
    ]
    body: Any = {"aborted": report.aborted, "divergences": items}
    try:
        raw = canonical(body)
    except TachographError:
        raw = orjson.dumps(body, option=orjson.OPT_SORT_KEYS, default=str)
    return "sha256:" + hashlib.sha256(raw).hexdigest()
