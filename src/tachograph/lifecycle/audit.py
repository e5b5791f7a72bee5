"""The store audit, as a reader sees it: list it and verify its chain.

The records themselves (:class:`~tachograph.store.audit.AuditRecord`) are written by the store
engines, in the same transaction as the change they record.
"""

from __future__ import annotations

import getpass
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..errors import ProfileError
from ..store.audit import AuditEntry, AuditRecord, link_problems
from ..store.base import Store

__all__ = [
    "ACTIONS",
    "AuditEntry",
    "AuditRecord",
    "AuditReport",
    "action_matches",
    "current_actor",
    "list_audit",
    "verify_audit",
    "verify_records",
]


ACTIONS = (
    "erase",
    "read",
    "read.denied",
    "retention.delete",
    "retention.override",
    "retention.blob",
)
"""The actions this library writes to the store audit (docs/privacy.md, "The store audit")."""


def action_matches(action: str, wanted: str) -> bool:
    """True when ``action`` is ``wanted`` or in its family (``read`` takes ``read.denied``)."""
    return action == wanted or action.startswith(wanted + ".")


def current_actor() -> str:
    """Who is acting, for the audit: ``TACHOGRAPH_ACTOR``, else the operating-system user."""
    named = os.environ.get("TACHOGRAPH_ACTOR")
    if named:
        return named
    try:
        return getpass.getuser()
    except Exception:  # no user database entry (some containers)
        return f"uid:{os.getuid()}" if hasattr(os, "getuid") else "unknown"


@dataclass(frozen=True, slots=True)
class AuditReport:
    """The result of checking the store audit's chain."""

    records: int
    head: str | None
    problems: tuple[tuple[int, str], ...] = field(default=())
    hidden: int = 0
    """Records of other tenants a store confined to one tenant does not see (PostgreSQL's
    row-level security hides them): the links across them are not checked here."""

    @property
    def ok(self) -> bool:
        """True when every record links to the one before and hashes to its ``hash``."""
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "ok": self.ok,
            "records": self.records,
            "head": self.head,
            "problems": [{"seq": seq, "problem": text} for seq, text in self.problems],
            "hidden": self.hidden,
        }

    def render(self) -> str:
        """One line, or one per problem."""
        if self.ok and self.hidden:
            return (
                f"store audit verified: {self.records} record(s) of this tenant, head "
                f"{self.head}; {self.hidden} record(s) of other tenants are not visible to it, "
                "so the links across them were not checked (a role of every tenant checks "
                "the whole chain)"
            )
        if self.ok:
            return f"store audit verified: {self.records} record(s), head {self.head}"
        lines = [f"store audit FAILED: {len(self.problems)} problem(s) in {self.records} records"]
        lines += [f"  record {seq}: {text}" for seq, text in self.problems]
        return "\n".join(lines)


def verify_records(records: Iterable[AuditRecord]) -> AuditReport:
    """Check a sequence of audit records (as read from a store or a file)."""
    seen: list[AuditRecord] = []

    def counted() -> Iterable[AuditRecord]:
        for record in records:
            seen.append(record)
            yield record

    problems = link_problems(counted())
    return AuditReport(
        records=len(seen), head=seen[-1].hash if seen else None, problems=tuple(problems)
    )


def verify_audit(store: Store) -> AuditReport:
    """Verify the store audit's hash chain.

    The audit is one chain for the whole store. A store confined to a tenant may not see the
    other tenants' records (PostgreSQL's row-level security hides them): each record it
    sees is checked, and so is every link between two records it sees in a row, and the
    records it cannot see are counted (``hidden``), not taken for a break. A store that
    sees every record (any unconfined one) is held to the whole chain."""
    if store.tenant is None or not store.hides_other_tenants:
        return verify_records(store.read_audit())
    records = list(store.read_audit())
    if any(r.tenant != store.tenant for r in records):
        # it sees other tenants' records (a superuser's session, which row-level security
        # does not hold): it sees them all, and a gap is a gap
        return verify_records(records)
    return _verify_visible(records)


def _verify_visible(records: Iterable[AuditRecord]) -> AuditReport:
    """:func:`verify_records` of the records one tenant sees: a gap in ``seq`` is other
    tenants' records, and the record after it is not held to the one before the gap."""
    problems: list[tuple[int, str]] = []
    count = hidden = expected = 0
    prev: str | None = None
    head: str | None = None
    for record in records:
        count += 1
        seq = record.seq
        if seq < expected:
            problems.append((seq, f"seq {seq} where {expected} or later was expected"))
            continue
        after_gap = seq > expected
        hidden += seq - expected
        if record.unreadable is not None:
            problems.append((seq, f"the stored record cannot be read: {record.unreadable}"))
        try:
            recomputed = record.recomputed_hash()
        except ProfileError as exc:
            problems.append((seq, f"its fields cannot be hashed: {exc}"))
            recomputed = record.hash
        if record.hash != recomputed:
            problems.append((seq, f"hash {record.hash} but the fields hash to {recomputed}"))
        if not after_gap and record.prev_hash != prev:
            problems.append(
                (seq, f"prev_hash {record.prev_hash} but the record before hashes to {prev}")
            )
        prev = recomputed
        expected = seq + 1
        head = record.hash
    return AuditReport(records=count, head=head, problems=tuple(problems), hidden=hidden)


def list_audit(
    store: Store,
    *,
    tenant: str | None = None,
    action: str | None = None,
    run_id: str | None = None,
    limit: int | None = None,
) -> list[AuditRecord]:
    """Audit records, oldest first, filtered by tenant, action (a prefix such as ``read`` or
    ``retention``) and run; ``limit`` keeps the newest that many.

    A store confined to a tenant (``?tenant=T``) lists T's records alone, as its other
    listings do, and naming another tenant raises :class:`~tachograph.errors.StoreError`
    (:meth:`Store.scoped_tenant`)."""
    tenant = store.scoped_tenant(tenant)
    found = [
        r
        for r in store.read_audit()
        if (tenant is None or r.tenant == tenant)
        and (action is None or action_matches(r.action, action))
        and (run_id is None or r.detail.get("run_id") == run_id)
    ]
    return found[-limit:] if limit else found
