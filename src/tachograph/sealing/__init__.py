"""Sealing (SPEC section 9): seal logs, checkpoints, witnesses and evidence bundles.

Signing and verifying need ``cryptography`` (``pip install 'tachograph[seal]'``); it is
imported only when a key is used. ``import tachograph`` does not import this package.

The names below are imported from their modules on first use: a command that only reads a
run's seal verdict (``tacho verify``, ``tacho show``, replay) does not load the witness's
HTTP client and server, or the recorder's sealing observer.
"""

from __future__ import annotations

import importlib
import typing

if typing.TYPE_CHECKING:
    from .evidence import EvidenceReport, verify_evidence, write_evidence
    from .log import (
        SIGNING_KEY_ENV,
        SealLog,
        TenantAudit,
        audit_tenant,
        load_signing_key,
        origin_for,
    )
    from .policy import DEFAULT_EVERY_EVENTS, DEFAULT_EVERY_SECONDS, SealingObserver, SealPolicy
    from .verdict import SealVerdict, run_verdict, seal_verdict_of
    from .witness import HTTPWitness, Witness, WitnessConflict, WitnessRefused, serve, witness_for

_LAZY: dict[str, str] = {
    "DEFAULT_EVERY_EVENTS": ".policy",
    "DEFAULT_EVERY_SECONDS": ".policy",
    "SIGNING_KEY_ENV": ".log",
    "EvidenceReport": ".evidence",
    "HTTPWitness": ".witness",
    "SealLog": ".log",
    "SealPolicy": ".policy",
    "SealVerdict": ".verdict",
    "SealingObserver": ".policy",
    "TenantAudit": ".log",
    "Witness": ".witness",
    "WitnessConflict": ".witness",
    "WitnessRefused": ".witness",
    "audit_tenant": ".log",
    "load_signing_key": ".log",
    "origin_for": ".log",
    "run_verdict": ".verdict",
    "seal_verdict_of": ".verdict",
    "serve": ".witness",
    "verify_evidence": ".evidence",
    "witness_for": ".witness",
    "write_evidence": ".evidence",
}


def __getattr__(name: str) -> typing.Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


__all__ = [
    "DEFAULT_EVERY_EVENTS",
    "DEFAULT_EVERY_SECONDS",
    "SIGNING_KEY_ENV",
    "EvidenceReport",
    "HTTPWitness",
    "SealLog",
    "SealPolicy",
    "SealVerdict",
    "SealingObserver",
    "TenantAudit",
    "Witness",
    "WitnessConflict",
    "WitnessRefused",
    "audit_tenant",
    "load_signing_key",
    "origin_for",
    "run_verdict",
    "seal_verdict_of",
    "serve",
    "verify_evidence",
    "witness_for",
    "write_evidence",
]
