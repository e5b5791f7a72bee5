"""Replay reports: a divergence is a diagnosis, not a boolean.

Each :class:`DivergenceItem` says what was expected and what came, which checks passed and
failed, the nearest recorded candidates, and a paragraph a person can act on. A
:class:`ReplayReport` adds the verdict (reproduced or diverged), whether the replay was a
reproduction or a simulation (environment drift), and the steps that could not be replayed.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from .diff import Change

__all__ = ["Candidate", "DivergenceItem", "DivergenceKind", "Drift", "ReplayReport", "one_line"]


class DivergenceKind(str, enum.Enum):
    """What kind of difference a replay found."""

    TYPE_CHANGED = "type_changed"
    """The agent did another kind of thing than recorded (a tool call instead of a model call)."""
    ARGS_CHANGED = "args_changed"
    """The same tool, called with other arguments."""
    REQUEST_CHANGED = "request_changed"
    """A model request that differs (prompt, temperature, tool list, ...)."""
    TOOL_CHANGED = "tool_changed"
    """Another tool called than recorded (another choice)."""
    DECISION_CHANGED = "decision_changed"
    """A decision that differs: another plan, a guardrail now tripping or not, ..."""
    EXTRA_CALL = "extra_call"
    """A call or event with no recorded counterpart."""
    MISSING_CALLS = "missing_calls"
    """The agent finished while recorded events remained."""
    OUTPUT_CHANGED = "output_changed"
    """A different final output, status or error."""
    TOOL_IMPLEMENTATION_CHANGED = "tool_implementation_changed"
    """A pure tool re-executed during replay returned something else than recorded."""
    UNREPLAYABLE = "unreplayable"
    """The recording cannot serve this step (erased payload, or the call never completed)."""
    UNRECORDED_CALL = "unrecorded_call"
    """A connection or process spawn the record does not hold; the network guard refused it."""
    MODEL_CHANGED = "model_changed"
    """A model call that names another exact model id than the recorded one."""

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True)
class Candidate:
    """A recorded event that could have been the counterpart, and how it compares."""

    seq: int
    type: str
    passed: tuple[str, ...]
    failed: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "seq": self.seq,
            "type": self.type,
            "passed": list(self.passed),
            "failed": list(self.failed),
        }


@dataclass(frozen=True, slots=True)
class DivergenceItem:
    """One divergence at recorded position ``seq``."""

    kind: DivergenceKind
    seq: int
    expected: dict[str, Any] | None
    """The recorded event (type, actor, key, model, payload), or None if there was none."""
    actual: dict[str, Any] | None
    """What the agent did now, in the same shape, or None if it did nothing."""
    changes: tuple[Change, ...] = ()
    candidates: tuple[Candidate, ...] = ()
    explanation: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "kind": self.kind.value,
            "seq": self.seq,
            "expected": self.expected,
            "actual": self.actual,
            "changes": [c.to_dict() for c in self.changes],
            "candidates": [c.to_dict() for c in self.candidates],
            "explanation": self.explanation,
        }

    def render(self) -> str:
        """Several lines for a terminal."""
        lines = [f"seq {self.seq}: {self.kind.value}"]
        if self.expected is not None:
            lines.append(f"  expected: {_summary(self.expected)}")
        if self.actual is not None:
            lines.append(f"  actual:   {_summary(self.actual)}")
        for change in self.changes[:20]:
            lines.append(f"    {change.render()}")
        for cand in [c for c in self.candidates if c.passed][:3]:
            lines.append(
                f"  candidate seq {cand.seq} ({cand.type}): "
                f"passed {', '.join(cand.passed) or '-'}; failed {', '.join(cand.failed) or '-'}"
            )
        if self.explanation:
            lines.append("  " + self.explanation)
        return "\n".join(map(one_line, lines))


def one_line(line: str) -> str:
    """A line of a report as one line: a line feed in what it quotes of the record (a tool's
    name, a model id, an error's message) is shown as ``\\x0a``, as every command of the CLI
    shows one, so that recorded text cannot add a line of its own to the report."""
    return line.replace("\n", "\\x0a")


def _summary(event: dict[str, Any]) -> str:
    payload = event.get("payload") or {}
    name = payload.get("tool") or payload.get("name") or payload.get("plan") or event.get("model")
    if event.get("type") in ("network.connect", "network.send", "network.resolve", "process.spawn"):
        url, target = payload.get("url"), payload.get("target")
        if isinstance(url, str) and url.startswith("/") and target:
            # http.client knows only the path: the connection's host and port go before it
            url = f"{target}{url}"
        name = " ".join(str(x) for x in (payload.get("method"), url or target) if x)
        if payload.get("frame"):
            name += f" from {payload['frame']}"
    text = str(event.get("type"))
    if name:
        text += f" {name}"
    return text


@dataclass(frozen=True, slots=True)
class Drift:
    """One element of the environment fingerprint that changed since recording."""

    field: str
    recorded: Any
    current: Any

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {"field": self.field, "recorded": self.recorded, "current": self.current}

    def render(self) -> str:
        """``field: recorded -> current``."""
        return f"{self.field}: {self.recorded!r} -> {self.current!r}"


@dataclass(frozen=True, slots=True)
class ReplayReport:
    """The outcome of a replay (or fork or resume) of one recorded run."""

    run_id: str
    mode: str
    """``replay``, ``fork`` or ``resume``."""
    divergences: tuple[DivergenceItem, ...]
    drift: tuple[Drift, ...]
    events: int
    """How many recorded events the run has."""
    served: int
    """How many recorded events were matched and served."""
    unverified: bool = False
    """True when the run did not verify (its chain or its seal) and the caller chose to
    replay it anyway."""
    seal: dict[str, Any] | None = None
    """A stored run's sealing verdict (the ``seal`` object of ``tacho verify --json``:
    ``status`` ``sealed``, ``unsigned``, ``unsealed`` or ``failed``, ``reason``,
    ``sealed_seq``, ...); ``None`` for a run replayed from a file or from events in hand."""
    erased: tuple[int, ...] = ()
    output: Any = None
    error: dict[str, Any] | None = None
    aborted: bool = False
    """True when replay had to stop early (a step with nothing recorded to serve)."""
    new_run_id: str | None = None
    """For fork and resume: the run that was written."""
    notes: tuple[str, ...] = field(default=())
    final_status: str | None = None
    """For fork and resume: how the run written ended (``ok``, ``error``, ``aborted``), or
    ``unfinished`` for a resume that stopped before appending anything."""
    allowed_calls: tuple[dict[str, Any], ...] = ()
    """Outbound calls the record does not hold that ``allow_network`` let through
    (``target``, ``frame``)."""
    unvouched: tuple[dict[str, Any], ...] = ()
    """Tool calls recorded model answers asked for with no tool event after them
    (``tool``, ``seq`` of the answer, ``call_id``): the record cannot vouch for them."""
    unreplayable: tuple[dict[str, Any], ...] = ()
    """Steps that cannot be replayed at all, and why (``seq``, ``type``, ``reason``), when
    the run could not be replayed (its ``run.started`` payload erased, ...)."""
    appended: tuple[dict[str, Any], ...] = ()
    """For resume: the events it appended to the run (``seq``, ``type``, and ``tool`` for a
    tool event), also when it stopped at a divergence and left the run unfinished."""
    reran: tuple[dict[str, Any], ...] = ()
    """For resume: the open intents it ran again live (``seq``, ``tool``, ``effect``,
    ``key``, ``confirmed``, ``outcome``: ``completed``, ``failed`` or ``open`` (no outcome
    recorded), and ``at``, the seq of the outcome)."""

    @property
    def reproduced(self) -> bool:
        """True when the agent did exactly what was recorded, and the record vouches for
        every tool call its model answers asked for."""
        return (
            not self.divergences
            and not self.aborted
            and not self.unvouched
            and not self.unreplayable
        )

    @property
    def verdict(self) -> str:
        """``reproduced``; ``diverged``; ``unvouched`` (every recorded step matched, but
        model answers asked for tool calls the record holds nothing of); or
        ``unreplayable`` (nothing could be replayed)."""
        if self.unreplayable:
            return "unreplayable"
        if self.divergences or self.aborted:
            return "diverged"
        return "unvouched" if self.unvouched else "reproduced"

    @property
    def simulation(self) -> bool:
        """True when the environment drifted: the replay simulates, it does not reproduce."""
        return bool(self.drift) or self.unverified

    @property
    def first(self) -> DivergenceItem | None:
        """The first divergence, if any."""
        return self.divergences[0] if self.divergences else None

    def to_dict(self) -> dict[str, Any]:
        """A stable JSON form (documented in docs/replay.md)."""
        return {
            "run_id": self.run_id,
            "mode": self.mode,
            "verdict": self.verdict,
            "reproduced": self.reproduced,
            "kind": "simulation" if self.simulation else "reproduction",
            "first_divergence": self.first.to_dict() if self.first else None,
            "divergences": [d.to_dict() for d in self.divergences],
            "drift": [d.to_dict() for d in self.drift],
            "events": self.events,
            "served": self.served,
            "unverified": self.unverified,
            "seal": self.seal,
            "erased": list(self.erased),
            "aborted": self.aborted,
            "new_run_id": self.new_run_id,
            "final_status": self.final_status,
            "notes": list(self.notes),
            "allowed_calls": list(self.allowed_calls),
            "unvouched": list(self.unvouched),
            "unreplayable": list(self.unreplayable),
            "appended": list(self.appended),
            "reran": list(self.reran),
            "output": self.output,
            "error": self.error,
        }

    def render(self) -> str:
        """The report for a person."""
        kind = "simulation" if self.simulation else "reproduction"
        if self.unreplayable:
            head = f"{self.mode} of {self.run_id}: UNREPLAYABLE"
        elif self.mode == "replay":
            head = f"replay of {self.run_id}: {self.verdict.upper()} ({kind})"
        elif self.verdict == "reproduced":
            # fork and resume serve recorded steps, then go on live
            head = (
                f"{self.mode} of {self.run_id}: recorded steps matched ({kind}), "
                "then continued live"
            )
        elif self.verdict == "unvouched":
            # the verdict that makes the exit 1, as replay's does, though the steps matched
            head = (
                f"{self.mode} of {self.run_id}: UNVOUCHED ({kind}): recorded steps matched, "
                "then continued live"
            )
        else:
            where = f" at seq {self.first.seq}" if self.first else ""
            head = f"{self.mode} of {self.run_id}: DIVERGED{where} ({kind}); stopped there"
        lines = [head]
        seal = self.seal or {}
        if seal.get("status") == "failed":
            lines.append(
                f"  WARNING: the run's seal fails ({seal.get('reason')}); replayed anyway on "
                "request"
            )
        elif self.unverified:
            lines.append("  WARNING: the run did not verify; replayed anyway on request")
        if seal.get("status") in ("sealed", "unsigned") and seal.get("sealed_seq") is not None:
            how = "signed checkpoint" if seal["status"] == "sealed" else "store's own seals only"
            lines.append(f"  sealed up to seq {seal['sealed_seq']} ({how})")
        for d in self.drift:
            lines.append(f"  drift: {d.render()}")
        if self.erased:
            lines.append(f"  erased payloads at seq {', '.join(map(str, self.erased))}")
        for step in self.unreplayable:
            lines.append(f"  seq {step.get('seq')} ({step.get('type')}): {step.get('reason')}")
        matched = self.verdict in ("reproduced", "unvouched")
        if self.unreplayable:
            pass  # nothing was served; the steps above say why
        elif matched and self.mode == "replay":
            lines.append(f"  {self.served} of {self.events} recorded events matched")
        elif matched:
            lines.append(f"  {self.served} recorded events served before going live")
        else:
            first = self.first
            # each divergence's lines are one line each already (their own render)
            if first is not None:
                lines.append("first divergence:")
                lines.extend(f"  {line}" for line in first.render().split("\n"))
            for more in self.divergences[1:]:
                lines.append("then:")
                lines.extend(f"  {line}" for line in more.render().split("\n"))
        lines.extend(_unvouched_lines(self.unvouched))
        if self.error is not None and not self.new_run_id:
            lines.append(f"  the agent raised {_error_text(self.error)}")
        if self.new_run_id and self.final_status == "unfinished":
            if self.appended:
                listed = ", ".join(
                    f"{a['seq']} ({a['type']}{' ' + a['tool'] if a.get('tool') else ''})"
                    for a in self.appended
                )
                lines.append(
                    f"  {self.new_run_id} was left unfinished; calls that went live before "
                    f"the divergence appended seq {listed}"
                )
            else:
                lines.append(f"  {self.new_run_id} was left unfinished; nothing was appended")
        elif self.new_run_id:
            verb = "appended to" if self.mode == "resume" else "recorded as"
            ended = f" (finished {self.final_status}" if self.final_status else ""
            if ended and self.error:
                ended += f": {_error_text(self.error)}"
            lines.append(f"  {verb} {self.new_run_id}{ended}{')' if ended else ''}")
        for call in self.allowed_calls:
            where = f" from {call['frame']}" if call.get("frame") else ""
            lines.append(f"  allowed: outbound call to {call['target']}{where} (allow_network)")
        lines.extend(f"  note: {n}" for n in self.notes)
        return "\n".join(map(one_line, lines))


def _error_text(error: dict[str, Any]) -> str:
    message = error.get("message")
    text = (
        f"{error.get('type')}: {message}" if message not in (None, "") else str(error.get("type"))
    )
    if error.get("frame"):
        text += f" (at {error['frame']})"
    return text


def _unvouched_lines(unvouched: tuple[dict[str, Any], ...]) -> list[str]:
    if not unvouched:
        return []
    calls = ", ".join(f"{c.get('tool')!r} (asked at seq {c.get('seq')})" for c in unvouched)
    names = ", ".join(sorted({repr(c.get("tool")) for c in unvouched}))
    return [
        f"  unvouched: the record cannot vouch for {len(unvouched)} tool call(s) the model "
        f"asked for: {calls}. No tool event followed them when the run was recorded, so what "
        "they did is not in the record: in this replay they ran again outside it (or not at "
        "all), and nothing was compared.",
        f"  to record {names}: decorate the function that runs it with "
        "@tachograph.tool(effect=...), or use a framework adapter that records tools "
        "(tachograph.integrations.openai_agents), then record the run again",
    ]
