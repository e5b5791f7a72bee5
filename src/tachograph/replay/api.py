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

import builtins
import contextlib
import enum
import inspect
import os
from collections.abc import Callable, Sequence
from typing import Any, Union

from ..capture.agent import (
    Agent,
    Run,
    as_agent,
    dry_run_default,
    output_outside_profile,
    record,
    release_store,
)
from ..capture.boundary import ReplayStopped, cancelled, error_info
from ..capture.recorder import Durability, Recorder
from ..capture.session import Session, current_session
from ..capture.vouch import unvouched_calls
from ..errors import Divergence, ProfileError, ReplayError, WriteFailed
from ..privacy.redactor import default_processors, pin_processors
from ..record.canonical import canonical
from ..record.event import Effect, Event, EventType, new_ulid
from ..record.seal import Processor
from ..store import Store, open_store
from .engine import ReplayEngine, confirmation_required
from .guard import NetworkGuard, agent_frame, parse_allow
from .history import RunHistory, gather
from .report import Drift, ReplayReport

__all__ = [
    "MatchMode",
    "Source",
    "areplay",
    "fork",
    "overlapping_calls",
    "replay",
    "resume",
]


class MatchMode(str, enum.Enum):
    """How the agent's steps are matched with the record.

    ``strict``: the next recorded step must be the one the agent takes. ``key``: calls are
    matched by idempotency key, for agents whose calls complete in varying order. ``auto``
    (the default): ``key`` when the recorded run had calls in flight at the same time
    (``asyncio.gather``, a task group), else ``strict``.
    """

    STRICT = "strict"
    KEY = "key"
    AUTO = "auto"

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


def overlapping_calls(events: Sequence[Event]) -> bool:
    """Whether the run had a call started while another was still open (concurrent calls)."""
    return gather(events)[1].overlapping


def _resolve(mode: MatchMode, history: RunHistory) -> tuple[MatchMode, tuple[str, ...]]:
    """The mode to match with, and a note when ``auto`` chose key matching."""
    if mode is not MatchMode.AUTO:
        return mode, ()
    if history.facts.overlapping:  # overlapping_calls(history.events), gathered
        return MatchMode.KEY, (
            "the recorded run had concurrent calls: they were matched by idempotency key "
            "(match='key'); pass match='strict' to require the recorded order",
        )
    return MatchMode.STRICT, ()


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


def _live_processors(
    processors: Sequence[Processor], events: Sequence[Event], redact_secrets: bool
) -> tuple[Processor, ...]:
    """The processors of the live side: those of :func:`record` (the default redaction
    included), each redactor pinned to the key the recording's tokens were made with."""
    return pin_processors(default_processors(processors, redact_secrets=redact_secrets), events)


def _recorded_in_dry_run(history: RunHistory) -> bool:
    return history.labels.get("tachograph.dry_run") == "true"


def drift(
    recorded: dict[str, Any] | None,
    current: dict[str, Any] | None,
    *,
    used_tools: frozenset[str] | None = None,
    used_models: frozenset[str] | None = None,
    asked_models: frozenset[str] | None = None,
) -> list[Drift]:
    """What changed between two environment fingerprints (SPEC section 7).

    Model ids, prompt hashes, tool schemas and versions, and the code version count; the
    runtime and the recorder version are reported by :func:`runtime_notes`. A fingerprint
    lists what the agent declared: when only one side declared its models, the models the
    other side used (``used_models``: the recorded run's model calls; ``asked_models``: the
    replay's) must be among the declared ones; when neither declared, the exact model id of
    every call is compared by the replay itself (``model_changed``). A tool declared on one
    side only counts when the other side declared tools too and the run used it
    (``used_tools``).
    """
    if recorded is None or current is None:
        return []
    out: list[Drift] = []
    if recorded.get("code_version") != current.get("code_version"):
        out.append(Drift("code_version", recorded.get("code_version"), current.get("code_version")))
    out.extend(_model_drift(recorded, current, used_models, asked_models))
    for section in ("prompts", "tools"):
        before = recorded.get(section) or {}
        after = current.get(section) or {}
        for name in sorted(set(before) | set(after)):
            one_sided = (name in before) != (name in after)
            if section == "tools" and one_sided:
                if not before or not after:
                    continue  # one side declared no tools: nothing to compare with
                if used_tools is not None and name not in used_tools:
                    continue
            if before.get(name) != after.get(name):
                out.append(Drift(f"{section}.{name}", before.get(name), after.get(name)))
    return out


