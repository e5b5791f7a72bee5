"""Purpose-scoped reads: every read of payloads names why, and a policy says what it may see.

A :class:`PurposePolicy` maps purposes to what they may read: every purpose sees envelopes
(type, time, actor, hashes); ``payloads`` lists the event types (``fnmatch`` patterns) whose
whole payloads it sees, ``fields`` the types of which it sees only some top-level keys, and
``tenants`` the tenants it may read at all. :class:`ScopedStore` wraps a store so that each
read applies that policy and appends a record (who, tenant, purpose, what, when) to the store
audit; a read the policy refuses raises :class:`~tachograph.errors.PurposeDenied` (and the
refusal is recorded too).

The default policy (:data:`DEFAULT_POLICY`) and purpose (:data:`DEFAULT_PURPOSE`, ``debug``)
are documented in docs/privacy.md.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
import functools
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

import orjson

from ..errors import PolicyError, PurposeDenied, RunNotFound
from ..record.event import Event, EventType
from ..record.files import write_whole
from ..record.jsonl import write_events
from ..record.rows import StoredRow
from ..store.audit import AuditEntry, AuditRecord
from ..store.base import CheckpointRow, Receipt, RunInfo, SealRow, Store, not_found
from .audit import current_actor
from .tomlfile import load_toml

__all__ = [
    "DEFAULT_POLICY",
    "DEFAULT_PURPOSE",
    "PurposePolicy",
    "PurposeRule",
    "ScopedStore",
    "export_run",
    "load_policy",
    "policy_in_force",
    "reading",
    "scoped",
]

DEFAULT_PURPOSE = "debug"
"""The purpose of a read that names none (``--purpose`` on the CLI)."""

POLICY_ENV = "TACHOGRAPH_PURPOSE_POLICY"
"""Environment variable naming a purpose policy file (TOML) to use instead of the default."""


@functools.lru_cache(maxsize=4096)
def _match(event_type: str, pattern: str) -> bool:
    # asked for every event a scoped read returns, with a handful of types and patterns
    return fnmatch.fnmatchcase(event_type, pattern)


def _matches(event_type: str, patterns: Iterable[str]) -> bool:
    return any(_match(event_type, p) for p in patterns)


@dataclass(frozen=True, slots=True)
class PurposeRule:
    """What one purpose may read."""

    name: str
    payloads: tuple[str, ...] = ()
    """Event types (patterns) whose whole payloads this purpose reads."""
    fields: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Event type pattern -> the top-level payload keys this purpose reads of it."""
    tenants: tuple[str, ...] = ("*",)
    """Tenants (patterns) this purpose may read."""
    description: str = ""

    @property
    def reads_everything(self) -> bool:
        """Whether every payload is whole to this purpose (its payloads include ``*``)."""
        return "*" in self.payloads

    def view(self, event_type: str) -> str | tuple[str, ...] | None:
        """``"whole"``, the keys it may read, or ``None`` (envelope only)."""
        if _matches(event_type, self.payloads):
            return "whole"
        for pattern, keys in self.fields.items():
            if _match(event_type, pattern):
                return keys
        return None

    def allows_tenant(self, tenant: str) -> bool:
        """Whether this purpose may read ``tenant`` at all."""
        return _matches(tenant, self.tenants)


@dataclass(frozen=True, slots=True)
class PurposePolicy:
    """Purposes by name."""

    rules: Mapping[str, PurposeRule]
    source: str = "built-in default"

    def rule(self, purpose: str) -> PurposeRule:
        """The rule of ``purpose``; an unknown purpose is denied."""
        found = self.rules.get(purpose)
        if found is None:
            raise PurposeDenied(
                f"unknown purpose {purpose!r} (policy: {self.source}); known purposes: "
                f"{', '.join(sorted(self.rules))}",
                purpose=purpose,
                what="any",
            )
        return found


_AUDIT_RECORD_TYPES = (
    EventType.RUN_FINISHED.value,
    EventType.DECISION.value,
    EventType.PLAN_SELECTED.value,
    "guardrail.*",
    "output.*",
    EventType.HANDOFF.value,
)

