"""Run seals in every recording (SPEC section 9): the writer's bookkeeping.

Every run recorded through a :class:`~tachograph.capture.recorder.Recorder` is sealed by
default: the store's writer appends a seal (a leaf of the tenant's seal log naming the run's
latest event and its hash) **in the same transaction as the batch of events it names**, so a
seal is never ahead of the events, and a crash keeps the last seal with what it covers.

When (:class:`SealPolicy`, defaults :data:`DEFAULT_EVERY_EVENTS` and
:data:`DEFAULT_EVERY_SECONDS`):

- at ``run.finished`` (a ``final`` seal, committed with that event);
- in the batch that brings the events no seal covers to ``every_events``;
- in the first batch after ``every_seconds`` since the run's last seal, and, for a run that has
  gone quiet, by the writer thread on its own once that time has passed.

So the **unsealed window** of a running run is at most ``every_events - 1`` stored events, or
those stored in the last ``every_seconds``; a run that finished is sealed to its end.

With a signing key (the file ``TACHOGRAPH_SIGNING_KEY`` names, made by ``tacho keys init``) the
writer also issues a signed checkpoint after each batch of seals; without one, seals are
appended unsigned and ``tacho verify`` says how far each run is sealed, with no checkpoint.

Opting out: ``record(..., seal=False)``, or ``TACHOGRAPH_SEAL=off`` in the environment.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import FrameType

from ..errors import RecordingError, SealingError
from ..record.checkpoint import SigningKey
from ..record.event import Event, EventType
from ..record.merkle import SealLeaf
from ..store.base import SealRow, Store
from ..store.checkpoints import Issued, issue_checkpoint, load_signing_key, origin_for

__all__ = [
    "DEFAULT_EVERY_EVENTS",
    "DEFAULT_EVERY_SECONDS",
    "SEAL_ENV",
    "RunSeals",
    "SealPlan",
    "SealPolicy",
    "keep_error",
    "kept_error",
    "resolve_policy",
]

_log = logging.getLogger("tachograph")
# a constant: ``EventType.X.value`` is a Python-level enum property on 3.11 (per batch here)
_RUN_FINISHED = EventType.RUN_FINISHED.value

KEPT_ERRORS = 100
"""How many of the latest failures a writer's or an observer's ``errors`` keeps."""


def kept_error(error: BaseException) -> BaseException:
    """``error``, caught by the caller, made fit to be kept until it is reported: without its
    traceback, nor those of its causes and contexts.

    A kept traceback keeps every frame it passed through, and through each frame's caller
    link the frames above it, with their variables once they return: the store, recorder and
    batch of the call that failed, and the agent's own frames when the failure came from a
    write on its thread. A store the program drops must stay freed, and an agent's variables
    are not the recorder's to keep. The traceback is logged at debug level here (logger
    ``tachograph``), for whoever needs it; the error keeps its type and message. An
    exception a running frame was handling when this one was raised (the agent's own, as a
    ``with`` block's exit records the run's end) is the agent's: it is unlinked from the
    kept error, and left as it is.
    """
    _log.debug("tachograph: kept to report later: %r", error, exc_info=error)
    running: set[int] = set()
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        running.add(id(frame))
        frame = frame.f_back
    pending, seen = [error], set()
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        current.__traceback__ = None
        for linked, unlink in (
            (current.__cause__, "__cause__"),
            (current.__context__, "__context__"),
        ):
            if linked is None:
                continue
            tb = linked.__traceback__
            if tb is not None and id(tb.tb_frame) in running:
                setattr(current, unlink, None)  # handled by a running frame: the agent's
            else:
                pending.append(linked)
    return error


def keep_error(errors: list[BaseException], error: BaseException) -> None:
    """Add ``error`` to ``errors`` as :func:`kept_error` makes it, keeping the latest
    :data:`KEPT_ERRORS` (a writer's or an observer's ``errors``)."""
    errors.append(kept_error(error))
    del errors[:-KEPT_ERRORS]


DEFAULT_EVERY_EVENTS = 1000
"""A running run is sealed at least every this many events."""
DEFAULT_EVERY_SECONDS = 10.0
"""... or once this many seconds have passed since its last seal."""
SEAL_ENV = "TACHOGRAPH_SEAL"
"""``off`` (or ``0``, ``false``, ``no``) turns the default sealing off for this process."""


@dataclass(frozen=True, slots=True)
class SealPolicy:
    """When to seal a running run (it is always sealed at ``run.finished``)."""

    every_events: int = DEFAULT_EVERY_EVENTS
    every_seconds: float = DEFAULT_EVERY_SECONDS

    def __post_init__(self) -> None:
        if self.every_events < 1 or self.every_seconds <= 0:
            raise RecordingError("a seal policy needs every_events >= 1 and every_seconds > 0")


def resolve_policy(seal: SealPolicy | bool | None) -> SealPolicy | None:
    """The policy a run is recorded with: ``seal`` when given, else the default unless
    ``TACHOGRAPH_SEAL`` turns it off; ``None`` means the run is not sealed."""
    if seal is False:
        return None
    if isinstance(seal, SealPolicy):
        return seal
    if seal is None:
        value = os.environ.get(SEAL_ENV, "").strip().lower()
        if value in ("off", "0", "false", "no"):
            return None
    return SealPolicy()


_keys: dict[tuple[str, float], SigningKey] = {}
_keys_lock = threading.Lock()


def configured_key() -> SigningKey | None:
    """The signing key ``TACHOGRAPH_SIGNING_KEY`` names (read once per file version), or
    ``None``. An unreadable key is logged and treated as none: recording never fails on it."""
    path = os.environ.get("TACHOGRAPH_SIGNING_KEY")
    if not path:
        return None
    try:
        stamp = os.stat(path).st_mtime
        with _keys_lock:
            key = _keys.get((path, stamp))
        if key is None:
            key = load_signing_key(path)
            if key is None:
                return None
            with _keys_lock:
                _keys[(path, stamp)] = key
        return key
    except (OSError, SealingError) as exc:
        _log.warning(
            "tachograph: the signing key %s cannot be used (%s): no checkpoints", path, exc
        )
        return None


@dataclass(slots=True)
class _RunState:
    policy: SealPolicy
    key: SigningKey | None
    log_name: str | None
    sealed_seq: int
    sealed_at: float
    pending: tuple[int, str] | None = None
    """The run's latest stored event that no seal covers: ``(seq, hash)``."""