def _model_drift(
    recorded: dict[str, Any],
    current: dict[str, Any],
    used: frozenset[str] | None,
    asked: frozenset[str] | None,
) -> list[Drift]:
    before = sorted(recorded.get("models") or [])
    after = sorted(current.get("models") or [])
    if before and after:
        return [Drift("models", before, after)] if before != after else []
    if before and asked is not None and not asked <= set(before):
        return [Drift("models", before, sorted(asked))]
    if after and used is not None and not used <= set(after):
        return [Drift("models", sorted(used), after)]
    return []


def used_models(events: Sequence[Event]) -> frozenset[str]:
    """The exact model ids a recorded run's model calls named."""
    return gather(events)[1].used_models


def runtime_notes(recorded: dict[str, Any] | None, current: dict[str, Any] | None) -> list[str]:
    """Differences in runtime and recorder, which do not make a simulation by themselves."""
    notes = []
    for key in ("runtime", "recorder"):
        if recorded and current and recorded.get(key) != current.get(key):
            notes.append(f"{key} was {recorded.get(key)!r}, is {current.get(key)!r}")
    return notes


def _module_of(spec: Agent) -> str | None:
    """The module the agent's function was defined in (where a recorded ``__main__.X`` of
    a run recorded with the agent's file run as a script is, once the agent is imported)."""
    name = getattr(inspect.unwrap(spec.fn), "__module__", None)
    return name if isinstance(name, str) else None


def _call(spec: Agent, input: Any) -> Any:
    result = spec(input)
    if inspect.isawaitable(result):
        import asyncio  # here: imported only for an async agent

        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(_await(result))
        raise ReplayError("the agent is async and a loop is running: use 'await areplay(...)'")
    return result


async def _await(awaitable: Any) -> Any:
    try:
        return await awaitable
    finally:
        # from here the end of asyncio.run cancels what the agent left in flight (a call
        # recorded in flight when the run finished is then ended as it was recorded)
        session = current_session()
        if session is not None:
            session.agent_returned = True


def _guard(engine: ReplayEngine, allow_network: Sequence[str]) -> NetworkGuard:
    return NetworkGuard(
        allow=allow_network, active=engine.closed_world, report=engine.unrecorded_call
    )


def _allowed(guard: NetworkGuard) -> tuple[dict[str, Any], ...]:
    return tuple({"target": a.target, "frame": a.frame} for a in guard.allowed)


def _holds_stop(exc: BaseException) -> bool:
    """Whether ``exc`` is a (nested) exception group holding a :class:`ReplayStopped`:
    a divergence inside a task group (asyncio or anyio) arrives wrapped."""
    group = getattr(builtins, "BaseExceptionGroup", None)
    if group is None or not isinstance(exc, group):
        return False
    inner: Sequence[BaseException] = getattr(exc, "exceptions", ())
    return any(isinstance(e, ReplayStopped) or _holds_stop(e) for e in inner)


def raised_at(exc: BaseException) -> str | None:
    """``file:line`` of the agent's own frame nearest to where ``exc`` was raised."""
    tb = exc.__traceback__
    if tb is None:
        return None
    while tb.tb_next is not None:
        tb = tb.tb_next
    return agent_frame(tb.tb_frame)


def _unvouched(events: Sequence[Event]) -> tuple[dict[str, Any], ...]:
    return tuple(c.to_dict() for c in unvouched_calls(events))


