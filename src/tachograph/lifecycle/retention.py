"""Retention: how long each kind of event keeps its payload, and each run its events.

A policy (TOML, :func:`load_policy`) gives a window per event type and per run, legal holds,
and the floor of the audit record: run start and end, the intents and results of ``write`` and
``irreversible`` tools, decisions, plans and guardrails are kept at least six months
(:data:`AUDIT_FLOOR`, EU AI Act Article 19) whatever their window says, unless an override
with a reason lowers the floor (recorded in the store audit whenever it is applied).

:func:`plan` says what would happen at a time; :func:`apply` does it: payloads past their
window are erased (the chain still verifies), whole runs past their run window are deleted
(the only path that deletes runs), and blobs past their time to live are removed.
"""

from __future__ import annotations

import fnmatch
import math
import os
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import PolicyError
from ..record.event import Event, EventType, now_ts
from ..store.audit import AuditEntry
from ..store.base import RunInfo, Store
from .audit import current_actor
from .blobs import BlobInfo, BlobStore
from .times import shift
from .tomlfile import load_toml, parse_duration

__all__ = [
    "AUDIT_FLOOR",
    "DEFAULT_RETENTION",
    "Hold",
    "Override",
    "RetentionPlan",
    "RetentionPolicy",
    "RunPlan",
    "RunWindow",
    "apply",
    "is_audit_record",
    "load_policy",
    "plan",
]

DAY = 86400.0
AUDIT_FLOOR = 183 * DAY
"""Six months: the least time the audit record is kept unless an override says otherwise."""

_AUDIT_TYPES = (
    EventType.RUN_STARTED.value,
    EventType.RUN_FINISHED.value,
    EventType.DECISION.value,
    EventType.PLAN_SELECTED.value,
    "guardrail.*",
)
_EFFECTFUL = ("write", "irreversible")


@dataclass(frozen=True, slots=True)
class RunWindow:
    """Runs whose id matches ``match`` (and tenant ``tenant``) are deleted ``window`` seconds
    after their last event."""

    match: str
    window: float
    tenant: str = "*"


@dataclass(frozen=True, slots=True)
class Hold:
    """A legal hold: matching runs are neither erased nor deleted while it stands."""

    reason: str
    runs: str = "*"
    tenant: str = "*"
    actor: str = "*"


@dataclass(frozen=True, slots=True)
class Override:
    """Lowers the audit floor to ``floor`` for ``types`` (patterns), for ``reason``."""

    floor: float
    reason: str
    types: tuple[str, ...] = ("*",)


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    """Windows (seconds; ``inf`` is forever) per event type, per run; holds; overrides."""

    types: Mapping[str, float] = field(default_factory=dict)
    default: float = math.inf
    runs: tuple[RunWindow, ...] = ()
    holds: tuple[Hold, ...] = ()
    overrides: tuple[Override, ...] = ()
    audit_floor: float = AUDIT_FLOOR
    source: str = "built-in default"

    def window(self, event_type: str) -> float:
        """The payload window of a type: an exact entry, else the longest matching pattern."""
        if event_type in self.types:
            return self.types[event_type]
        patterns = [p for p in self.types if fnmatch.fnmatchcase(event_type, p)]
        if patterns:
            return self.types[max(patterns, key=len)]
        return self.default

    def floor(self, event_type: str) -> float:
        """The least time an audit-record event of this type is kept."""
        lowered = [o.floor for o in self.overrides if _matches(event_type, o.types)]
        return min(lowered) if lowered else self.audit_floor

    def run_window(self, info: RunInfo) -> float:
        """The whole-run window of a run (``inf`` when no rule matches)."""
        found = [
            w.window
            for w in self.runs
            if fnmatch.fnmatchcase(info.run_id, w.match)
            and fnmatch.fnmatchcase(info.tenant, w.tenant)
        ]
        return min(found) if found else math.inf

    def hold_for(self, info: RunInfo) -> Hold | None:
        """The first hold that covers a run."""
        for hold in self.holds:
            if (
                fnmatch.fnmatchcase(info.run_id, hold.runs)
                and fnmatch.fnmatchcase(info.tenant, hold.tenant)
                and fnmatch.fnmatchcase(info.actor, hold.actor)
            ):
                return hold
        return None


