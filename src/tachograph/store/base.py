"""The store contract: what every engine must do, and nothing more.

A store keeps rows, enforces order and uniqueness, and answers queries. Hashing, canonical
bytes and checks happen in the core before a store sees an event. Every engine runs the same
conformance suite (:mod:`tachograph.testing.conformance`).
"""

from __future__ import annotations

import abc
import difflib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ..chain import LineChecker, VerifyReport
from ..errors import RunNotFound, TachographError
from ..events import Event

__all__ = ["Receipt", "RunInfo", "Store", "suggest"]


@dataclass(frozen=True, slots=True)
class Receipt:
    """What an append returns per event. ``duplicate`` is true when nothing was written."""

    event_id: str
    tenant: str
    run_id: str
    seq: int
    hash: str
    duplicate: bool = False


@dataclass(frozen=True, slots=True)
class RunInfo:
    """A summary row for one run."""

    tenant: str
    run_id: str
    actor: str
    started_at: str
    last_at: str
    events: int
    head_hash: str
    status: str | None
    """``ok``, ``error`` or ``aborted`` from ``run.finished``; ``None`` while unfinished."""

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "tenant": self.tenant,
            "run_id": self.run_id,
            "actor": self.actor,
            "started_at": self.started_at,
            "last_at": self.last_at,
            "events": self.events,
            "head_hash": self.head_hash,
            "status": self.status,
        }