def _unreplayable_report(history: RunHistory, mode: str) -> ReplayReport | None:
    """The report of a run that cannot be replayed at all: which steps, and why."""
    if history.started.type != EventType.RUN_STARTED.value or not history.started.erased:
        return None
    steps: list[dict[str, Any]] = [
        {
            "seq": 0,
            "type": EventType.RUN_STARTED.value,
            "reason": "its payload was erased (retention or privacy): the agent's input and "
            "the run's key secret are gone, so the agent cannot be called as it was recorded",
        }
    ]
    for e in history.events[1:]:
        if e.erased:
            steps.append(
                {
                    "seq": e.seq,
                    "type": e.type,
                    "reason": "its payload was erased: it can be neither compared nor served",
                }
            )
    rest = len(history.events) - 1
    return ReplayReport(
        run_id=history.run_id,
        mode=mode,
        divergences=(),
        drift=(),
        events=len(history.events),
        served=0,
        erased=history.erased,
        unreplayable=tuple(steps),
        notes=(
            f"none of the {rest} recorded step(s) after run.started can be replayed without "
            "the recorded input; the chain still verifies (tacho verify), and tacho show "
            "lists what is left",
        ),
    )


def _refuse_open_irreversible(history: RunHistory) -> None:
    """Raise :class:`~tachograph.errors.ConfirmationRequired` before anything runs or is
    written when the run stopped inside an irreversible tool. Found only when the agent
    reached that call, the refusal came after the other calls left open beside it
    (concurrent writes) had been completed in dry run and queued: a refused resume still
    wrote them, and the resume with confirm that the refusal asks for then found them done
    and ran none of them."""
    effects = (Effect.WRITE.value, Effect.IRREVERSIBLE.value)
    open_effects = [
        e
        for e in history.events
        if e.type == EventType.TOOL_REQUESTED.value
        and isinstance(e.payload, dict)
        and e.payload.get("effect") in effects
        and history.completion(e.idempotency_key) is None
    ]
    for event in open_effects:
        if event.payload.get("effect") == Effect.IRREVERSIBLE.value:
            others = [e for e in open_effects if e is not event]
            raise confirmation_required(history.run_id, event.payload.get("tool"), event, others)