DEFAULT_RETENTION = RetentionPolicy(
    types={
        EventType.MODEL_REQUEST.value: 30 * DAY,
        EventType.MODEL_RESPONSE.value: 30 * DAY,
        EventType.EXTERNAL_READ.value: 90 * DAY,
    },
    default=400 * DAY,
)
"""Without a policy file: raw model traffic 30 days, external reads 90 days, everything else
400 days (the audit record at least the six-month floor); no run is deleted whole."""


def _matches(event_type: str, patterns: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(event_type, p) for p in patterns)


_ENTRY_KEYS: Mapping[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    # table: (required keys, optional keys)
    "runs": (("match", "window"), ("tenant",)),
    "holds": (("runs", "reason"), ("tenant", "actor")),
    "overrides": (("types", "floor", "reason"), ()),
}
_EXPECTED = {
    "match": 'a run id pattern (a string; "*" for every run)',
    "runs": 'a run id pattern (a string; "*" for every run)',
    "tenant": "a tenant pattern (a string)",
    "actor": "an actor pattern (a string)",
    "reason": "a non-empty string",
    "types": 'a list of event type patterns (strings; ["*"] for every type)',
    "window": "a duration such as '7d'",
    "floor": "a duration such as '30d'",
}


def _table(data: Mapping[str, Any], key: str, where: str) -> list[dict[str, Any]]:
    """The entries of ``[[retention.<key>]]``, each checked for unknown and missing keys."""
    value = data.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise PolicyError(
            f"{where}: [[retention.{key}]] must be an array of tables", path=where, key=key
        )
    required, optional = _ENTRY_KEYS[key]
    allowed = ", ".join(required + optional)
    for number, item in enumerate(value, 1):
        unknown = sorted(set(item) - set(required) - set(optional))
        if unknown:
            raise PolicyError(
                f"{where}: [[retention.{key}]] entry {number}: unknown key "
                f"{', '.join(map(repr, unknown))}; expected only {allowed}",
                path=where,
                key=f"{key}.{unknown[0]}",
            )
        for name in required:
            if name not in item:
                raise PolicyError(
                    f"{where}: [[retention.{key}]] entry {number}: missing {name!r}, "
                    f"{_EXPECTED[name]}",
                    path=where,
                    key=f"{key}.{name}",
                )
    return value


def _wrong(key: str, number: int, name: str, value: Any, where: str) -> PolicyError:
    return PolicyError(
        f"{where}: [[retention.{key}]] entry {number}: {name} must be {_EXPECTED[name]}, "
        f"not {value!r}",
        path=where,
        key=f"{key}.{name}",
    )


def _text(item: Mapping[str, Any], key: str, number: int, name: str, where: str) -> str:
    """A string-valued key of an entry (a pattern; ``"*"`` when an optional one is absent)."""
    value = item.get(name, "*")
    if not isinstance(value, str) or not value:
        raise _wrong(key, number, name, value, where)
    return value


def _reason(item: Mapping[str, Any], key: str, number: int, where: str) -> str:
    reason = item.get("reason")
    if not isinstance(reason, str) or not reason.strip():
        raise PolicyError(
            f"{where}: every [[retention.{key}]] needs a reason (entry {number}: "
            f"{_EXPECTED['reason']}, not {reason!r})",
            path=where,
            key=f"{key}.reason",
        )
    return reason


def _patterns(item: Mapping[str, Any], key: str, number: int, where: str) -> tuple[str, ...]:
    value = item.get("types")
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
        raise _wrong(key, number, "types", value, where)
    return tuple(value)


def _duration(item: Mapping[str, Any], key: str, number: int, name: str, where: str) -> float:
    return parse_duration(
        item.get(name),
        key=f"{key}.{name}",
        path=where,
        label=f"[[retention.{key}]] entry {number}: {name}",
    )