DEFAULT_POLICY = PurposePolicy(
    {
        "debug": PurposeRule(
            "debug", payloads=("*",), description="developers investigating a run: everything"
        ),
        "replay": PurposeRule(
            "replay", payloads=("*",), description="replay, fork and resume: everything"
        ),
        "audit": PurposeRule(
            "audit",
            payloads=_AUDIT_RECORD_TYPES,
            fields={
                EventType.RUN_STARTED.value: ("parent", "labels"),
                EventType.TOOL_REQUESTED.value: ("tool", "effect", "schema_version"),
                "tool.*": ("tool",),
                EventType.MODEL_FAILED.value: ("error",),
            },
            description="auditors: envelopes, decisions and guardrails, tool names and effects",
        ),
        "metrics": PurposeRule("metrics", description="counting and timing: envelopes only"),
    }
)
"""The policy used when none is configured: ``debug`` and ``replay`` read everything,
``audit`` reads envelopes and decisions (not model traffic or tool arguments), ``metrics``
reads envelopes only."""


def _strings(value: Any, key: str, path: str) -> tuple[str, ...]:
    if isinstance(value, str) and value:
        return (value,)
    if isinstance(value, list) and all(isinstance(v, str) and v for v in value):
        return tuple(value)
    raise PolicyError(
        f"{path}: {key} must be a list of patterns (non-empty strings), not {value!r}",
        path=path,
        key=key,
    )


_PURPOSE_KEYS = ("payloads", "fields", "tenants", "description")


def load_policy(path: str | os.PathLike[str]) -> PurposePolicy:
    """Read a purpose policy (TOML)::

    [purposes.audit]
    payloads = ["decision", "guardrail.*"]
    tenants = ["*"]
    [purposes.audit.fields]
    "tool.requested" = ["tool", "effect"]
    """
    where = str(path)
    data = load_toml(path)
    purposes = data.get("purposes")
    if not isinstance(purposes, dict) or not purposes:
        raise PolicyError(f"{where}: no [purposes.NAME] tables", path=where, key="purposes")
    rules: dict[str, PurposeRule] = {}
    for name, body in purposes.items():
        table = f"purposes.{name}"
        if not isinstance(body, dict):
            raise PolicyError(f"{where}: {table} must be a table", path=where, key=table)
        unknown = sorted(set(body) - set(_PURPOSE_KEYS))
        if unknown:
            raise PolicyError(
                f"{where}: [{table}] has unknown keys {unknown}; expected only "
                f"{', '.join(_PURPOSE_KEYS)}",
                path=where,
                key=f"{table}.{unknown[0]}",
            )
        fields_table = body.get("fields", {})
        if not isinstance(fields_table, dict):
            raise PolicyError(
                f"{where}: [{table}.fields] must be a table of event type = [keys], "
                f"not {fields_table!r}",
                path=where,
                key=f"{table}.fields",
            )
        description = body.get("description", "")
        if not isinstance(description, str):
            raise PolicyError(
                f"{where}: {table}.description must be a string, not {description!r}",
                path=where,
                key=f"{table}.description",
            )
        rules[name] = PurposeRule(
            name,
            payloads=_strings(body.get("payloads", []), f"{table}.payloads", where),
            fields={k: _strings(v, f"{table}.fields.{k}", where) for k, v in fields_table.items()},
            tenants=_strings(body.get("tenants", ["*"]), f"{table}.tenants", where),
            description=description,
        )
    return PurposePolicy(rules, source=where)


def policy_in_force(path: str | os.PathLike[str] | None = None) -> PurposePolicy:
    """The policy at ``path``, else the file ``TACHOGRAPH_PURPOSE_POLICY`` names, else the
    default."""
    target = path if path is not None else os.environ.get(POLICY_ENV)
    return load_policy(target) if target else DEFAULT_POLICY