def _drive(
    session: Session,
    engine: ReplayEngine,
    spec: Agent,
    input: Any,
    guard: NetworkGuard | None = None,
) -> tuple[str, Any, dict[str, Any] | None]:
    """Run the agent under ``session`` (and ``guard``); returns (status, output, error)."""
    session.activate()
    closed = guard.guarding() if guard is not None else contextlib.nullcontext()

    def stopped() -> tuple[str, Any, dict[str, Any] | None]:
        if session.fatal_error is not None:
            raise session.fatal_error from None
        return "stopped", None, None

    try:
        try:
            with closed:
                output = _call(spec, input)
        except ReplayStopped:
            return stopped()
        except BaseException as exc:
            # a stop in a thread the agent started ends the agent as stopped too, whatever
            # error its main thread then ran into (the result the thread never made)
            if _holds_stop(exc) or (engine.stopped and isinstance(exc, Exception)):
                return stopped()
            # SystemExit ends a recorded run "aborted" (capture/agent.py): a replayed agent
            # that exits ends the same way, compared with the recorded end, instead of
            # taking the replay down with it (``sys.exit(0)`` would read as "reproduced").
            # An agent that ends by its own cancellation (it cancelled a call of its own and
            # let the CancelledError end it) ends "aborted", as its recording did. Ctrl-C and
            # the rest still propagate.
            if isinstance(exc, SystemExit) or cancelled(exc):
                ended = "aborted"
            elif isinstance(exc, Exception):
                ended = "error"
            else:
                raise
            info: dict[str, Any] = dict(error_info(exc))
            try:
                engine.check_end(ended, None, info)
            except ReplayStopped:
                pass
            return ended, None, {**info, "frame": raised_at(exc)}
        if engine.stopped:
            return stopped()
        try:
            canonical(output, "output")
        except ProfileError as bad:
            # as a recording ends such a run: an error that says so, in the same words
            info = dict(error_info(output_outside_profile(session.run_id, bad)))
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
    match: MatchMode | str = MatchMode.AUTO,
    collect: bool = False,
    raise_on_divergence: bool = False,
    allow_unverified: bool = False,
    rerun_pure: bool = False,
    env: dict[str, Any] | None = None,
    processors: Sequence[Processor] = (),
    allow_network: Sequence[str] = (),
    redact_secrets: bool = True,
) -> ReplayReport:
    """Replay a recorded run against the agent's current code; nothing runs live.

    ``store`` is a store (or its URL) holding ``run_id``, or a :class:`RunHistory` (from a
    JSONL file or a list of events; ``run_id`` may then be ``None``). The run is verified as
    ``tacho verify`` verifies it before anything is served. ``match`` is ``strict`` (the next
    recorded step must be the one the agent takes), ``key`` (calls matched by idempotency
    key, for agents whose calls complete in varying order) or ``auto`` (the default: ``key``
    when the recorded run had concurrent calls, else ``strict``; the report notes the
    choice). By default replay stops at the
    first divergence; ``collect=True`` goes on and reports every divergence it can;
    ``raise_on_divergence=True`` raises :class:`~tachograph.errors.Divergence` (carrying the
    report) instead of returning it. ``rerun_pure=True`` re-executes ``pure`` tools and
    compares their results. ``processors`` are those the run was recorded with (e.g.
    redaction): the agent's steps are passed through them before they are compared with the
    (processed) record. The default redaction of every recording (docs/privacy.md) is added
    as :func:`record` adds it, unless ``redact_secrets=False``; redactors are pinned to the
    recording's key id.

    Replay is a closed world: a connection or process spawn the record does not serve is
    refused (:class:`~tachograph.errors.UnrecordedCall`) and reported as an
    ``unrecorded_call`` divergence, unless ``allow_network`` lists it (``HOST:PORT``,
    ``HOST:*``, ``unix:PATH``, ``exec:PROGRAM``); what the list lets through is reported too.
    """
    history = _history(store, run_id, tenant)
    mode, match_notes = _resolve(MatchMode.parse(match), history)
    gone = _unreplayable_report(history, "replay")
    if gone is not None:
        if raise_on_divergence:
            raise Divergence(gone.render(), report=gone, run_id=gone.run_id, seq=0)
        return gone
    unverified = history.check_replayable(allow_unverified=allow_unverified)
    events = history.events
    processors = _live_processors(processors, events, redact_secrets)
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
        agent_module=_module_of(spec),
    )
    session = Session(
        mode="replay",
        run_id=history.run_id,
        actor=history.actor,
        engine=engine,
        processors=processors,
    )
    engine.attach(session)
    guard = _guard(engine, allow_network)
    _status, output, error = _drive(session, engine, spec, history.input, guard)
    report = ReplayReport(
        run_id=history.run_id,
        mode="replay",
        divergences=tuple(engine.divergences),
        drift=tuple(
            drift(
                recorded_env,
                current_env,
                used_tools=history.used_tools,
                used_models=history.facts.used_models,
                asked_models=frozenset(engine.models_asked),
            )
        ),
        events=len(events),
        served=engine.served + 1,  # run.started
        unverified=unverified,
        seal=history.seal.to_dict() if history.seal is not None else None,
        erased=history.erased,
        output=output,
        error=error,
        aborted=engine.aborted,
        notes=tuple(runtime_notes(recorded_env, current_env))
        + match_notes
        + tuple(session.notes)
        + tuple(engine.matcher.notes)
        + (
            ("the recorded run never finished (no run.finished)",)
            if history.finished is None
            else ()
        )
        + _dry_run_note(history.facts.dry_run),
        allowed_calls=_allowed(guard),
        unvouched=_unvouched(events),
    )
    if raise_on_divergence and not report.reproduced:
        raise Divergence(
            report.render(),
            report=report,
            run_id=report.run_id,
            seq=report.first.seq if report.first else None,
        )
    return report


def _dry_run_note(seqs: Sequence[int]) -> tuple[str, ...]:
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
    import asyncio

    return await asyncio.to_thread(replay, store, run_id, agent, **options)


