"""tachograph: a tamper-evident flight recorder for AI agents.

Record every crossing of the agent harness boundary as an append-only, hash-chained event
log (the record format of SPEC.md), verify it, fold it into the state at any step, and replay
the agent's own code against it.
"""

from __future__ import annotations

from ._version import __version__

# The subpackage tachograph.record (SPEC in code) is loaded, through capture, before the
# function ``record`` is bound below, so the facade's ``record`` stays the function.
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
