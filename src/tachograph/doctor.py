"""``tacho doctor``: checks of a store's health, each finding with plain advice.

Checks form a registry (:data:`CHECKS`): a check is a function of an open store returning
findings. Seals and blobs add theirs with :func:`register_check` where those features live.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import RunNotFound
from .store.base import Store

__all__ = ["CHECKS", "Finding", "register_check", "run_checks"]


@dataclass(frozen=True, slots=True)
class Finding:
    """One result: ``level`` is ``ok``, ``warning`` or ``problem``."""

    check: str
    level: str
    message: str
    advice: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "check": self.check,
            "level": self.level,
            "message": self.message,
            "advice": self.advice,
        }


Check = Callable[[Store], Iterator[Finding]]
CHECKS: dict[str, Check] = {}
"""Every check, by name, in the order they run."""


def register_check(name: str) -> Callable[[Check], Check]:
    """Add a check to :data:`CHECKS` (a decorator)."""

    def add(check: Check) -> Check:
        CHECKS[name] = check
        return check

    return add


def run_checks(store: Store) -> list[Finding]:
    """Run every registered check; a check that fails is itself a finding."""
    findings: list[Finding] = []
    for name, check in CHECKS.items():
        try:
            findings.extend(check(store))
        except Exception as exc:  # a broken check must not hide the others
            findings.append(
                Finding(name, "problem", f"the check could not run: {exc}", "Report this.")
            )
    return findings


@register_check("integrity")
def _integrity(store: Store) -> Iterator[Finding]:
    check = getattr(store, "integrity_check", None)
    if check is None:
        return
    result = check()
    if result == "ok":
        yield Finding("integrity", "ok", "the database file is sound (PRAGMA integrity_check)")
    else:
        yield Finding(
            "integrity",
            "problem",
            f"the database file is damaged: {result}",
            "Stop writing to it, copy it somewhere safe, and restore from a backup or export "
            "what still verifies with tacho export.",
        )


@register_check("verification")
def _verification(store: Store) -> Iterator[Finding]:
    reports = list(store.verify_all())
    failed = [r for r in reports if not r.ok]
    if not failed:
        yield Finding("verification", "ok", f"all {len(reports)} run(s) verify")
    for report in failed:
        yield Finding(
            "verification",
            "problem",
            report.render(),
            "This run was changed outside tachograph or damaged: do not trust it; compare "
            "it with an export or backup (tacho verify FILE).",
        )


@register_check("permissions")
def _permissions(store: Store) -> Iterator[Finding]:
    path = getattr(store, "path", None)
    if not path or path == ":memory:":
        return
    mode = Path(path).stat().st_mode
    if mode & (stat.S_IWGRP | stat.S_IWOTH):
        yield Finding(
            "permissions",
            "warning",
            f"{path} can be written by other users (mode {stat.filemode(mode)})",
            f"Run: chmod go-w {path}",
        )
    elif mode & stat.S_IROTH:
        yield Finding(
            "permissions",
            "warning",
            f"{path} can be read by every user (mode {stat.filemode(mode)}): payloads may hold "
            "personal data",
            f"Run: chmod o-r {path}",
        )
    else:
        yield Finding("permissions", "ok", f"{path} is not writable by others")
    if getattr(store, "read_only", False) or not os.access(path, os.W_OK):
        yield Finding(
            "permissions", "warning", f"{path} is read-only here", "Reads work; recording will not."
        )


@register_check("schema")
def _schema(store: Store) -> Iterator[Finding]:
    # each engine has its own numbering: compare with what this engine writes
    current = getattr(type(store), "current_schema_version", None)
    version = getattr(store, "schema_version", None)
    if version is None or current is None:
        return
    if version == current:
        yield Finding("schema", "ok", f"schema version {version} (current)")
    else:
        yield Finding(
            "schema",
            "warning",
            f"schema version {version}; this tachograph writes {current}",
            str(getattr(type(store), "upgrade_advice", "")),
        )


_SEAL_ADVICE = (
    "Recordings are sealed by default (unless seal=False or TACHOGRAPH_SEAL=off); imported "
    "runs are not. Issue a checkpoint with tacho seal; tacho verify --key KEY then shows how "
    "far each run is sealed."
)


@register_check("seals")
def _seals(store: Store) -> Iterator[Finding]:
    """Unsealed runs (a warning: a cut tail or a rewritten store cannot be shown) and seals
    that fail (a problem: the run or the seal log was changed)."""
    from .errors import SealingError
    from .sealing import audit_tenant, load_signing_key, run_verdict
    from .sealing.log import TenantAudit

    try:
        key = load_signing_key()  # TACHOGRAPH_SIGNING_KEY, as tacho verify uses it
    except SealingError:
        key = None
    keys = [key.verifier] if key is not None else []
    unsealed: list[str] = []
    sealed = 0
    failed = False
    tenants = sorted({tenant for tenant, _ in store.run_keys()})
    for tenant in tenants:
        audit = audit_tenant(store, tenant, keys=keys)
        if audit.problem is not None:
            failed = True
            yield Finding(
                "seals",
                "problem",
                f"the seal log of tenant {tenant!r} does not verify: {audit.problem}",
                "The seal log or its checkpoints were changed: do not trust this store's runs; "
                "compare them with evidence bundles or witnesses (tacho verify DIR --key KEY).",
            )
            continue
        if audit.size is None and store.seal_count(tenant):
            # No trusted checkpoint (no key here): still hold every stored seal against its
            # run, which shows a changed run even without a signature.
            audit = TenantAudit(tenant, store.seal_count(tenant), "the stored seal log")
        for run_tenant, run_id in store.run_keys():
            if run_tenant != tenant:
                continue
            try:
                info = store.run_info(run_id, tenant=tenant)
            except RunNotFound:
                continue  # events without a summary: the verification check reports them
            verdict = run_verdict(store, info, audit)
            if verdict.status == "failed":
                failed = True
                yield Finding(
                    "seals",
                    "problem",
                    f"run {run_id} (tenant {tenant}): {verdict.render()}",
                    "The run no longer matches its seal: it was changed after it was sealed. "
                    "Do not trust it; compare it with an export or evidence bundle.",
                )
            elif verdict.status == "sealed":
                sealed += 1
            else:
                unsealed.append(run_id)
    if unsealed:
        shown = ", ".join(unsealed[:5]) + (
            f" and {len(unsealed) - 5} more" if len(unsealed) > 5 else ""
        )
        yield Finding(
            "seals",
            "warning",
            f"{len(unsealed)} run(s) not sealed: {shown}",
            _SEAL_ADVICE,
        )
    elif not failed and tenants:
        yield Finding("seals", "ok", f"all {sealed} run(s) are sealed")


@register_check("blobs")
def _blobs(store: Store) -> Iterator[Finding]:
    """Blobs beside the store whose bytes no longer match their references."""
    from .lifecycle.blobs import BlobStore, check_stored_blobs

    path = getattr(store, "path", None)
    if not path or path == ":memory:":
        return
    blobs = BlobStore.beside(store)
    if not blobs.root.is_dir():
        return
    checked = expired = 0
    bad = False
    for tenant, run_id in store.run_keys():
        result = check_stored_blobs(store, run_id, blobs, tenant=tenant)
        checked += len(result.verified)
        expired += len(result.expired)
        if result.malformed:
            seq, where, message = result.malformed[0]
            more = f" (and {len(result.malformed) - 1} more)" if len(result.malformed) > 1 else ""
            yield Finding(
                "blobs",
                "warning",
                f"run {run_id} seq {seq} {where}: {message}{more}",
                "A value shaped like a blob reference that is not one was recorded: it is kept "
                "as a plain value and checked against no blob. Record references made by "
                "BlobRule or BlobStore.put.",
            )
        for seq, where, message in result.failures:
            bad = True
            yield Finding(
                "blobs",
                "problem",
                f"run {run_id} seq {seq} {where}: {message}",
                "The blob file was changed or damaged: restore it from a backup or an export "
                "made with tacho export --blobs.",
            )
    if not bad:
        gone = f"; {expired} expired (their time to live ran out)" if expired else ""
        yield Finding("blobs", "ok", f"{checked} blob(s) match their references{gone}")
