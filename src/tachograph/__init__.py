"""tachograph: a tamper-evident flight recorder for AI agents.

Record every crossing of the agent harness boundary as an append-only, hash-chained event
log (the record format of SPEC.md), verify it, fold it into the state at any step, and replay
the agent's own code against it.
"""

from __future__ import annotations

from .canonical import canonical
from .chain import Check, Failure, VerifyReport, verify_events, verify_lines
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
from .events import Effect, Event, EventType, new_event
from .jsonl import ImportReport, export_run, import_jsonl, read_jsonl, verify_jsonl
from .store import Receipt, RunInfo, SQLiteStore, Store, open_store

__version__ = "0.1.0"

__all__ = [
    "AgentLoadError",
    "AppendRefused",
    "Check",
    "ConfirmationRequired",
    "Divergence",
    "DuplicateConflict",
    "Effect",
    "Event",
    "EventError",
    "EventType",
    "Failure",
    "FormatError",
    "ImportReport",
    "ProfileError",
    "Receipt",
    "RecordingError",
    "ReplayError",
    "RunInfo",
    "RunNotFound",
    "SQLiteStore",
    "SchemaVersionError",
    "SequenceConflict",
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
    "canonical",
    "export_run",
    "import_jsonl",
    "new_event",
    "open_store",
    "read_jsonl",
    "verify_events",
    "verify_jsonl",
    "verify_lines",
]