class Store(abc.ABC):
    """The contract every engine implements.

    Appends are atomic per batch and enforce the chain; duplicates of stored events are
    acknowledged without writing; reads stream in constant memory.
    """

    url: str

    @abc.abstractmethod
    def append(self, events: Sequence[Event], *, durable: bool = True) -> list[Receipt]:
        """Append a batch atomically. Refuse the whole batch on any conflict.

        Each event's ``seq`` must be its run's next and its ``prev_hash`` the run's head hash,
        else :class:`~tachograph.errors.SequenceConflict`. An event already stored with the
        same bytes gets its original receipt (``duplicate=True``); the same ``event_id`` or
        ``(run, seq)`` with other content raises :class:`~tachograph.errors.DuplicateConflict`.
        """

    def append_all(
        self,
        batches: Iterable[Sequence[Event]],
        *,
        progress: Callable[[int], None] | None = None,
    ) -> tuple[int, int]:
        """Append several batches as ONE atomic unit: all of them are stored, or none.

        What an import needs (a file is stored whole or not at all, whatever fails and
        wherever the process is killed). Returns ``(written, duplicates)``. Engines that can
        hold one transaction over several batches override this to keep memory flat; this
        default joins the batches into one :meth:`append`.
        """
        joined = [event for batch in batches for event in batch]
        receipts = self.append(joined)
        if progress is not None:
            progress(len(joined))
        duplicates = sum(1 for r in receipts if r.duplicate)
        return len(receipts) - duplicates, duplicates

    @abc.abstractmethod
    def head(self, run_id: str, *, tenant: str = "default") -> tuple[int, str] | None:
        """The last ``(seq, hash)`` of a run, or ``None`` if it has no events."""

    @abc.abstractmethod
    def read(
        self,
        run_id: str,
        *,
        tenant: str | None = None,
        from_seq: int = 0,
        decode: bool = True,
    ) -> Iterator[Event]:
        """Stream a run's events in seq order from ``from_seq``, in constant memory.

        With ``decode=False`` payloads are left as canonical bytes in ``payload_bytes``
        (``payload`` is ``None``), which is what verification needs.
        """

    @abc.abstractmethod
    def runs(
        self,
        *,
        actor: str | None = None,
        tenant: str | None = None,
        status: str | None = None,
        since: str | None = None,
        until: str | None = None,
        limit: int | None = None,
    ) -> list[RunInfo]:
        """Runs, newest first, filtered by actor, tenant, status (``unfinished`` for none) and
        start time (ISO 8601 strings compared lexically)."""

    @abc.abstractmethod
    def run_info(self, run_id: str, *, tenant: str | None = None) -> RunInfo:
        """The summary of one run; raises :class:`RunNotFound` with close matches."""

    @abc.abstractmethod
    def count_events(self) -> int:
        """How many events the store holds."""

    def close(self) -> None:  # noqa: B027 - optional for engines without resources
        """Release the engine's resources."""

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- derived operations, the same for every engine ------------------------------------

    def events(self, run_id: str, *, tenant: str | None = None) -> list[Event]:
        """All events of a run, decoded, as a list (use :meth:`read` for large runs)."""
        return list(self.read(run_id, tenant=tenant))

    def verify(self, run_id: str, *, tenant: str | None = None) -> VerifyReport:
        """Verify one stored run (SPEC section 8), streaming."""
        return self._verify_one(run_id, tenant, None)

    def _summary(self, run_id: str, tenant: str | None) -> RunInfo | None:
        # Read before the chain: appends only add, so the chain is never shorter than a
        # summary read first, unless events were taken away.
        try:
            return self.run_info(run_id, tenant=tenant)
        except RunNotFound:
            return None

    def _feed(self, checker: LineChecker, run_id: str, tenant: str | None) -> Iterator[int]:
        """Feed a run's events to ``checker``, yielding once per event (for progress).

        Engines may override this with a faster path over their raw rows.
        """
        for event in self.read(run_id, tenant=tenant, decode=False):
            checker.feed_event(event)
            yield 1

    def verify_all(
        self,
        *,
        tenant: str | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> Iterator[VerifyReport]:
        """Verify every run, one at a time, in constant memory.

        ``progress`` is called with the number of events checked since its last call.
        """
        for run_tenant, run_id in self.run_keys():
            if tenant is not None and run_tenant != tenant:
                continue
            yield self._verify_one(run_id, run_tenant, progress)

    def _verify_one(
        self, run_id: str, tenant: str | None, progress: Callable[[int], None] | None
    ) -> VerifyReport:
        checker = LineChecker(source=self.url)
        pending = 0
        try:
            summary = self._summary(run_id, tenant)
            for _ in self._feed(checker, run_id, tenant):
                pending += 1
                if progress is not None and pending >= 1000:
                    progress(pending)
                    pending = 0
        except RunNotFound:
            raise
        except (TachographError, ValueError, TypeError, OverflowError) as exc:
            # One unreadable run (a damaged page, a tampered row the engine cannot even
            # return) fails with a report; it does not stop the others from being reported.
            if checker.run_id is None:
                checker.run_id, checker.tenant = run_id, tenant
            checker.feed_malformed(f"the store could not read this run: {exc}")
            return checker.report()
        if progress is not None and pending:
            progress(pending)
        return _finish(checker, run_id, tenant, summary)

    def run_keys(self) -> list[tuple[str, str]]:
        """Every ``(tenant, run_id)`` in the store; engines also list orphaned events' runs."""
        return [(info.tenant, info.run_id) for info in self.runs()]

    def resolve(self, run_id: str, *, tenant: str | None = None) -> RunInfo:
        """Alias of :meth:`run_info`, for readability at call sites."""
        return self.run_info(run_id, tenant=tenant)


def _finish(
    checker: LineChecker, run_id: str, tenant: str | None, summary: RunInfo | None = None
) -> VerifyReport:
    if checker.position == 0:
        # A store lists a run only once an event of it was appended: a listed run with no
        # events lost them behind the store's back. That must not read as "verified".
        checker.run_id, checker.tenant = run_id, tenant
        checker.feed_missing("the store lists this run but holds none of its events")
    elif summary is not None and checker.position < summary.events:
        # The chain alone cannot show a cut tail; the store's own summary, written in the
        # same transaction as every append, can (unless it was rewritten too: unsealed).
        checker.feed_missing(
            f"the store's run summary records {summary.events} events, but the chain stops "
            f"at seq {checker.position - 1}: its tail is missing"
        )
    elif (
        summary is not None
        and checker.position == summary.events
        and not checker.failures
        and checker.head != summary.head_hash
    ):
        checker.position -= 1
        checker.feed_missing(
            f"the last event hashes to {checker.head}, but the store's run summary records "
            f"{summary.head_hash}: the tail was replaced"
        )
        checker.position += 1
    return checker.report()


def suggest(run_id: str, candidates: Iterable[str]) -> list[str]:
    """Close matches for an unknown run id (prefixes first, then similar spellings)."""
    pool = list(candidates)
    prefixed = [c for c in pool if c.startswith(run_id)]
    close = difflib.get_close_matches(run_id, pool, n=5, cutoff=0.6)
    seen: list[str] = []
    for c in prefixed + close:
        if c not in seen:
            seen.append(c)
    return seen[:5]


def not_found(run_id: str, candidates: Iterable[str], where: str) -> RunNotFound:
    """A :class:`RunNotFound` that lists close matches."""
    matches = suggest(run_id, candidates)
    hint = f"; did you mean {', '.join(matches)}?" if matches else ""
    return RunNotFound(
        f"no run {run_id!r} in {where}{hint}", run_id=run_id, suggestions=matches, location=where
    )
