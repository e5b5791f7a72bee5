"""Per-run sealing verdicts for a store: sealed up to seq S, unsealed (why), or failed (what)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import SealingError
from ..record.merkle import SealLeaf
from ..store.base import RunInfo, Store
from .log import TenantAudit

__all__ = ["SealVerdict", "run_verdict"]


@dataclass(frozen=True, slots=True)
class SealVerdict:
    """``status`` is ``sealed``, ``unsealed`` (not a failure: ``reason`` says why) or
    ``failed`` (``reason`` names what failed)."""

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
        witnessed = f", witnessed by {', '.join(self.witnessed_by)}" if self.witnessed_by else ""
        after = self.events - 1 - (self.sealed_seq or 0)
        window = f"; {after} later event(s) not yet sealed" if after > 0 else ""
        return (
            f"sealed up to seq {self.sealed_seq}{' (final)' if self.final else ''} by checkpoint "
            f"of size {self.checkpoint_size}, signed by {self.signed_by}{witnessed}{window}"
        )


def run_verdict(store: Store, info: RunInfo, audit: TenantAudit) -> SealVerdict:
    """The sealing verdict of one stored run, given its tenant's :class:`TenantAudit`."""
    if audit.problem is not None:
        return SealVerdict(info.run_id, info.tenant, status="failed", reason=audit.problem)
    if audit.size is None:
        return SealVerdict(
            info.run_id, info.tenant, status="unsealed", reason=audit.unsigned_reason
        )
    seals = store.seals_for_run(info.tenant, info.run_id)
    covered = [s for s in seals if s.index < audit.size]
    if not covered:
        reason = f"no seal of this run under checkpoint {audit.size}"
        if seals:
            reason += f"; {len(seals)} seal(s) wait for the next checkpoint"
        return SealVerdict(info.run_id, info.tenant, status="unsealed", reason=reason)
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
    for event in store.read(info.run_id, tenant=info.tenant, decode=False):
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
            if leaf.final and seq != last:
                return SealVerdict(
                    info.run_id,
                    info.tenant,
                    status="failed",
                    events=count,
                    reason=f"the run goes on to seq {last} after its final seal at seq {seq}",
                )
    index = max(s.index for s in covered if s.seq == top)
    return SealVerdict(
        info.run_id,
        info.tenant,
        status="sealed",
        sealed_seq=top,
        final=any(leaf.final for leaf in wanted[top]),
        events=count,
        checkpoint_size=audit.size,
        signed_by=audit.signer,
        witnessed_by=tuple(name for name, size in audit.witnessed if index < size),
    )
