"""Every error tachograph raises, under one root.

Errors carry data (``run_id``, ``seq``, ``expected``, ``actual``, ``path``) as attributes, not
only text, so that callers and reports can act on them. Every attribute a raise passes is
declared, with its type, on the class that carries it (a test holds the raises to that).
Driver errors (``sqlite3``, a database client's, ``OSError``) are translated at the store
boundary into :class:`StoreError` subclasses.

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
    │   ├── SchemaVersionError       the database was written by a newer tachograph
    │   ├── StoreUnavailable         the engine failed (I/O error, corrupt file, locked too long)
    │   └── PurposeDenied            the read's purpose may not see this tenant, type or field
    ├── PolicyError                  a retention or purpose policy that cannot be used as written
    ├── VerificationFailed           a run or file that does not verify (carries the report)
    ├── SealingError                 a seal log, checkpoint, key, proof or witness that fails
    ├── RecordingError               misuse while recording (finished run, nested run, ...)
    │   └── WriteFailed              the writer could not make events durable
    ├── ReplayError                  a replay that cannot proceed
    │   ├── Divergence               the agent did something other than what was recorded
    │   ├── Unreplayable             erased payloads or an unverified run
    │   ├── ConfirmationRequired     resuming would repeat an irreversible side effect
    │   └── UnrecordedCall           replay refused a connection or process the record lacks
    ├── AgentLoadError               ``module:function`` could not be imported
    ├── PrivacyError                 a redaction key or policy that cannot be used as given
    └── CorpusError                  a regression corpus that cannot be written or read
"""

from __future__ import annotations

import errno
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # for the annotations only: errors import nothing of tachograph at run time
    from .record.verify import VerifyReport
    from .replay.report import ReplayReport

