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
    from .store.sqlite import SCHEMA_VERSION

    version = getattr(store, "schema_version", None)
    if version is None:
        return
    if version == SCHEMA_VERSION:
        yield Finding("schema", "ok", f"schema version {version} (current)")
    else:
        yield Finding(
            "schema",
            "warning",
            f"schema version {version}; this tachograph writes {SCHEMA_VERSION}",
            "Open it once with write access (any recording command) to upgrade it.",
        )