class ScopedStore(Store):
    """A store seen through one purpose: reads are filtered by the policy and audited.

    Payloads a purpose may not see are withheld: ``payload`` and ``salt`` are ``None`` (so a
    withheld line reads, and verifies, as erased: the reader cannot tell a withheld value from
    the chain). Of a type the purpose may read only some keys of, the payload holds just those
    keys and ``salt`` is ``None``; with ``whole_events=True`` (exports, which must verify) such
    payloads are withheld instead. ``tenant`` confines every read and listing to one tenant.
    """

    def __init__(
        self,
        inner: Store,
        *,
        purpose: str = DEFAULT_PURPOSE,
        policy: PurposePolicy | None = None,
        actor: str | None = None,
        tenant: str | None = None,
        whole_events: bool = False,
    ) -> None:
        self.inner = inner
        self.url = inner.url
        self.purpose = purpose
        self.policy = policy or DEFAULT_POLICY
        self.actor = actor or current_actor()
        # A store confined to a tenant (``?tenant=T``) confines this view to it too; naming
        # another tenant here is refused as the store refuses it.
        self.tenant = inner.scoped_tenant(tenant)
        self.hides_other_tenants = inner.hides_other_tenants
        self.whole_events = whole_events
        self._rule: PurposeRule | None = None

    @property
    def path(self) -> Any:
        """The inner store's file, for engines that have one (blob folders sit beside it)."""
        return getattr(self.inner, "path", None)

    def rule(self) -> PurposeRule:
        """The purpose's rule (an unknown purpose is denied and the refusal recorded)."""
        if self._rule is None:
            try:
                self._rule = self.policy.rule(self.purpose)
            except PurposeDenied:
                self._record("read.denied", self.tenant or "default", {"what": "any"})
                raise
        return self._rule

    def _record(self, action: str, tenant: str, detail: dict[str, Any]) -> AuditRecord | None:
        if getattr(self.inner, "read_only", False):
            # A store opened read-only (a read-only file, folder or medium, e.g. an archive)
            # cannot take an audit record. Refusing the read would make such a store
            # unreadable through tachograph while the bytes stay readable to anyone, so the
            # read is allowed and goes unrecorded (docs/privacy.md says so).
            return None
        return self.inner.append_audit(
            AuditEntry(
                action=action,
                actor=self.actor,
                tenant=tenant,
                detail={"purpose": self.purpose, **detail},
            )
        )

    def _check_tenant(self, run_id: str, tenant: str | None) -> str:
        resolved = self.run_info(run_id, tenant=tenant).tenant  # confined to the scoped tenant
        rule = self.rule()
        if not rule.allows_tenant(resolved):
            self._record("read.denied", resolved, {"run_id": run_id, "what": "tenant"})
            raise PurposeDenied(
                f"purpose {self.purpose!r} may not read tenant {resolved!r}",
                purpose=self.purpose,
                run_id=run_id,
                tenant=resolved,
                what="tenant",
            )
        return resolved

    def _filter(self, event: Event, rule: PurposeRule) -> Event:
        view = rule.view(event.type)
        if view == "whole" or event.erased:
            return event
        if view is None or self.whole_events:
            return dataclasses.replace(event, payload=None, salt=None, payload_bytes=None)
        payload = event.payload
        if payload is None and event.payload_bytes is not None:
            try:
                payload = orjson.loads(event.payload_bytes)
            except (orjson.JSONDecodeError, TypeError):  # tampered bytes: verification says so
                payload = None
        whole = payload if isinstance(payload, dict) else {}
        kept = {k: v for k, v in whole.items() if k in view}
        return dataclasses.replace(event, payload=kept, salt=None, payload_bytes=None)

    def read(
        self,
        run_id: str,
        *,
        tenant: str | None = None,
        from_seq: int = 0,
        decode: bool = True,
    ) -> Iterator[Event]:
        """The run's events as the purpose may see them; the read is recorded first."""
        resolved = self._check_tenant(run_id, tenant)
        rule = self.rule()
        self._record("read", resolved, {"run_id": run_id, "from_seq": from_seq})
        events = self.inner.read(run_id, tenant=resolved, from_seq=from_seq, decode=decode)
        if rule.reads_everything:
            return events  # nothing to filter: no generator step per event (replay reads so)
        return (self._filter(e, rule) for e in events)

    def read_rows(
        self, run_id: str, *, tenant: str | None = None, from_seq: int = 0
    ) -> Iterator[StoredRow]:
        """The run's rows as the purpose may see them (a payload it may not read comes
        without its bytes and salt, as erased); the read is recorded first."""
        resolved = self._check_tenant(run_id, tenant)
        rule = self.rule()
        self._record("read", resolved, {"run_id": run_id, "from_seq": from_seq})
        rows = self.inner.read_rows(run_id, tenant=resolved, from_seq=from_seq)
        if rule.reads_everything:
            yield from rows
            return
        for row in rows:
            if rule.view(row.type) == "whole":
                yield row
            else:
                yield row._replace(payload_bytes=None, salt=None)

    # -- everything else passes through, confined to the tenant ---------------------------

    def append(self, events: Sequence[Event], *, durable: bool = True) -> list[Receipt]:
        """Appends pass through."""
        return self.inner.append(events, durable=durable)

    def append_all(
        self,
        batches: Iterable[Sequence[Event]],
        *,
        progress: Callable[[int], None] | None = None,
    ) -> tuple[int, int]:
        """Atomic multi-batch appends pass through (the inner engine keeps memory flat)."""
        return self.inner.append_all(batches, progress=progress)

    def head(self, run_id: str, *, tenant: str | None = None) -> tuple[int, str] | None:
        """The inner store's head."""
        return self.inner.head(run_id, tenant=tenant if tenant is not None else self.tenant)

    def runs(self, **filters: Any) -> list[RunInfo]:
        """Runs, confined to the scoped tenant."""
        if self.tenant is not None:
            filters["tenant"] = self.tenant
        return self.inner.runs(**filters)

    def run_info(self, run_id: str, *, tenant: str | None = None) -> RunInfo:
        """A run's summary, confined to the scoped tenant."""
        confined = self._confined(run_id, tenant)
        with self._as_confined(run_id):
            return self.inner.run_info(run_id, tenant=confined)

    def close_matches(self, run_id: str, *, tenant: str | None = None) -> list[str]:
        """Close matches of an unknown run id, confined to the scoped tenant."""
        return self.inner.close_matches(run_id, tenant=self._confined(run_id, tenant))

    @contextlib.contextmanager
    def _as_confined(self, run_id: str) -> Iterator[None]:
        """A miss of the inner store as a store confined to the scoped tenant says it: the
        inner store, confined to none, names the tenants that hold the id (and then offers
        no close match, which would tell the same); a scoped store names none of them and
        offers the close matches of its own tenant, whether another tenant holds the id or
        not."""
        try:
            yield
        except RunNotFound as exc:
            if self.tenant is None or not exc.tenants:
                raise
            matches = self.inner.close_matches(run_id, tenant=self.tenant)
            where = exc.location if isinstance(exc.location, str) else self.url
            raise not_found(run_id, (), where, tenant=self.tenant, matches=matches) from None

    def _confined(self, run_id: str, tenant: str | None) -> str | None:
        self.inner.scoped_tenant(tenant, run_id=run_id)
        if self.tenant is not None and tenant not in (None, self.tenant):
            raise RunNotFound(
                f"no run {run_id!r} in tenant {self.tenant!r}",
                run_id=run_id,
                tenant=self.tenant,
                suggestions=[],
            )
        return tenant or self.tenant

    def run_keys(self) -> list[tuple[str, str]]:
        """Run keys, confined to the scoped tenant."""
        keys = self.inner.run_keys()
        return [k for k in keys if self.tenant is None or k[0] == self.tenant]

    def count_events(self) -> int:
        """The inner store's count."""
        return self.inner.count_events()

    def erase(
        self,
        tenant: str,
        run_id: str,
        seqs: Iterable[int],
        *,
        audit: AuditEntry,
        unlink: str | Sequence[str] | None = None,
    ) -> int:
        """Erasure passes through."""
        return self.inner.erase(tenant, run_id, seqs, audit=audit, unlink=unlink)

    def scrub(self) -> None:
        """The inner store's scrub."""
        self.inner.scrub()

    def detached(self) -> str | None:
        """The inner store's answer."""
        return self.inner.detached()

    def delete_run(self, tenant: str, run_id: str, *, audit: AuditEntry) -> int:
        """Deletion passes through."""
        return self.inner.delete_run(tenant, run_id, audit=audit)

    def append_audit(self, entry: AuditEntry) -> AuditRecord:
        """Audit appends pass through."""
        return self.inner.append_audit(entry)

    def read_audit(self, *, from_seq: int = 0) -> Iterator[AuditRecord]:
        """The inner store's audit."""
        return self.inner.read_audit(from_seq=from_seq)

    def audit_of(self, action: str, *, tenant: str | None = None) -> Iterator[AuditRecord]:
        """The inner store's audit records of one action."""
        return self.inner.audit_of(action, tenant=tenant)

    def link_subjects(self, tenant: str, run_id: str, links: Iterable[tuple[int, str]]) -> int:
        """Subject links pass through."""
        return self.inner.link_subjects(tenant, run_id, links)

    def subject_events(self, tenant: str, subject: str) -> list[tuple[str, int]]:
        """The inner store's subject index."""
        return self.inner.subject_events(tenant, subject)

    def run_subjects(self, tenant: str, run_id: str) -> list[tuple[int, str]]:
        """The inner store's subject index."""
        return self.inner.run_subjects(tenant, run_id)

    def subject_key_ids(self, tenant: str) -> frozenset[str] | None:
        """The inner store's subject index."""
        return self.inner.subject_key_ids(tenant)

    # -- the seal log: envelopes only (leaf hashes and checkpoints), read by every purpose

    def append_seals(self, tenant: str, seals: Sequence[SealRow]) -> int:
        """The inner store's seal log."""
        return self.inner.append_seals(tenant, seals)

    def read_seals(self, tenant: str, start: int = 0, end: int | None = None) -> list[SealRow]:
        """The inner store's seal log."""
        return self.inner.read_seals(tenant, start, end)

    def seal_count(self, tenant: str) -> int:
        """The inner store's seal log."""
        return self.inner.seal_count(tenant)

    def seals_for_run(self, tenant: str, run_id: str) -> list[SealRow]:
        """The inner store's seal log."""
        return self.inner.seals_for_run(tenant, run_id)

    def put_checkpoint(self, checkpoint: CheckpointRow) -> bool:
        """The inner store's checkpoints."""
        return self.inner.put_checkpoint(checkpoint)

    def latest_checkpoint(self, tenant: str) -> CheckpointRow | None:
        """The inner store's checkpoints."""
        return self.inner.latest_checkpoint(tenant)

    def close(self) -> None:
        """Close the inner store."""
        self.inner.close()


