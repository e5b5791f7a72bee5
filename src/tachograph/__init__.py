"""tachograph: a tamper-evident flight recorder for AI agents.

Record every crossing of the agent harness boundary as an append-only, hash-chained event
log (the record format of SPEC.md), verify it, fold it into the state at any step, and replay
the agent's own code against it.

The facade is lazy (PEP 562): ``import tachograph`` loads only the version and the errors, and
each name below is imported from its layer the first time it is read. A process that needs one
layer (a verification worker, ``tacho --version``) does not pay for the others.
"""

from __future__ import annotations

import importlib
import sys
import types
import typing

from ._version import __version__
from .errors import (
    AgentLoadError,
    AppendRefused,
    ConfirmationRequired,
    Divergence,
    DuplicateConflict,
    EventError,
    FormatError,
    ProfileError,
    RecordingError,
    ReplayError,
    RunNotFound,
    SchemaVersionError,
    SequenceConflict,
    StoreError,
    StoreNotFound,
    StoreUnavailable,
    TachographError,
    Unreplayable,
    VerificationFailed,
    WriteFailed,
)

if typing.TYPE_CHECKING:
    from .capture.agent import (
        Agent,
        Run,
        RunResult,
        agent,
        arecord_run,
        fingerprint,
        record,
        record_run,
    )
    from .capture.imports import import_jsonl
    from .capture.recorder import Durability
    from .capture.runtime import (
        ModelAliasWarning,
        accept_output,
        decide,
        emit,
        external,
        guardrail,
        handoff,
        model,
        now,
        reject_output,
        rng,
        select_plan,
        tool,
        uuid4,
    )
    from .lifecycle.purpose import export_run
    from .record.canonical import canonical
    from .record.event import Effect, Event, EventType, new_event
    from .record.jsonl import ImportReport, read_jsonl, verify_jsonl
    from .record.verify import Check, Failure, VerifyReport, verify_events, verify_lines
    from .replay import areplay, fork, replay, resume
    from .replay.diff import Change, RunDiff, diff_runs, diff_values
    from .replay.fold import State, fold
    from .replay.report import DivergenceItem, DivergenceKind, Drift, ReplayReport
    from .store import Receipt, RunInfo, SQLiteStore, Store, open_store

# name -> the module it is read from, on first use
_LAZY: dict[str, str] = {
    "Agent": ".capture.agent",
    "Change": ".replay.diff",
    "Check": ".record.verify",
    "DivergenceItem": ".replay.report",
    "DivergenceKind": ".replay.report",
    "Drift": ".replay.report",
    "Durability": ".capture.recorder",
    "Effect": ".record.event",
    "Event": ".record.event",
    "EventType": ".record.event",
    "Failure": ".record.verify",
    "ImportReport": ".record.jsonl",
    "ModelAliasWarning": ".capture.runtime",
    "Receipt": ".store",
    "ReplayReport": ".replay.report",
    "Run": ".capture.agent",
    "RunDiff": ".replay.diff",
    "RunInfo": ".store",
    "RunResult": ".capture.agent",
    "SQLiteStore": ".store",
    "State": ".replay.fold",
    "Store": ".store",
    "VerifyReport": ".record.verify",
    "accept_output": ".capture.runtime",
    "agent": ".capture.agent",
    "arecord_run": ".capture.agent",
    "areplay": ".replay",
    "canonical": ".record.canonical",
    "decide": ".capture.runtime",
    "diff_runs": ".replay.diff",
    "diff_values": ".replay.diff",
    "emit": ".capture.runtime",
    "export_run": ".lifecycle.purpose",
    "external": ".capture.runtime",
    "fingerprint": ".capture.agent",
    "fold": ".replay.fold",
    "fork": ".replay",
    "guardrail": ".capture.runtime",
    "handoff": ".capture.runtime",
    "import_jsonl": ".capture.imports",
    "model": ".capture.runtime",
    "new_event": ".record.event",
    "now": ".capture.runtime",
    "open_store": ".store",
    "read_jsonl": ".record.jsonl",
    "record": ".capture.agent",
    "record_run": ".capture.agent",
    "reject_output": ".capture.runtime",
    "replay": ".replay",
    "resume": ".replay",
    "rng": ".capture.runtime",
    "select_plan": ".capture.runtime",
    "tool": ".capture.runtime",
    "uuid4": ".capture.runtime",
    "verify_events": ".record.verify",
    "verify_jsonl": ".record.jsonl",
    "verify_lines": ".record.verify",
}

# Two names of the facade are also subpackages: the function ``replay`` and the context manager
# ``record`` share their names with tachograph.replay and tachograph.record (SPEC in code).
# Importing a subpackage binds it on its parent, which would hide the facade's name from
# ``__getattr__``; the facade keeps those two names for itself (the subpackages stay in
# sys.modules, and ``from tachograph.record import event`` reads them from there).
_SHADOWED = frozenset({"record", "replay"})


class _Facade(types.ModuleType):
    def __setattr__(self, name: str, value: typing.Any) -> None:
        if name in _SHADOWED and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Facade


def __getattr__(name: str) -> typing.Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


__all__ = [
    "Agent",
    "AgentLoadError",
    "AppendRefused",
    "Change",
    "Check",
    "ConfirmationRequired",
    "Divergence",
    "DivergenceItem",
    "DivergenceKind",
    "Drift",
    "DuplicateConflict",
    "Durability",
    "Effect",
    "Event",
    "EventError",
    "EventType",
    "Failure",
    "FormatError",
    "ImportReport",
    "ModelAliasWarning",
    "ProfileError",
    "Receipt",
    "RecordingError",
    "ReplayError",
    "ReplayReport",
    "Run",
    "RunDiff",
    "RunInfo",
    "RunNotFound",
    "RunResult",
    "SQLiteStore",
    "SchemaVersionError",
    "SequenceConflict",
    "State",
    "Store",
    "StoreError",
    "StoreNotFound",
    "StoreUnavailable",
    "TachographError",
    "Unreplayable",
    "VerificationFailed",
    "VerifyReport",
    "WriteFailed",
    "__version__",
    "accept_output",
    "agent",
    "arecord_run",
    "areplay",
    "canonical",
    "decide",
    "diff_runs",
    "diff_values",
    "emit",
    "export_run",
    "external",
    "fingerprint",
    "fold",
    "fork",
    "guardrail",
    "handoff",
    "import_jsonl",
    "model",
    "new_event",
    "now",
    "open_store",
    "read_jsonl",
    "record",
    "record_run",
    "reject_output",
    "replay",
    "resume",
    "rng",
    "select_plan",
    "tool",
    "uuid4",
    "verify_events",
    "verify_jsonl",
    "verify_lines",
]