@dataclass(slots=True)
class SealPlan:
    """The seals due with one batch, and the bookkeeping to apply once it is committed."""

    rows: dict[str, list[SealRow]] = field(default_factory=dict)
    sealed: list[tuple[tuple[str, str], int, bool]] = field(default_factory=list)
    """``(run, seq, final)`` for every seal in ``rows``."""
    pending: list[tuple[tuple[str, str], int, str]] = field(default_factory=list)
    """``(run, seq, hash)``: the run's last event in the batch, not sealed by it."""
    keys: dict[tuple[str, str], SigningKey] = field(default_factory=dict)
    """``(tenant, origin) -> key``: the checkpoints to issue once the seals are stored."""

    def add(self, state: _RunState, leaf: SealLeaf) -> None:
        """Seal ``leaf`` (of a run recorded with ``state``) in this plan."""
        self.rows.setdefault(leaf.tenant, []).append(
            SealRow(leaf.run_id, leaf.seq, leaf.to_bytes())
        )
        self.sealed.append(((leaf.tenant, leaf.run_id), leaf.seq, leaf.final))
        if state.key is not None:
            self.keys[(leaf.tenant, origin_for(leaf.tenant, state.log_name))] = state.key


RunKey = tuple[str, str]


class RunSeals:
    """Which tracked runs of one store are due a seal; a writer holds one.

    Thread-safe; :meth:`plan` is pure, :meth:`committed` applies a plan after its batch
    committed. ``errors`` keeps checkpoint failures (logged, never raised into the agent).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: dict[RunKey, _RunState] = {}
        self._issued: dict[tuple[str, str], Issued] = {}
        self.errors: list[BaseException] = []

    def track(
        self,
        run: RunKey,
        policy: SealPolicy,
        *,
        now: float,
        key: SigningKey | None = None,
        log_name: str | None = None,
        head: int = -1,
    ) -> None:
        """Seal ``run`` from now on; ``head`` is the seq of its last stored event."""
        with self._lock:
            self._runs[run] = _RunState(policy, key, log_name, head, now)

    def forget(self, run: RunKey) -> None:
        """Stop sealing ``run`` (its recorder is gone)."""
        with self._lock:
            self._runs.pop(run, None)

    def note_error(self, error: BaseException) -> None:
        """Keep a failure in :attr:`errors` (the latest :data:`KEPT_ERRORS`)."""
        with self._lock:
            keep_error(self.errors, error)

    def postpone(self, plan: SealPlan, now: float) -> None:
        """The seals of ``plan`` could not be stored: try those runs again one period from
        ``now``, not at once (a store that refuses would otherwise be asked in a tight loop)."""
        with self._lock:
            for run, _seq, _final in plan.sealed:
                state = self._runs.get(run)
                if state is not None:
                    state.sealed_at = now

    @property
    def active(self) -> bool:
        """Whether any run is tracked."""
        return bool(self._runs)

    def plan(self, batch: Sequence[Event], now: float) -> SealPlan | None:
        """The seals due when ``batch`` is committed (``None``: no tracked run in it)."""
        runs = self._runs
        # The last event of each run in the batch (a comprehension: the per-event cost; a
        # batch of one, a durable event claimed with nothing queued, without its frame).
        if len(batch) == 1:
            only = batch[0]
            last = {(only.tenant, only.run_id): only}
        else:
            last = {(e.tenant, e.run_id): e for e in batch}
        plan: SealPlan | None = None
        with self._lock:
            for run, event in last.items():
                state = runs.get(run)
                if state is None:
                    continue
                if plan is None:
                    plan = SealPlan()
                final = event.type == _RUN_FINISHED
                if (
                    final
                    or event.seq - state.sealed_seq >= state.policy.every_events
                    or now - state.sealed_at >= state.policy.every_seconds
                ):
                    plan.add(
                        state, SealLeaf(event.tenant, event.run_id, event.seq, event.hash, final)
                    )
                else:
                    plan.pending.append((run, event.seq, event.hash))
        return plan

    def committed(self, plan: SealPlan, now: float) -> None:
        """Apply a plan whose batch (and seals) are stored."""
        with self._lock:
            for run, seq, final in plan.sealed:
                state = self._runs.get(run)
                if state is None:
                    continue
                if final:
                    del self._runs[run]
                    continue
                state.sealed_seq, state.sealed_at, state.pending = seq, now, None
            for run, seq, hash_ in plan.pending:
                state = self._runs.get(run)
                if state is not None:
                    state.pending = (seq, hash_)

    def next_due(self) -> float | None:
        """When the earliest quiet run is due a seal of its pending events (monotonic time)."""
        # A loop, not a comprehension and min(): no frame of its own (a durable event's claim
        # asks twice, on the caller's thread).
        due: float | None = None
        with self._lock:
            for state in self._runs.values():
                if state.pending is not None:
                    at = state.sealed_at + state.policy.every_seconds
                    if due is None or at < due:
                        due = at
        return due

    def quiet(self, now: float) -> SealPlan:
        """Seals for the runs whose stored events have waited ``every_seconds`` unsealed."""
        plan = SealPlan()
        with self._lock:
            for run, state in self._runs.items():
                if state.pending is None or now - state.sealed_at < state.policy.every_seconds:
                    continue
                seq, hash_ = state.pending
                plan.add(state, SealLeaf(run[0], run[1], seq, hash_, False))
        return plan

    def checkpoint(self, plan: SealPlan, store: Store) -> None:
        """Issue a checkpoint per tenant whose new seals were made with a signing key."""
        for (tenant, origin), key in plan.keys.items():
            try:
                issued = issue_checkpoint(
                    store,
                    tenant,
                    key,
                    origin=origin,
                    trusted=self._issued.get((tenant, origin)),
                )
            except Exception as exc:  # observability never breaks the host
                self.note_error(exc)
                _log.warning("tachograph: no checkpoint issued for tenant %r: %s", tenant, exc)
                continue
            if issued is not None:
                self._issued[(tenant, origin)] = issued