def _override_seq(events: tuple[Event, ...], at: int) -> int:
    target = events[at]
    if target.type in (EventType.MODEL_RESPONSE.value, EventType.TOOL_COMPLETED.value):
        return at
    if target.type in (EventType.MODEL_REQUEST.value, EventType.TOOL_REQUESTED.value):
        for e in events[at + 1 :]:
            if e.idempotency_key == target.idempotency_key and e.type in (
                EventType.MODEL_RESPONSE.value,
                EventType.TOOL_COMPLETED.value,
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
    match: MatchMode | str = MatchMode.AUTO,
    dry_run: bool | None = True,
    allow_unverified: bool = False,
    labels: dict[str, str] | None = None,
    processors: Sequence[Processor] = (),
    durability: Durability | str = Durability.EFFECTS,
    allow_network: Sequence[str] = (),
    redact_secrets: bool = True,
) -> ReplayReport:
    """Serve ``run_id`` up to step ``at``, then continue live in a new run.

    ``override`` replaces the answer served at ``at`` ("what if the model had answered
    this"). Tools that write run in dry run unless ``dry_run=False``. The report's
    ``new_run_id`` names the fork; its ``run.started`` names the parent ``{run_id, seq}``.
    Served steps are copied into the fork, their idempotency keys re-based onto it.
    ``processors`` (e.g. the redaction of the original recording) apply to every event of the
    fork, after the default redaction unless ``redact_secrets=False`` (redactors pinned to
    the recording's key id). The fork goes to ``to_store``, by default the store the run was
    read from (a history read from a file needs ``to_store``).
    """
    parse_allow(allow_network)  # a bad entry fails before the fork is started
    history = _history(store, run_id, tenant)
    mode, _ = _resolve(MatchMode.parse(match), history)
    gone = _unreplayable_report(history, "fork")
    if gone is not None:
        return gone
    events = history.events
    if not 0 <= at < len(events):
        raise ReplayError(
            f"seq {at} is outside run {history.run_id!r} (0..{len(events) - 1})", seq=at
        )
    unverified = history.check_replayable(allow_unverified=allow_unverified)
    processors = _live_processors(processors, events, redact_secrets)
    spec = as_agent(agent, history.actor)
    override_at = _override_seq(events, at) if override is not ... else None
    cut = max(at, override_at or at)
    prefix = [e for e in events[: cut + 1] if e.type != EventType.RUN_FINISHED.value]
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
        redact_secrets=redact_secrets,
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
        agent_module=_module_of(spec),
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
        return _finish_live(
            rec.env, run, session, engine, spec, history, "fork", unverified, allow_network
        )
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
    allow_network: Sequence[str] = (),
) -> ReplayReport:
    guard = _guard(engine, allow_network)
    status, output, error = _drive(session, engine, spec, history.input, guard)
    allowed = _allowed(guard)
    if status == "stopped" and mode == "resume":
        # Leave the crashed run open, so that it can be resumed again once the agent follows
        # its recorded path. Concurrent calls may have gone live before the divergence (an
        # open intent run again under confirm, after its claim): what they appended is
        # written before the store is let go, and the report names it.
        with contextlib.suppress(WriteFailed):  # the report names what reached the store
            run.recorder.flush()
        report = _live_report(
            env, run, session, engine, history, mode, unverified, status, output, error, allowed
        )
        raise Divergence(
            report.render(),
            report=report,
            run_id=report.run_id,
            seq=report.first.seq if report.first else None,
        )
    recorded_error = {k: v for k, v in error.items() if k != "frame"} if error is not None else None
    if status == "stopped":
        body: dict[str, Any] = {
            "status": "aborted",
            "error": {
                "type": "tachograph.Divergence",
                "message": "the agent left the recorded path",
            },
        }
    elif recorded_error is not None:
        body = {"status": status, "error": recorded_error}
    else:
        body = {"status": "ok", "output": output}
    session.finish_unfinished()
    try:
        run.recorder.append(EventType.RUN_FINISHED.value, body)
    except ProfileError as bad:
        # an output outside the profile: the run still ends, as an error that says so
        error = {"type": "tachograph.errors.ProfileError", "message": str(bad)}
        status, output = "error", None
        run.recorder.append(EventType.RUN_FINISHED.value, {"status": "error", "error": error})
    run.recorder.flush()
    return _live_report(
        env, run, session, engine, history, mode, unverified, status, output, error, allowed
    )


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
    allowed: tuple[dict[str, Any], ...] = (),
) -> ReplayReport:
    notes = list(session.notes) + list(engine.matcher.notes)
    reran = tuple(dict(r) for r in engine.reran)
    if reran:
        notes.append(_reran_note(reran))
    if session.used_dry_run:
        notes.append("dry-run tools were used: simulated results are marked dry_run")
    return ReplayReport(
        run_id=history.run_id,
        mode=mode,
        divergences=tuple(engine.divergences),
        drift=tuple(
            drift(
                history.env,
                env,
                used_tools=history.used_tools,
                used_models=used_models(engine.matcher.source_events),
                asked_models=frozenset(engine.models_asked),
            )
        ),
        events=len(history.events),
        served=engine.served,
        unverified=unverified,
        seal=history.seal.to_dict() if history.seal is not None else None,
        erased=history.erased,
        output=output,
        error=error,
        aborted=engine.aborted or status == "stopped",
        new_run_id=run.run_id,
        notes=tuple(notes),
        final_status=(
            ("unfinished" if mode == "resume" else "aborted")
            if status == "stopped"
            else (status if error is not None else "ok")
        ),
        allowed_calls=allowed,
        # served steps only: a call asked for just before a fork's step N is made live
        unvouched=_unvouched(engine.matcher.source_events),
        appended=tuple(engine.appended) if mode == "resume" else (),
        reran=reran,
    )


