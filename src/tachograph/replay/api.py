"""Replay, fork and resume: run the agent's own code against a recorded run.

* :func:`replay` serves every model answer, tool result, clock reading, random value and
  external read from the record; nothing runs live and nothing is written. It reports the
  first divergence (or every one, with ``collect=True``), and whether the replay reproduces
  or only simulates (environment drift).
* :func:`fork` serves a run up to step N (optionally overriding the answer at N), then goes
  on live in a new run whose ``run.started`` names its parent. Tools that write default to
  dry run.
* :func:`resume` continues a run that never finished (a crash) in the same run: recorded
  steps are served, then the agent goes on live. A dangling intent is handled by its effect.
"""

from __future__ import annotations

import asyncio
import enum
import inspect
import os
from collections.abc import Callable, Sequence
from typing import Any, Union

from ..capture.agent import Agent, Run, as_agent, dry_run_default, record, release_store
from ..capture.boundary import ReplayStopped, error_info
from ..capture.recorder import Durability, Recorder
from ..capture.session import Session
from ..errors import Divergence, ProfileError, ReplayError
from ..record.event import Event, new_ulid
from ..record.seal import Processor
from ..store import Store, open_store
from .engine import ReplayEngine
from .history import RunHistory
from .report import Drift, ReplayReport

__all__ = ["MatchMode", "Source", "areplay", "fork", "replay", "resume"]


class MatchMode(str, enum.Enum):
    """How the agent's steps are matched with the record.

    ``strict``: the next recorded step must be the one the agent takes. ``key``: calls are
    matched by idempotency key, for agents whose calls complete in varying order.
    """

    STRICT = "strict"
    KEY = "key"

    def __str__(self) -> str:
        return self.value

    @classmethod
    def parse(cls, value: str | MatchMode) -> MatchMode:
        """The mode named by ``value``, or an error listing the valid names."""
        try:
            return cls(value)
        except ValueError:
            valid = ", ".join(repr(m.value) for m in cls)
            raise ReplayError(f"unknown match mode {value!r}; expected one of {valid}") from None


Source = Union[Store, str, "os.PathLike[str]", RunHistory, None]
"""Where a recorded run comes from: a store (or its URL), or a :class:`RunHistory`."""


def _history(source: Source, run_id: str | None, tenant: str | None) -> RunHistory:
    if isinstance(source, RunHistory):
        if run_id is not None and run_id != source.run_id:
            raise ReplayError(
                f"the history holds run {source.run_id!r}, not {run_id!r}", run_id=run_id
            )
        return source
    if run_id is None:
        raise ReplayError("name the run to replay (run_id)")
    return RunHistory.from_store(source, run_id, tenant=tenant)


def _dry_run_seqs(events: tuple[Event, ...]) -> list[int]:
    return [
        e.seq
        for e in events
        if e.type == "tool.completed" and (e.payload or {}).get("dry_run") is True
    ]


def _recorded_in_dry_run(history: RunHistory) -> bool:
    return history.labels.get("tachograph.dry_run") == "true"


def drift(
    recorded: dict[str, Any] | None,
    current: dict[str, Any] | None,
    *,
    used_tools: frozenset[str] | None = None,
) -> list[Drift]:
    """What changed between two environment fingerprints (SPEC section 7).

    Model ids, prompt hashes, tool schemas and versions, and the code version count; the
    runtime and the recorder version are reported by :func:`runtime_notes`. With
    ``used_tools`` (the tools the recorded run called), a tool declared on one side only
    counts when the run used it: an agent declared without an explicit tool list
    fingerprints every tool its process has imported, which says nothing about this run.
    """
    if recorded is None or current is None:
        return []
    out: list[Drift] = []
    if recorded.get("code_version") != current.get("code_version"):
        out.append(Drift("code_version", recorded.get("code_version"), current.get("code_version")))
    if sorted(recorded.get("models") or []) != sorted(current.get("models") or []):
        out.append(Drift("models", recorded.get("models"), current.get("models")))
    for section in ("prompts", "tools"):
        before = recorded.get(section) or {}
        after = current.get(section) or {}
        for name in sorted(set(before) | set(after)):
            one_sided = (name in before) != (name in after)
            if (
                section == "tools"
                and one_sided
                and used_tools is not None
                and name not in used_tools
            ):
                continue
            if before.get(name) != after.get(name):
                out.append(Drift(f"{section}.{name}", before.get(name), after.get(name)))
    return out


