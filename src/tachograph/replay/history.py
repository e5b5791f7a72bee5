"""What replay, fork, resume and regression take: one recorded run, verified once.

A :class:`RunHistory` is built from a store, a JSONL file, or a list of events. It is
verified on the way in with the same strength everywhere (the store's own run summary is held
against the chain, so that a cut tail is refused by replay exactly as by ``tacho verify``),
and it knows what replay needs: the recorded input, environment and key secret, and the
pairing of each intent with its completion.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import FormatError, Unreplayable
from ..lifecycle.purpose import reading
from ..record.event import Event, EventType
from ..record.jsonl import read_jsonl, read_jsonl_unverified
from ..record.seal import key_secret_of
from ..record.verify import VerifyReport, verify_events
from ..store import Store, open_store, read_verified

if TYPE_CHECKING:
    from ..sealing.verdict import SealVerdict

__all__ = ["RunFacts", "RunHistory", "gather"]

_COMPLETION_TYPES = frozenset(
    {
        EventType.TOOL_COMPLETED.value,
        EventType.TOOL_FAILED.value,
        EventType.MODEL_RESPONSE.value,
        EventType.MODEL_FAILED.value,
    }
)
# Read per event: a constant, as ``EventType.X.value`` is an enum property (~1 us on 3.11).
_TOOL_REQUESTED = EventType.TOOL_REQUESTED.value
_TOOL_COMPLETED = EventType.TOOL_COMPLETED.value
_MODEL_REQUEST = EventType.MODEL_REQUEST.value
_CALL_TYPES = frozenset({_TOOL_REQUESTED, _MODEL_REQUEST})


_LIVE_READS = 3
"""Reads of a run that another process is recording, before a seal failure is believed."""


def _grew(store: Store, run_id: str, tenant: str, read: int) -> bool:
    """Whether the store holds more events of the run than the ``read`` just read."""
    try:
        return store.run_info(run_id, tenant=tenant).events > read
    except Exception:  # a run the store cannot describe did not grow
        return False


@dataclass(frozen=True)
class RunFacts:
    """What replay reads off a whole run besides its steps, gathered in the one pass over
    its events that pairs intents with completions. A pass of its own for each cost 20 to
    90 ns an event, and more once a run outgrows the caches (50,000 events)."""

    erased: tuple[int, ...]
    """The seqs whose payload and salt were erased."""
    used_tools: frozenset[str]
    """The tools the run called."""
    used_models: frozenset[str]
    """The exact model ids its model requests named."""
    dry_run: tuple[int, ...]
    """The seqs of tool results recorded in dry run."""
    overlapping: bool
    """Whether a call started while another was still open (concurrent calls)."""


def gather(events: Iterable[Event]) -> tuple[dict[str, Event], RunFacts]:
    """The completions of ``events`` by idempotency key, and their :class:`RunFacts`."""
    completions: dict[str, Event] = {}
    erased: list[int] = []
    tools: set[str] = set()
    models: set[str] = set()
    dry_run: list[int] = []
    open_keys: set[str] = set()
    overlapping = False
    for e in events:
        kind = e.type
        payload = e.payload
        key = e.idempotency_key
        if payload is None and e.salt is None:  # e.erased
            erased.append(e.seq)
        if kind in _COMPLETION_TYPES:
            if key is not None:
                completions[key] = e
                open_keys.discard(key)
            if kind == _TOOL_COMPLETED and payload is not None and payload.get("dry_run") is True:
                dry_run.append(e.seq)
        elif kind in _CALL_TYPES:
            if kind == _MODEL_REQUEST:
                if e.model is not None:
                    models.add(e.model)
            elif isinstance(payload, dict):
                tools.add(str(payload.get("tool")))
            if key is not None and not overlapping:
                if open_keys:
                    overlapping = True
                open_keys.add(key)
    facts = RunFacts(
        erased=tuple(erased),
        used_tools=frozenset(tools),
        used_models=frozenset(models),
        dry_run=tuple(dry_run),
        overlapping=overlapping,
    )
    return completions, facts


@dataclass(frozen=True)
class RunHistory:
    """One recorded run: its events, where they came from, and how they verified."""

    events: tuple[Event, ...]
    report: VerifyReport
    source: str
    completions: Mapping[str, Event] = field(default_factory=dict, repr=False)
    seal: SealVerdict | None = None
    """For a stored run: its sealing verdict, as ``tacho verify RUN`` gives it (``None`` for
    a file or events in hand, which carry no seal)."""
    known: RunFacts | None = field(default=None, repr=False, compare=False)
    """The run's facts when they were gathered with its completions (see :attr:`facts`)."""

    # -- building ----------------------------------------------------------------------------

    @classmethod
    def from_events(
        cls, events: Iterable[Event], *, source: str = "events", report: VerifyReport | None = None
    ) -> RunHistory:
        """A history of events already in hand (verified here unless ``report`` is given)."""
        evs = tuple(events)
        if not evs:
            raise Unreplayable(f"{source} holds no events; there is nothing to replay")
        rep = report if report is not None else verify_events(evs, source=source)
        completions, facts = gather(evs)
        return cls(evs, rep, source, completions, known=facts)

    @classmethod
    def from_store(
        cls,
        store: Store | str | os.PathLike[str] | None,
        run_id: str,
        *,
        tenant: str | None = None,
        purpose: str = "replay",
    ) -> RunHistory:
        """A stored run, verified as ``tacho verify`` verifies it (chain and run summary),
        read for ``purpose`` (default ``replay``) under the purpose policy in force, the read
        recorded in the store audit (docs/privacy.md)."""
        owned = not isinstance(store, Store)
        st = store if isinstance(store, Store) else open_store(store, create=False)
        from ..sealing.verdict import seal_verdict_of

        try:
            for _attempt in range(_LIVE_READS):
                events, report = read_verified(reading(st, purpose), run_id, tenant=tenant)
                seal = None
                if not events:
                    break
                # held against its seals as ``tacho verify RUN`` holds it: a run its owner
                # rewrote (a chain that verifies, a seal that does not) is not replayed
                seal = seal_verdict_of(st, run_id, events[0].tenant, events=events)
                if seal.ok or not _grew(st, run_id, events[0].tenant, len(events)):
                    break
                # A run still being recorded: a seal its recorder committed after the events
                # were read names a seq past them, which reads as a cut tail. Read again.
        finally:
            if owned:
                st.close()
        history = cls.from_events(events, source=st.url, report=report)
        return replace(history, seal=seal)

    @classmethod
    def from_jsonl(
        cls,
        path: str | os.PathLike[str],
        *,
        run_id: str | None = None,
        allow_unverified: bool = False,
    ) -> RunHistory:
        """A run from an interchange file (``tacho export``); ``run_id`` picks one of
        several runs in the file. A file that does not verify is refused
        (:class:`~tachograph.errors.VerificationFailed`) unless ``allow_unverified``: then
        the history carries the failed report, and replay labels it unverified (passed
        ``allow_unverified`` too), as it does a stored run that does not verify."""
        read: list[tuple[list[Event], VerifyReport | None]]
        if allow_unverified:
            read = list(read_jsonl_unverified(path))
        else:
            read = [(events, None) for events in read_jsonl(path)]
        if run_id is not None:
            read = [(r, rep) for r, rep in read if r and r[0].run_id == run_id]
        runs = [r for r, _rep in read]
        if not runs:
            what = f"no run {run_id!r}" if run_id is not None else "no run"
            raise FormatError(f"{Path(path)} holds {what}", path=str(path))
        if len(runs) > 1:
            ids = ", ".join(r[0].run_id for r in runs[:5])
            raise FormatError(
                f"{Path(path)} holds {len(runs)} runs ({ids}); name one with run_id",
                path=str(path),
                runs=len(runs),
            )
        return cls.from_events(runs[0], source=str(path), report=read[0][1])

    # -- what replay needs ---------------------------------------------------------------------

    @property
    def run_id(self) -> str:
        return self.events[0].run_id

    @property
    def tenant(self) -> str:
        return self.events[0].tenant

    @property
    def actor(self) -> str:
        return self.events[0].actor

    @property
    def started(self) -> Event:
        return self.events[0]

    @property
    def finished(self) -> Event | None:
        last = self.events[-1]
        return last if last.type == EventType.RUN_FINISHED.value else None

    @property
    def input(self) -> Any:
        return (self.started.payload or {}).get("input")

    @property
    def env(self) -> dict[str, Any] | None:
        env = (self.started.payload or {}).get("env")
        return env if isinstance(env, dict) else None

    @property
    def labels(self) -> dict[str, Any]:
        labels = (self.started.payload or {}).get("labels")
        return labels if isinstance(labels, dict) else {}

    @property
    def key_secret(self) -> bytes | None:
        """The run's key secret (SPEC section 5); ``None`` for a run recorded before it."""
        return key_secret_of(self.started.payload)

    @property
    def facts(self) -> RunFacts:
        """What replay reads off the whole run (gathered once)."""
        known = self.known
        if known is None:  # built without from_events
            known = gather(self.events)[1]
            object.__setattr__(self, "known", known)
        return known

    @property
    def erased(self) -> tuple[int, ...]:
        return self.facts.erased

    @property
    def used_tools(self) -> frozenset[str]:
        """The tools the run called."""
        return self.facts.used_tools

    def completion(self, key: str | None) -> Event | None:
        """The completion of the call with idempotency key ``key``."""
        return self.completions.get(key) if key is not None else None

    def check_replayable(self, *, allow_unverified: bool = False) -> bool:
        """Raise :class:`~tachograph.errors.Unreplayable` unless the run can be replayed;
        returns whether it is replayed unverified."""
        first = self.started
        if first.type != EventType.RUN_STARTED.value:
            raise Unreplayable(
                f"run {self.run_id!r} does not begin with run.started; it cannot be replayed",
                run_id=self.run_id,
            )
        if first.erased:
            raise Unreplayable(
                f"the payload of run.started of {self.run_id!r} was erased: the agent's input "
                "is gone, so the run cannot be replayed",
                run_id=self.run_id,
                seq=0,
                seqs=(0,),
            )
        # the chain first: its report names the first broken event, the more precise
        # diagnosis; a chain that verifies is then held against its seals (an owner's rewrite)
        if not self.report.ok:
            if not allow_unverified:
                first_failure = self.report.first_failure
                raise Unreplayable(
                    f"refusing to replay a run that does not verify: {self.report.render()} "
                    "(pass allow_unverified=True / --allow-unverified to replay it anyway, "
                    "labelled as such)",
                    run_id=self.report.run_id,
                    seq=first_failure.seq if first_failure else None,
                    report=self.report,
                )
            return True
        if self.seal is not None and not self.seal.ok:
            if not allow_unverified:
                raise Unreplayable(
                    f"refusing to replay a run whose seal fails: {self.run_id}: "
                    f"{self.seal.reason} (pass allow_unverified=True / --allow-unverified to "
                    "replay it anyway, labelled as such)",
                    run_id=self.run_id,
                )
            return True
        return False