def load_policy(path: str | os.PathLike[str]) -> RetentionPolicy:
    """Read a retention policy file (the format is in docs/privacy.md)."""
    where = str(path)
    data = load_toml(path).get("retention")
    if not isinstance(data, dict):
        raise PolicyError(f"{where}: no [retention] table", path=where, key="retention")
    known = ("default", "audit_floor", "types", "runs", "holds", "overrides")
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise PolicyError(
            f"{where}: unknown keys in [retention]: {sorted(unknown)}; expected only "
            f"{', '.join(known)}",
            path=where,
            key=unknown[0],
        )
    types_table = data.get("types", {})
    if not isinstance(types_table, dict):
        raise PolicyError(
            f"{where}: [retention.types] must be a table of event type = duration",
            path=where,
            key="types",
        )
    overrides = tuple(
        Override(
            floor=_duration(o, "overrides", n, "floor", where),
            reason=_reason(o, "overrides", n, where),
            types=_patterns(o, "overrides", n, where),
        )
        for n, o in enumerate(_table(data, "overrides", where), 1)
    )
    floor = parse_duration(
        data.get("audit_floor", "183d"),
        key="audit_floor",
        path=where,
        label="[retention] audit_floor",
    )
    if floor < AUDIT_FLOOR and not any(o.types == ("*",) for o in overrides):
        raise PolicyError(
            f"{where}: audit_floor is below six months (183 days); lowering it needs an "
            '[[retention.overrides]] entry with types = ["*"] and a reason',
            path=where,
            key="audit_floor",
        )
    return RetentionPolicy(
        types={
            str(k): parse_duration(
                v, key=f"types.{k}", path=where, label=f"[retention.types] {k!r}"
            )
            for k, v in types_table.items()
        },
        default=parse_duration(
            data.get("default", "forever"), key="default", path=where, label="[retention] default"
        ),
        runs=tuple(
            RunWindow(
                match=_text(r, "runs", n, "match", where),
                window=_duration(r, "runs", n, "window", where),
                tenant=_text(r, "runs", n, "tenant", where),
            )
            for n, r in enumerate(_table(data, "runs", where), 1)
        ),
        holds=tuple(
            Hold(
                reason=_reason(h, "holds", n, where),
                runs=_text(h, "holds", n, "runs", where),
                tenant=_text(h, "holds", n, "tenant", where),
                actor=_text(h, "holds", n, "actor", where),
            )
            for n, h in enumerate(_table(data, "holds", where), 1)
        ),
        overrides=overrides,
        audit_floor=max(floor, AUDIT_FLOOR) if not overrides else floor,
        source=where,
    )


def is_audit_record(event: Event, effects: Mapping[str, str]) -> bool:
    """Whether an event belongs to the audit record; ``effects`` maps idempotency keys of
    the run's ``tool.requested`` events to their effects."""
    if _matches(event.type, _AUDIT_TYPES):
        return True
    if event.type.startswith("tool."):
        return effects.get(event.idempotency_key or "") in _EFFECTFUL
    return False


def _effects(events: Sequence[Event]) -> dict[str, str]:
    found = {}
    for e in events:
        if (
            e.type == EventType.TOOL_REQUESTED.value
            and isinstance(e.payload, dict)
            and e.idempotency_key
        ):
            found[e.idempotency_key] = str(e.payload.get("effect"))
    return found


def _past(ts: str, window: float, now: str) -> bool:
    until = shift(ts, window)
    return until is not None and until <= now


@dataclass(frozen=True, slots=True)
class RunPlan:
    """What retention does to one run: erase payloads, delete it, or hold it."""

    tenant: str
    run_id: str
    action: str
    """``erase``, ``delete`` or ``hold``."""
    counts: Mapping[str, int]
    """Events per type affected (erased payloads, or deleted events)."""
    seqs: tuple[int, ...] = ()
    floor_kept: Mapping[str, int] = field(default_factory=dict)
    """Per type, payloads past their window kept by the audit floor."""
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "tenant": self.tenant,
            "run_id": self.run_id,
            "action": self.action,
            "counts": dict(self.counts),
            "seqs": list(self.seqs),
            "floor_kept": dict(self.floor_kept),
            "reason": self.reason,
        }


@dataclass(frozen=True, slots=True)
class RetentionPlan:
    """What :func:`apply` would do at ``now``."""

    now: str
    source: str
    runs: tuple[RunPlan, ...]
    blobs: tuple[BlobInfo, ...] = ()
    overrides: tuple[Override, ...] = ()

    def totals(self) -> dict[str, int]:
        """Counts over the plan: payloads to erase, runs and events to delete, runs held."""
        return {
            "erase_payloads": sum(sum(r.counts.values()) for r in self.runs if r.action == "erase"),
            "delete_runs": sum(1 for r in self.runs if r.action == "delete"),
            "delete_events": sum(sum(r.counts.values()) for r in self.runs if r.action == "delete"),
            "held_runs": sum(1 for r in self.runs if r.action == "hold"),
            "expired_blobs": len(self.blobs),
            "floor_kept": sum(sum(r.floor_kept.values()) for r in self.runs),
        }

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "now": self.now,
            "policy": self.source,
            "totals": self.totals(),
            "runs": [r.to_dict() for r in self.runs],
            "blobs": [b.to_dict() for b in self.blobs],
            "overrides": [
                {"types": list(o.types), "floor_days": o.floor / DAY, "reason": o.reason}
                for o in self.overrides
            ],
        }