def runtime_notes(recorded: dict[str, Any] | None, current: dict[str, Any] | None) -> list[str]:
    """Differences in runtime and recorder, which do not make a simulation by themselves."""
    notes = []
    for key in ("runtime", "recorder"):
        if recorded and current and recorded.get(key) != current.get(key):
            notes.append(f"{key} was {recorded.get(key)!r}, is {current.get(key)!r}")
    return notes


def _call(spec: Agent, input: Any) -> Any:
    result = spec(input)
    if inspect.isawaitable(result):
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(_await(result))
        raise ReplayError("the agent is async and a loop is running: use 'await areplay(...)'")
    return result


async def _await(awaitable: Any) -> Any:
    return await awaitable


def _drive(
    session: Session, engine: ReplayEngine, spec: Agent, input: Any
) -> tuple[str, Any, dict[str, Any] | None]:
    """Run the agent under ``session``; returns (status, output, error)."""
    session.activate()
    try:
        try:
            output = _call(spec, input)
        except ReplayStopped:
            if session.fatal_error is not None:
                raise session.fatal_error from None
            return "stopped", None, None
        except Exception as exc:
            info = error_info(exc)
            try:
                engine.check_end("error", None, info)
            except ReplayStopped:
                pass
            return "error", None, info
        try:
            engine.check_end("ok", output, None)
        except ReplayStopped:
            pass
        return "ok", output, None
    finally:
        session.deactivate()


def replay(
    store: Source,
    run_id: str | None,
    agent: Callable[..., Any] | Agent,
    *,
    tenant: str | None = None,
    match: MatchMode | str = MatchMode.STRICT,
    collect: bool = False,
    raise_on_divergence: bool = False,
    allow_unverified: bool = False,
    rerun_pure: bool = False,
    env: dict[str, Any] | None = None,
    processors: Sequence[Processor] = (),
) -> ReplayReport:
    """Replay a recorded run against the agent's current code; nothing runs live.

    ``store`` is a store (or its URL) holding ``run_id``, or a :class:`RunHistory` (from a
    JSONL file or a list of events; ``run_id`` may then be ``None``). The run is verified as
    ``tacho verify`` verifies it before anything is served. ``match`` is ``strict`` (the next
    recorded step must be the one the agent takes) or ``key`` (calls matched by idempotency
    key, for agents whose calls complete in varying order). By default replay stops at the
    first divergence; ``collect=True`` goes on and reports every divergence it can;
    ``raise_on_divergence=True`` raises :class:`~tachograph.errors.Divergence` (carrying the
    report) instead of returning it. ``rerun_pure=True`` re-executes ``pure`` tools and
    compares their results. ``processors`` are those the run was recorded with (e.g.
    redaction): the agent's steps are passed through them before they are compared with the
    (processed) record.
    """
    mode = MatchMode.parse(match)
    history = _history(store, run_id, tenant)
    unverified = history.check_replayable(allow_unverified=allow_unverified)
    events = history.events
    spec = as_agent(agent, history.actor)
    recorded_env = history.env
    current_env = env if env is not None else spec.fingerprint()
    engine = ReplayEngine(
        history,
        mode="replay",
        match=mode.value,
        raise_on_divergence=not collect,
        rerun_pure=rerun_pure,
        processors=processors,
    )
    session = Session(
        mode="replay",
        run_id=history.run_id,
        actor=history.actor,
        engine=engine,
        processors=processors,
    )
    engine.attach(session)
    _status, output, error = _drive(session, engine, spec, history.input)
    report = ReplayReport(
        run_id=history.run_id,
        mode="replay",
        divergences=tuple(engine.divergences),
        drift=tuple(drift(recorded_env, current_env, used_tools=history.used_tools)),
        events=len(events),
        served=engine.served + 1,  # run.started
        unverified=unverified,
        erased=history.erased,
        output=output,
        error=error,
        aborted=engine.aborted,
        notes=tuple(runtime_notes(recorded_env, current_env))
        + tuple(session.notes)
        + tuple(engine.matcher.notes)
        + (
            ("the recorded run never finished (no run.finished)",)
            if history.finished is None
            else ()
        )
        + _dry_run_note(events),
    )
    if raise_on_divergence and not report.reproduced:
        raise Divergence(
            report.render(),
            report=report,
            run_id=report.run_id,
            seq=report.first.seq if report.first else None,
        )
    return report


def _dry_run_note(events: tuple[Event, ...]) -> tuple[str, ...]:
    seqs = _dry_run_seqs(events)
    if not seqs:
        return ()
    return (
        "the recording holds dry-run (simulated) tool results at seq "
        + ", ".join(map(str, seqs))
        + "; they were served as recorded, not as real effects",
    )