__all__ = [
    "AgentLoadError",
    "AppendRefused",
    "ConfirmationRequired",
    "CorpusError",
    "Divergence",
    "DuplicateConflict",
    "EventError",
    "FormatError",
    "PolicyError",
    "PrivacyError",
    "ProfileError",
    "PurposeDenied",
    "RecordingError",
    "ReplayError",
    "RunNotFound",
    "SchemaVersionError",
    "SealingError",
    "SequenceConflict",
    "StoreError",
    "StoreNotFound",
    "StoreUnavailable",
    "TachographError",
    "UnrecordedCall",
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

    path: str | None = None
    """Where the value sits, e.g. ``payload.args.when``."""
    reason: str | None = None
    tool: str | None = None
    """The tool whose arguments or result held the value."""
    model: str | None = None
    """The model whose request or response held the value."""
    run_id: str | None = None


class EventError(TachographError, ValueError):
    """An envelope field that does not satisfy SPEC section 3 (``field``, ``value``)."""

    field: str | None = None
    value: Any = None


class FormatError(TachographError, ValueError):
    """A malformed interchange line (``line``) or file (``location``)."""

    line: int | None = None
    location: str | None = None
    path: str | None = None
    runs: int | None = None  # a file of several runs where one was wanted: how many


class StoreError(TachographError):
    """Anything that went wrong inside a store; ``location`` names the store (file or URL),
    ``tenant`` the tenant of the run it is about (``None``: not known, or any tenant)."""

    location: str | None = None
    run_id: str | None = None
    tenant: str | None = None
    several_tenants: bool = False  # the run id names a run in more than one tenant


class StoreNotFound(StoreError):
    """The store does not exist where we looked (``location``)."""


class RunNotFound(StoreError, KeyError):
    """No run with that id (``run_id``); ``suggestions`` lists close matches, ``tenants`` the
    tenants that do hold a run of that id when it was looked up in another one."""

    suggestions: Sequence[str] = ()
    tenants: Sequence[str] = ()

    def __str__(self) -> str:
        return self.message


class AppendRefused(StoreError):
    """An append was refused; nothing of the batch was written."""

    seq: int | None = None


class SequenceConflict(AppendRefused):
    """``seq`` is not the run's next or ``prev_hash`` is not its head: ``expected`` and
    ``actual`` are ``{"seq": ..., "prev_hash": ...}``."""

    expected: Mapping[str, Any] | None = None
    actual: Mapping[str, Any] | None = None


class DuplicateConflict(AppendRefused):
    """The same ``event_id`` or ``(run_id, seq)`` is already stored with different content:
    ``expected`` is the stored event's hash (if found), ``actual`` the refused one's."""

    expected: str | None = None
    actual: str | None = None


class SchemaVersionError(StoreError):
    """The store's schema is newer than this tachograph understands (``expected``: the newest
    version it reads, ``actual``: the store's)."""

    expected: int | None = None
    actual: int | None = None


class StoreUnavailable(StoreError):
    """The storage engine failed: I/O error, corruption, a closed store, a lock held too long.

    After a failed commit, ``stored`` says whether the batch is in the store after all
    (``True``: stored but perhaps not durable; ``False``: nothing stored; ``None``: unknown).
    """

    stored: bool | None = None


class PurposeDenied(StoreError, PermissionError):
    """A read whose purpose (``purpose``) the policy does not allow for what it asked
    (``run_id``, ``tenant``, ``what``); nothing was read, and the refusal is in the audit."""

    purpose: str | None = None
    tenant: str | None = None
    what: str | None = None


class PolicyError(TachographError, ValueError):
    """A retention or purpose policy that cannot be used as written (``path``, ``key``)."""

    path: str | None = None
    key: str | None = None


class VerificationFailed(TachographError):
    """A run that does not verify: ``report`` is its report, ``reports`` every failed run's
    when several were checked (a file)."""

    report: VerifyReport | None = None
    reports: Sequence[VerifyReport] = ()
    run_id: str | None = None


class SealingError(TachographError, ValueError):
    """A seal log, checkpoint, key, proof or witness that fails (SPEC section 9); ``what``
    names the part: ``key``, ``note``, ``signature``, ``checkpoint``, ``cosignature``,
    ``proof``, ``consistency``, ``equivocation``, ``leaf``, ``run`` or ``dependency``."""

    what: str = ""


class RecordingError(TachographError):
    """Misuse while recording: appending to a finished run, nesting runs, bad arguments;
    ``key`` names the call when one is concerned."""

    run_id: str | None = None
    key: str | None = None


class WriteFailed(RecordingError):
    """The writer could not make events durable; the run must not be trusted to be complete.
    ``cause`` is the error the store raised."""

    cause: BaseException | None = None


class ReplayError(TachographError):
    """A replay that cannot proceed."""

    run_id: str | None = None
    seq: int | None = None


class Divergence(ReplayError):
    """The agent did something other than what was recorded; ``report`` holds the diagnosis
    (every raise passes it)."""

    report: ReplayReport


class Unreplayable(ReplayError):
    """The run cannot be replayed: erased payloads at ``seqs``, a step without a recorded
    answer (``key``), or a run that does not verify (``report``)."""

    seqs: Sequence[int] = ()
    key: str | None = None
    report: VerifyReport | None = None


class ConfirmationRequired(ReplayError):
    """Resuming would repeat a side effect that must be confirmed explicitly (``key``: the
    idempotency key of the dangling step)."""

    key: str | None = None


class UnrecordedCall(ReplayError, ConnectionRefusedError):
    """Replay refused an outbound connection or a process spawn the record does not hold
    (closed world). It is a ``ConnectionRefusedError``, so HTTP clients fail as they fail on
    a closed port. ``target`` is ``host:port``, a socket path or the program; ``frame`` is
    the agent's ``file:line`` that made the call."""

    target: str | None = None
    host: str | None = None
    port: int | None = None
    frame: str | None = None

    def __init__(self, message: str, **fields: Any) -> None:
        super().__init__(message, **fields)
        self.errno = errno.ECONNREFUSED
        self.strerror = message


class AgentLoadError(TachographError, ImportError):
    """An agent given as ``module:function`` could not be loaded (``target``, ``reason``;
    ``suggestions`` lists close names)."""

    target: str | None = None
    reason: str | None = None
    suggestions: Sequence[str] = ()


class CorpusError(TachographError, ValueError):
    """A corpus that cannot be written or read as asked (``path``, ``run_id``, ``seq``)."""

    path: str | None = None
    run_id: str | None = None
    seq: int | None = None


class PrivacyError(TachographError, ValueError):
    """A redaction key, key ring or policy that cannot be used as given (``key_id``); the
    message never holds key material."""

    key_id: str | None = None