def _plan_run(policy: RetentionPolicy, info: RunInfo, events: Sequence[Event], now: str) -> RunPlan:
    hold = policy.hold_for(info)
    if hold is not None:
        return RunPlan(info.tenant, info.run_id, "hold", {}, reason=hold.reason)
    effects = _effects(events)
    run_window = policy.run_window(info)
    if _past(info.last_at, run_window, now):
        # A whole run goes only once its audit record may go too.
        floors = [policy.floor(e.type) for e in events if is_audit_record(e, effects)]
        if not floors or _past(info.last_at, max(floors), now):
            counts = Counter(e.type for e in events)
            return RunPlan(
                info.tenant,
                info.run_id,
                "delete",
                dict(sorted(counts.items())),
                reason="run window",
            )
    erase: Counter[str] = Counter()
    kept: Counter[str] = Counter()
    seqs = []
    for e in events:
        if e.erased:
            continue
        window = policy.window(e.type)
        if not _past(e.ts, window, now):
            continue
        if is_audit_record(e, effects) and not _past(e.ts, max(window, policy.floor(e.type)), now):
            kept[e.type] += 1
            continue
        erase[e.type] += 1
        seqs.append(e.seq)
    return RunPlan(
        info.tenant,
        info.run_id,
        "erase",
        dict(sorted(erase.items())),
        tuple(seqs),
        dict(sorted(kept.items())),
        reason="type window",
    )


def plan(
    store: Store,
    policy: RetentionPolicy | None = None,
    *,
    now: str | None = None,
    tenant: str | None = None,
    blobs: BlobStore | None = None,
) -> RetentionPlan:
    """What retention would erase and delete at ``now`` (default: now)."""
    policy = policy or DEFAULT_RETENTION
    moment = now or now_ts()
    runs = []
    for info in sorted(store.runs(tenant=tenant), key=lambda i: (i.tenant, i.run_id)):
        events = list(store.read(info.run_id, tenant=info.tenant))
        run_plan = _plan_run(policy, info, events, moment)
        if run_plan.action != "erase" or run_plan.counts or run_plan.floor_kept:
            runs.append(run_plan)
    expired = tuple(blobs.expired(moment)) if blobs is not None else ()
    return RetentionPlan(moment, policy.source, tuple(runs), expired, policy.overrides)


def apply(
    store: Store,
    retention: RetentionPlan,
    *,
    actor: str | None = None,
    blobs: BlobStore | None = None,
) -> dict[str, int]:
    """Carry out a plan; every step is recorded in the store audit, with the time the plan
    was made as of (``as_of``). Returns what was done."""
    who = actor or current_actor()
    # records of no one run: the store's tenant (a confined store's own audit lists them)
    tenant = store.writing_tenant()
    for override in retention.overrides:
        store.append_audit(
            AuditEntry(
                action="retention.override",
                actor=who,
                tenant=tenant,
                detail={
                    "types": list(override.types),
                    "floor_days": override.floor / DAY,
                    "reason": override.reason,
                    "policy": retention.source,
                },
            )
        )
    done = {"erased": 0, "deleted_runs": 0, "deleted_events": 0, "deleted_blobs": 0}
    for run in retention.runs:
        if run.action == "delete":
            entry = AuditEntry(
                action="retention.delete",
                actor=who,
                tenant=run.tenant,
                detail={
                    "reason": "retention: run window",
                    "policy": retention.source,
                    "as_of": retention.now,
                },
            )
            deleted = store.delete_run(run.tenant, run.run_id, audit=entry)
            done["deleted_events"] += deleted
            done["deleted_runs"] += 1 if deleted else 0
        elif run.action == "erase" and run.seqs:
            entry = AuditEntry(
                action="erase",
                actor=who,
                tenant=run.tenant,
                detail={
                    "reason": "retention: type window",
                    "policy": retention.source,
                    "as_of": retention.now,
                },
            )
            done["erased"] += store.erase(run.tenant, run.run_id, run.seqs, audit=entry)
    if blobs is not None:
        for blob in retention.blobs:
            if blobs.delete(blob.digest):
                store.append_audit(
                    AuditEntry(
                        action="retention.blob",
                        actor=who,
                        tenant=tenant,
                        detail={"digest": blob.digest, "expires": blob.expires},
                    )
                )
                done["deleted_blobs"] += 1
    return done
