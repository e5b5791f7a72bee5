"""Every error tachograph raises, under one root.

Errors carry data (``run_id``, ``seq``, ``expected``, ``actual``, ``path``) as attributes, not
only text, so that callers and reports can act on them. Driver errors (``sqlite3``, ``OSError``)
are translated at the store boundary into :class:`StoreError` subclasses.

::

    TachographError
    ├── ProfileError                 a value outside the closed JSON profile (SPEC section 2)
    ├── EventError                   an envelope field that breaks a rule of SPEC section 3
    ├── FormatError                  a malformed interchange line or file (SPEC section 4)
    ├── StoreError                   anything that went wrong in a store
    │   ├── StoreNotFound            the store (file) does not exist where we looked
    │   ├── RunNotFound              no such run in the store (with close matches)
    │   ├── AppendRefused            an append that would break the chain; nothing was written
    │   │   ├── SequenceConflict     seq is not the run's next, or prev_hash is not its head
    │   │   └── DuplicateConflict    an event_id or (run, seq) already stored with other content
    │   ├── PurposeDenied            a read for a purpose the store's policy refuses (audited)
    │   ├── SchemaVersionError       the database was written by a newer tachograph
    │   └── StoreUnavailable         the engine failed (I/O error, corrupt file, locked too long)
    ├── VerificationFailed           a run or file that does not verify (carries the report)
    ├── RecordingError               misuse while recording (finished run, nested run, ...)
    │   └── WriteFailed              the writer could not make events durable
    ├── ReplayError                  a replay that cannot proceed
    │   ├── Divergence               the agent did something other than what was recorded
    │   ├── Unreplayable             erased payloads or an unverified run
    │   └── ConfirmationRequired     resuming would repeat an irreversible side effect
    ├── AgentLoadError               ``module:function`` could not be imported
    └── CorpusError                  a regression corpus that cannot be written or read
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = [
    "AgentLoadError",
    "AppendRefused",
    "ConfirmationRequired",
    "CorpusError",
    "Divergence",
    "DuplicateConflict",
    "EventError",
    "FormatError",
    "ProfileError",
    "PurposeDenied",
    "RecordingError",
    "ReplayError",
    "RunNotFound",
    "SchemaVersionError",
    "SequenceConflict",
    "StoreError",
    "StoreNotFound",
    "StoreUnavailable",
    "TachographError",
    "Unreplayable",
    "VerificationFailed",
    "WriteFailed",
]


class TachographError(Exception):
    """Root of every error raised by tachograph.

    Keyword arguments become attributes, so handlers can read ``err.run_id`` or ``err.seq``.
    """

    run_id: str | None = None
    seq: int | None = None
    expected: Any = None
    actual: Any = None

    def __init__(self, message: str, **fields: Any) -> None:
        super().__init__(message)
        self.message = message
        self.fields = fields
        for key, value in fields.items():
            setattr(self, key, value)

    def __str__(self) -> str:
        return self.message


class ProfileError(TachographError, TypeError):
    """A value outside the closed JSON profile; ``path`` names where it sits."""

    path: str


class EventError(TachographError, ValueError):
    """An envelope field that does not satisfy SPEC section 3 (``field``, ``value``)."""


class FormatError(TachographError, ValueError):
    """A malformed interchange line (``line``, ``seq``) or file."""


class StoreError(TachographError):
    """Anything that went wrong inside a store."""


class StoreNotFound(StoreError):
    """The store does not exist where we looked (``location``)."""


class RunNotFound(StoreError, KeyError):
    """No run with that id (``run_id``); ``suggestions`` lists close matches."""

    suggestions: Sequence[str] = ()

    def __str__(self) -> str:
        return self.message


class AppendRefused(StoreError):
    """An append was refused; nothing of the batch was written."""


class SequenceConflict(AppendRefused):
    """``seq`` is not the run's next or ``prev_hash`` is not its head (``expected``, ``actual``)."""


class DuplicateConflict(AppendRefused):
    """The same ``event_id`` or ``(run_id, seq)`` is already stored with different content."""


class PurposeDenied(StoreError):
    """A read refused by the store's purpose policy (``run_id``, ``tenant``, ``purpose``,
    ``types``); the store records the refusal in its audit."""

    purpose: str | None = None
    types: Sequence[str] = ()


class SchemaVersionError(StoreError):
    """The store's schema is newer than this tachograph understands."""


class StoreUnavailable(StoreError):
    """The storage engine failed: I/O error, corruption, or a lock held too long."""


class VerificationFailed(TachographError):
    """A run that does not verify; ``report`` is the :class:`~tachograph.chain.VerifyReport`."""


class RecordingError(TachographError):
    """Misuse while recording: appending to a finished run, nesting runs, bad arguments."""


class WriteFailed(RecordingError):
    """The writer could not make events durable; the run must not be trusted to be complete."""


class ReplayError(TachographError):
    """A replay that cannot proceed."""


class Divergence(ReplayError):
    """The agent did something other than what was recorded; ``report`` holds the diagnosis
    (a :class:`~tachograph.report.ReplayReport`)."""

    report: Any = None


class Unreplayable(ReplayError):
    """The run cannot be replayed (erased payloads at ``seqs``, or it does not verify)."""


class ConfirmationRequired(ReplayError):
    """Resuming would repeat a side effect that must be confirmed explicitly."""


class AgentLoadError(TachographError, ImportError):
    """An agent given as ``module:function`` could not be loaded (``target``)."""


class CorpusError(TachographError, ValueError):
    """A corpus that cannot be written or read as asked (``path``, ``run_id``)."""
