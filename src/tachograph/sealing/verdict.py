"""Per-run sealing verdicts for a store: sealed up to seq S, unsealed (why), or failed (what)."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import RunNotFound, SealingError
from ..record.checkpoint import VerifierKey
from ..record.event import Event, EventType
from ..record.merkle import SealLeaf
from ..store.base import RunInfo, SealRow, Store
from .log import TenantAudit

__all__ = ["SealVerdict", "run_verdict", "seal_verdict_of"]


@dataclass(frozen=True, slots=True)
class SealVerdict:
    """``status`` is ``sealed`` (covered by a trusted checkpoint), ``unsigned`` (the store's
    seal log covers the run up to ``sealed_seq`` but no trusted checkpoint does: ``reason``
    says why), ``unsealed`` (no seal of the run: not a failure, ``reason`` says why) or
    ``failed`` (``reason`` names what failed).

    Unsigned seals show a tail cut or an event changed by anyone but the store's owner, who
    could rewrite the seal log as well; only a signed (and witnessed) checkpoint shows that.
    """

    run_id: str
    tenant: str
    status: str
    reason: str | None = None
    sealed_seq: int | None = None
    final: bool = False
    events: int = 0
    checkpoint_size: int | None = None
    signed_by: str | None = None
    witnessed_by: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """False only when sealing shows tampering."""
        return self.status != "failed"

    def to_dict(self) -> dict[str, Any]:
        """JSON form (the ``seal`` object of ``tacho verify --json``)."""
        unsealed = None
        if self.sealed_seq is not None:
            unsealed = max(0, self.events - 1 - self.sealed_seq)
        return {
            "status": self.status,
            "reason": self.reason,
            "sealed_seq": self.sealed_seq,
            "final": self.final,
            "unsealed_events": unsealed,
            "checkpoint_size": self.checkpoint_size,
            "signed_by": self.signed_by,
            "witnessed_by": list(self.witnessed_by),
        }

    def render(self) -> str:
        """One clause for the run's line."""
        if self.status == "failed":
            return f"SEAL FAILED: {self.reason}"
        if self.status == "unsealed":
            return f"unsealed ({self.reason})"
        after = self.events - 1 - (self.sealed_seq or 0)
        window = f"; {after} later event(s) not yet sealed" if after > 0 else ""
        if self.status == "unsigned":
            return (
                f"sealed up to seq {self.sealed_seq}{' (final)' if self.final else ''}, "
                f"no checkpoint ({self.reason}){window}"
            )
        witnessed = f", witnessed by {', '.join(self.witnessed_by)}" if self.witnessed_by else ""
        return (
            f"sealed up to seq {self.sealed_seq}{' (final)' if self.final else ''} by checkpoint "
            f"of size {self.checkpoint_size}, signed by {self.signed_by}{witnessed}{window}"
        )


def seal_verdict_of(
    store: Store,
    run_id: str,
    tenant: str,
    *,
    keys: Sequence[VerifierKey] | None = None,
    events: Sequence[Event] | None = None,
) -> SealVerdict:
    """The sealing verdict of one stored run, as ``tacho verify RUN`` gives it: its tenant's
    seal log audited against the trusted ``keys`` (default: the verifier of the signing key
    ``TACHOGRAPH_SIGNING_KEY`` names, if any), then the run held against its seals.

    ``events`` are the run's events when the caller has read them already (replay has), so
    that the run is not read a second time. A key file that cannot be read leaves the run
    held against the store's own seals only (``unsigned``), as no key does.
    """
    if keys is None:
        from .log import load_signing_key

        try:
            key = load_signing_key()
        except SealingError:
            key = None
        keys = [key.verifier] if key is not None else []
    audit = _tenant_audit(store, tenant, keys)
    try:
        info = store.run_info(run_id, tenant=tenant)
    except RunNotFound:
        # events with no summary: the chain check reports that; no seal can be held to it
        return SealVerdict(run_id, tenant, status="unsealed", reason="the store lists no such run")
    return run_verdict(store, info, audit, events=events)


_AUDITS: weakref.WeakKeyDictionary[
    Store, dict[tuple[str, tuple[VerifierKey, ...]], tuple[Hashable, TenantAudit]]
] = weakref.WeakKeyDictionary()
"""Per store: the last audit of each tenant's seal log (under each set of trusted keys), with
the store's :meth:`~tachograph.store.Store.change_token` it was made at."""
_AUDITS_LOCK = threading.Lock()


def _tenant_audit(store: Store, tenant: str, keys: Sequence[VerifierKey]) -> TenantAudit:
    """``audit_tenant(store, tenant, keys=keys)``, made again only when the store may have
    changed since the last one in this process. The audit reads and recomputes the tenant's
    whole seal log and lists its runs: every replay, fork, resume and ``tacho show`` of one
    run paid for the whole store (36 ms for a run of 5,000 events beside 3,000 small runs,
    more than its own read), and a regression suite replaying each run of a store paid for
    it once per run."""
    from .log import audit_tenant

    # read before the audit: a change made during it leaves an older token behind
    token = store.change_token()
    if token is None:
        return audit_tenant(store, tenant, keys=keys)
    memo_key = (tenant, tuple(keys))
    with _AUDITS_LOCK:
        held = _AUDITS.get(store, {}).get(memo_key)
    if held is not None and held[0] == token:
        return held[1]
    audit = audit_tenant(store, tenant, keys=keys)
    with _AUDITS_LOCK:
        _AUDITS.setdefault(store, {})[memo_key] = (token, audit)
    return audit