async def areplay(
    store: Source, run_id: str | None, agent: Callable[..., Any] | Agent, **options: Any
) -> ReplayReport:
    """:func:`replay` for async agents, from inside a running event loop."""
    return await asyncio.to_thread(replay, store, run_id, agent, **options)


def _override_seq(events: tuple[Event, ...], at: int) -> int:
    target = events[at]
    if target.type in ("model.response", "tool.completed"):
        return at
    if target.type in ("model.request", "tool.requested"):
        for e in events[at + 1 :]:
            if e.idempotency_key == target.idempotency_key and e.type in (
                "model.response",
                "tool.completed",
            ):
                return e.seq
    raise ReplayError(
        f"cannot override seq {at} ({target.type}): override the answer of a model or tool "
        "call (model.response, tool.completed, or the request whose answer it is)",
        seq=at,
    )


def fork(
    store: Source,
    run_id: str | None,
    at: int,
    agent: Callable[..., Any] | Agent,
    *,
    override: Any = ...,
    new_run_id: str | None = None,
    tenant: str | None = None,
    to_store: Store | str | os.PathLike[str] | None = None,
    match: MatchMode | str = MatchMode.STRICT,
    dry_run: bool | None = True,
    allow_unverified: bool = False,
    labels: dict[str, str] | None = None,
    processors: Sequence[Processor] = (),
    durability: Durability | str = Durability.EFFECTS,
) -> ReplayReport:
    """Serve ``run_id`` up to step ``at``, then continue live in a new run.

    ``override`` replaces the answer served at ``at`` ("what if the model had answered
    this"). Tools that write run in dry run unless ``dry_run=False``. The report's
    ``new_run_id`` names the fork; its ``run.started`` names the parent ``{run_id, seq}``.
    Served steps are copied into the fork, their idempotency keys re-based onto it.
    ``processors`` (e.g. the redaction of the original recording) apply to every event of the
    fork. The fork goes to ``to_store``, by default the store the run was read from (a
    history read from a file needs ``to_store``).
    """
    mode = MatchMode.parse(match)
    history = _history(store, run_id, tenant)
    events = history.events
    if not 0 <= at < len(events):
        raise ReplayError(
            f"seq {at} is outside run {history.run_id!r} (0..{len(events) - 1})", seq=at
        )
    unverified = history.check_replayable(allow_unverified=allow_unverified)
    spec = as_agent(agent, history.actor)
    override_at = _override_seq(events, at) if override is not ... else None
    cut = max(at, override_at or at)
    prefix = [e for e in events[: cut + 1] if e.type != "run.finished"]
    if to_store is None:
        if isinstance(store, RunHistory):
            raise ReplayError("a fork of a run read from a file needs to_store (where to record)")
        to_store = store
    rec = record(
        to_store,
        actor=history.actor,
        input=history.input,
        run_id=new_run_id or f"{history.run_id}.fork-{new_ulid()[-8:].lower()}",
        tenant=history.tenant,
        agent=spec,
        labels={**(labels or {}), "tachograph.fork_of": history.run_id},
        dry_run=dry_run_default(dry_run),
        parent={"run_id": history.run_id, "seq": at},
        processors=processors,
        durability=durability,
        key_secret=history.key_secret.hex() if history.key_secret is not None else None,
    )
    run = rec.start()
    run.session.deactivate()
    engine = ReplayEngine(
        history,
        mode="fork",
        match=mode.value,
        raise_on_divergence=True,
        live_after_source=True,
        copy_served=True,
        override=(override_at, override) if override_at is not None else None,
        processors=processors,
        events=prefix,
    )
    session = Session(
        mode="fork",
        run_id=run.run_id,
        actor=history.actor,
        recorder=run.recorder,
        engine=engine,
        dry_run=rec.dry_run,
    )
    engine.attach(session)
    run.session = session
    try:
        return _finish_live(rec.env, run, session, engine, spec, history, "fork", unverified)
    finally:
        rec.release()


def _finish_live(
    env: dict[str, Any],
    run: Run,
    session: Session,
    engine: ReplayEngine,
    spec: Agent,
    history: RunHistory,
    mode: str,
    unverified: bool,
) -> ReplayReport:
    status, output, error = _drive(session, engine, spec, history.input)
    if status == "stopped" and mode == "resume":
        # Nothing was appended while the record was being served: leave the crashed run
        # open, so that it can be resumed again once the agent follows its recorded path.
        report = _live_report(
            env, run, session, engine, history, mode, unverified, status, output, error
        )
        raise Divergence(
            report.render() + "\n  the run was left unfinished; nothing was appended",
            report=report,
            run_id=report.run_id,
            seq=report.first.seq if report.first else None,
        )
    if status == "stopped":
        body: dict[str, Any] = {
            "status": "aborted",
            "error": {
                "type": "tachograph.Divergence",
                "message": "the agent left the recorded path",
            },
        }
    elif error is not None:
        body = {"status": "error", "error": error}
    else:
        body = {"status": "ok", "output": output}
    try:
        run.recorder.append("run.finished", body)
    except ProfileError as bad:
        # an output outside the profile: the run still ends, as an error that says so
        error = {"type": "tachograph.errors.ProfileError", "message": str(bad)}
        status, output = "error", None
        run.recorder.append("run.finished", {"status": "error", "error": error})
    run.recorder.flush()
    return _live_report(env, run, session, engine, history, mode, unverified, status, output, error)