def scoped(
    store: Store,
    purpose: str = DEFAULT_PURPOSE,
    *,
    policy: PurposePolicy | None = None,
    actor: str | None = None,
    tenant: str | None = None,
    whole_events: bool = False,
) -> ScopedStore:
    """``store`` seen through ``purpose`` (see :class:`ScopedStore`)."""
    return ScopedStore(
        store,
        purpose=purpose,
        policy=policy,
        actor=actor,
        tenant=tenant,
        whole_events=whole_events,
    )


def reading(
    store: Store,
    purpose: str = DEFAULT_PURPOSE,
    *,
    policy: PurposePolicy | None = None,
    actor: str | None = None,
    tenant: str | None = None,
    whole_events: bool = False,
) -> ScopedStore:
    """``store`` seen through ``purpose`` under ``policy`` (default: the policy in force,
    :func:`policy_in_force`): what every library read of payloads goes through.

    A store already seen through the same purpose is returned as it is, so that a read is
    filtered and recorded once; a store scoped to another purpose is narrowed again (each
    purpose filters, and each read is recorded under both)."""
    if (
        isinstance(store, ScopedStore)
        and store.purpose == purpose
        and (store.whole_events or not whole_events)
        and tenant in (None, store.tenant)
    ):
        return store
    return scoped(
        store,
        purpose,
        policy=policy or policy_in_force(),
        actor=actor,
        tenant=tenant,
        whole_events=whole_events,
    )


def export_run(
    store: Store,
    run_id: str,
    out: IO[bytes] | str | os.PathLike[str],
    *,
    tenant: str | None = None,
    purpose: str = DEFAULT_PURPOSE,
    policy: PurposePolicy | None = None,
    actor: str | None = None,
) -> int:
    """Write one stored run to ``out`` as JSONL (SPEC section 4), as ``purpose`` may read it,
    the read recorded in the store audit; returns the event count.

    ``out`` is a binary stream or a path. A path is written whole or not at all: under a
    fresh temporary name beside the file (a symbolic link is followed), renamed over it once
    complete.

    Payloads the purpose may not read whole are withheld (they read, and verify, as erased),
    so that the file always verifies. The default purpose is ``debug``, as ``tacho export``'s;
    :func:`tachograph.record.jsonl.export_run` is the engine-level form, below the policy."""
    seen = reading(store, purpose, policy=policy, actor=actor, whole_events=True)
    if not isinstance(out, (str, os.PathLike)):
        return write_events(seen.read(run_id, tenant=tenant, decode=False), out)
    with write_whole(out) as handle:
        return write_events(seen.read(run_id, tenant=tenant, decode=False), handle)