def run_verdict(
    store: Store, info: RunInfo, audit: TenantAudit, *, events: Sequence[Event] | None = None
) -> SealVerdict:
    """The sealing verdict of one stored run, given its tenant's :class:`TenantAudit`
    (``events``: the run's events, if already read)."""
    if audit.problem is not None:
        return SealVerdict(info.run_id, info.tenant, status="failed", reason=audit.problem)
    seals = store.seals_for_run(info.tenant, info.run_id)
    if not seals:
        # About this run, not its tenant's log: whatever the checkpoints, it has no seal.
        return SealVerdict(info.run_id, info.tenant, status="unsealed", reason=_no_seal(info))
    if audit.size is None:
        # No trusted checkpoint, but the store's own seals still show a cut or changed run.
        verdict = _held_against(store, info, seals, events)
        if verdict.status != "sealed":
            return verdict
        return SealVerdict(
            info.run_id,
            info.tenant,
            status="unsigned",
            reason=_unsigned(audit.unsigned_reason),
            sealed_seq=verdict.sealed_seq,
            final=verdict.final,
            events=verdict.events,
        )
    covered = [s for s in seals if s.index < audit.size]
    if not covered:
        reason = (
            f"no seal of this run under checkpoint {audit.size}; its {len(seals)} seal(s) "
            "wait for the next checkpoint"
        )
        return SealVerdict(info.run_id, info.tenant, status="unsealed", reason=reason)
    verdict = _held_against(store, info, covered, events)
    if verdict.status != "sealed":
        return verdict
    top = verdict.sealed_seq
    index = max(s.index for s in covered if s.seq == top)
    return SealVerdict(
        info.run_id,
        info.tenant,
        status="sealed",
        sealed_seq=top,
        final=verdict.final,
        events=verdict.events,
        checkpoint_size=audit.size,
        signed_by=audit.signer,
        witnessed_by=tuple(name for name, size in audit.witnessed if index < size),
    )


def _no_seal(info: RunInfo) -> str:
    """Why a run has no seal at all: a finished run is sealed at its end unless sealing was off."""
    if info.status is None:
        return (
            "no seal of this run yet: it is still running or stopped before its first seal, "
            "or it was recorded with sealing off"
        )
    return "no seal of this run: it was recorded with sealing off, or imported"


def _unsigned(reason: str | None) -> str:
    prefix = "no checkpoint was issued ("
    if reason and reason.startswith(prefix) and reason.endswith(")"):
        return reason[len(prefix) : -1] + "; tacho keys init, then tacho seal"
    return reason or "no trusted checkpoint"


def _held_against(
    store: Store, info: RunInfo, covered: list[SealRow], events: Sequence[Event] | None = None
) -> SealVerdict:
    """The run held against ``covered`` seals: ``failed``, or ``sealed`` with how far."""
    wanted: dict[int, list[SealLeaf]] = {}
    for row in covered:
        try:
            leaf = SealLeaf.from_bytes(row.leaf)
        except SealingError as exc:
            return SealVerdict(
                info.run_id, info.tenant, status="failed", reason=f"seal {row.index}: {exc}"
            )
        if (leaf.tenant, leaf.run_id, leaf.seq) != (info.tenant, info.run_id, row.seq):
            return SealVerdict(
                info.run_id,
                info.tenant,
                status="failed",
                reason=f"seal {row.index} is for run {leaf.run_id!r} seq {leaf.seq}, but is "
                "filed under this run: a seal was moved",
            )
        wanted.setdefault(leaf.seq, []).append(leaf)
    hashes: dict[int, tuple[str, str]] = {}
    count = 0
    read: Iterable[Event] = (
        events if events is not None else store.read(info.run_id, tenant=info.tenant, decode=False)
    )
    for event in read:
        count += 1
        if event.seq in wanted:
            hashes[event.seq] = (event.hash, event.type)
    last = count - 1
    top = max(wanted)
    for seq in sorted(wanted):
        for leaf in wanted[seq]:
            if seq not in hashes:
                return SealVerdict(
                    info.run_id,
                    info.tenant,
                    status="failed",
                    events=count,
                    reason=f"the run stops at seq {last}, before the sealed seq {seq}: its tail "
                    "was cut",
                )
            if hashes[seq][0] != leaf.hash:
                return SealVerdict(
                    info.run_id,
                    info.tenant,
                    status="failed",
                    events=count,
                    reason=f"the event at seq {seq} hashes to {hashes[seq][0]}, but the seal "
                    f"records {leaf.hash}: the run was changed",
                )
            if leaf.final and hashes[seq][1] != EventType.RUN_FINISHED.value:
                return SealVerdict(
                    info.run_id,
                    info.tenant,
                    status="failed",
                    events=count,
                    reason=f"the seal at seq {seq} says it is the run's end, but that event is "
                    f"{hashes[seq][1]!r}, not run.finished",
                )
            if leaf.final and seq != last:
                return SealVerdict(
                    info.run_id,
                    info.tenant,
                    status="failed",
                    events=count,
                    reason=f"the run goes on to seq {last} after its final seal at seq {seq}",
                )
    return SealVerdict(
        info.run_id,
        info.tenant,
        status="sealed",
        sealed_seq=top,
        final=any(leaf.final for leaf in wanted[top]),
        events=count,
    )