def _live_report(
    env: dict[str, Any],
    run: Run,
    session: Session,
    engine: ReplayEngine,
    history: RunHistory,
    mode: str,
    unverified: bool,
    status: str,
    output: Any,
    error: dict[str, Any] | None,
) -> ReplayReport:
    notes = list(session.notes) + list(engine.matcher.notes)
    if session.used_dry_run:
        notes.append("dry-run tools were used: simulated results are marked dry_run")
    return ReplayReport(
        run_id=history.run_id,
        mode=mode,
        divergences=tuple(engine.divergences),
        drift=tuple(drift(history.env, env, used_tools=history.used_tools)),
        events=len(history.events),
        served=engine.served,
        unverified=unverified,
        erased=history.erased,
        output=output,
        error=error,
        aborted=engine.aborted or status == "stopped",
        new_run_id=run.run_id,
        notes=tuple(notes),
        final_status=(
            ("unfinished" if mode == "resume" else "aborted")
            if status == "stopped"
            else ("error" if error is not None else "ok")
        ),
    )


def resume(
    store: Store | str | os.PathLike[str] | None,
    run_id: str,
    agent: Callable[..., Any] | Agent,
    *,
    tenant: str | None = None,
    confirm: bool = False,
    match: MatchMode | str = MatchMode.STRICT,
    dry_run: bool | None = None,
    processors: Sequence[Processor] = (),
    durability: Durability | str = Durability.EFFECTS,
) -> ReplayReport:
    """Continue a crashed run (no ``run.finished``) in the same run.

    Recorded steps are served; then the agent continues live, appending to the run. A call
    whose intent was recorded but never completed is handled by its effect: ``pure`` and
    ``read`` run again; ``write`` runs again with the same idempotency key if ``confirm``,
    else in dry run; ``irreversible`` raises :class:`~tachograph.errors.ConfirmationRequired`
    unless ``confirm`` (it escapes even an agent's ``except Exception``). The intent is not
    recorded a second time: its completion follows the recorded intent, under its key.

    A dry-run result is never taken for a real one: once the agent acts on a simulated
    result (an unconfirmed write, or a recorded dry-run result), every later write or
    irreversible tool of this resume runs in dry run too, and the report says so. A run
    recorded in dry run resumes in dry run unless ``dry_run=False``. If the agent leaves the
    recorded path before the crash point, :class:`~tachograph.errors.Divergence` is raised and
    the run is left unfinished. Pass the ``processors`` the run was recorded with (redaction),
    so that the events appended now are processed alike.
    """
    mode = MatchMode.parse(match)
    owned = not isinstance(store, Store)
    st = store if isinstance(store, Store) else open_store(store, create=False)
    try:
        history = RunHistory.from_store(st, run_id, tenant=tenant)
        if history.finished is not None:
            raise ReplayError(
                f"run {run_id!r} has finished; fork it instead of resuming it", run_id=run_id
            )
        history.check_replayable()
        spec = as_agent(agent, history.actor)
        last = history.events[-1]
        recorder = Recorder(
            st,
            run_id=last.run_id,
            actor=history.actor,
            tenant=last.tenant,
            head=(last.seq, last.hash),
            processors=processors,
            durability=durability,
        )
        engine = ReplayEngine(
            history,
            mode="resume",
            match=mode.value,
            raise_on_divergence=True,
            live_after_source=True,
            confirm=confirm,
            processors=processors,
        )
        session = Session(
            mode="resume",
            run_id=last.run_id,
            actor=history.actor,
            recorder=recorder,
            engine=engine,
            # A run recorded in dry run goes on in dry run unless the caller says otherwise.
            dry_run=dry_run_default(dry_run)
            or (dry_run is None and _recorded_in_dry_run(history)),
        )
        engine.attach(session)
        run = Run(session, recorder, st)
        return _finish_live(
            spec.fingerprint(), run, session, engine, spec, history, "resume", False
        )
    finally:
        if owned:
            release_store(st)
