"""Sealing (SPEC section 9): seal logs, checkpoints, witnesses and evidence bundles.

Signing and verifying need ``cryptography`` (``pip install 'tachograph[seal]'``); it is
imported only when a key is used. ``import tachograph`` does not import this package.
"""

from __future__ import annotations

from .evidence import EvidenceReport, verify_evidence, write_evidence
from .log import SIGNING_KEY_ENV, SealLog, TenantAudit, audit_tenant, load_signing_key, origin_for
from .policy import DEFAULT_EVERY_EVENTS, DEFAULT_EVERY_SECONDS, SealingObserver, SealPolicy
from .verdict import SealVerdict, run_verdict, seal_verdict_of
from .witness import HTTPWitness, Witness, WitnessConflict, WitnessRefused, serve, witness_for

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
