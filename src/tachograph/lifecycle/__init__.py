"""The data lifecycle: erasure, data subjects, retention, blobs and purpose-scoped reads.

``import tachograph`` loads this package for the facade's purpose-scoped ``export_run``
(:mod:`tachograph.lifecycle.purpose`); import the modules by their full path::

    from tachograph.lifecycle.erasure import erase
    from tachograph.lifecycle.retention import load_policy, plan, apply
    from tachograph.lifecycle.blobs import BlobStore, BlobRule
    from tachograph.lifecycle.purpose import scoped

See docs/privacy.md.
"""

from __future__ import annotations

from .audit import AuditReport, current_actor, list_audit, verify_audit
from .blobs import BlobCheck, BlobInfo, BlobRule, BlobStore, check_blobs, check_stored_blobs
from .erasure import ErasureReport, RunErasure, SubjectRule, erase, link_subject
from .purpose import (
    DEFAULT_POLICY,
    DEFAULT_PURPOSE,
    PurposePolicy,
    PurposeRule,
    ScopedStore,
    scoped,
)
from .retention import DEFAULT_RETENTION, RetentionPlan, RetentionPolicy, apply, plan

__all__ = [
    "DEFAULT_POLICY",
    "DEFAULT_PURPOSE",
    "DEFAULT_RETENTION",
    "AuditReport",
    "BlobCheck",
    "BlobInfo",
    "BlobRule",
    "BlobStore",
    "ErasureReport",
    "PurposePolicy",
    "PurposeRule",
    "RetentionPlan",
    "RetentionPolicy",
    "RunErasure",
    "ScopedStore",
    "SubjectRule",
    "apply",
    "check_blobs",
    "check_stored_blobs",
    "current_actor",
    "erase",
    "link_subject",
    "list_audit",
    "plan",
    "scoped",
    "verify_audit",
]