def _reran_note(reran: Sequence[dict[str, Any]]) -> str:
    """The note naming every open intent a resume ran again live, and how each ended."""
    parts = []
    for r in reran:
        how = f"{r['effect']} {r['tool']!r}, key {r['key']}"
        if r["confirmed"]:
            how += ", confirmed"
        if r["outcome"] == "open":
            ended = "no outcome recorded (the resume stopped while it ran)"
        else:
            ended = f"{r['outcome']} at seq {r['at']}"
        parts.append(f"seq {r['seq']} ({how}): {ended}")
    which = "the open intent" if len(parts) == 1 else f"the {len(parts)} open intents"
    return f"{which} the crash left ran again live: " + "; ".join(parts)


def resume(
    store: Store | str | os.PathLike[str] | None,
    run_id: str,
    agent: Callable[..., Any] | Agent,
    *,
    tenant: str | None = None,
    confirm: bool = False,
    takeover: bool = False,
    match: MatchMode | str = MatchMode.AUTO,
    dry_run: bool | None = None,
    processors: Sequence[Processor] = (),
    durability: Durability | str = Durability.EFFECTS,
    allow_network: Sequence[str] = (),
    redact_secrets: bool = True,
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
    so that the events appended now are processed alike (after the default redaction, unless
    ``redact_secrets=False``; redactors pinned to the recording's key id). While recorded
    steps are served, the network guard of :func:`replay` refuses unrecorded calls
    (``allow_network``).

    Before a confirmed resume runs an open effect again it takes the run (a
    ``tachograph.resume`` event). It stops, having run nothing, when the run's latest claim
    was made by a process that still runs on this host or on another host (which cannot be
    asked); ``takeover=True`` says that resume has ended.
    """
    requested = MatchMode.parse(match)
    parse_allow(allow_network)
    owned = not isinstance(store, Store)
    st = store if isinstance(store, Store) else open_store(store, create=False)
    try:
        history = RunHistory.from_store(st, run_id, tenant=tenant)
        gone = _unreplayable_report(history, "resume")
        if gone is not None:
            return gone
        if history.finished is not None:
            raise ReplayError(
                f"run {run_id!r} has finished; fork it instead of resuming it", run_id=run_id
            )
        history.check_replayable()
        if not confirm:
            _refuse_open_irreversible(history)
        mode, _ = _resolve(requested, history)
        processors = _live_processors(processors, history.events, redact_secrets)
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
            takeover=takeover,
            processors=processors,
            agent_module=_module_of(spec),
        )
        session = Session(
            mode="resume",
            run_id=last.run_id,
            actor=history.actor,
            recorder=recorder,
            engine=engine,
            # A run recorded in dry run goes on in dry run unless the caller says otherwise.
            dry_run=dry_run_default(dry_run) or (dry_run is None and _recorded_in_dry_run(history)),
        )
        engine.attach(session)
        run = Run(session, recorder, st)
        engine.watch(recorder)
        return _finish_live(
            spec.fingerprint(),
            run,
            session,
            engine,
            spec,
            history,
            "resume",
            False,
            allow_network,
        )
    finally:
        if owned:
            release_store(st)
